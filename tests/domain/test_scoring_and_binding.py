"""Prioritize scores (0..10, no-attach first, tighter packing higher, neutral for non-group pods without GPUs) and the
bind plan (idempotent re-bind, conflicts, reservation to store, fabric GPUs to attach)."""

from __future__ import annotations

import pytest

from tests import builders
from webhook.domain.decisions import binding, scoring
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import DecisionError

POLICY = Policy()
A, B = "aaaa-1111.7", "bbbb-2222.7"


def test_pods_outside_any_group_without_gpus_get_neutral_scores_everywhere() -> None:
    # GPU pods outside any group are packed (tests/domain/test_plain_pods.py)
    snap = builders.snapshot(builders.rack("a", A, 3))
    scores = scoring.prioritize(parsing.pod(builders.pod("plain", gpus=0)), ["a-00", "a-01"],
                                DecisionInputs(snap, POLICY, 0.0))
    assert scores == [("a-00", 0), ("a-01", 0)]


def test_tighter_packing_scores_higher_and_scores_stay_in_range() -> None:
    objects = [builders.node("roomy", 8, A), builders.node("tight", 8, A), *builders.cd_objects("job", 2),
               builders.pod("other", gpus=4, node="tight", phase="Running", namespace="x")]
    snap = builders.snapshot(objects)
    scores = dict(scoring.prioritize(parsing.pod(builders.pod("job-0", cd="job")), ["roomy", "tight"],
                                     DecisionInputs(snap, POLICY, 0.0)))
    assert scores["tight"] == 10 and 5 <= scores["roomy"] < 10


def test_nodes_that_need_a_fabric_attach_score_below_nodes_that_do_not() -> None:
    objects = [builders.node("local", 4, zone="pool"), builders.node("attach", 1, zone="pool", slots=4),
               *builders.cd_objects("job", 2)]
    snap = builders.snapshot(objects, fabric_free={"pool": 8})
    scores = dict(scoring.prioritize(parsing.pod(builders.pod("job-0", cd="job", gpus=2)), ["local", "attach"],
                                     DecisionInputs(snap, POLICY, 0.0)))
    assert 1 <= scores["attach"] <= 4 < 5 <= scores["local"] <= 10


def test_among_nodes_that_need_an_attach_the_fewest_fabric_gpus_score_highest() -> None:
    # The zone's pool is shared by the group's pods still to place: a node that takes more blocks only because
    # its local GPU is busy would empty the pool for the last pods (the stuck job of docs/SIMULATE.md, seed 7).
    objects = [builders.node("one-local", 1, zone="pool", slots=4), builders.node("busy", 1, zone="pool", slots=4),
               builders.pod("plain", gpus=1, node="busy", phase="Running", namespace="x"),
               *builders.cd_objects("job", 2)]
    snap = builders.snapshot(objects, fabric_free={"pool": 8})
    scores = dict(scoring.prioritize(parsing.pod(builders.pod("job-0", cd="job", gpus=2)), ["one-local", "busy"],
                                     DecisionInputs(snap, POLICY, 0.0)))
    assert 1 <= scores["busy"] < scores["one-local"] <= 4


def test_nodes_outside_the_groups_domain_score_zero() -> None:
    objects = [*builders.rack("a", A, 2), *builders.rack("b", B, 4), *builders.cd_objects("job", 2)]
    snap = builders.snapshot(objects)
    scores = dict(scoring.prioritize(parsing.pod(builders.pod("job-0", cd="job")), ["a-00", "b-00"],
                                     DecisionInputs(snap, POLICY, 0.0)))
    assert scores["b-00"] == 0 and scores["a-00"] > 0


def _plan(objects: list[dict[str, object]], name: str, node: str, uid: str | None = None,
          reservations: dict[str, Reservation] | None = None, fabric_free: dict[str, int] | None = None
          ) -> binding.BindPlan:
    snap = builders.snapshot(objects, reservations, fabric_free)  # type: ignore[arg-type]
    pod_obj = next(o for o in objects if o.get("kind") == "Pod" and o["metadata"]["name"] == name)  # type: ignore[index]
    pod = parsing.pod(pod_obj)
    return binding.plan(pod, uid if uid is not None else pod.uid, node,
                        DecisionInputs(snap, POLICY, 100.0, holder="me"))


def test_binding_again_to_the_same_node_is_success() -> None:
    objects = [*builders.rack("a", A, 2), builders.pod("p", node="a-00", phase="Running")]
    assert _plan(objects, "p", "a-00").already_bound


def test_binding_a_pod_already_bound_elsewhere_is_refused() -> None:
    objects = [*builders.rack("a", A, 2), builders.pod("p", node="a-00", phase="Running")]
    with pytest.raises(DecisionError, match="already bound to node a-00, not a-01"):
        _plan(objects, "p", "a-01")


def test_a_recreated_pod_is_refused_by_uid() -> None:
    objects = [*builders.rack("a", A, 1), builders.pod("p")]
    with pytest.raises(DecisionError, match="recreated"):
        _plan(objects, "p", "a-00", uid="some-older-uid")


def test_binding_a_group_pod_records_the_nodes_domain() -> None:
    objects = [*builders.rack("a", A, 2), *builders.cd_objects("job", 2), builders.pod("job-0", cd="job")]
    plan = _plan(objects, "job-0", "a-01")
    assert plan.reservation is not None and plan.reservation.domain == A and plan.reservation.size == 2
    assert plan.attach_gpus == 0


def test_binding_outside_the_stored_reservation_is_refused() -> None:
    objects = [*builders.rack("a", A, 2), *builders.rack("b", B, 2), *builders.cd_objects("job", 2),
               builders.pod("job-0", cd="job")]
    gid = f"cd:{builders.cd_uid('job')}"
    res = Reservation(group_id=gid, group_name="job", namespace="ml", domain=A, size=2, gpus_per_pod=4,
                      one_pod_per_node=True, created_at=99.0, version="7")
    with pytest.raises(DecisionError, match="reserved in domain"):
        _plan(objects, "job-0", "b-00", reservations={gid: res})


def test_a_pod_that_needs_fabric_gpus_plans_the_attach() -> None:
    objects = [builders.node("f", 1, zone="pool", slots=4), *builders.cd_objects("job", 1),
               builders.pod("job-0", cd="job", gpus=3)]
    assert _plan(objects, "job-0", "f", fabric_free={"pool": 4}).attach_gpus == 2


def test_a_missing_pod_cannot_be_bound() -> None:
    snap = builders.snapshot(builders.rack("a", A, 1))
    with pytest.raises(DecisionError, match="not found"):
        binding.plan(None, "u", "a-00", DecisionInputs(snap, POLICY, 0.0, holder="me"))
