"""Housekeeping: release reservations whose group is gone or that expired with no member placed, and drop
dead domain promises (``webhook.state.reservations``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from webhook.domain.model import Snapshot
from webhook.domain.placement import members_summary
from webhook.errors import StoreConflict
from webhook.state.decision_log import decision_log, log

if TYPE_CHECKING:
    from webhook.state.engine import Engine



def housekeep(engine: Engine) -> list[tuple[str, str]]:
    """Nothing while the caches are loading: a group whose pods are not listed yet looks gone."""
    why = engine.loading()
    if why is not None:
        log.info("housekeeping waits: %s", why)
        return []
    now = engine.clock()
    snapshot = engine.snapshot()
    released = []
    for group_id, why in stale_reservations(snapshot, now, engine.policy.reservation_ttl):
        try:
            engine.reservations.release(group_id)
        except StoreConflict as exc:
            log.info("reservation %s changed while releasing it (%s); checked again next round", group_id, exc)
            continue
        released.append((group_id, why))
        decision_log("release", group_id, reason=why)
        engine.report.released(snapshot.reservations[group_id], why, snapshot, now)
    dropped = engine.reservations.prune(lambda p: engine.live(p, engine.clock()))
    if dropped:
        log.info("dropped %d dead domain promises", dropped)
    return released


def stale_reservations(snapshot: Snapshot, now: float, ttl: float) -> list[tuple[str, str]]:
    out = []
    for group_id, res in sorted(snapshot.reservations.items()):
        seen, placed, _ = members_summary(snapshot.members.get(group_id, ()))
        if placed == 0 and res.expired(now, ttl):
            out.append((group_id, f"no member placed within {ttl:.0f}s"))
        elif seen == 0 and now - (res.placed_at or res.created_at) > 30:
            # A bound member shows up in the caches within moments; 30 s of nothing means the group ended.
            out.append((group_id, "every member of the group has finished or was deleted"))
    return out
