"""The filter decision and the domain choice behind it: whole-group capacity, best fit, holds of other
groups, ComputeDomain exclusivity, fabric capacity, failed vs unresolvable nodes, and reasons."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.decisions import filtering
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import resolution
from webhook.domain.model import Reservation
from webhook.domain.placement import placement
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import DecisionError

POLICY = Policy()
A, B, C = "aaaa-1111.7", "bbbb-2222.7", "cccc-3333.7"  # same clique number, different racks


def _filter(objects: list[dict[str, Any]], pod: dict[str, Any], reservations: dict[str, Reservation] | None = None,
            fabric_free: dict[str, int] | None = None, now: float = 1000.0) -> filtering.FilterOutcome:
    snap = builders.snapshot(objects, reservations, fabric_free)
    return filtering.filter_nodes(parsing.pod(pod), sorted(snap.nodes), DecisionInputs(snap, POLICY, now))


def _domains(objects: list[dict[str, Any]], names: tuple[str, ...]) -> set[str]:
    snap = builders.snapshot(objects)
    return {snap.nodes[n].domain or "" for n in names}


def test_a_pod_outside_any_group_passes_through_unchanged() -> None:
    objects = [*builders.rack("a", A, 3), builders.node("hgx", 8)]
    out = _filter(objects, builders.pod("plain"))
    assert out.passed == ("a-00", "a-01", "a-02", "hgx") and not out.failed and not out.unresolvable
    assert out.outcome == "pass-through"


def test_a_pod_whose_claim_template_the_cache_lacks_is_an_error_the_scheduler_retries_not_a_pass() -> None:
    # The scheduler asks about a pod only once its claims exist: a missing template is our cache lagging,
    # and passing every node could place an IMEX pod outside its group.
    with pytest.raises(DecisionError, match="uses ResourceClaimTemplate late-channel, which imex-webhook's cache"):
        _filter(builders.rack("a", A, 2), builders.pod("late-0", cd="late"))


def test_clique_values_sharing_a_clique_number_are_different_domains() -> None:
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4), *builders.cd_objects("job", 4)]
    out = _filter(objects, builders.pod("job-0", cd="job"))
    assert len(out.passed) == 4 and len(_domains(objects, out.passed)) == 1
    other = next(n for n in out.unresolvable if n.startswith("b-") or n.startswith("a-"))
    assert "node is outside domain" in out.unresolvable[other]


def test_best_fit_picks_the_smallest_domain_that_holds_the_whole_group() -> None:
    objects = [*builders.rack("a", A, 18), *builders.rack("c", C, 9), *builders.cd_objects("job", 8)]
    out = _filter(objects, builders.pod("job-0", cd="job"))
    assert _domains(objects, out.passed) == {C}
    assert out.context is not None and "best fit" in out.context.reason


def test_a_group_too_large_for_any_domain_names_its_size_and_the_largest_capacity() -> None:
    objects = [*builders.rack("a", A, 18), *builders.rack("b", B, 9), *builders.cd_objects("big", 20)]
    out = _filter(objects, builders.pod("big-0", cd="big"))
    assert not out.passed and not out.failed
    reason = out.unresolvable["a-00"]
    assert "no domain can host 20 pods" in reason and "largest free capacity is 18 pods" in reason
    assert "even empty, the largest domain holds 18" in reason


def test_a_group_that_fits_once_pods_finish_fails_resolvably() -> None:
    busy = [builders.pod(f"busy-{i}", gpus=4, node=f"a-{i:02d}", phase="Running") for i in range(3)]
    objects = [*builders.rack("a", A, 4), *busy, *builders.cd_objects("job", 4)]
    out = _filter(objects, builders.pod("job-0", cd="job"))
    assert not out.passed and not out.unresolvable
    assert "could once running pods finish" in out.failed["a-00"]


def test_two_groups_competing_for_one_domain_do_not_share_promised_capacity() -> None:
    objects = [*builders.rack("a", A, 8), *builders.rack("b", B, 8),
               *builders.cd_objects("first", 6), *builders.cd_objects("second", 4)]
    first = Reservation(group_id=f"cd:{builders.cd_uid('first')}", group_name="first", namespace="nlp", domain=A,
                        size=6, gpus_per_pod=4, one_pod_per_node=True, created_at=990.0, version="1")
    # Without the hold, "second" (4 pods) would best-fit into either rack; the hold leaves rack A 2 nodes.
    out = _filter(objects, builders.pod("second-0", cd="second"), reservations={first.group_id: first})
    assert _domains(objects, out.passed) == {B}


def test_a_stored_reservation_is_kept_even_when_another_domain_fits_better() -> None:
    objects = [*builders.rack("a", A, 18), *builders.rack("c", C, 9), *builders.cd_objects("job", 8)]
    gid = f"cd:{builders.cd_uid('job')}"
    res = Reservation(group_id=gid, group_name="job", namespace="ml", domain=A, size=8, gpus_per_pod=4,
                      one_pod_per_node=True, created_at=990.0, version="3")
    out = _filter(objects, builders.pod("job-1", cd="job"), reservations={gid: res})
    assert _domains(objects, out.passed) == {A}


def test_an_expired_reservation_with_no_member_placed_is_ignored() -> None:
    objects = [*builders.rack("a", A, 18), *builders.rack("c", C, 9), *builders.cd_objects("job", 8)]
    gid = f"cd:{builders.cd_uid('job')}"
    res = Reservation(group_id=gid, group_name="job", namespace="ml", domain=A, size=8, gpus_per_pod=4,
                      one_pod_per_node=True, created_at=0.0, version="3")
    out = _filter(objects, builders.pod("job-1", cd="job"), reservations={gid: res}, now=POLICY.reservation_ttl + 1)
    assert _domains(objects, out.passed) == {C}


def test_a_node_held_by_another_compute_domain_is_unresolvable() -> None:
    objects = [*builders.rack("a", A, 3), builders.node("a-held", 4, A, compute_domain="someone-else"),
               *builders.cd_objects("job", 2)]
    out = _filter(objects, builders.pod("job-0", cd="job"))
    assert "held by ComputeDomain someone-else" in out.unresolvable["a-held"]


def test_a_node_running_a_pod_of_another_compute_domain_is_unresolvable() -> None:
    objects = [*builders.rack("a", A, 3), *builders.cd_objects("job", 2), *builders.cd_objects("other", 1),
               builders.pod("other-0", cd="other", gpus=1, node="a-00", phase="Running")]
    out = _filter(objects, builders.pod("job-0", cd="job"))
    assert "runs a pod of ComputeDomain" in out.unresolvable["a-00"]


def test_a_member_already_on_a_node_keeps_other_members_off_it() -> None:
    objects = [*builders.rack("a", A, 3), *builders.cd_objects("job", 2),
               builders.pod("job-0", cd="job", gpus=1, node="a-00", phase="Running")]
    out = _filter(objects, builders.pod("job-1", cd="job", gpus=1))
    assert "already runs a pod of this ComputeDomain" in out.unresolvable["a-00"]
    assert out.passed == ("a-01", "a-02")


def test_members_already_placed_decide_the_domain() -> None:
    objects = [*builders.rack("a", A, 18), *builders.rack("c", C, 9), *builders.cd_objects("job", 4),
               builders.pod("job-0", cd="job", node="a-05", phase="Running")]
    out = _filter(objects, builders.pod("job-1", cd="job"))
    assert _domains(objects, out.passed) == {A}


def test_an_init_container_demand_larger_than_any_node_is_unresolvable() -> None:
    objects = [*builders.rack("a", A, 2), *builders.cd_objects("job", 1)]
    pod = builders.pod("job-0", cd="job", gpus=1)
    pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {keys.GPU_RESOURCE: "8"}}}]
    out = _filter(objects, pod)
    assert not out.passed
    assert "8 GPUs" in out.unresolvable["a-00"]


def test_unknown_group_size_counts_the_pods_seen() -> None:
    pods = [builders.pod(f"job-{i}", annotations={keys.GROUP_ANNOTATION: "job"}) for i in range(3)]
    objects = [*builders.rack("a", A, 2), *builders.rack("b", B, 3), *pods]
    out = _filter(objects, pods[0])
    assert _domains(objects, out.passed) == {B}  # 3 seen pods x 4 GPUs do not fit rack A's 2 nodes


def test_a_busy_node_inside_the_domain_fails_resolvably() -> None:
    objects = [*builders.rack("a", A, 4), *builders.cd_objects("job", 2),
               builders.pod("busy", gpus=2, node="a-00", phase="Running")]
    out = _filter(objects, builders.pod("job-0", cd="job"))
    assert "pod needs 4 GPUs; 2 free" in out.failed["a-00"]


def test_finished_pods_hold_no_gpus() -> None:
    objects = [*builders.rack("a", A, 1), *builders.cd_objects("job", 1),
               builders.pod("done", gpus=4, node="a-00", phase="Succeeded")]
    assert _filter(objects, builders.pod("job-0", cd="job")).passed == ("a-00",)


def test_nodes_outside_any_domain_are_unresolvable_with_the_labels_to_add() -> None:
    objects = [*builders.rack("a", A, 1), builders.node("hgx", 8), *builders.cd_objects("job", 1)]
    reason = _filter(objects, builders.pod("job-0", cd="job")).unresolvable["hgx"]
    assert keys.CLIQUE_LABEL in reason and keys.FABRIC_ZONE_LABEL in reason


def test_fabric_gpus_make_a_small_node_fit_within_the_zone_budget() -> None:
    pool = [builders.node(f"f-{i}", 1, zone="pool", slots=4) for i in range(3)]
    objects = [*pool, *builders.cd_objects("job", 2)]
    out = _filter(objects, builders.pod("job-0", cd="job", gpus=3), fabric_free={"pool": 4})
    assert out.passed == ("f-0", "f-1", "f-2")  # each node alone can take 2 attached GPUs
    out = _filter(objects, builders.pod("job-0", cd="job", gpus=3), fabric_free={"pool": 1})
    assert not out.passed  # 2 pods x 2 attached GPUs exceed the 1 free block


def test_equal_domains_are_chosen_deterministically() -> None:
    objects = [*builders.rack("b", B, 4), *builders.rack("a", A, 4), *builders.cd_objects("job", 4)]
    first = _filter(objects, builders.pod("job-0", cd="job"))
    again = _filter(list(reversed(objects)), builders.pod("job-0", cd="job"))
    assert first.passed == again.passed and _domains(objects, first.passed) == {A}


def test_a_group_with_contradicting_claims_fails_every_node_with_the_problem() -> None:
    objects = [*builders.rack("a", A, 2), *builders.cd_objects("x", 1), *builders.cd_objects("y", 1)]
    pod = builders.pod("p")
    pod["spec"]["resourceClaims"] = [{"name": "a", "resourceClaimTemplateName": "x-channel"},
                                     {"name": "b", "resourceClaimTemplateName": "y-channel"}]
    out = _filter(objects, pod)
    assert out.outcome == "invalid-group" and "2 different ComputeDomains" in out.unresolvable["a-00"]


@pytest.mark.parametrize(("free_nodes", "size", "expected"), [(9, 8, 9), (9, 9, 9), (9, 10, 0)])
def test_the_offer_of_a_domain_counts_whole_pods(free_nodes: int, size: int, expected: int) -> None:
    objects = [*builders.rack("c", C, free_nodes), *builders.cd_objects("job", size)]
    snap = builders.snapshot(objects)
    pod = parsing.pod(builders.pod("job-0", cd="job"))
    ctx = resolution.resolve(pod, DecisionInputs(snap, POLICY, 0.0))
    assert ctx is not None
    choice = placement.choose(replace(ctx.resolution.group), size, ctx.demand, snap, {})  # type: ignore[arg-type]
    assert (choice.domain == C) == (expected > 0)
    assert choice.offers[0].ceiling == free_nodes
