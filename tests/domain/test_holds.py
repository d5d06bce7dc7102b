"""Holds and backfill, the decisions (webhook.domain.jobs.holds; docs/SCHEDULER.md, "Holds and backfill"): the
wait order (priority, then age), which groups are due a hold, a domain's earliest start from the running
groups' walltimes (never from a group without one), busy domains held before idle ones at the same start,
one domain per segment, and which groups may backfill under a hold: only those whose walltime ends before
its expected start, or that fit beside what it needs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.decisions import filtering
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import holds, resolution
from webhook.domain.model import Reservation, Snapshot
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.wire.timestamps import rfc3339

A, B, C = "aaaa-1111.7", "bbbb-2222.7", "cccc-3333.7"
T0 = 1_800_000_000.0  # when the running groups started
NOW = T0 + 1200.0
POLICY = Policy(max_holds=2, hold_after=600.0)


def _group(name: str, pods: int, *, runtime: str | None = None, nodes: list[str] | None = None,
           created: float = T0, priority: int = 0, segment: int | None = None) -> list[dict[str, Any]]:
    """A ComputeDomain group of ``pods`` pods: running on ``nodes`` since T0 when given, else waiting."""
    objects = builders.cd_objects(name, pods)
    annotations = {}
    if runtime is not None:
        annotations[keys.MAX_RUNTIME_ANNOTATION] = runtime
    if segment is not None:
        annotations[keys.SEGMENT_SIZE_ANNOTATION] = str(segment)
    objects[0]["metadata"]["annotations"] = annotations
    for i in range(pods):
        node = nodes[i] if nodes else None
        pod = builders.pod(f"{name}-{i}", name, node=node, phase="Running" if node else "Pending")
        pod["metadata"]["creationTimestamp"] = rfc3339(created, "s")
        pod["spec"]["priority"] = priority
        if segment is not None:
            pod["metadata"]["annotations"][keys.COMPLETION_INDEX] = str(i)
        if node:
            pod["status"]["startTime"] = rfc3339(T0, "s")
        objects.append(pod)
    return objects


def _racks(*extra: list[dict[str, Any]]) -> Snapshot:
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4)]
    for more in extra:
        objects.extend(more)
    return builders.snapshot(objects)


def _waiting(snap: Snapshot, live: dict[str, Reservation] | None = None) -> list[holds.Waiting]:
    return holds.waiting(snap, live or {}, POLICY)


def test_groups_wait_in_order_of_priority_then_age_and_running_groups_do_not_wait() -> None:
    snap = _racks(_group("old", 4, created=T0 - 500), _group("young", 4, created=T0),
                  _group("urgent", 4, created=T0 + 100, priority=1000),
                  _group("busy", 2, runtime="1h", nodes=["a-00", "a-01"]))
    assert [w.group.name for w in _waiting(snap)] == ["urgent", "old", "young"]


def test_only_the_first_groups_that_waited_long_enough_are_due_a_hold() -> None:
    snap = _racks(_group("old", 4, created=NOW - 900), _group("fresh", 4, created=NOW - 60),
                  _group("older", 4, created=NOW - 1000))
    order = _waiting(snap)
    assert [w.group.name for w in holds.due(order, 0, NOW, POLICY)] == ["older", "old"]
    assert [w.group.name for w in holds.due(order, 1, NOW, POLICY)] == ["older"]  # one hold already made
    assert holds.due(order, 2, NOW, POLICY) == []


def test_a_domain_starts_a_waiting_group_when_enough_running_groups_walltimes_end() -> None:
    snap = _racks(_group("short", 2, runtime="30m", nodes=["a-00", "a-01"]),
                  _group("long", 2, runtime="2h", nodes=["a-02", "a-03"]),
                  _group("endless", 4, nodes=["b-00", "b-01", "b-02", "b-03"]),
                  _group("big", 4, created=T0 - 1000))
    entry = next(w for w in _waiting(snap) if w.group.name == "big")
    assert holds.earliest_start(A, entry.group, entry.need, 4, snap, {}, POLICY, NOW) == T0 + 7200
    assert holds.earliest_start(A, entry.group, entry.need, 2, snap, {}, POLICY, NOW) == T0 + 1800  # half of it
    assert holds.earliest_start(B, entry.group, entry.need, 4, snap, {}, POLICY, NOW) is None  # never ends
    planned = holds.plan(entry, snap, {}, POLICY, NOW)
    assert planned == holds.Plan((A,), T0 + 7200)


def test_at_the_same_start_the_busier_domain_is_held_and_the_idle_one_stays_usable() -> None:
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4), *builders.rack("c", C, 4),
               *_group("one", 1, runtime="1h", nodes=["a-00"]), *_group("three", 3, runtime="1h",
                                                                       nodes=["b-00", "b-01", "b-02"]),
               *_group("big", 4, created=T0 - 1000)]
    snap = builders.snapshot(objects)
    # rack c is idle and could host it now, which is no hold; ask among a and b alone.
    entry = next(w for w in _waiting(snap) if w.group.name == "big")
    without_c = replace(snap, domains={d: n for d, n in snap.domains.items() if d != C})
    assert holds.plan(entry, without_c, {}, POLICY, NOW) == holds.Plan((B,), T0 + 3600)


def test_a_job_in_segments_holds_one_domain_per_segment_and_starts_when_the_last_frees() -> None:
    snap = _racks(_group("ra", 4, runtime="1h", nodes=["a-00", "a-01", "a-02", "a-03"]),
                  _group("rb", 4, runtime="3h", nodes=["b-00", "b-01", "b-02", "b-03"]),
                  _group("wide", 8, created=T0 - 1000, segment=4))
    entry = next(w for w in _waiting(snap) if w.group.name.startswith("wide"))
    planned = holds.plan(entry, snap, {}, POLICY, NOW)
    assert planned is not None and set(planned.domains) == {A, B} and planned.start == T0 + 3 * 3600
    made = holds.holds_for(entry, planned, NOW, "r1")
    assert [r.segment.index for r in made if r.segment] == [0, 1]
    assert {r.expected_start for r in made} == {T0 + 3 * 3600} and all(holds.is_hold(r) for r in made)


@pytest.mark.parametrize(("c_runtime", "domains", "start"), [
    ("65m", {B, C}, T0 + 65 * 60),  # 5 minutes later for the job spares rack a idle for 40
    ("3h", {A, B}, T0 + 3600),  # two hours later costs more than rack a idle for 40 minutes
], ids=["idle-rack-spared", "idle-rack-held-when-waiting-costs-more"])
def test_a_job_in_segments_starts_a_little_later_rather_than_hold_an_idle_domain(c_runtime: str, domains: set[str],
                                                                                  start: float) -> None:
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4), *builders.rack("c", C, 4),
               *_group("rb", 4, runtime="1h", nodes=["b-00", "b-01", "b-02", "b-03"]),
               *_group("rc", 4, runtime=c_runtime, nodes=["c-00", "c-01", "c-02", "c-03"]),
               *_group("wide", 8, created=T0 - 1000, segment=4)]
    snap = builders.snapshot(objects)
    entry = next(w for w in _waiting(snap) if w.group.name.startswith("wide"))
    planned = holds.plan(entry, snap, {}, POLICY, NOW)
    assert planned is not None and set(planned.domains) == domains and planned.start == start


def test_the_idle_room_of_a_hold_counts_what_is_free_now_and_what_frees_before_the_start() -> None:
    snap = _racks(_group("one", 1, runtime="1h", nodes=["a-00"]),
                  _group("two", 2, runtime="2h", nodes=["b-00", "b-01"]))
    gpus = snap.nodes["a-00"].gpus
    ends = holds.endings(snap, POLICY, NOW)
    until = T0 + 2 * 3600
    # rack a: 3 nodes free now, the 4th from T0 + 1h; a hold of 4 nodes keeps all of it
    assert holds._idle(A, snap, ends, POLICY, 4 * gpus, NOW, until) == 3 * gpus * (until - NOW) + gpus * 3600
    # a hold of 2 nodes keeps 2 of what is free
    assert holds._idle(A, snap, ends, POLICY, 2 * gpus, NOW, until) == 2 * gpus * (until - NOW)
    # rack b: 2 nodes free now; its group ends at ``until``, which idles nothing before then
    assert holds._idle(B, snap, ends, POLICY, 4 * gpus, NOW, until) == 2 * gpus * (until - NOW)


def test_a_domain_already_held_for_another_group_is_not_held_twice() -> None:
    snap = _racks(_group("ra", 4, runtime="1h", nodes=["a-00", "a-01", "a-02", "a-03"]),
                  _group("rb", 4, runtime="3h", nodes=["b-00", "b-01", "b-02", "b-03"]),
                  _group("big", 4, created=T0 - 1000))
    entry = next(w for w in _waiting(snap) if w.group.name == "big")
    other = Reservation("cd:x", "x", "ml", A, 4, 4, True, NOW, expected_start=T0 + 3600)
    assert holds.plan(entry, snap, {"cd:x": other}, POLICY, NOW) == holds.Plan((B,), T0 + 3 * 3600)


HELD = Reservation("cd:big", "big", "ml", A, 4, 4, True, NOW, version="1", expected_start=NOW + 3600)


@pytest.mark.parametrize(("runtime", "backfills"), [("30m", True), ("59m", True), ("2h", False), (None, False)],
                         ids=["ends well before", "ends just before", "ends after", "states no walltime"])
def test_only_a_group_that_ends_before_the_holds_start_may_backfill_under_it(runtime: str | None,
                                                                              backfills: bool) -> None:
    snap = _racks(_group("small", 2, runtime=runtime, created=NOW))
    group = resolution.resolve(parsing.pod(next(o for o in _group("small", 2, runtime=runtime) if o["kind"] == "Pod")),
                               DecisionInputs(snap, POLICY, NOW))
    assert group is not None and group.group is not None
    seen = holds.visible({"cd:big": HELD}, group.group, NOW)
    assert ("cd:big" not in seen) is backfills


def _small_domain(runtime: str | None) -> str | None:
    """The domain a 2-pod group gets while rack a (2 nodes free) is held for a 4-pod group and rack b is full."""
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4),
               *_group("ra", 2, runtime="1h", nodes=["a-00", "a-01"]),
               *_group("rb", 4, nodes=["b-00", "b-01", "b-02", "b-03"]),
               *_group("small", 2, runtime=runtime, created=NOW)]
    snap = builders.snapshot(objects, {HELD.group_id: HELD})
    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "small-0")
    ctx = resolution.resolve(parsing.pod(pod), DecisionInputs(snap, POLICY, NOW))
    assert ctx is not None
    return ctx.domain


def test_a_held_domain_takes_no_new_group_that_states_no_walltime() -> None:
    assert _small_domain(None) is None


def test_a_group_that_ends_before_the_hold_starts_backfills_into_the_held_domain() -> None:
    assert _small_domain("30m") == A


def test_a_hold_lives_its_own_timeout_and_is_overdue_once_its_start_passed_without_room() -> None:
    policy = Policy(hold_timeout=3600.0)
    assert policy.live(HELD, NOW + 3500, stored=True)  # far past the reservation TTL, still held
    assert not policy.live(HELD, NOW + 3700, stored=True)
    assert not holds.overdue(HELD, NOW + 3600 + holds.LATE - 1) and holds.overdue(HELD, NOW + 3600 + holds.LATE + 1)
    placed = replace(HELD, placed_at=NOW + 3600)
    assert not holds.is_hold(placed) and not holds.overdue(placed, NOW + 99_999)


@pytest.mark.parametrize(("runtime", "kept_out"), [(None, True), ("2h", True), ("20m", False)],
                         ids=["no walltime", "ends after the hold starts", "ends before the hold starts"])
def test_a_gpu_pod_outside_any_group_stays_out_of_a_held_domain_unless_it_ends_before_the_hold_starts(
        runtime: str | None, kept_out: bool) -> None:
    pod = builders.pod("notebook", gpus=1, annotations={keys.MAX_RUNTIME_ANNOTATION: runtime} if runtime else None)
    snap = builders.snapshot([*builders.rack("a", A, 2), *builders.rack("b", B, 2)], {HELD.group_id: HELD})
    out = filtering.filter_nodes(parsing.pod(pod), sorted(snap.nodes), DecisionInputs(snap, POLICY, NOW))
    assert ("a-00" not in out.passed) is kept_out and {"b-00", "b-01"} <= set(out.passed)
    if kept_out:
        assert "is held for group ml/big" in out.failed["a-00"]
