"""Which holds give way to a group of higher priority (``webhook.domain.jobs.holds`` makes them).

A hold is made for one of the ``Policy.max_holds`` first groups of the waiting order (pod priority, then
age). Slurm plans its reservations for the top of its queue afresh on every backfill cycle, so a job of
higher priority that arrives later takes the reservation of a lower one. Here a hold gives way when a group
of strictly higher priority has become due (waited ``Policy.hold_after``) and is not among the first
``max_holds`` of the order because the holds fill it: the hold of the lowest priority (then the youngest)
is let go, and the higher group is planned on the same round. Age alone never displaces a hold: two groups
of one priority would otherwise take a hold from each other on every round.
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.domain.jobs.holds import Waiting
from webhook.domain.model import Reservation

Held = tuple[Waiting, Sequence[Reservation]]


def _rank(entry: Waiting) -> tuple[int, float, str]:
    return -entry.priority, entry.since, entry.group.id


def displaced(held: Sequence[Held], due: Sequence[Waiting], max_holds: int) -> list[Held]:
    """The held jobs to let go: as many as there are ``due`` groups of strictly higher priority than they
    that the ``max_holds`` slots leave out, lowest priority first."""
    free = max(max_holds - len(held), 0)
    waiting = sorted(due, key=_rank)[free:]  # those the free slots take are held without displacing anyone
    out: list[Held] = []
    kept = sorted(held, key=lambda h: _rank(h[0]), reverse=True)  # lowest priority, then youngest, first
    for entry in waiting:
        if not kept or kept[0][0].priority >= entry.priority:
            break
        out.append(kept.pop(0))
    return out
