"""Holds through the engine (webhook.engine.holds): a group that waited past --hold-after gets its domain held
at the earliest start the running groups' walltimes give; the hold keeps new groups out unless they end
before it starts; the held group's pods pass the filter and bind once the room is there, and the hold
becomes an ordinary reservation; a hold past its start without room is planned again; a deleted group's hold
goes with it; a stored hold is one per domain, whatever the threads racing to make one."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson
from prometheus_client import generate_latest

from tests import builders
from tests.domain.test_holds import T0, _group
from webhook.adapters.embedded import EmbeddedBackend
from webhook.domain.jobs import holds
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine import housekeeping
from webhook.engine.engine import Engine
from webhook.engine.occurrences import Occurrence
from webhook.http.cluster_metrics import ClusterMetrics
from webhook.http.metrics import Metrics
from webhook.tools.explain import words

A, B = "aaaa-1111.7", "bbbb-2222.7"
POLICY = Policy(max_holds=1, hold_after=600.0, hold_timeout=4 * 3600.0)


class Kept:
    def __init__(self) -> None:
        self.items: list[Occurrence] = []

    def record(self, occurrence: Occurrence) -> None:
        self.items.append(occurrence)

    def dropped(self) -> Mapping[str, int]:
        return {}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _cluster(*waiting: list[dict[str, Any]], b_runtime: str | None = None,
             policy: Policy = POLICY) -> tuple[Engine, EmbeddedBackend, Clock, Kept]:
    """Rack a runs 'short' (30 min) and 'long' (1 h) since T0, rack b 'endless' (no walltime, or ``b_runtime``)."""
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4),
               *_group("short", 2, runtime="30m", nodes=["a-00", "a-01"]),
               *_group("long", 2, runtime="1h", nodes=["a-02", "a-03"]),
               *_group("endless", 4, runtime=b_runtime, nodes=["b-00", "b-01", "b-02", "b-03"])]
    for more in waiting:
        objects.extend(more)
    store = builders.store(objects, policy)
    backend = EmbeddedBackend(store, [], "test")
    clock, sink = Clock(T0 + 1200), Kept()
    return builders.engine(backend, policy, holder="r1", clock=clock, events=sink), backend, clock, sink


def _delete(backend: EmbeddedBackend, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        if obj["kind"] == "Pod":
            backend.store.apply("Pod", "DELETED", obj)


def _pod(objects: list[dict[str, Any]], name: str) -> Any:
    return parsing.pod(next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == name))


def test_a_group_that_waited_long_enough_gets_its_domain_held_at_its_earliest_start_and_is_told() -> None:
    big = _group("big", 4, created=T0)
    engine, _, clock, sink = _cluster(big)
    clock.now = T0 + 500
    assert engine.plan_holds() == []  # it has not waited --hold-after yet
    clock.now = T0 + 1200
    (hold,) = engine.plan_holds()
    assert (hold.domain, hold.expected_start, hold.group_name) == (A, T0 + 3600, "big")
    assert engine.reservations.all()[hold.group_id].expected_start == T0 + 3600
    assert engine.plan_holds() == []  # held once
    notes = [o.note for o in sink.items if o.reason.name == "DomainHeld"]
    assert notes and "expected start in about 40 minutes" in notes[0] and f"domain {A} held" in notes[0]


def test_the_held_domain_keeps_new_groups_out_unless_they_end_before_the_hold_starts() -> None:
    big, short_lived, endless = _group("big", 4, created=T0), _group("quick", 2, runtime="10m", created=T0 + 1900), \
        _group("idle", 2, created=T0 + 1900)
    engine, backend, clock, _ = _cluster(big, short_lived, endless)
    engine.plan_holds()
    _delete(backend, _group("short", 2, runtime="30m", nodes=["a-00", "a-01"]))  # a-00, a-01 free at T0+1800
    clock.now = T0 + 1900
    nodes = sorted(engine.snapshot().nodes)
    refused = engine.filter(_pod(endless, "idle-0"), nodes)
    assert not refused.passed and refused.context is not None and refused.context.domain is None
    backfill = engine.filter(_pod(short_lived, "quick-0"), nodes)
    assert set(backfill.passed) == {"a-00", "a-01"}, "10 minutes end before the hold's start at T0+3600"


def test_the_held_group_binds_into_its_domain_once_the_room_is_there_and_the_hold_becomes_a_reservation() -> None:
    big = _group("big", 4, created=T0)
    engine, backend, clock, _ = _cluster(big)
    (hold,) = engine.plan_holds()
    nodes = sorted(engine.snapshot().nodes)
    waiting = engine.filter(_pod(big, "big-0"), nodes)
    assert not waiting.passed and waiting.context is not None and waiting.context.domain == A
    _delete(backend, _group("short", 2, runtime="30m", nodes=["a-00", "a-01"]))
    _delete(backend, _group("long", 2, runtime="1h", nodes=["a-02", "a-03"]))
    clock.now = T0 + 3600
    for i in range(4):
        result = engine.filter(_pod(big, f"big-{i}"), nodes)
        assert result.passed, result.failed
        engine.bind("ml", f"big-{i}", _pod(big, f"big-{i}").uid, result.passed[0])
    stored = engine.reservations.all()[hold.group_id]
    assert stored.domain == A and stored.placed_at is not None and not holds.is_hold(stored)


def test_a_hold_past_its_start_without_room_is_planned_again_around_the_group_that_overran() -> None:
    big = _group("big", 4, created=T0)
    engine, _, clock, _ = _cluster(big, b_runtime="3h")
    (first,) = engine.plan_holds()
    assert (first.domain, first.expected_start) == (A, T0 + 3600)
    clock.now = T0 + 3600 + holds.LATE + 1  # 'long' runs past its advisory walltime: rack a is not free
    (again,) = engine.plan_holds()
    assert again.group_id == first.group_id and again.created_at == clock.now
    assert (again.domain, again.expected_start) == (B, T0 + 3 * 3600)


def test_a_deleted_groups_hold_is_released_with_it_on_that_change() -> None:
    big = _group("big", 4, created=T0)
    engine, backend, _, _ = _cluster(big)
    (hold,) = engine.plan_holds()
    _delete(backend, big)
    released = engine.housekeep()  # no grace: its members had waited --hold-after when it was made
    assert (hold.group_id, "every member of the group has finished or was deleted") in released
    assert hold.group_id not in engine.reservations.all()


def test_a_hold_made_sooner_than_the_grace_after_its_members_came_keeps_the_rest_of_the_grace() -> None:
    """With a --hold-after below the grace, another replica's cache may not have the members yet."""
    big = _group("big", 4, created=T0 + 1190)
    engine, _, _, _ = _cluster(big)
    quick = Policy(max_holds=1, hold_after=10.0)
    res = Reservation("cd:x", "x", "ml", A, 4, 4, True, T0 + 1200, expected_start=T0 + 3600)
    snap = replace(engine.snapshot(), reservations={"cd:x": res})
    assert housekeeping.stale_reservations(snap, T0 + 1215, quick) == []  # 25 s since its members were seen
    assert housekeeping.stale_reservations(snap, T0 + 1221, quick) == [("cd:x", housekeeping.ENDED)]


def test_threads_racing_to_plan_hold_each_domain_once() -> None:
    big = _group("big", 4, created=T0)
    engine, _, _, _ = _cluster(big)
    made: list[int] = []
    start = threading.Barrier(6)

    def plan() -> None:
        start.wait()
        made.append(len(engine.plan_holds()))

    threads = [threading.Thread(target=plan) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    held = [r for r in engine.reservations.all().values() if holds.is_hold(r)]
    assert len(held) == 1 and sum(made) >= 1


def test_a_held_group_whose_room_is_there_earlier_elsewhere_lets_its_hold_go_and_starts_there() -> None:
    big = _group("big", 4, created=T0)
    engine, backend, _, _ = _cluster(big)
    (hold,) = engine.plan_holds()
    assert hold.domain == A
    _delete(backend, _group("endless", 4, nodes=["b-00", "b-01", "b-02", "b-03"]))  # rack b is free now
    assert engine.plan_holds() == []
    assert hold.group_id not in engine.reservations.all(), "let go: its room is there now, in rack b"
    result = engine.filter(_pod(big, "big-0"), sorted(engine.snapshot().nodes))
    assert result.context is not None and result.context.domain == B and result.passed


def test_the_pods_of_a_job_held_in_segments_start_together_once_every_held_domain_has_room() -> None:
    wide = _group("wide", 4, created=T0, segment=2)
    engine, backend, clock, _ = _cluster(wide, b_runtime="3h")
    held = engine.plan_holds()
    assert {r.domain for r in held} == {A, B} and {r.expected_start for r in held} == {T0 + 3 * 3600}
    _delete(backend, _group("short", 2, runtime="30m", nodes=["a-00", "a-01"]))
    _delete(backend, _group("long", 2, runtime="1h", nodes=["a-02", "a-03"]))
    clock.now = T0 + 3600  # rack a is free, rack b runs on
    nodes = sorted(engine.snapshot().nodes)
    waiting = engine.filter(_pod(wide, "wide-0"), nodes)
    assert not waiting.passed and waiting.outcome == "no-fit"
    assert "its pods start together once every held domain has room" in next(iter(waiting.failed.values()))
    _delete(backend, _group("endless", 4, runtime="3h", nodes=["b-00", "b-01", "b-02", "b-03"]))
    assert engine.filter(_pod(wide, "wide-0"), nodes).passed


def test_a_hold_is_shown_in_inspect_in_metrics_and_in_explain() -> None:
    big = _group("big", 4, created=T0)
    engine, _, clock, _ = _cluster(big)
    (hold,) = engine.plan_holds()
    body = orjson.loads(orjson.dumps(engine.inspection(clock.now)))
    (shown,) = [r for r in body["reservations"] if r["group"] == hold.group_id]
    assert shown["state"] == "held" and shown["expectedStart"] == "2027-01-15T09:00:00Z"
    by_domain = {d["domain"]: d["heldGpus"] for d in body["domains"]}
    assert by_domain == {A: 16, B: 0}, "4 pods x 4 GPUs kept in rack a as they free"
    metrics = Metrics()
    metrics.registry.register(ClusterMetrics(engine))
    assert f'imex_webhook_held_gpus{{domain="{A}"}} 16.0' in generate_latest(metrics.registry).decode()
    status, text = words.explain_name(body, "ml/big", clock.now)
    assert status == 0 and "held until its room comes (expected 2027-01-15T09:00:00Z)" in text, text


def test_a_hold_for_members_not_created_yet_is_bounded_by_the_namespaces_share() -> None:
    """A hold keeps room for pods that do not exist yet as any reservation does, and is bounded alike: a
    ComputeDomain of 4 nodes with 1 pod created asks 12 GPUs for pods to come, over a share of 8."""
    big = [o for o in _group("big", 4, created=T0) if o["kind"] != "Pod" or o["metadata"]["name"] == "big-0"]
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4),
               *_group("short", 2, runtime="30m", nodes=["a-00", "a-01"]),
               *_group("long", 2, runtime="1h", nodes=["a-02", "a-03"]),
               *_group("endless", 4, nodes=["b-00", "b-01", "b-02", "b-03"]), *big]

    def held(share: int | None) -> list[Reservation]:
        policy = Policy(max_holds=1, hold_after=600.0, max_reserved_gpus=share)
        backend = EmbeddedBackend(builders.store(objects, policy), [], "test")
        return builders.engine(backend, policy, holder="r1", clock=Clock(T0 + 1200)).plan_holds()

    assert held(8) == []
    assert [(r.domain, r.size) for r in held(None)] == [(A, 4)]  # under the default share it is held
