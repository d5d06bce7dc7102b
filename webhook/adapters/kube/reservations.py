"""Domain reservations and domain ledgers kept in the API server, so every replica and restart sees them.

Both are DomainReservation objects (the two shapes and their codec: ``webhook.wire.domain_reservation``);
``metadata.resourceVersion`` is ``Reservation.version`` (empty for a promise). Reads come from a
watch-fed cache (``all()`` and ``promises()`` never call the API); writes are guarded:
- ``reserve`` read-modify-writes the domain's ledger with its resourceVersion (409 Conflict: re-read,
  ask the arbiter again; ``webhook.adapters.kube.ledgers``), then creates the group's reservation (409
  AlreadyExists: another replica won; read it and adopt it, and withdraw our promise when its domain
  differs);
- ``placed`` replaces with the resourceVersion it read, re-reading and retrying on 409 Conflict;
- ``release`` deletes with a resourceVersion precondition, so a reservation that another replica has just
  used is not lost; already gone counts as done; then the promise is withdrawn;
- ``prune`` rewrites (or deletes, when empty) ledgers holding dead promises, guarded the same way.
A ``reserve`` spends at most the sum of one call's connect and read timeouts (below kube-scheduler's
extender timeout), retrying 429, 5xx and timeouts while that lasts; what it cannot finish is a
``DecisionError`` that names the step, and the filter reports it in ``Error``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from webhook.adapters.kube.api import Api, ApiError
from webhook.adapters.kube.cache import WatchedCache
from webhook.adapters.kube.ledgers import (
    CRD_MISSING,
    WRITE_ATTEMPTS,
    Budget,
    Entry,
    Ledger,
    LedgerBook,
    decode,
    kept,
    transient,
)
from webhook.domain.model import Reservation
from webhook.engine.ports import Arbiter
from webhook.errors import DecisionError, StoreConflict, WireError
from webhook.wire import domain_reservation as dr
from webhook.wire.kinds import DOMAIN_RESERVATIONS

log = logging.getLogger(__name__)

__all__ = ["CRD_MISSING", "KubeReservationStore"]
PLACED_RETRIES = 3


class KubeReservationStore:
    """``ReservationStore`` on DomainReservation objects; ``cache`` is the ``Sink`` of their watcher."""

    def __init__(self, api: Api, holder: str) -> None:
        self._api = api
        self._holder = holder
        self.cache: WatchedCache[Entry | Ledger] = WatchedCache(dr.KIND, decode)
        self._ledgers = LedgerBook(api, holder, self.cache)
        # What all() and promises() hand out, rebuilt on each change: every filter request reads them.
        self._entries: Mapping[str, Entry] = MappingProxyType({})
        self._view: Mapping[str, Reservation] = MappingProxyType({})
        self._promises: Mapping[str, Mapping[str, Reservation]] = MappingProxyType({})
        self.cache.subscribe(self._publish)

    @property
    def synced(self) -> bool:
        return self.cache.synced

    # -- ReservationStore -----------------------------------------------------------------------------

    def all(self) -> Mapping[str, Reservation]:
        return self._view

    def promises(self) -> Mapping[str, Mapping[str, Reservation]]:
        return self._promises

    def reserve(self, proposal: Reservation, arbiter: Arbiter | None = None) -> Reservation:
        cached = self._entries.get(proposal.group_id)
        if cached is not None:
            return cached.reservation
        budget = Budget(self._api.timeout)
        self._ledgers.promise(proposal, arbiter, budget)
        return self._create(proposal, budget)

    def placed(self, group_id: str, when: float) -> None:
        entry: Entry | None = self._entries.get(group_id)
        name = dr.reservation_name(group_id)
        for attempt in range(1 + PLACED_RETRIES):
            try:
                if entry is None or attempt:
                    entry = self._read(name)
                if entry is None:
                    raise StoreConflict(f"reservation object {name} of group {group_id} is malformed")
                placed_at = max(when, entry.reservation.placed_at or when)
                body = dr.with_placed_at(entry.obj, placed_at)
                self._remember(self._api.call("PUT", DOMAIN_RESERVATIONS.path(name=name), body=body))
                return
            except ApiError as exc:
                if exc.status == 404:
                    self.cache.forget(name)
                    raise StoreConflict(f"the reservation of group {group_id} is gone") from exc
                if exc.status != 409:
                    # The engine treats StoreConflict as "not recorded, the next bind refreshes it".
                    raise StoreConflict(exc.explain(f"record a placement in reservation {name}", "update",
                                                    DOMAIN_RESERVATIONS.qualified)) from exc
                log.debug("reservation %s changed under us (attempt %d): %s", name, attempt + 1, exc)
        raise StoreConflict(f"reservation {name} of group {group_id} kept changing: {PLACED_RETRIES} retries "
                            "after a conflict failed")

    def subscribe(self, listener: Callable[[], None]) -> None:
        self.cache.subscribe(lambda _contents: listener())

    def release(self, group_id: str) -> None:
        entry = self._entries.get(group_id)
        name = dr.reservation_name(group_id)
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if entry is not None and entry.reservation.version:
            options["preconditions"] = {"resourceVersion": entry.reservation.version}
        try:
            self._api.call("DELETE", DOMAIN_RESERVATIONS.path(name=name), body=options)
        except ApiError as exc:
            if exc.status != 404:
                raise StoreConflict(exc.explain(f"release reservation {name}", "delete",
                                                DOMAIN_RESERVATIONS.qualified)) from exc
        self.cache.forget(name)
        if entry is not None:
            self._ledgers.withdraw(group_id, entry.reservation.domain)

    def prune(self, live: Callable[[Reservation], bool]) -> int:
        dropped = 0
        for ledger in self._ledgers.all():
            keep = [p for p in ledger.promises.values() if live(p)]
            if len(keep) == len(ledger.promises):
                continue
            try:
                self._ledgers.rewrite(ledger, keep)
            except ApiError as exc:
                log.info("ledger of domain %s not pruned this round: %s", ledger.domain, exc)
                continue
            dropped += len(ledger.promises) - len(keep)
        return dropped

    # -- the second write of reserve --------------------------------------------------------------------

    def _create(self, proposal: Reservation, budget: Budget) -> Reservation:
        """Create the group's reservation; on AlreadyExists adopt the one that is there."""
        group = f"{proposal.namespace}/{proposal.group_name}"
        name = dr.reservation_name(proposal.group_id)
        action = f"store the domain reservation of group {group}"
        body = dr.reservation_object(proposal, self._holder or proposal.holder)
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                return self._remember(self._api.call("POST", DOMAIN_RESERVATIONS.path(), body=body,
                                                     timeout=budget.timeout(action)))
            except ApiError as exc:
                if exc.status == 404:
                    raise DecisionError(CRD_MISSING) from exc
                if exc.status != 409:
                    if transient(exc) and attempt < WRITE_ATTEMPTS and budget.pause(attempt):
                        continue  # after no answer the create may have happened: the retry's 409 tells
                    raise DecisionError(exc.explain(action, "create", DOMAIN_RESERVATIONS.qualified)
                                        + f"; domain {proposal.domain} stays promised to the group and the "
                                        "scheduler retries") from exc
            # 409 AlreadyExists: another replica (or our own earlier attempt) won; its choice holds.
            try:
                winner = self._remember(self._api.call("GET", DOMAIN_RESERVATIONS.path(name=name),
                                                       timeout=budget.timeout(action)))
            except ApiError as exc:
                if exc.status == 404:
                    continue  # released between its create and our read: try to create again
                raise DecisionError(exc.explain(f"read the domain reservation of group {group}", "get",
                                                DOMAIN_RESERVATIONS.qualified) + "; the scheduler retries") from exc
            if winner.group_id != proposal.group_id:
                raise DecisionError(f"reservation object {name} belongs to group {winner.group_id}, not "
                                    f"{proposal.group_id} (a name collision); delete it to proceed")
            if winner.domain != proposal.domain:
                self._ledgers.withdraw(proposal.group_id, proposal.domain, budget)
            return winner
        raise DecisionError(f"could not {action}: it was deleted repeatedly while we stored it; the scheduler retries")

    # -- internals ------------------------------------------------------------------------------------

    def _read(self, name: str) -> Entry | None:
        """The reservation as the API server has it now; ``None`` when it is malformed."""
        obj = self._api.call("GET", DOMAIN_RESERVATIONS.path(name=name))
        try:
            entry = decode(obj)
        except WireError as exc:
            log.warning("skipping malformed %s %s: %s", dr.KIND, name, exc)
            return None
        return entry if isinstance(entry, Entry) else None

    def _remember(self, obj: Mapping[str, Any]) -> Reservation:
        return kept(self.cache, obj, Entry).reservation

    def _publish(self, items: Mapping[str, Entry | Ledger]) -> None:
        entries = {e.reservation.group_id: e for e in items.values() if isinstance(e, Entry)}
        self._entries = MappingProxyType(entries)
        self._view = MappingProxyType({g: e.reservation for g, e in entries.items()})
        self._promises = MappingProxyType({v.domain: v.promises for v in items.values() if isinstance(v, Ledger)})
