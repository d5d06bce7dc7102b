"""Where a group's domain reservation is kept, behind one interface.

Kubernetes mode keeps reservations in the API server (``webhook.adapters.kube``) so that every replica
and every restart sees them, guarded by resourceVersion; embedded mode keeps them in memory here. Choices
made by ``/filter`` that no bind has confirmed yet are *proposals*, remembered only by this process: they
are cheap to lose (the next filter recomputes the same best fit) and never need an API call on the
filter path.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from webhook.domain.errors import StoreConflict
from webhook.domain.model import Reservation


class ReservationStore(Protocol):
    def all(self) -> Mapping[str, Reservation]:
        """Every stored reservation by group id, from the cache (no API call)."""
        ...

    def ensure(self, proposal: Reservation) -> Reservation:
        """Store ``proposal`` unless the group already has a reservation; return the one that holds.

        Two replicas racing for one group agree: exactly one create succeeds and the loser gets the
        winner's reservation back.
        """
        ...

    def placed(self, group_id: str, when: float) -> None:
        """Record that a member was bound (keeps the reservation from expiring)."""
        ...

    def release(self, group_id: str) -> None:
        ...


class MemoryReservationStore:
    """Embedded mode: the same contract, in memory; versions increase like resourceVersions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Reservation] = {}
        self._counter = 0

    def _next(self) -> str:
        self._counter += 1
        return str(self._counter)

    def all(self) -> Mapping[str, Reservation]:
        with self._lock:
            return dict(self._items)

    def ensure(self, proposal: Reservation) -> Reservation:
        with self._lock:
            current = self._items.get(proposal.group_id)
            if current is not None:
                return current
            stored = replace(proposal, version=self._next())
            self._items[proposal.group_id] = stored
            return stored

    def placed(self, group_id: str, when: float) -> None:
        with self._lock:
            current = self._items.get(group_id)
            if current is None:
                raise StoreConflict(f"reservation for {group_id} is gone")
            self._items[group_id] = replace(current, placed_at=when, version=self._next())

    def release(self, group_id: str) -> None:
        with self._lock:
            self._items.pop(group_id, None)


class Proposals:
    """Domain choices made by this process's filter calls and not yet confirmed by a bind."""

    def __init__(self, ttl: float) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Reservation] = {}
        self._ttl = ttl

    def view(self, now: float) -> dict[str, Reservation]:
        with self._lock:
            stale = [g for g, r in self._items.items() if now - r.created_at > self._ttl]
            for g in stale:
                del self._items[g]
            return dict(self._items)

    def remember(self, proposal: Reservation) -> None:
        with self._lock:
            self._items.setdefault(proposal.group_id, proposal)

    def forget(self, group_id: str) -> None:
        with self._lock:
            self._items.pop(group_id, None)
