"""The choose-and-record machinery: how a group's domain is chosen and recorded, and why two choices never
promise the same capacity.

The first ``/filter`` of a group chooses its domain and stores the reservation before any member passes
the filter, so ``/bind`` (which runs after DRA's PreBind has allocated the claim on the node) only
confirms it and never redirects a pod. Kubernetes mode keeps reservations in the API server
(``webhook.adapters.kube.reservations``: every replica and every restart sees them); embedded mode keeps
them in memory (``webhook.adapters.memory``). Later members read the reservation from the watch-fed
cache: no API call, no lock.

Capacity promised to groups never exceeds a domain's capacity:

- **One process**: ``Choices`` holds one lock around "read what is promised, choose, record the choice as
  in flight", so a concurrent first pod of another group sees the choice before it makes its own. The
  lock covers the choice only (milliseconds), never an API call.
- **Across replicas**: every domain has a *ledger*, the list of groups promised capacity in it
  (Kubernetes mode: one more DomainReservation object per domain, named after the domain, with
  ``spec.promises``). Recording a choice takes two writes, in this order:
  1. *the promise*: a read-modify-write of the domain's ledger, guarded by its resourceVersion. Just
     before writing, the store hands the ledger's live promises to the choice's ``Arbiter``
     (``DomainArbiter``), which checks that the domain still fits the group next to them. The API server
     serialises two replicas writing one ledger: the loser of the 409 re-reads, checks again, and either
     records next to the winner or raises ``DomainFull``; the engine then chooses again, with the ledger
     it just read in its cache;
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
import time
from collections.abc import Callable, Iterator, Mapping, Set
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType

from webhook.domain.inputs import live_reservations
from webhook.domain.jobs import holds
from webhook.domain.model import Demand, Group, Reservation, Snapshot
from webhook.domain.placement import placement
from webhook.domain.placement.placement import members_summary
from webhook.domain.policy import Policy
from webhook.engine.ports import Arbiter, ReservationStore
from webhook.errors import DecisionError, StoreConflict


class Lazy(Mapping[str, Reservation]):
    """The promises without a stored reservation, computed on first use: a later pod's filter finds its
    group's stored reservation first and never pays for them."""

    def __init__(self, build: Callable[[], Mapping[str, Reservation]]) -> None:
        self._build = build
        self._data: Mapping[str, Reservation] | None = None

    def _get(self) -> Mapping[str, Reservation]:
        if self._data is None:
            self._data = self._build()
        return self._data

    def __getitem__(self, key: str) -> Reservation:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


class Choices:
    """The domain choices of this process and of the store, and the one lock that orders them.

    Choose-and-record: ``hold()`` is held while a first pod reads what is promised, chooses and marks its
    choice in flight (``fly``), never across an API call; ``store`` then writes it and lands it. Readers
    take the in-flight choices without the lock (the mapping is replaced, never changed)."""

    def __init__(self, reservations: ReservationStore, policy: Policy, holder: str = "",
                 clock: Callable[[], float] = time.time) -> None:
        self.reservations = reservations
        self.policy = policy
        self.holder = holder
        self.clock = clock
        self._lock = threading.Lock()
        self._in_flight: Mapping[str, Reservation] = MappingProxyType({})

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._lock:
            yield

    @property
    def in_flight(self) -> Mapping[str, Reservation]:
        return self._in_flight

    def live(self, promise: Reservation, now: float) -> bool:
        """A promise holds capacity while its group's reservation names its domain, or, before the
        reservation exists, for ``proposal_ttl``."""
        stored = self.reservations.all().get(promise.group_id)
        if stored is not None:
            return stored.domain == promise.domain and self.policy.live(stored, now, stored=True)
        return self.policy.live(promise, now, stored=False)

    def promised(self, now: float) -> Mapping[str, Reservation]:
        """Choices without a stored reservation: live ledger promises (another replica between its two
        writes, or one whose create failed), then this process's choices being stored."""
        stored = self.reservations.all()
        out: dict[str, Reservation] = {}
        for ledger in self.reservations.promises().values():
            for group_id, promise in ledger.items():
                if group_id in stored or not self.policy.live(promise, now, stored=False):
                    continue
                if group_id not in out or promise.created_at > out[group_id].created_at:
                    out[group_id] = promise
        out.update(self._in_flight)
        return out

    def lazy(self, now: float) -> Mapping[str, Reservation]:
        return Lazy(lambda: self.promised(now))

    def fly(self, res: Reservation) -> None:
        """Count ``res`` as promised in this process until ``store`` answers; call it under ``hold()``."""
        self._in_flight = MappingProxyType({**self._in_flight, res.group_id: res})

    def land(self, res: Reservation) -> None:
        """Stop counting ``res`` as in flight without storing it (a plan given up)."""
        self._land(res)

    def _land(self, res: Reservation) -> None:
        with self._lock:
            if self._in_flight.get(res.group_id) is res:
                self._in_flight = MappingProxyType({g: r for g, r in self._in_flight.items() if g != res.group_id})

    def forget(self, group_id: str) -> None:
        """Drop the group's reservation and choice, so that its next filter chooses again (bench, tests)."""
        with self._lock:
            self._in_flight = MappingProxyType({g: r for g, r in self._in_flight.items() if g != group_id})
        if group_id in self.reservations.all():
            self.reservations.release(group_id)

    def store(self, res: Reservation, arbiter: Arbiter) -> Reservation:
        """Write a choice marked with ``fly``; it stops counting as in flight once the store answers."""
        try:
            current = self.reservations.all().get(res.group_id)
            if current is not None and current.version and not self.policy.live(current, self.clock(), stored=True):
                # Expired but not yet released by housekeeping: the filter no longer follows it; replace it.
                try:
                    self.reservations.release(res.group_id)
                except StoreConflict as exc:
                    raise DecisionError(f"the expired reservation of group {res.namespace}/{res.group_name} is "
                                        f"changing ({exc}); the scheduler retries") from exc
            return self.reservations.reserve(res, arbiter)
        finally:
            self._land(res)

    def record(self, res: Reservation, arbiter: Arbiter, admit: Callable[[], None] | None = None) -> Reservation:
        """Store ``res`` as a choice in flight: ``admit`` (raising to refuse) runs under the lock first."""
        with self._lock:
            if admit is not None:
                admit()
            self.fly(res)
        return self.store(res, arbiter)


@dataclass(frozen=True, slots=True)
class DomainArbiter:
    """The ``Arbiter`` of one choice: is a promise live, does the domain still fit the group."""

    choices: Choices
    current: Callable[[], Snapshot]  # the cluster now (the engine's snapshot)
    proposal: Reservation
    group: Group
    need: Demand
    allowed: Set[str] | None  # the candidate nodes of the filter that chose (None: the whole domain)
    # The cluster the choice was made for, when not the current one: once a preemption's victims are gone.
    after: Snapshot | None = None

    def live(self, promise: Reservation) -> bool:
        return self.choices.live(promise, self.choices.clock())

    def fits(self, promises: Mapping[str, Reservation]) -> bool:
        choices, res = self.choices, self.proposal
        now = choices.clock()
        snapshot = self.after if self.after is not None else self.current()
        others = live_reservations(snapshot, choices.promised(now), choices.policy, now)
        others.update(promises)  # the domain's ledger as the store just read it wins over our cache
        others.pop(res.group_id, None)
        # The holds it may backfill under do not count.
        others = dict(holds.visible(others, self.group, now, choices.policy.backfill_enforced_only))
        _, placed, _ = members_summary(snapshot.members.get(res.group_id, ()))
        remaining = max(res.size - placed, 1) + res.spares  # the spares it holds must still fit too
        return placement.still_fits(res.domain, self.group, self.need, remaining, snapshot, others, self.allowed,
                                    choices.policy)
