"""Holds, made and given up (``webhook.domain.jobs.holds`` decides; this records): after each round of
housekeeping the groups that waited longest get their domains held at their earliest start, through the
same store and arbiter protocol as any choice, so two replicas hold the same domains or one withdraws.

A hold's group binds into its domain as a reserved group does: its pods are refused while the room is not
there, and the retry of refused groups (``webhook.engine.requeue``) hands them back to the scheduler once it
is. A hold whose expected start passed without room is released here and planned again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from webhook.domain.groups import segments
from webhook.domain.jobs import hold_order, holds
from webhook.domain.model import Reservation
from webhook.domain.placement import quotas
from webhook.engine.choices import Choices
from webhook.engine.core import Core
from webhook.engine.decision_log import decision_log, log
from webhook.errors import DecisionError, DomainFull, StoreConflict


@dataclass(frozen=True, slots=True)
class HoldArbiter:
    """The ``Arbiter`` of a hold: a domain is held for one group at a time. Its capacity is not there yet, by
    definition; what the hold takes as it frees is counted like any promise's."""

    choices: Choices
    proposal: Reservation

    def live(self, promise: Reservation) -> bool:
        return self.choices.live(promise, self.choices.clock())

    def fits(self, promises: Mapping[str, Reservation]) -> bool:
        job = segments.job_of(self.proposal.group_id)
        return not any(holds.is_hold(p) and segments.job_of(g) != job and self.live(p) for g, p in promises.items())


def plan_holds(core: Core) -> list[Reservation]:
    """Give up the holds past due, then hold domains for the groups due one; returns the holds made."""
    policy = core.policy
    if policy.max_holds <= 0 or core.loading() is not None:
        return []
    inputs = core.decision_inputs()
    for group_id, res in sorted(inputs.snapshot.reservations.items()):
        if holds.overdue(res, inputs.now) and policy.live(res, inputs.now, stored=True):
            _give_up(core, group_id, res)
    _move_earlier(core)
    _give_way(core)
    _yield(core)
    inputs = core.decision_inputs()
    now, snapshot, live = inputs.now, inputs.snapshot, dict(inputs.live)
    held_jobs = _held_jobs(live)
    order = holds.waiting(snapshot, live, policy)
    hungry = hold_order.starving(order, held_jobs, now, policy)
    made: list[Reservation] = []
    for entry in holds.due(order, len(held_jobs), now, policy):
        if hold_order.gives_way(entry, hungry, now, policy) is not None:
            continue  # the cluster is behind on the groups that need one domain: no hold taken from them now
        planned = holds.plan(entry, snapshot, live, policy, now)
        if planned is None or planned.start <= now:
            continue  # no walltime makes room, or room is there: the scheduler places it on its next try
        wanted = holds.holds_for(entry, planned, now, core.holder)
        over = quotas.refusal(entry.group, wanted, False, snapshot, live, policy)
        if over:  # a hold is capacity kept for pods not running: bounded like any reservation (quotas)
            log.info("no hold for %s/%s: %s", entry.group.namespace, entry.group.name, over)
            continue
        recorded = _record(core, wanted)
        if recorded:
            made.extend(recorded)
            live.update((r.group_id, r) for r in recorded)
            core.report.held(entry.pod, entry.group, recorded, planned.start, now, snapshot.catalog)
    return made


def _move_earlier(core: Core) -> None:
    """Plan every held group again; one whose room now comes earlier by ``holds.RESOLUTION`` elsewhere (or
    is there now) lets its holds go, and is held again on this round where it starts earliest."""
    inputs = core.decision_inputs()
    for entry, current in holds.held_waiting(inputs.snapshot, inputs.live, core.policy):
        ids = {r.group_id for r in current}
        others = {g: r for g, r in inputs.live.items() if g not in ids}
        planned = holds.plan(entry, inputs.snapshot, others, core.policy, inputs.now)
        start = max(r.expected_start or 0.0 for r in current)
        if planned is None or planned.start > start - holds.RESOLUTION:
            continue
        for res in current:
            if _release(core, res.group_id):
                decision_log("release", res.group_id, domain=res.domain,
                             reason=f"room for the held group comes earlier ({planned.start:.0f})")


def _give_way(core: Core) -> None:
    """Let go the holds of lower priority that a due group of higher priority needs the slot of
    (``webhook.domain.jobs.hold_order``); it is planned on this round."""
    inputs = core.decision_inputs()
    order = holds.waiting(inputs.snapshot, holds.unheld(inputs.live), core.policy)
    held = holds.held_waiting(inputs.snapshot, inputs.live, core.policy, order)
    held_jobs = _held_jobs(inputs.live)
    # The wait order with the holds in place is this one less the held jobs: one pass serves both.
    due = [w for w in order if segments.job_of(w.group.id) not in held_jobs
           and inputs.now - w.since >= core.policy.hold_after]
    for entry, current in hold_order.displaced(held, due, core.policy.max_holds):
        for res in current:
            if _release(core, res.group_id):
                decision_log("release", res.group_id, domain=res.domain,
                             reason=f"a group of higher priority than {entry.priority} waits for a hold")


def _yield(core: Core) -> None:
    """Let go the holds of the jobs that give way to a group that needs one domain and has waited longer than
    ``--hold-yield-after`` (``webhook.domain.jobs.hold_order.gives_way``); they are made again once no such
    group waits."""
    policy = core.policy
    if policy.hold_yield_after <= 0:
        return
    inputs = core.decision_inputs()
    held_jobs = _held_jobs(inputs.live)
    if not held_jobs:
        return
    order = holds.waiting(inputs.snapshot, holds.unheld(inputs.live), policy)
    held = holds.held_waiting(inputs.snapshot, inputs.live, policy, order)
    hungry = hold_order.starving(order, held_jobs, inputs.now, policy)
    for entry, current in held:
        to = hold_order.gives_way(entry, hungry, inputs.now, policy)
        if to is None:
            continue
        waited = inputs.now - to.since
        for res in current:
            if _release(core, res.group_id):
                decision_log("release", res.group_id, domain=res.domain,
                             reason=f"group {to.group.namespace}/{to.group.name} needs one domain and has waited "
                                    f"{waited:.0f} s (--hold-yield-after {policy.hold_yield_after:g})")


def _held_jobs(live: Mapping[str, Reservation]) -> set[str]:
    """The jobs that hold domains (a job in segments holds one per segment)."""
    return {segments.job_of(g) for g, r in live.items() if holds.is_hold(r)}


def _record(core: Core, wanted: list[Reservation]) -> list[Reservation]:
    """Store every hold of one plan, or none: a segment that cannot be held withdraws those stored before it."""
    stored: list[Reservation] = []
    try:
        for res in wanted:
            with core.choices.hold():
                core.choices.fly(res)
            kept = core.choices.store(res, HoldArbiter(core.choices, res))
            if kept.domain != res.domain or kept.expected_start is None:  # reserved by a filter meanwhile
                raise StoreConflict(f"group {res.namespace}/{res.group_name} was reserved in domain {kept.domain} "
                                    "meanwhile")
            stored.append(kept)
    except (DomainFull, DecisionError, StoreConflict) as exc:
        log.info("no hold for %s now: %s", wanted[0].group_name, exc)
        for res in stored:
            _release(core, res.group_id)
        return []
    if any(kept.holder != res.holder or abs(kept.created_at - res.created_at) > 1e-3  # stored to the microsecond
           for kept, res in zip(stored, wanted, strict=True)):
        return []  # another replica held the same group a moment before: its hold stands, and it told the group
    for res in stored:
        decision_log("hold", res.group_id, domain=res.domain, reason=f"expected start {res.expected_start:.0f}")
    return stored


def _give_up(core: Core, group_id: str, res: Reservation) -> None:
    if _release(core, group_id):
        decision_log("release", group_id, domain=res.domain, reason="hold past its expected start without room")


def _release(core: Core, group_id: str) -> bool:
    try:
        core.reservations.release(group_id)
    except StoreConflict as exc:
        log.info("hold %s changed while releasing it (%s); checked again next round", group_id, exc)
        return False
    return True
