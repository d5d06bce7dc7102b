"""Fabric health in the decision (webhook.domain.health): an unhealthy, not-Ready, condition-tainted or cordoned
node takes no member, with a reason; a domain with a degraded NVLink fabric is a second choice (avoid), any
choice (allow) or none (refuse) for a new group; a running group stays; hostile node fields are refused by
name."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from webhook.domain import health, keys
from webhook.domain.decisions import filtering
from webhook.domain.health import HealthPolicy
from webhook.domain.inputs import DecisionInputs
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import WireError

A, B = "aaaa-1111.7", "bbbb-2222.7"


def sick(node: dict[str, Any], fabric: str | None = None, ready: str | None = None,
         taints: list[dict[str, Any]] | None = None, cordoned: bool = False) -> dict[str, Any]:
    if fabric is not None:
        node["metadata"]["labels"][keys.HEALTH_LABEL] = fabric
    if ready is not None:
        node["status"]["conditions"] = [{"type": "MemoryPressure", "status": "False"},
                                        {"type": "Ready", "status": ready}]
    spec = node.setdefault("spec", {})
    if taints is not None:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    return node


def _filter(objects: list[dict[str, Any]], pod: str, cd: str, policy: HealthPolicy = "avoid",
            size_objects: int = 4) -> filtering.FilterOutcome:
    snap = builders.snapshot([*objects, *builders.cd_objects(cd, size_objects)])
    return filtering.filter_nodes(parsing.pod(builders.pod(pod, cd=cd)), sorted(snap.nodes),
                                  DecisionInputs(snap, Policy(fabric_health=policy), 1000.0))


@pytest.mark.parametrize(("change", "why"), [
    ({"fabric": "unhealthy"}, "NVLink fabric unhealthy"),
    ({"ready": "False"}, "node is not Ready"),
    ({"ready": "Unknown"}, "node is not Ready"),
    ({"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
     "taint node.kubernetes.io/unreachable:NoExecute"),
    ({"taints": [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}]},
     "taint node.kubernetes.io/memory-pressure:NoSchedule"),
    ({"cordoned": True}, "cordoned"),
])
def test_a_node_that_cannot_run_a_member_well_takes_none_and_says_why(change: dict[str, Any], why: str) -> None:
    rack = builders.rack("a", A, 5)
    sick(rack[2], **change)
    out = _filter(rack, "job-0", "job")
    assert "a-02" not in out.passed and len(out.passed) == 4
    assert why in out.unresolvable["a-02"]


@pytest.mark.parametrize("change", [
    {"fabric": "healthy"}, {"fabric": "none"}, {"fabric": "degraded"}, {"ready": "True"},
    {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},  # the scheduler weighs tolerations
    {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "PreferNoSchedule"}]},
])
def test_signals_that_do_not_stop_a_node_leave_it_a_candidate(change: dict[str, Any]) -> None:
    rack = builders.rack("a", A, 4)
    sick(rack[1], **change)
    assert "a-01" in _filter(rack, "job-0", "job").passed


def test_a_domain_with_too_few_usable_nodes_is_not_chosen_and_the_reason_counts_what_it_holds() -> None:
    rack = builders.rack("a", A, 4)
    sick(rack[0], fabric="unhealthy")
    out = _filter(rack, "job-0", "job")
    assert out.outcome == "no-domain" and not out.passed
    assert out.context is not None and "no domain can host 4 pods" in out.context.reason
    assert "holds 3 such pods" in out.context.reason


@pytest.mark.parametrize(("policy", "domain", "note"), [
    ("avoid", A, ""),
    ("allow", A, ""),
    ("refuse", A, ""),
])
def test_a_healthy_domain_wins_over_a_degraded_better_fit(policy: HealthPolicy, domain: str, note: str) -> None:
    healthy, degraded = builders.rack("a", A, 8), builders.rack("b", B, 4)
    sick(degraded[3], fabric="degraded")
    out = _filter([*healthy, *degraded], "job-0", "job", policy)
    chosen = {builders.snapshot([*healthy, *degraded]).nodes[n].domain for n in out.passed}
    if policy == "allow":
        assert chosen == {B}  # the best fit, health aside
    else:
        assert chosen == {domain}


def test_avoid_takes_a_degraded_domain_when_no_healthy_one_fits_and_says_so() -> None:
    small_healthy, degraded = builders.rack("a", A, 2), builders.rack("b", B, 4)
    sick(degraded[0], fabric="degraded")
    out = _filter([*small_healthy, *degraded], "job-0", "job")
    assert sorted(out.passed) == ["b-00", "b-01", "b-02", "b-03"]
    assert out.context is not None and "degraded NVLink fabric" in out.context.reason
    assert "degraded fabric on b-00" in out.context.reason


def test_refuse_keeps_a_new_group_waiting_for_a_healthy_domain_without_preemption_being_pointless() -> None:
    small_healthy, degraded = builders.rack("a", A, 2), builders.rack("b", B, 4)
    sick(degraded[0], fabric="degraded")
    out = _filter([*small_healthy, *degraded], "job-0", "job", "refuse")
    assert not out.passed and out.outcome == "no-domain"
    assert out.context is not None and "--fabric-health-policy is refuse" in out.context.reason
    assert out.context.resolvable_later and out.failed and not out.unresolvable  # health can return


def test_a_running_group_stays_in_its_domain_when_the_fabric_degrades() -> None:
    rack = builders.rack("a", A, 4)
    sick(rack[0], fabric="degraded")
    objects = [*rack, *builders.rack("b", B, 4),
               builders.pod("job-0", cd="job", node="a-00", phase="Running")]
    snap = builders.snapshot([*objects, *builders.cd_objects("job", 4)])
    out = filtering.filter_nodes(parsing.pod(builders.pod("job-1", cd="job")), sorted(snap.nodes),
                                 DecisionInputs(snap, Policy(fabric_health="refuse"), 1000.0))
    assert out.passed and {snap.nodes[n].domain for n in out.passed} == {A}


@pytest.mark.parametrize(("nodes", "expected"), [
    ([{}, {}], ("healthy", (), ())),
    ([{"fabric": "degraded"}, {}], ("degraded", ("n0",), ())),
    ([{"fabric": "unhealthy"}, {}], ("degraded", ("n0",), ("n0",))),
    ([{"ready": "False"}, {}], ("healthy", (), ("n0",))),
    ([{"ready": "False"}, {"cordoned": True}], ("unhealthy", (), ("n0", "n1"))),
    ([{"fabric": "unhealthy"}, {"fabric": "unhealthy"}], ("unhealthy", ("n0", "n1"), ("n0", "n1"))),
])
def test_a_domains_health_and_the_nodes_behind_it(nodes: list[dict[str, Any]],
                                                  expected: tuple[str, tuple[str, ...], tuple[str, ...]]) -> None:
    parsed = [parsing.node(sick(builders.node(f"n{i}", 4, A), **change), Policy().domain_labels)
              for i, change in enumerate(nodes)]
    judged = health.domain_health(parsed)
    assert (judged.health, judged.degraded, judged.unhealthy) == expected


def test_the_description_of_a_large_domain_names_a_few_nodes_and_counts_the_rest() -> None:
    judged = health.DomainHealth("degraded", tuple(f"n{i}" for i in range(18)), ())
    assert judged.describe() == "degraded fabric on n0, n1, n2 and 15 more"


@pytest.mark.parametrize(("field", "value", "path"), [
    ("conditions", "Ready", "node.status.conditions"),
    ("conditions", [["Ready"]], "node.status.conditions[0]"),
    ("conditions", [{"type": "Ready", "status": 1}], "node.status.conditions[0].status"),
    ("taints", {"key": "x"}, "node.spec.taints"),
    ("taints", [{"key": "node.kubernetes.io/" + "x" * 100_000, "effect": "NoSchedule"}], "node.spec.taints[0].key"),
    ("taints", [{"key": "k", "effect": ["NoSchedule"]}], "node.spec.taints[0].effect"),
])
def test_hostile_health_fields_are_refused_naming_the_field(field: str, value: Any, path: str) -> None:
    node = builders.node("n0", 4, A)
    if field == "conditions":
        node["status"]["conditions"] = value
    else:
        node["spec"] = {"taints": value}
    with pytest.raises(WireError) as err:
        parsing.node(node, Policy().domain_labels)
    assert err.value.path == path


def _offered_only(rack_a: list[dict[str, Any]], rack_b: list[dict[str, Any]]) -> str:
    """The reason a 4-pod group gets when the scheduler offers only rack a's nodes."""
    snap = builders.snapshot([*rack_a, *rack_b, *builders.cd_objects("job", 4)])
    offered = sorted(n for n in snap.nodes if n.startswith("a-"))
    out = filtering.filter_nodes(parsing.pod(builders.pod("job-0", cd="job")), offered,
                                 DecisionInputs(snap, Policy(), 1000.0))
    assert out.context is not None and out.context.domain is None and not out.passed
    return out.context.reason


def test_a_group_offered_only_unhealthy_nodes_is_told_of_them_not_of_a_domain_the_scheduler_never_offered() -> None:
    rack_a = [sick(node, fabric="unhealthy") for node in builders.rack("a", A, 4)]
    reason = _offered_only(rack_a, builders.rack("b", B, 4))
    assert reason.index(f"domain {A}: 4 nodes, 4 with an unhealthy NVLink fabric") < reason.index(B), reason
    assert "the scheduler offered nodes in 1 of the 2 domains checked" in reason
    assert "rejected by the scheduler's own filters" not in reason


def test_each_offered_domain_is_named_with_what_ruled_it_out() -> None:
    rack_a = builders.rack("a", A, 4)
    sick(rack_a[0], fabric="unhealthy")
    sick(rack_a[1], cordoned=True)
    reason = _offered_only(rack_a, builders.rack("b", B, 4))
    assert f"domain {A}: 4 nodes, 1 cordoned, 1 with an unhealthy NVLink fabric, 2 < 4 needed" in reason, reason


def test_when_the_scheduler_offers_nodes_of_no_domain_the_reason_says_so() -> None:
    snap = builders.snapshot([*builders.rack("a", A, 4), builders.node("plain", 8), *builders.cd_objects("job", 4)])
    out = filtering.filter_nodes(parsing.pod(builders.pod("job-0", cd="job")), ["plain"],
                                 DecisionInputs(snap, Policy(), 1000.0))
    assert out.context is not None
    assert "the scheduler offered no node of any domain (1 domains checked)" in out.context.reason
