"""The whole group's claims, per domain, through the real kube-scheduler (docs/SCHEDULER.md, "What a domain can
take"): nodes whose compute-domain devices another ComputeDomain's allocated claims hold (its IMEX daemon's, as
the driver allocates them) and a cordoned node count against each rack; a group that fits on GPU counts but not
on those waits with a FailedScheduling reason that counts what ran out, no pod of it binds anywhere, and the
whole group binds in one rack once they clear. The real scheduler's DRA plugin sees the same allocations."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, RACKS, RealCluster
from tests.e2e.kubeapi import eventually
from webhook.domain import keys

pytestmark = pytest.mark.realcluster


def _nodes(rack: str) -> list[str]:
    return [f"gb200-{rack}-{i:02d}" for i in range(RACKS[rack][1])]


def _hold(cluster: RealCluster, ns: str, node: str, cd_uid: str) -> str:
    """An IMEX daemon's claim of ComputeDomain ``cd_uid``, allocated on ``node``'s daemon-0 device."""
    name = f"daemon-{node}"
    cluster.api.create({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "labels": {
            keys.COMPUTE_DOMAIN_LABEL: cd_uid, keys.COMPUTE_DOMAIN_TARGET_LABEL: keys.DAEMON_TARGET}},
        "spec": {"devices": {"requests": [{"name": "daemon", "exactly": {
            "deviceClassName": "compute-domain-daemon.nvidia.com"}}]}},
    })
    cluster.api.merge_patch("ResourceClaim", ns, name, {"status": {"allocation": {"devices": {"results": [
        {"request": "daemon", "driver": objects.CD_DRIVER, "pool": node, "device": "daemon-0"}]}}}}, sub="status")
    return name


def _cordon(cluster: RealCluster, node: str, cordoned: bool) -> None:
    cluster.api.merge_patch("Node", None, node, {"spec": {"unschedulable": cordoned or None}})


def test_a_group_that_fits_on_gpus_but_not_on_claims_waits_with_counts_then_binds(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("claims-per-domain")
    a, b = _nodes("a"), _nodes("b")
    holder = scenario.computedomain(real_cluster, ns, "holder", 1)["metadata"]["uid"]
    held = [_hold(real_cluster, ns, a[0], holder), _hold(real_cluster, ns, b[0], holder)]
    _cordon(real_cluster, a[1], True)
    try:
        # 4 pods x 4 device-plugin GPUs, one per node: rack a (4 nodes) and b (3) have the GPUs free, but a has
        # 2 usable nodes and b 2; the DRA racks c and d publish their GPUs another way.
        scenario.computedomain(real_cluster, ns, "train", 4)
        names = scenario.members(real_cluster, ns, "train", 4, gpus=GPUS_PER_NODE,
                                 claims=[scenario.channel("train")])

        def counted() -> list[dict[str, Any]]:
            return [e for e in real_cluster.events_for(ns, names[0], "FailedScheduling")
                    if "held by ComputeDomain" in e.get("note", e.get("message", ""))]

        (event, *_) = eventually(counted, 60, what="a FailedScheduling event that counts the held nodes")
        text = event.get("note", event.get("message", ""))
        assert f"1 held by ComputeDomain {ns}/holder" in text and "2 < 4 needed" in text, text
        assert not any(real_cluster.api.get("Pod", ns, n)["spec"].get("nodeName") for n in names)

        for name in held:  # the holder's daemons go and the node is uncordoned: rack a has 4 usable nodes
            real_cluster.api.delete("ResourceClaim", ns, name)
        _cordon(real_cluster, a[1], False)
        placed = real_cluster.wait_bound(ns, names, timeout=90)
        assert scenario.domains_of(placed) == {"a"}, placed  # the only rack with 4 nodes
    finally:
        _cordon(real_cluster, a[1], False)
        real_cluster.cleanup(ns)
