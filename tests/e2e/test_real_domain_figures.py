"""Free slots and domain health as an operator scrapes them, with the real kube-scheduler placing a group
(docs/OPERATING.md, "Monitoring"): imex_webhook_domain_fit_pods follows the group's binding into rack b,
imex_webhook_largest_group_fits stays at the largest rack's room, and imex_webhook_domain_health turns
degraded when the node agent's label says so, back to healthy when it is lifted."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import scenario
from tests.e2e.conftest import GPUS_PER_NODE, RACKS, RealCluster
from tests.e2e.kubeapi import eventually
from webhook.domain import keys

pytestmark = pytest.mark.realcluster

RACK_A, RACK_B = RACKS["a"][0], RACKS["b"][0]


def _samples(cluster: RealCluster, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    body = cluster.extenders["imex-webhook"].get("/metrics")
    assert body.status_code == 200, body.text
    return {tuple(sorted(s.labels.items())): s.value for family in text_string_to_metric_families(body.text)
            for s in family.samples if s.name == name}


def _fit(cluster: RealCluster, domain: str) -> float | None:
    return _samples(cluster, "imex_webhook_domain_fit_pods").get(
        (("domain", domain), ("gpus_per_pod", str(GPUS_PER_NODE))))


def _health(cluster: RealCluster, domain: str) -> str | None:
    current = [dict(labels)["health"] for labels, value in _samples(cluster, "imex_webhook_domain_health").items()
               if dict(labels)["domain"] == domain and value == 1]
    return current[0] if len(current) == 1 else None


def test_free_slots_and_health_follow_the_cluster_as_the_real_scheduler_places_a_group(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("figures")
    node = "gb200-a-01"
    try:
        eventually(lambda: _fit(real_cluster, RACK_B) == 3, 30, what="rack b's 3 free nodes as free slots")
        assert _fit(real_cluster, RACK_A) == 4
        scenario.computedomain(real_cluster, ns, "pair", 2)
        placed = real_cluster.wait_bound(ns, scenario.members(real_cluster, ns, "pair", 2, gpus=GPUS_PER_NODE,
                                                              claims=[scenario.channel("pair")]))
        assert scenario.domains_of(placed) == {"b"}
        eventually(lambda: _fit(real_cluster, RACK_B) == 1, 30, what="rack b's one node left after the group")
        largest = _samples(real_cluster, "imex_webhook_largest_group_fits")
        assert largest[(("gpus_per_pod", str(GPUS_PER_NODE)),)] == 4

        assert _health(real_cluster, RACK_A) == "healthy"
        real_cluster.api.merge_patch("Node", None, node, {"metadata": {"labels": {keys.HEALTH_LABEL: "degraded"}}})
        eventually(lambda: _health(real_cluster, RACK_A) == "degraded", 30, what="rack a degraded")
        real_cluster.api.merge_patch("Node", None, node, {"metadata": {"labels": {keys.HEALTH_LABEL: None}}})
        eventually(lambda: _health(real_cluster, RACK_A) == "healthy", 30, what="rack a healthy again")
    finally:
        real_cluster.api.merge_patch("Node", None, node, {"metadata": {"labels": {keys.HEALTH_LABEL: None}}})
        real_cluster.cleanup(ns)
