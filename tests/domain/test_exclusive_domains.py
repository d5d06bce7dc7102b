"""One IMEX domain per NVLink domain, when asked (webhook.domain.placement.exclusive): an exclusive ComputeDomain's
group gets only a domain no other ComputeDomain uses (running pods, a held node, a live reservation), keeps
other ComputeDomains out while it holds one (their reason names it), leaves groups without a ComputeDomain
alone; the annotation on the ComputeDomain, on the pods, or --exclusive-domains turn it on; a choice recorded
next to an exclusive holder fails the arbiter's test."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.decisions import filtering
from webhook.domain.groups import grouping
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Demand, Reservation
from webhook.domain.placement import exclusive, placement
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing

A, B, C = "aaaa-1111.7", "bbbb-2222.7", "cccc-3333.7"
NOW = 1000.0


def cd(name: str, nodes: int, exclusive_value: str | None = None) -> list[dict[str, Any]]:
    objects = builders.cd_objects(name, nodes)
    if exclusive_value is not None:
        objects[0]["metadata"].setdefault("annotations", {})[keys.EXCLUSIVE_ANNOTATION] = exclusive_value
    return objects


def reservation(group_id: str, name: str, domain: str, size: int = 2) -> Reservation:
    return Reservation(group_id=group_id, group_name=name, namespace="ml", domain=domain, size=size, gpus_per_pod=4,
                       one_pod_per_node=True, created_at=NOW, holder="t", version="1")


def _filter(objects: list[dict[str, Any]], pod: dict[str, Any], policy: Policy | None = None,
            reservations: dict[str, Reservation] | None = None) -> filtering.FilterOutcome:
    snap = builders.snapshot(objects, reservations)
    return filtering.filter_nodes(parsing.pod(pod), sorted(snap.nodes), DecisionInputs(snap, policy or Policy(), NOW))


def _domain(objects: list[dict[str, Any]], out: filtering.FilterOutcome) -> set[str | None]:
    snap = builders.snapshot(objects)
    return {snap.nodes[n].domain for n in out.passed}


RACKS = [*builders.rack("a", A, 2), *builders.rack("b", B, 4)]


def test_an_exclusive_group_skips_the_best_fit_another_compute_domain_runs_in() -> None:
    running = builders.pod("other-0", cd="other", node="a-00", phase="Running")
    objects = [*RACKS, *cd("other", 1), running, *cd("solo", 1, "true")]
    out = _filter(objects, builders.pod("solo-0", cd="solo"))
    assert _domain(objects, out) == {B}  # rack a fits better but runs ComputeDomain other


@pytest.mark.parametrize("value", [None, "false"])
def test_without_the_annotation_set_to_true_nothing_changes(value: str | None) -> None:
    running = builders.pod("other-0", cd="other", node="a-00", phase="Running")
    objects = [*RACKS, *cd("other", 1), running, *cd("shared", 1, value)]
    assert _domain(objects, _filter(objects, builders.pod("shared-0", cd="shared"))) == {A}


@pytest.mark.parametrize("value", ["True", " TRUE ", "yes", "1", "x" * 60, ""])
def test_a_value_other_than_true_or_false_is_refused_naming_the_annotation_not_read_as_false(value: str) -> None:
    objects = [*RACKS, *cd("shared", 1, value)]
    out = _filter(objects, builders.pod("shared-0", cd="shared"))
    assert not out.passed and out.outcome == "invalid-group"
    assert out.context is not None and "ComputeDomain ml/shared's annotation" in out.context.reason
    assert f'{keys.EXCLUSIVE_ANNOTATION}=' in out.context.reason and '"true" or "false"' in out.context.reason


def test_an_exclusive_holder_keeps_other_compute_domains_out_and_the_reason_names_it() -> None:
    holder = cd("owner", 2, "true")
    uid = builders.cd_uid("owner")
    held = {f"cd:{uid}": reservation(f"cd:{uid}", "owner", A, size=2)}
    objects = [*builders.rack("a", A, 4), *holder, *cd("guest", 2)]
    out = _filter(objects, builders.pod("guest-0", cd="guest"), reservations=held)
    assert not out.passed and out.outcome == "no-domain"
    assert out.context is not None and "held exclusively by ComputeDomain ml/owner" in out.context.reason
    assert out.context.resolvable_later  # the holder ends


def test_plain_gpu_pods_are_not_kept_out_of_an_exclusive_domain() -> None:
    uid = builders.cd_uid("owner")
    held = {f"cd:{uid}": reservation(f"cd:{uid}", "owner", A, size=2)}
    objects = [*builders.rack("a", A, 4), *cd("owner", 2, "true")]
    out = _filter(objects, builders.pod("plain"), reservations=held)
    assert len(out.passed) == 4


def test_an_exclusive_group_does_not_take_a_domain_another_compute_domain_has_reserved() -> None:
    uid = builders.cd_uid("first")
    held = {f"cd:{uid}": reservation(f"cd:{uid}", "first", A, size=1)}
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4), *cd("first", 1), *cd("solo", 2, "true")]
    out = _filter(objects, builders.pod("solo-0", cd="solo"), reservations=held)
    assert _domain(objects, out) == {B}


def test_the_pod_annotation_and_the_cluster_wide_flag_make_a_group_exclusive_too() -> None:
    running = builders.pod("other-0", cd="other", node="a-00", phase="Running")
    objects = [*RACKS, *cd("other", 1), running, *cd("solo", 1)]
    annotated = builders.pod("solo-0", cd="solo", annotations={keys.EXCLUSIVE_ANNOTATION: "true"})
    assert _domain(objects, _filter(objects, annotated)) == {B}
    assert _domain(objects, _filter(objects, builders.pod("solo-0", cd="solo"), Policy(exclusive_domains=True))) == {B}
    snap = builders.snapshot(objects)
    assert grouping.resolve(parsing.pod(annotated), snap.catalog, Policy()).group.exclusive  # type: ignore[union-attr]


def test_a_group_without_a_compute_domain_is_never_exclusive() -> None:
    pod = builders.pod("ann-0", annotations={keys.GROUP_ANNOTATION: "team", keys.EXCLUSIVE_ANNOTATION: "true"})
    group = grouping.resolve(parsing.pod(pod), builders.snapshot([]).catalog, Policy(exclusive_domains=True)).group
    assert group is not None and not group.exclusive


def test_when_every_domain_is_ruled_out_the_reason_says_so() -> None:
    running = [builders.pod("x-0", cd="x", node="a-00", phase="Running"),
               builders.pod("y-0", cd="y", node="b-00", phase="Running")]
    objects = [*RACKS, *cd("x", 1), *cd("y", 1), *running, *cd("solo", 1, "true")]
    out = _filter(objects, builders.pod("solo-0", cd="solo"))
    assert out.context is not None and "ruled out by exclusive ComputeDomains (2;" in out.context.reason
    assert out.context.resolvable_later


def test_a_choice_recorded_next_to_an_exclusive_holder_fails_the_arbiters_test() -> None:
    objects = [*builders.rack("a", A, 4), *cd("owner", 2, "true"), *cd("late", 2)]
    snap = builders.snapshot(objects)
    late = grouping.resolve(parsing.pod(builders.pod("late-0", cd="late")), snap.catalog, Policy()).group
    assert late is not None
    uid = builders.cd_uid("owner")
    others = {f"cd:{uid}": reservation(f"cd:{uid}", "owner", A, size=2)}
    need = Demand(4)
    assert placement.still_fits(A, late, need, 2, snap, {}, None, Policy())
    assert not placement.still_fits(A, late, need, 2, snap, others, None, Policy())
    assert exclusive.conflict(A, late, snap, others, Policy()) is not None
