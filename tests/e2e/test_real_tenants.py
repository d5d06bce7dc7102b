"""A tenant keeps to its own namespace on the real control plane (issue 38; docs/GROUPS.md).

A ComputeDomain's UID is on every node the NVIDIA driver labels, so a tenant can write a claim template in its
own namespace whose ``domainID`` names another namespace's ComputeDomain. Before the fix, ``evil/thief-0``
joined ``ml/train``'s group that way, took a node of its reserved rack and left the job one node short.

Here the victim's job fills rack B (3 nodes, 4 GPUs each) exactly, so a thief holding any node of it would
leave one victim pod unplaceable. The thief is refused by the admission webhook with a message naming the
ComputeDomain's namespace; created where admission does not see it (a namespace labelled
``imex-webhook.io/ignore``) and before the victim's pods, it reaches the extender's /filter, which refuses
every node with the same reason; either way, every victim pod is placed in the rack.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, RACKS, RealCluster
from tests.e2e.kubeapi import ApiCallError, eventually
from webhook.domain import keys
from webhook.service import deploy

# The first test also waits for the session fixture, which may build the control plane from source.
pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]

RACK = "b"
SIZE = RACKS[RACK][1]  # the victim's job fills the rack: one node taken by another would leave it short
IGNORE_LABEL = "imex-webhook.io/ignore"  # the MutatingWebhookConfiguration's per-namespace opt-out


def _victim(cluster: RealCluster, ns: str) -> str:
    """ComputeDomain ``train`` with its channel template (as the driver's controller writes them): its UID."""
    cd = scenario.computedomain(cluster, ns, "train", SIZE)
    uid: str = cd["metadata"]["uid"]
    return uid


def _thief(ns: str, *, scheduler: str | None = None) -> dict[str, Any]:
    pod = objects.pod(ns, "thief-0", gpus=GPUS_PER_NODE, claims=[scenario.channel("thief")])
    if scheduler:  # admission did not send it to the dedicated profile: the tenant names it itself
        pod["spec"]["schedulerName"] = scheduler
    return pod


def _names_victim(text: str, victim_ns: str, thief_ns: str) -> bool:
    return f"ComputeDomain {victim_ns}/train" in text and f"own namespace ({thief_ns})" in text


def _victim_fills_the_rack(cluster: RealCluster, ns: str, names: list[str]) -> None:
    placed = cluster.wait_bound(ns, names, timeout=120)
    assert scenario.domains_of(placed) == {RACK}, f"{SIZE} pods x 4 GPUs fit rack {RACK} exactly: {placed}"
    assert len(set(placed.values())) == SIZE, f"one ComputeDomain pod per node: {placed}"
    (reservation,) = cluster.reservations(ns)
    assert reservation["spec"]["size"] == SIZE, reservation["spec"]


def test_admission_refuses_a_pod_naming_another_namespaces_compute_domain(real_cluster: RealCluster) -> None:
    victim_ns, thief_ns = real_cluster.namespace("ml"), real_cluster.namespace("evil")
    try:
        uid = _victim(real_cluster, victim_ns)
        # The thief's template: the victim's channel template in its own namespace, under its own name,
        # keeping domainID = ml/train's UID (read off a node label).
        real_cluster.api.create(objects.channel_template(thief_ns, "thief", uid))
        names = scenario.members(real_cluster, victim_ns, "train", SIZE, gpus=GPUS_PER_NODE,
                                 claims=[scenario.channel("train")])

        def refusal() -> str | None:
            # A dry run goes through admission and stores nothing. Until the webhook's cache holds the
            # thief's template and the ComputeDomain, it admits the pod deferred (no group): ask again.
            try:
                admitted = real_cluster.api.call("POST", real_cluster.api.path("Pod", thief_ns), _thief(thief_ns),
                                                 params={"dryRun": "All"})
            except ApiCallError as err:
                return err.body
            labels = admitted["metadata"].get("labels") or {}
            assert keys.GROUP_LABEL not in labels, (
                f"the thief was admitted into group {labels[keys.GROUP_LABEL]!r}: "
                f"{admitted['metadata'].get('annotations')}")
            return None

        body = eventually(refusal, 60, what="the admission webhook's refusal of evil/thief-0")
        assert _names_victim(body, victim_ns, thief_ns), body
        with pytest.raises(ApiCallError) as refused:
            real_cluster.api.create(_thief(thief_ns))
        assert refused.value.status == 400 and "pods.imex-webhook.io" in refused.value.body, refused.value.body
        assert _names_victim(refused.value.body, victim_ns, thief_ns), refused.value.body
        assert not real_cluster.api.list("Pod", thief_ns)

        _victim_fills_the_rack(real_cluster, victim_ns, names)
        assert not real_cluster.reservations(thief_ns)
    finally:
        real_cluster.cleanup(thief_ns)
        real_cluster.cleanup(victim_ns)


def test_past_admission_the_filter_refuses_every_node_and_the_victim_gets_its_whole_rack(
        real_cluster: RealCluster) -> None:
    victim_ns = real_cluster.namespace("ml-unhooked")
    thief_ns = "evil-unhooked"
    real_cluster.api.create({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": thief_ns, "labels": {IGNORE_LABEL: "true"}}}, exist_ok=True)
    try:
        uid = _victim(real_cluster, victim_ns)
        real_cluster.api.create(objects.channel_template(thief_ns, "thief", uid))
        # Admission never sees the thief: it keeps no mutation and names the dedicated scheduler itself.
        thief = real_cluster.api.create(_thief(thief_ns, scheduler=deploy.SCHEDULER_NAME))
        assert keys.MUTATED_ANNOTATION not in (thief["metadata"].get("annotations") or {}), thief["metadata"]

        def refused_by_filter() -> list[dict[str, Any]]:
            node = real_cluster.api.get("Pod", thief_ns, "thief-0")["spec"].get("nodeName")
            assert node is None, f"evil/thief-0 was placed on {node}, in ComputeDomain {victim_ns}/train's group"
            return [e for e in real_cluster.events_for(thief_ns, "thief-0", "FailedScheduling")
                    if _names_victim(e.get("note") or "", victim_ns, thief_ns)]

        # Before any victim pod exists: the thief is the first to reach the extender.
        events = eventually(refused_by_filter, 90, what="a FailedScheduling event naming the other namespace")
        assert not real_cluster.reservations(victim_ns) and not real_cluster.reservations(thief_ns), (
            "the thief's filter reserved nothing", events[-1]["note"])

        names = scenario.members(real_cluster, victim_ns, "train", SIZE, gpus=GPUS_PER_NODE,
                                 claims=[scenario.channel("train")])
        _victim_fills_the_rack(real_cluster, victim_ns, names)
        assert real_cluster.api.get("Pod", thief_ns, "thief-0")["spec"].get("nodeName") is None
        assert not real_cluster.reservations(thief_ns)
    finally:
        real_cluster.cleanup(thief_ns)
        real_cluster.cleanup(victim_ns)
