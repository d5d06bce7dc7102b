"""The Event correlation rules (webhook.adapters.kube.event_series) on an injected clock, no API server:
an isomorphic occurrence within six minutes joins the Event's series and one later starts a new Event;
the note is not part of the key; a series ends with its last count written; heartbeats keep a long
series alive; 25 writes per object, then one per five minutes; counts that wait for a token are delayed,
never lost; a failed create is forgotten; both caches stay bounded."""

from __future__ import annotations

import pytest

from webhook.adapters.kube.event_series import BURST, HEARTBEAT, REFILL, SERIES_WINDOW, Correlator, Write
from webhook.engine.occurrences import NO_DOMAIN_FITS, NORMAL, ObjectRef, Occurrence, Reason

POD = ObjectRef("v1", "Pod", "ml", "p-0", "uid-p0")
OTHER_POD = ObjectRef("v1", "Pod", "ml", "p-1", "uid-p1")
CD = ObjectRef("resource.nvidia.com/v1beta1", "ComputeDomain", "ml", "cd", "uid-cd")
T0 = 1_000_000.0


def occ(note: str = "no domain has room", regarding: ObjectRef = POD, related: ObjectRef | None = None,
        reason: Reason = NO_DOMAIN_FITS) -> Occurrence:
    return Occurrence(reason, note, regarding, related)


def shape(writes: list[Write]) -> list[tuple[str, int]]:
    return [(w.verb, w.count) for w in writes]


def run(correlator: Correlator, at: float, o: Occurrence | None = None) -> tuple[list[tuple[str, int]], bool]:
    """Observe (or, without an occurrence, look at what is due) and report every write as succeeded."""
    if o is None:
        writes, admitted = correlator.due(at), True
    else:
        writes, admitted = correlator.observe(o, at, f"name-{at}")
    for w in writes:
        correlator.done(w, at, ok=True)
    return shape(writes), admitted


# (seconds after T0 of each occurrence, the writes each one calls for)
SERIES_CASES = [
    pytest.param([0], [[("create", 1)]], id="a first occurrence creates an Event"),
    pytest.param([0, 10, 20], [[("create", 1)], [("patch", 2)], [("patch", 3)]],
                 id="repeats within the window patch the series count"),
    pytest.param([0, SERIES_WINDOW], [[("create", 1)], [("patch", 2)]],
                 id="exactly at the window the occurrence still joins"),
    pytest.param([0, SERIES_WINDOW + 1], [[("create", 1)], [("create", 1)]],
                 id="after the window of a singleton a new Event starts"),
    pytest.param([0, 300, 600, 900], [[("create", 1)], [("patch", 2)], [("patch", 3)], [("patch", 4)]],
                 id="the window counts from the last occurrence, not the first"),
]


@pytest.mark.parametrize("times, expected", SERIES_CASES)
def test_occurrences_join_a_series_within_six_minutes_of_the_last_one(times: list[float],
                                                                      expected: list[list[tuple[str, int]]]) -> None:
    correlator = Correlator()
    assert [run(correlator, T0 + t, occ())[0] for t in times] == expected


@pytest.mark.parametrize("other, joins", [
    pytest.param(occ(note="a different text"), True, id="another note joins (the first note stays)"),
    pytest.param(occ(related=CD), False, id="another related object is another Event"),
    pytest.param(occ(regarding=OTHER_POD), False, id="another regarding object is another Event"),
    pytest.param(occ(reason=Reason("NoDomainFits", NORMAL, "Other")), False, id="another action is another Event"),
    pytest.param(occ(reason=Reason("Else", NORMAL, NO_DOMAIN_FITS.action)), False, id="another reason too"),
])
def test_the_key_is_action_reason_regarding_and_related(other: Occurrence, joins: bool) -> None:
    correlator = Correlator()
    run(correlator, T0, occ())
    assert run(correlator, T0 + 1, other)[0] == ([("patch", 2)] if joins else [("create", 1)])


def test_an_ended_series_writes_its_last_count_once_and_is_forgotten() -> None:
    correlator = Correlator(burst=2)
    for t in (0, 1, 2, 3):  # a create and one patch use both tokens: counts 3 and 4 wait
        run(correlator, T0 + t, occ())
    assert run(correlator, T0 + 3 + SERIES_WINDOW + 1) == ([("patch", 4)], True)
    assert len(correlator) == 0
    assert run(correlator, T0 + 3 + 2 * SERIES_WINDOW) == ([], True)


def test_a_new_occurrence_after_an_unfinished_series_first_writes_the_old_count_then_creates() -> None:
    correlator = Correlator(burst=2)
    for t in (0, 1, 2):
        run(correlator, T0 + t, occ())
    assert run(correlator, T0 + 2 + SERIES_WINDOW + 1, occ()) == ([("patch", 3), ("create", 1)], True)


def test_a_singleton_is_forgotten_silently_after_the_window() -> None:
    correlator = Correlator()
    run(correlator, T0, occ())
    assert run(correlator, T0 + SERIES_WINDOW + 1) == ([], True) and len(correlator) == 0


def test_a_long_series_without_tokens_is_still_written_every_heartbeat() -> None:
    correlator = Correlator(burst=2, refill=10 * HEARTBEAT)
    run(correlator, T0, occ())
    run(correlator, T0 + 1, occ())  # count 2 written; the bucket is now empty for hours
    t = 1.0
    heartbeats = []
    while t < 2 * HEARTBEAT + 300:
        t += 300  # an occurrence every 5 minutes keeps the series going
        writes, _ = run(correlator, T0 + t, occ())
        assert writes == []
        heartbeats += run(correlator, T0 + t)[0]
    assert heartbeats == [("patch", 8), ("patch", 14)]  # after 30 and 60 minutes: every count so far


def test_the_bucket_allows_25_new_events_per_object_then_one_every_five_minutes() -> None:
    correlator = Correlator()
    reasons = [Reason(f"R{i}", NORMAL, "A") for i in range(BURST + 5)]
    admitted = [run(correlator, T0, occ(reason=r))[1] for r in reasons]
    assert admitted == [True] * BURST + [False] * 5
    assert run(correlator, T0, occ(regarding=OTHER_POD))[1]  # another object has its own bucket
    assert not run(correlator, T0 + REFILL - 1, occ(reason=Reason("late", NORMAL, "A")))[1]
    assert run(correlator, T0 + REFILL, occ(reason=Reason("later", NORMAL, "A")))[1]
    assert not run(correlator, T0 + REFILL + 1, occ(reason=Reason("latest", NORMAL, "A")))[1]


def test_repeats_past_the_bucket_wait_for_a_token_and_no_count_is_lost() -> None:
    correlator = Correlator()
    writes = [run(correlator, T0 + i, occ())[0] for i in range(40)]
    assert writes[:BURST] == [[("create", 1)]] + [[("patch", n)] for n in range(2, BURST + 1)]
    assert writes[BURST:] == [[]] * 15  # counted, not written
    assert run(correlator, T0 + 39 + REFILL / 2) == ([], True)  # half a token: still waiting
    assert run(correlator, T0 + 39 + REFILL) == ([("patch", 40)], True)  # a token: the whole count
    assert run(correlator, T0 + 39 + REFILL + 1) == ([], True)  # nothing owed


def test_a_failed_create_is_forgotten_so_that_the_next_occurrence_creates_again() -> None:
    correlator = Correlator()
    (create,), _ = correlator.observe(occ(), T0, "first")
    correlator.done(create, T0, ok=False)
    assert len(correlator) == 0
    (again,), _ = correlator.observe(occ(), T0 + 1, "second")
    assert (again.verb, again.series.name) == ("create", "second")


def test_a_failed_patch_leaves_the_count_owed_for_the_next_token() -> None:
    correlator = Correlator()
    run(correlator, T0, occ())
    (patch,), _ = correlator.observe(occ(), T0 + 1, "unused")
    correlator.done(patch, T0 + 1, ok=False)
    assert run(correlator, T0 + 2) == ([("patch", 2)], True)


def test_the_series_and_bucket_caches_are_bounded() -> None:
    correlator = Correlator(size=3)
    pods = [ObjectRef("v1", "Pod", "ml", f"p-{i}", "") for i in range(5)]
    for i, pod in enumerate(pods):
        run(correlator, T0 + i, occ(regarding=pod))
    assert len(correlator) == 3
    # The oldest was forgotten: its next occurrence is a new Event, the newest joins its series.
    assert run(correlator, T0 + 10, occ(regarding=pods[0]))[0] == [("create", 1)]
    assert run(correlator, T0 + 11, occ(regarding=pods[4]))[0] == [("patch", 2)]


def test_a_clock_that_steps_back_neither_refunds_tokens_nor_shortens_a_series() -> None:
    correlator = Correlator(burst=1)
    assert run(correlator, T0, occ()) == ([("create", 1)], True)
    assert run(correlator, T0 - 3600, occ()) == ([], True)  # joins (counted), no token to write it
    assert not run(correlator, T0 - 3600, occ(reason=Reason("x", NORMAL, "A")))[1]
    assert run(correlator, T0 + REFILL) == ([("patch", 2)], True)
