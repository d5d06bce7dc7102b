"""What a group refused from a held domain is told (webhook.domain.jobs.held_out): the hold, when it starts as
an operator reads a clock, and why the group cannot backfill: it states no walltime, or one ending after the
hold starts. Which holds kept a group out is checked through the engine (tests/engine/test_hold_events.py)."""

from __future__ import annotations

import pytest

from tests.domain.test_holds import T0
from webhook.domain.jobs import held_out
from webhook.domain.model import Reservation, Walltime

# T0 is 2027-01-15 08:00:00 UTC.
HOLD = Reservation(group_id="cd:big", group_name="big", namespace="ml", domain="rack-a", size=4, gpus_per_pod=4,
                   one_pod_per_node=True, created_at=T0, expected_start=T0 + 2400)


@pytest.mark.parametrize(("seconds", "expected"), [
    (7200, "2h"), (5400, "1h30m"), (600, "10m"), (45, "45s"), (3661, "1h1m1s"), (59.6, "1m"), (0, "0s"),
])
def test_a_walltime_reads_as_it_is_written_in_max_runtime(seconds: float, expected: str) -> None:
    assert held_out.duration(seconds) == expected


@pytest.mark.parametrize(("ts", "now", "expected"), [
    (T0 + 2400, T0, "08:40 UTC"),
    (T0 + 2429, T0, "08:40 UTC"),
    (T0 + 17 * 3600, T0, "2027-01-16 01:00 UTC"),  # another day: the date too
])
def test_a_time_reads_as_a_utc_clock_with_the_date_only_when_it_is_not_today(ts: float, now: float,
                                                                              expected: str) -> None:
    assert held_out.at(ts, now) == expected


@pytest.mark.parametrize(("bound", "expected"), [
    (None, "domain rack-a is held for ml/big until about 08:40 UTC; this job states no walltime "
           "(imex-webhook.io/max-runtime or activeDeadlineSeconds) so it cannot backfill there"),
    (Walltime(7200, "the pods' imex-webhook.io/max-runtime", False),
     "domain rack-a is held for ml/big until about 08:40 UTC; this job's walltime of 2h (the pods' "
     "imex-webhook.io/max-runtime) ends after that, at about 10:00 UTC, so it cannot backfill there"),
    (Walltime(3000, "Job ml/idle's activeDeadlineSeconds", True),
     "domain rack-a is held for ml/big until about 08:40 UTC; this job's walltime of 50m (Job ml/idle's "
     "activeDeadlineSeconds) ends after that, at about 08:50 UTC, so it cannot backfill there"),
])
def test_the_note_names_the_hold_its_start_and_why_the_group_cannot_backfill(bound: Walltime | None,
                                                                              expected: str) -> None:
    assert held_out.note(HOLD, bound, T0) == expected
