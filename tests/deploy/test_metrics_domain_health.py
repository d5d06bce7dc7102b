"""Each domain's health and the spare nodes held in it, in /metrics: ``imex_webhook_domain_health{domain,health}``
(the Prometheus enum pattern: a series per health value, 1 for the current one) and
``imex_webhook_spare_nodes{domain}``, with spares counted among the domain's reserved GPUs; read at scrape
time from the engine and read back with prometheus_client's text parser."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests import builders
from tests.deploy.test_metrics_view import NOW, Samples, engine_for, group_pods, reservation, scrape, viewed
from webhook.domain import keys
from webhook.domain.health import HEALTHS
from webhook.domain.policy import Policy


def _node(name: str, domain: str, fabric: str = "", ready: bool = True) -> dict[str, Any]:
    node = builders.node(name, 4, domain)
    if fabric:
        node["metadata"]["labels"][keys.HEALTH_LABEL] = fabric
    if not ready:
        node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return node


def healths(samples: Samples) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (name, labels), value in samples.items():
        if name == "imex_webhook_domain_health":
            by = dict(labels)
            out.setdefault(by["domain"], {})[by["health"]] = value
    return out


def spares(samples: Samples) -> dict[str, float]:
    return {dict(labels)["domain"]: v for (name, labels), v in samples.items() if name == "imex_webhook_spare_nodes"}


def reserved(samples: Samples) -> dict[str, float]:
    return {dict(labels)["domain"]: v for (name, labels), v in samples.items()
            if name == "imex_webhook_domain_gpus" and dict(labels)["state"] == "reserved"}


HEALTHY = [_node(f"a-{i:02d}", "dom-a") for i in range(3)]

# (case, nodes of dom-a, its health)
CASES: list[tuple[str, list[dict[str, Any]], str]] = [
    ("every node healthy", HEALTHY, "healthy"),
    ("one node's NVLink fabric degraded", [*HEALTHY[:2], _node("a-02", "dom-a", fabric="degraded")], "degraded"),
    ("one node's fabric unhealthy, the others take members", [*HEALTHY[:2], _node("a-02", "dom-a", "unhealthy")],
     "degraded"),
    ("one node not Ready lowers capacity, not health", [*HEALTHY[:2], _node("a-02", "dom-a", ready=False)], "healthy"),
    ("every node's fabric unhealthy", [_node(f"a-{i:02d}", "dom-a", "unhealthy") for i in range(3)], "unhealthy"),
    ("no node Ready", [_node(f"a-{i:02d}", "dom-a", ready=False) for i in range(3)], "unhealthy"),
]


@pytest.mark.parametrize(("nodes", "health"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_domain_has_exactly_one_health_at_1_and_the_others_at_0(nodes: list[dict[str, Any]],
                                                                        health: str) -> None:
    samples = scrape(viewed(engine_for([*nodes, *builders.rack("b", "dom-b", 2)])))
    assert healths(samples) == {
        "dom-a": {h: (1.0 if h == health else 0.0) for h in HEALTHS},
        "dom-b": {"healthy": 1.0, "degraded": 0.0, "unhealthy": 0.0},  # its neighbour's trouble is not its own
    }


def test_spares_of_a_live_reservation_are_spare_nodes_and_reserved_gpus_until_it_lapses() -> None:
    clock = {"now": NOW}
    objects = [*builders.rack("a", "dom-a", 6), *builders.rack("b", "dom-b", 2),
               *group_pods("g", 2, bound={0: "a-00"})]
    held = replace(reservation("g", "dom-a", 2), spares=2)
    metrics = viewed(engine_for(objects, [held], clock=lambda: clock["now"]))
    samples = scrape(metrics)
    assert spares(samples) == {"dom-a": 2.0, "dom-b": 0.0}
    # One member still to place and two spare nodes, 4 GPUs each.
    assert reserved(samples) == {"dom-a": 12.0, "dom-b": 0.0}
    clock["now"] = NOW + Policy().reservation_ttl + 1  # no member placed since: the reservation lapsed
    samples = scrape(metrics)
    assert spares(samples) == {"dom-a": 0.0, "dom-b": 0.0} and reserved(samples) == {"dom-a": 0.0, "dom-b": 0.0}


def test_spares_stay_held_while_every_member_runs() -> None:
    objects = [*builders.rack("a", "dom-a", 6), *group_pods("g", 2, bound={0: "a-00", 1: "a-01"})]
    held = replace(reservation("g", "dom-a", 2), spares=3, placed_at=NOW)
    samples = scrape(viewed(engine_for(objects, [held])))
    assert spares(samples) == {"dom-a": 3.0} and reserved(samples) == {"dom-a": 12.0}


def test_the_exposition_declares_both_families_as_gauges_with_their_labels() -> None:
    objects = [*HEALTHY, _node("b-00", "dom-b", fabric="degraded")]
    text = generate_latest(viewed(engine_for(objects)).registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    health, spare = families["imex_webhook_domain_health"], families["imex_webhook_spare_nodes"]
    assert (health.type, spare.type) == ("gauge", "gauge")
    assert {tuple(sorted(s.labels)) for s in health.samples} == {("domain", "health")}
    assert len(health.samples) == 2 * len(HEALTHS)
    assert {s.labels["domain"] for s in spare.samples} == {"dom-a", "dom-b"}
    assert 'imex_webhook_domain_health{domain="dom-b",health="degraded"} 1.0' in text
