"""Which holds give way to a group of higher priority (``webhook.domain.jobs.holds`` makes them).

A hold is made for one of the ``Policy.max_holds`` first groups of the waiting order (pod priority, then
age). Slurm plans its reservations for the top of its queue afresh on every backfill cycle, so a job of
higher priority that arrives later takes the reservation of a lower one. Here a hold gives way when a group
of strictly higher priority has become due (waited ``Policy.hold_after``) and is not among the first
``max_holds`` of the order because the holds fill it: the hold of the lowest priority (then the youngest)
is let go, and the higher group is planned on the same round. Age alone never displaces a hold: two groups
of one priority would otherwise take a hold from each other on every round.

Holds also give way, to nobody in particular, while the cluster falls behind the groups that need one domain
(``Policy.hold_yield_after``): a hold takes racks as they drain, and in a busy stretch those are the racks the
single-domain groups of 9-18 trays wait for, so a job held then is started with room taken from them (on a
stream that ends, the peer leaves that job for the drain: docs/SIMULATE.md, "What the stream's end hides").
While a group that needs one domain, of at least the held job's priority and held for by none, has waited
longer than ``hold_yield_after``, no hold is made and the holds made are let go; they are made again once no
such group waits. A job that has waited ``hold_yield_until`` gives way no more, so it never starves, and no
group that waits forever (one no domain could ever host) stalls holds for longer than that.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from webhook.domain.groups import segments
from webhook.domain.jobs.holds import Waiting
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy

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


def starving(order: Sequence[Waiting], held_jobs: Collection[str], now: float, policy: Policy) -> list[Waiting]:
    """The groups of ``order`` the holds give way to: those that need one domain (not in segments), whose job
    holds nothing, and that have waited longer than ``hold_yield_after``; none when holds never give way."""
    if policy.hold_yield_after <= 0:
        return []
    return [w for w in order if w.group.segment is None and segments.job_of(w.group.id) not in held_jobs
            and now - w.since > policy.hold_yield_after]


def gives_way(entry: Waiting, hungry: Sequence[Waiting], now: float, policy: Policy) -> Waiting | None:
    """The group of ``hungry`` (``starving``) that the job of ``entry``, held or due a hold, gives way to: the
    first, in wait order, of at least its priority and of another job; None when there is none, or when the
    job has waited longer than ``hold_yield_until``."""
    if now - entry.since > policy.hold_yield_until:
        return None
    job = segments.job_of(entry.group.id)
    return next((w for w in hungry if w.priority >= entry.priority and segments.job_of(w.group.id) != job), None)
