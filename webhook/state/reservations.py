"""Where a group's domain reservation is kept, and why two choices never promise the same capacity.

The first ``/filter`` of a group chooses its domain and stores the reservation before any member passes
the filter, so ``/bind`` (which runs after DRA's PreBind has allocated the claim on the node) only
confirms it and never redirects a pod. Kubernetes mode keeps reservations in the API server
(``webhook.adapters.kube.reservations``: every replica and every restart sees them); embedded mode keeps
them in memory here. Later members read the reservation from the watch-fed cache: no API call, no lock.

Capacity promised to groups never exceeds a domain's capacity:

- **One process**: ``Engine`` holds one lock around "read what is promised, choose, record the choice as
  in flight", so a concurrent first pod of another group sees the choice before it makes its own. The
  lock covers the choice only (milliseconds), never an API call.
- **Across replicas**: every domain has a *ledger*, the list of groups promised capacity in it
  (Kubernetes mode: one more DomainReservation object per domain, named after the domain, with
  ``spec.promises``). Recording a choice takes two writes, in this order:
  1. *the promise*: a read-modify-write of the domain's ledger, guarded by its resourceVersion. Just
     before writing, the store hands the ledger's live promises to the engine's ``Arbiter``, which checks
     that the domain still fits the group next to them. The API server serialises two replicas writing
     one ledger: the loser of the 409 re-reads, checks again, and either records next to the winner or
     raises ``DomainFull``; the engine then chooses again, with the ledger it just read in its cache;
  2. *the reservation*: one create per group. 409 AlreadyExists means another replica reserved the group
     first: its domain holds; our promise is withdrawn and the filter runs against that domain.
- **Crash safety** (a replica killed between the two writes, a create that failed): a promise counts only
  while it is *live*: its group's reservation exists, names that domain and has not expired; or no
  reservation exists yet and the promise is younger than ``Policy.proposal_ttl`` (longer than the gang
  wait at Permit). Dead promises are ignored when read and dropped at the next write of their ledger and
  by housekeeping (``prune``). While a promise lives, the next filter of its group finishes the job:
  it creates the reservation in the promised domain (re-writing a promise past half its TTL first, so no
  reservation is ever created from a promise that others are about to drop).
- Releasing a reservation deletes it, then withdraws its promise (re-reading the ledger after a conflict;
  a promise left behind anyway counts until it is older than the proposal TTL).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Protocol

from webhook.domain.model import Reservation
from webhook.errors import StoreConflict

NO_PROMISES: Mapping[str, Mapping[str, Reservation]] = MappingProxyType({})


class DomainFull(StoreConflict):
    """The domain's latest promises leave no room for the group: choose again."""

    def __init__(self, domain: str, group: str) -> None:
        super().__init__(f"domain {domain} has no room left for group {group} next to the promises recorded "
                         "since the choice was made")
        self.domain = domain


class Arbiter(Protocol):
    """The engine's judgement, handed to the store for the moment it records a promise."""

    def live(self, promise: Reservation) -> bool:
        """Whether a recorded promise still holds capacity (see the module docstring)."""
        ...

    def fits(self, promises: Mapping[str, Reservation]) -> bool:
        """Whether the domain still hosts the group next to these live promises of other groups."""
        ...


class ReservationStore(Protocol):
    def all(self) -> Mapping[str, Reservation]:
        """Every stored reservation by group id, from the cache (no API call)."""
        ...

    def promises(self) -> Mapping[str, Mapping[str, Reservation]]:
        """Every domain's ledger: promises by group id, live or not, from the cache (no API call)."""
        ...

    def reserve(self, proposal: Reservation, arbiter: Arbiter | None = None) -> Reservation:
        """Promise ``proposal.domain`` to the group, then store the reservation; return the one that holds.

        A group that already has a reservation keeps it (it is returned, whatever its domain). Two replicas
        racing for one group agree: exactly one create succeeds and the loser gets the winner's
        reservation back. Raises ``DomainFull`` when ``arbiter`` finds no room next to the domain's latest
        promises, ``DecisionError`` (a reason for the scheduler's events) when the store cannot be written.
        """
        ...

    def placed(self, group_id: str, when: float) -> None:
        """Record that a member was bound (keeps the reservation from expiring)."""
        ...

    def release(self, group_id: str) -> None:
        ...

    def prune(self, live: Callable[[Reservation], bool]) -> int:
        """Drop the dead promises of every ledger; returns how many were dropped."""
        ...

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change of the reservations from now on (it must not block)."""
        ...


class MemoryReservationStore:
    """Embedded mode: the same contract, in memory; versions increase like resourceVersions.

    One process holds every reservation, so the reservations themselves are the ledger: ``reserve`` checks
    the domain's live reservations and stores under one lock, and there is nothing to prune."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # the arbiter reads all() while reserve holds it
        self._items: dict[str, Reservation] = {}
        self._view: Mapping[str, Reservation] = MappingProxyType({})
        self._counter = 0
        self._listeners: list[Callable[[], None]] = []

    def _next(self) -> str:
        self._counter += 1
        return str(self._counter)

    def _set(self, items: dict[str, Reservation]) -> None:
        self._items = items
        self._view = MappingProxyType(dict(items))
        for listener in self._listeners:
            listener()

    def subscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def all(self) -> Mapping[str, Reservation]:
        return self._view

    def promises(self) -> Mapping[str, Mapping[str, Reservation]]:
        return NO_PROMISES

    def reserve(self, proposal: Reservation, arbiter: Arbiter | None = None) -> Reservation:
        with self._lock:
            current = self._items.get(proposal.group_id)
            if current is not None:
                return current
            if arbiter is not None:
                others = {g: r for g, r in self._items.items() if r.domain == proposal.domain and arbiter.live(r)}
                if not arbiter.fits(others):
                    raise DomainFull(proposal.domain, f"{proposal.namespace}/{proposal.group_name}")
            stored = replace(proposal, version=self._next())
            self._set({**self._items, proposal.group_id: stored})
            return stored

    def placed(self, group_id: str, when: float) -> None:
        with self._lock:
            current = self._items.get(group_id)
            if current is None:
                raise StoreConflict(f"reservation for {group_id} is gone")
            self._set({**self._items, group_id: replace(current, placed_at=when, version=self._next())})

    def release(self, group_id: str) -> None:
        with self._lock:
            if group_id in self._items:
                self._set({g: r for g, r in self._items.items() if g != group_id})

    def prune(self, live: Callable[[Reservation], bool]) -> int:
        return 0
