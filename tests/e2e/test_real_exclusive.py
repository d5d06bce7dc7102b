"""One IMEX domain per NVLink domain through the real kube-scheduler (docs/SCHEDULER.md, "Exclusive domains"):
a ComputeDomain annotated imex-webhook.io/exclusive-domain keeps other ComputeDomains out of the rack it
holds, even where the other group would fit best; without the annotation the two share it."""

from __future__ import annotations

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, RealCluster
from webhook.domain import keys

pytestmark = pytest.mark.realcluster


def _job(cluster: RealCluster, ns: str, name: str, pods: int, exclusive: bool) -> list[str]:
    body = objects.computedomain(ns, name, pods)
    if exclusive:  # set at creation: the watch delivers it with the object, before any pod exists
        body["metadata"]["annotations"] = {keys.EXCLUSIVE_ANNOTATION: "true"}
    cd = cluster.api.create(body)
    cluster.api.create(objects.channel_template(ns, name, cd["metadata"]["uid"]))
    return scenario.members(cluster, ns, name, pods, gpus=GPUS_PER_NODE, claims=[scenario.channel(name)])


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "shared"])
def test_an_exclusive_compute_domain_keeps_others_out_of_its_rack(real_cluster: RealCluster, exclusive: bool) -> None:
    ns = real_cluster.namespace("exclusive" if exclusive else "shared")
    try:
        first = real_cluster.wait_bound(ns, _job(real_cluster, ns, "owner", 2, exclusive))
        (rack,) = scenario.domains_of(first)
        assert rack == "b", first  # 3 nodes: the best fit for 2 pods, one node left
        second = real_cluster.wait_bound(ns, _job(real_cluster, ns, "guest", 1, False))
        # The guest's best fit is the node left in rack b; an exclusive owner keeps it out.
        assert scenario.domains_of(second) == ({"a"} if exclusive else {"b"}), second
    finally:
        real_cluster.cleanup(ns)
