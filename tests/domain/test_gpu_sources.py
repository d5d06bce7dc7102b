"""A node offers GPUs of the kind it publishes: device-plugin nvidia.com/gpu, or DRA devices from its
ResourceSlices. Found with the real kube-scheduler: counting both as one pool sent device-plugin pods to
DRA-only nodes, where NodeResourcesFit then rejected every node of the chosen domain."""

from __future__ import annotations

import pytest

from webhook.domain.model import Catalog, Demand, Node, Snapshot
from webhook.domain.placement.capacity import Verdict, node_fit


def _node(plugin: int, dra: int, slots: int = 0) -> Node:
    return Node("n", "d", "k", plugin + dra, "zone" if slots else None, slots, None, dra_gpus=dra)


@pytest.mark.parametrize(("node", "need", "verdict", "reason"), [
    (_node(4, 0), Demand(4), Verdict.FITS, ""),
    (_node(0, 4), Demand(4, claim_gpus=4), Verdict.FITS, ""),
    (_node(0, 4), Demand(4), Verdict.NEVER, "pod requests 4 nvidia.com/gpu from the device plugin; node publishes "
                                            "its GPUs only as DRA devices"),
    (_node(4, 0), Demand(4, claim_gpus=4), Verdict.NEVER, "pod claims GPUs through DRA; node has only "
                                                          "device-plugin GPUs (no GPU ResourceSlice)"),
    (_node(4, 0), Demand(0, whole_node=True), Verdict.NEVER, "pod claims GPUs through DRA; node has only "
                                                             "device-plugin GPUs (no GPU ResourceSlice)"),
    (_node(1, 0, slots=4), Demand(3), Verdict.FITS, ""),
    (_node(0, 0, slots=4), Demand(2), Verdict.FITS, ""),
    (_node(2, 4), Demand(6, claim_gpus=4), Verdict.FITS, ""),
], ids=["device plugin on a plugin node", "claims on a DRA node", "device plugin on a DRA-only node",
        "claims on a plugin-only node", "a whole-node claim on a plugin-only node",
        "a plugin node with fabric slots takes attached GPUs", "an empty fabric node takes attached GPUs",
        "a node with both kinds serves a pod asking for both"])
def test_a_node_offers_the_gpus_of_the_kind_it_publishes(node: Node, need: Demand, verdict: Verdict,
                                                        reason: str) -> None:
    snapshot = Snapshot(nodes={"n": node}, used_gpus={}, node_groups={}, node_compute_domains={}, members={},
                        domains={"d": ("n",)}, catalog=Catalog({}, {}, {}, {}), reservations={},
                        fabric_free={"zone": 8})
    fit = node_fit(node, need, snapshot)
    assert (fit.verdict, fit.reason) == (verdict, reason)
