"""The NoBackfill Event through the engine (webhook.domain.jobs.held_out): a group the filter refuses because a
domain it would fit is held for another group is told which hold, until when, and that its walltime (none, or
one ending after the hold starts) is why it cannot backfill there, a job in segments too when the hold keeps
one of its segments out; a group refused for any other reason, a backfill group, and the held group itself
are not. The clusters are test_holds.py's: rack a runs 'short' (30 min) and 'long' (1 h) since T0, rack b a
group with no walltime; 'big' (4 pods) is held in rack a from T0+1200 until T0+3600 (09:00 UTC), and 'short'
has ended by T0+1900, leaving a-00 and a-01 free."""

from __future__ import annotations

from typing import Any

from tests import builders
from tests.domain.test_holds import T0, C, _group
from tests.engine.test_holds import A, Kept, _cluster, _delete, _pod
from webhook.engine.engine import Engine
from webhook.engine.occurrences import NO_BACKFILL, Occurrence


def _held(*waiting: list[dict[str, Any]]) -> tuple[Engine, Kept]:
    """'big' held in rack a, 'short' ended: two nodes of rack a free, kept for 'big'; ``waiting`` come too."""
    big = _group("big", 4, created=T0)
    engine, backend, clock, sink = _cluster(big, *waiting)
    (hold,) = engine.plan_holds()
    assert (hold.domain, hold.expected_start) == (A, T0 + 3600)
    _delete(backend, _group("short", 2, runtime="30m", nodes=["a-00", "a-01"]))
    clock.now = T0 + 1900
    return engine, sink


def _no_backfill(sink: Kept) -> list[Occurrence]:
    return [o for o in sink.items if o.reason == NO_BACKFILL]


def _filter(engine: Engine, objects: list[dict[str, Any]], name: str) -> Any:
    return engine.filter(_pod(objects, name), sorted(engine.snapshot().nodes))


def test_a_group_without_a_walltime_refused_from_a_held_domain_is_told_it_cannot_backfill_there() -> None:
    idle = _group("idle", 2, created=T0 + 1900)
    engine, sink = _held(idle)
    refused = _filter(engine, idle, "idle-0")
    assert not refused.passed and refused.outcome == "no-domain"
    (event,) = [o for o in _no_backfill(sink) if o.regarding.kind == "Pod"]
    assert event.regarding.name == "idle-0" and event.related is not None and event.related.name == "idle"
    assert event.note == (f"domain {A} is held for ml/big until about 09:00 UTC; this job states no walltime "
                          "(imex-webhook.io/max-runtime or activeDeadlineSeconds) so it cannot backfill there")
    on_domain = [o for o in _no_backfill(sink) if o.regarding.kind == "ComputeDomain"]
    assert [o.regarding.name for o in on_domain] == ["idle"], "its ComputeDomain too, as NoDomainFits"


def test_a_group_whose_walltime_ends_after_the_hold_starts_is_told_when_it_would_end() -> None:
    slow = _group("slow", 2, runtime="2h", created=T0 + 1900)
    engine, sink = _held(slow)
    assert not _filter(engine, slow, "slow-0").passed
    (event,) = [o for o in _no_backfill(sink) if o.regarding.kind == "Pod"]
    assert event.note.startswith(f"domain {A} is held for ml/big until about 09:00 UTC; this job's walltime of 2h (")
    assert event.note.endswith("ends after that, at about 10:31 UTC, so it cannot backfill there"), event.note


def test_a_backfill_group_that_ends_before_the_hold_starts_passes_and_is_told_nothing() -> None:
    quick = _group("quick", 2, runtime="10m", created=T0 + 1900)
    engine, sink = _held(quick)
    assert set(_filter(engine, quick, "quick-0").passed) == {"a-00", "a-01"}
    assert _no_backfill(sink) == []


def test_a_group_that_would_not_fit_in_the_held_domain_anyway_is_told_nothing_about_the_hold() -> None:
    """Four pods: rack a has two nodes free, hold or not; 'long' still runs on the other two."""
    wide = _group("wide", 4, created=T0 + 1900)
    engine, sink = _held(wide)
    refused = _filter(engine, wide, "wide-0")
    assert not refused.passed and refused.outcome == "no-domain"
    assert any(o.reason.name == "NoDomainFits" for o in sink.items)
    assert _no_backfill(sink) == []


def test_the_held_groups_own_waiting_pods_are_not_told_to_backfill() -> None:
    engine, sink = _held()
    big = _group("big", 4, created=T0)
    assert not _filter(engine, big, "big-0").passed
    assert _no_backfill(sink) == []


def test_a_group_the_scheduler_keeps_off_the_held_domain_is_not_told_about_it() -> None:
    """The scheduler's own filters left only rack b's nodes: the hold on rack a kept nothing out."""
    idle = _group("idle", 2, created=T0 + 1900)
    engine, sink = _held(idle)
    refused = engine.filter(_pod(idle, "idle-0"), [f"b-0{i}" for i in range(4)])
    assert not refused.passed
    assert _no_backfill(sink) == []


def test_every_refusal_is_the_same_event_so_the_recorder_counts_repeats_in_one_series() -> None:
    """The sink aggregates by action, reason, regarding and related (webhook.adapters.kube.event_series), and
    rate-limits per object: a scheduler retrying every few seconds makes one growing Event, as NoDomainFits."""
    idle = _group("idle", 2, created=T0 + 1900)
    engine, sink = _held(idle)
    for _ in range(3):
        _filter(engine, idle, "idle-0")
    on_pod = [o for o in _no_backfill(sink) if o.regarding.kind == "Pod"]
    assert len(on_pod) == 3
    assert len({(o.reason.action, o.reason.name, o.regarding, o.related) for o in on_pod}) == 1


def test_a_job_in_segments_kept_out_of_a_held_rack_is_told_which_hold_kept_one_of_its_segments_out() -> None:
    """'pair' runs in two segments of two pods: rack a (held, two nodes free) and rack c (two nodes, empty)
    would host it; the hold on rack a keeps one segment out, so the whole job waits and is told why."""
    c_rack = builders.rack("c", C, 2)
    pair = _group("pair", 4, created=T0 + 1900, segment=2)
    engine, sink = _held(c_rack, pair)
    refused = _filter(engine, pair, "pair-0")
    assert not refused.passed
    notes = {o.note for o in _no_backfill(sink) if o.regarding.kind == "Pod"}
    assert notes == {f"domain {A} is held for ml/big until about 09:00 UTC; this job states no walltime "
                     "(imex-webhook.io/max-runtime or activeDeadlineSeconds) so it cannot backfill there"}


def test_a_job_in_segments_that_ends_before_the_hold_starts_backfills_one_segment_into_the_held_rack() -> None:
    c_rack = builders.rack("c", C, 2)
    pair = _group("pair", 4, runtime="10m", created=T0 + 1900, segment=2)
    engine, sink = _held(c_rack, pair)
    passed = _filter(engine, pair, "pair-0")
    assert passed.passed and passed.context is not None and passed.context.domain in (A, C)
    assert _no_backfill(sink) == []
