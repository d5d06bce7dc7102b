"""Repair inside the domain through the real kube-scheduler (docs/SCHEDULER.md, "Repair inside the domain"): a
16-node ComputeDomain group asking for one spare node runs in the one rack big enough (17 nodes, added for
this test); the spare keeps a one-pod group out even where that group fits best. Two of the group's nodes
are lost (tainted NoExecute unreachable, their pods evicted as the taint manager would) and the Job's
replacements are created: one lands on the spare, in the same clique; the other waits there with a
ReplacementWaiting Event (rack a's 4 free nodes are never offered), and lands in the clique once a lost node
returns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, RealCluster, rack_of
from tests.e2e.kubeapi import eventually
from webhook.domain import keys

pytestmark = pytest.mark.realcluster

RACK_E = ("e", "e0e0e0e0-0000-4000-8000-00000000000e.32766", 17)
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}


@pytest.fixture
def big_rack(real_cluster: RealCluster) -> Iterator[list[str]]:
    prefix, clique, count = RACK_E
    names = [f"gb200-{prefix}-{i:02d}" for i in range(count)]
    for name in names:
        real_cluster.api.create(objects.node(name, clique=clique, device_plugin_gpus=GPUS_PER_NODE))
        real_cluster.api.create(objects.channel_slice(name))
        # The TaintNodesByCondition admission plugin gives every new node the not-ready taint; the node
        # lifecycle controller would lift it once the kubelet reports Ready.
        real_cluster.api.merge_patch("Node", None, name, {"spec": {"taints": None}})

    def labelled() -> bool:  # the extender's node domain labeller has seen them
        return all(keys.DOMAIN_LABEL in real_cluster.api.get("Node", None, n)["metadata"]["labels"] for n in names)

    eventually(labelled, 60, what="the domain label on the new rack's nodes")
    try:
        yield names
    finally:
        for name in names:
            real_cluster.api.delete("ResourceSlice", None, f"{name}-{objects.CD_DRIVER}")
            real_cluster.api.delete("Node", None, name)


def _taint(cluster: RealCluster, node: str, lost: bool) -> None:
    cluster.api.merge_patch("Node", None, node, {"spec": {"taints": [UNREACHABLE] if lost else None}})


def _event(cluster: RealCluster, ns: str, pod: str) -> list[dict[str, Any]]:
    return [e for e in cluster.api.list("Event", ns)
            if e.get("reason") == "ReplacementWaiting" and e.get("regarding", {}).get("name") == pod]


def test_replacements_of_a_running_16_node_group_land_in_its_clique(real_cluster: RealCluster,
                                                                    big_rack: list[str]) -> None:
    ns = real_cluster.namespace("repair")
    lost: list[str] = []
    try:
        cd = objects.computedomain(ns, "train", 16)
        cd["metadata"]["annotations"] = {keys.SPARE_NODES_ANNOTATION: "1"}
        uid = real_cluster.api.create(cd)["metadata"]["uid"]
        real_cluster.api.create(objects.channel_template(ns, "train", uid))
        names = scenario.members(real_cluster, ns, "train", 16, gpus=GPUS_PER_NODE, claims=[scenario.channel("train")])
        placed = real_cluster.wait_bound(ns, names, timeout=60)
        assert scenario.domains_of(placed) == {"e"}, placed

        # The spare is held: a one-pod group's best fit would be the rack's last free node.
        scenario.computedomain(real_cluster, ns, "guest", 1)
        guest = scenario.members(real_cluster, ns, "guest", 1, gpus=GPUS_PER_NODE, claims=[scenario.channel("guest")])
        assert scenario.domains_of(real_cluster.wait_bound(ns, guest)) != {"e"}

        # Two nodes are lost; the taint manager would evict their pods, and the Job makes replacements.
        victims = names[:2]
        lost = [placed[v] for v in victims]
        for node in lost:
            _taint(real_cluster, node, True)
        for victim in victims:
            real_cluster.api.delete("Pod", ns, victim)
        eventually(lambda: not [p for p in real_cluster.api.list("Pod", ns) if p["metadata"]["name"] in victims],
                   30, what="the lost members gone")
        job = real_cluster.api.get("Job", ns, "train")
        replacements = ["train-r0", "train-r1"]
        for name in replacements:
            real_cluster.api.create(objects.pod(ns, name, gpus=GPUS_PER_NODE, claims=[scenario.channel("train")],
                                                owner=job))

        def one_bound() -> dict[str, str] | None:
            bound = {n: real_cluster.api.get("Pod", ns, n)["spec"].get("nodeName") for n in replacements}
            landed = {n: node for n, node in bound.items() if node}
            return landed if len(landed) == 1 else None

        first = eventually(one_bound, 60, what="one replacement on the spare node")
        (node,) = first.values()
        assert rack_of(node) == "e" and node not in lost, first
        (waiting,) = [n for n in replacements if n not in first]
        (event, *_) = eventually(lambda: _event(real_cluster, ns, waiting), 60, what="a ReplacementWaiting Event")
        note = event["note"]
        assert "never placed in another domain" in note and "2 tainted for their conditions" in note, note
        assert "0 < 1 needed" in note, note
        assert real_cluster.api.get("Pod", ns, waiting)["spec"].get("nodeName") is None

        _taint(real_cluster, lost[0], False)  # repaired
        second = real_cluster.wait_bound(ns, [waiting], timeout=60)
        assert second[waiting] == lost[0], second
    finally:
        for node in lost:
            _taint(real_cluster, node, False)
        real_cluster.cleanup(ns)
