"""Who may call the extender, as the real kube-scheduler meets it (docs/HARDENING.md, "Who may call us").

The suite's kube-scheduler presents the client certificate the certs tool issues it (CN imex-scheduler) and
places pods. Here it is restarted with another certificate of the same CA, with clientAuth, as
kube-apiserver's would be: every extender call is refused with 403, which kube-scheduler reports in the
pod's FailedScheduling event, and the pod is not placed; back on its own certificate, the pod is placed.
"""

from __future__ import annotations

import pytest

from certs import files as cert_files
from tests.e2e import objects
from tests.e2e.conftest import RealCluster
from tests.e2e.kubeapi import eventually
from webhook.domain import keys

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]


def test_a_scheduler_presenting_another_subjects_certificate_of_the_same_ca_is_refused(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("wrong-subject")
    cert, key = cert_files.issue_client(real_cluster.tls_dir, "kube-apiserver")
    config = real_cluster.scheduler_config()
    (extender,) = config["extenders"]
    extender["tlsConfig"]["certFile"], extender["tlsConfig"]["keyFile"] = str(cert), str(key)
    real_cluster.plane.stop("kube-scheduler")
    real_cluster.plane.start_scheduler(config)
    try:
        annotations = {keys.GROUP_ANNOTATION: "refused", keys.GROUP_SIZE_ANNOTATION: "1"}
        real_cluster.api.create(objects.pod(ns, "refused-0", gpus=4, annotations=annotations))
        events = eventually(lambda: [e for e in real_cluster.events_for(ns, "refused-0", "FailedScheduling")
                                     if "403" in (e.get("note") or "")], 60,
                            what="a FailedScheduling event with the extender's 403")
        assert "refused-0" == events[-1]["regarding"]["name"]
        assert real_cluster.api.get("Pod", ns, "refused-0")["spec"].get("nodeName") is None
        assert not real_cluster.reservations(ns), "nothing was reserved for a caller that is not the scheduler"
    finally:
        real_cluster.plane.stop("kube-scheduler")
        real_cluster.plane.start_scheduler(real_cluster.scheduler_config())
    try:
        placed = real_cluster.wait_bound(ns, ["refused-0"], timeout=120)
        assert placed["refused-0"].startswith("gb200-"), placed
    finally:
        real_cluster.cleanup(ns)
