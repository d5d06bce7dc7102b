"""Housekeeping: release reservations whose group is gone or that expired with no member placed, and drop
dead domain promises (``webhook.engine.choices``).

It runs whenever the caches change (``webhook.service.upkeep``) and on a timer, so a group that ended
frees its domain at once: a group whose members this replica saw placed and then saw all deleted or
finished (``Snapshot.ended_groups``) is released on the watch event that removed its last member.

The grace stays where the cache may be behind the API server. A reservation whose members this replica
never saw placed, and that has none now, may belong to pods its watch has not delivered yet: another
replica reserved and bound them a moment ago, or this replica just restarted and relisted. Such a
reservation is released only ``GRACE`` seconds after its last placement (or its creation): a bound pod shows
up in every replica's pod cache well within that. A hold is made only for members that waited
``Policy.hold_after``, so its grace counts from that long before its making: with the default, a held group
whose pods are deleted frees its domains on that change.
"""

from __future__ import annotations

from webhook.domain.jobs import holds
from webhook.domain.model import Reservation, Snapshot
from webhook.domain.placement.placement import members_summary
from webhook.domain.policy import Policy
from webhook.engine.core import Core
from webhook.engine.decision_log import decision_log, log
from webhook.errors import StoreConflict

GRACE = 30.0  # seconds; see the module docstring
ENDED = "every member of the group has finished or was deleted"


def housekeep(core: Core, prune: bool = True) -> list[tuple[str, str]]:
    """Nothing while the caches are loading: a group whose pods are not listed yet looks gone."""
    why = core.loading()
    if why is not None:
        if prune:  # the timed round says so; the rounds on each change while loading would repeat it
            log.info("housekeeping waits: %s", why)
        return []
    now = core.clock()
    snapshot = core.snapshot()
    released = []
    for group_id, why in stale_reservations(snapshot, now, core.policy):
        try:
            core.reservations.release(group_id)
        except StoreConflict as exc:
            log.info("reservation %s changed while releasing it (%s); checked again next round", group_id, exc)
            continue
        released.append((group_id, why))
        decision_log("release", group_id, reason=why)
        core.report.released(snapshot.reservations[group_id], why, snapshot, now)
    # Ended groups whose reservation is gone (released above, or by another replica) need no more tracking.
    handled = [g for g in snapshot.ended_groups if g not in core.reservations.all()]
    if handled:
        core.store.forget_ended(handled)
    # The operator learns of a running group's domain turning degraded or unhealthy (health_watch).
    core.health_watch.check(core.snapshot(), core.report)
    dropped = core.reservations.prune(lambda p: core.choices.live(p, core.clock())) if prune else 0
    if dropped:
        log.info("dropped %d dead domain promises", dropped)
    return released


def stale_reservations(snapshot: Snapshot, now: float, policy: Policy) -> list[tuple[str, str]]:
    out = []
    for group_id, res in sorted(snapshot.reservations.items()):
        seen, placed, _ = members_summary(snapshot.members.get(group_id, ()))
        if seen == 0 and group_id in snapshot.ended_groups:
            out.append((group_id, ENDED))
        elif placed == 0 and not policy.live(res, now, stored=True):
            out.append((group_id, f"no member placed within {policy.reservation_ttl:.0f}s"))
        elif seen == 0 and now - _last_sign_of_life(res, policy) > GRACE:
            out.append((group_id, ENDED))
    return out


def _last_sign_of_life(res: Reservation, policy: Policy) -> float:
    """When the group of ``res`` was last known to have members: its last placement, else its reservation's
    making; for a hold, ``hold_after`` before its making, since its members had waited that long by then
    (every synced replica has them in its cache), so a deleted held group frees its domains at once."""
    if holds.is_hold(res):
        return res.created_at - policy.hold_after
    return res.placed_at or res.created_at
