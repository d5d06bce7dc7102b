"""Which held domains kept a refused group out, and why it could not backfill there (the ``NoBackfill`` Event,
docs/OPERATING.md; docs/SCHEDULER.md, "Holds and backfill").

A group no domain can host is told so in ``NoDomainFits``, whose reason counts what runs and what is
promised in each domain. That does not say what the owner can change: a domain held for a group that waited
longest takes no new group, except a backfill group whose walltime ends before the hold's expected start
(``holds.visible``). A group refused only because of such a hold, one that states no walltime or one that
ends too late, would have started had it stated a shorter one.

So a hold is named only where it is what kept the group out: with the hold gone (every other promise kept)
the group's own choice, the very function the filter chose with, would take the held domain. A group
refused for its quota, or that no domain could host hold or not, is not told about holds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.domain import keys
from webhook.domain.groups import segments
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import holds, resolution, segment_plan
from webhook.domain.model import Demand, Group, Pod, Reservation, Walltime
from webhook.domain.placement import placement


@dataclass(frozen=True, slots=True)
class HeldOut:
    """A held domain that kept a group out, and the note that says why it could not backfill there."""

    hold: Reservation
    note: str


def at(ts: float, now: float) -> str:
    """A time as an operator reads it: ``12:40 UTC``, with the date when it is not today's."""
    same_day = time.gmtime(ts)[:3] == time.gmtime(now)[:3]
    return time.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def duration(seconds: float) -> str:
    """``2h``, ``90m`` -> ``1h30m``, ``45s``: as ``imex-webhook.io/max-runtime`` is written."""
    whole = max(round(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


def note(hold: Reservation, bound: Walltime | None, now: float, enforced_only: bool = False) -> str:
    """Why a group with walltime ``bound`` (None: it states none) cannot start in ``hold``'s domain;
    ``enforced_only``: only walltimes Kubernetes enforces backfill (``Policy.backfill_enforced_only``)."""
    start = hold.expected_start if hold.expected_start is not None else now
    head = f"domain {hold.domain} is held for {hold.namespace}/{hold.group_name} until about {at(start, now)}"
    if bound is not None and enforced_only and not bound.enforced:
        return (f"{head}; this job's walltime of {duration(bound.seconds)} ({bound.source}) is only stated, and "
                "here only a walltime Kubernetes enforces (activeDeadlineSeconds, Kueue's maximum execution time) "
                "may backfill, so it cannot backfill there")
    if bound is None:
        return (f"{head}; this job states no walltime ({keys.MAX_RUNTIME_ANNOTATION} or activeDeadlineSeconds) "
                "so it cannot backfill there")
    return (f"{head}; this job's walltime of {duration(bound.seconds)} ({bound.source}) ends after that, at about "
            f"{at(now + bound.seconds, now)}, so it cannot backfill there")


def _hosts(group: Group, size: int | None, need: Demand, inputs: DecisionInputs, kept: Mapping[str, Reservation],
           pending_self: bool, allowed: set[str] | None) -> tuple[str, ...]:
    """The domains ``group`` would take with ``kept`` promised: one, a job's segments' several, or none."""
    snapshot, policy = inputs.snapshot, inputs.policy
    if group.segment is not None:
        planned = segment_plan.plan(group, need, snapshot, kept, allowed, policy)
        return tuple(planned.domains.values()) if planned.domains is not None else ()
    choice = placement.choose(group, size, need, snapshot, kept, pending_self=pending_self, allowed=allowed,
                              health=policy.fabric_health, policy=policy)
    return (choice.domain,) if choice.domain is not None else ()


def held_out(pod: Pod, group: Group, size: int | None, need: Demand, inputs: DecisionInputs,
             candidates: Sequence[str] | None = None) -> list[HeldOut]:
    """The holds of other jobs that kept ``pod``'s ``group`` out (none when it would be refused without them
    too, or is not refused at all), by domain. ``size`` and ``candidates`` as the filter chose with
    (``resolution.resolve``)."""
    kept = resolution.kept_off(group, inputs)  # a hold it may backfill under is not among them
    job = segments.job_of(group.id)
    blocking = [(g, r) for g, r in sorted(kept.items()) if holds.is_hold(r) and segments.job_of(g) != job]
    if not blocking:
        return []
    allowed = resolution.allowed_nodes(candidates)
    pending_self = resolution.is_new_member(pod, group, inputs)
    if _hosts(group, size, need, inputs, kept, pending_self, allowed):
        return []  # a domain takes it: nothing kept it out
    out = []
    for group_id, hold in blocking:
        without = {g: r for g, r in kept.items() if g != group_id}
        if hold.domain in _hosts(group, size, need, inputs, without, pending_self, allowed):
            out.append(HeldOut(hold, note(hold, group.walltime, inputs.now, inputs.policy.backfill_enforced_only)))
    return sorted(out, key=lambda h: h.hold.domain)
