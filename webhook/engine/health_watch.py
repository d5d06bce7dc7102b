"""Telling the operator when the NVLink domain of a running group changes health.

A group placed in a domain stays there: moving a running job means restarting it, which is the job's
controller's call, not ours. When the domain's fabric turns degraded or unhealthy (``webhook.domain.health``)
the operator must know which groups it affects: a Warning Event on the group's ComputeDomain (and its first
running pod) once per change, and a Normal one when it recovers. Housekeeping runs this on every cache
change (``webhook.engine.housekeeping``). Each replica remembers what it reported; after a restart, a
domain that is still degraded is reported once more.
"""

from __future__ import annotations

import threading

from webhook.domain.health import DomainHealth, Health, domain_health
from webhook.domain.model import Snapshot
from webhook.domain.placement.placement import members_summary
from webhook.engine.events import Reporter


class HealthWatch:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, Health] = {}  # group id -> the health of its domain last reported

    def check(self, snapshot: Snapshot, report: Reporter) -> list[tuple[str, Health]]:
        """Report every running group whose domain's health changed; returns (group id, health) for each."""
        changed: list[tuple[str, Health]] = []
        judged_by_domain: dict[str, DomainHealth] = {}
        with self._lock:
            running = set()
            for group_id, res in sorted(snapshot.reservations.items()):
                if members_summary(snapshot.members.get(group_id, ()))[1] == 0:
                    continue  # not running yet: the next choice weighs the health itself
                running.add(group_id)
                judged = judged_by_domain.get(res.domain)
                if judged is None:
                    judged = domain_health(snapshot.nodes[n] for n in snapshot.domains.get(res.domain, ())
                                           if n in snapshot.nodes)
                    judged_by_domain[res.domain] = judged
                was = self._seen.get(group_id, "healthy")
                if judged.health != was:
                    self._seen[group_id] = judged.health
                    changed.append((group_id, judged.health))
                    report.domain_health(res, judged, was, snapshot)
            for group_id in set(self._seen) - running:
                del self._seen[group_id]
        return changed
