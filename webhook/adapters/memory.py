"""Embedded mode's stores: the reservation and attachment contracts of ``webhook.engine.ports``, in memory.

One process holds the whole embedded cluster, so the reservations themselves are the domains' ledger
(``webhook.engine.choices`` explains the protocol the API-server store follows across replicas), and the
attachments are mirrored into the ``ClusterStore`` that the decisions read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType

from webhook.domain.model import Reservation
from webhook.engine.ports import Arbiter
from webhook.errors import DomainFull, StoreConflict
from webhook.state.cluster import ClusterStore
from webhook.wire.fabric_attachment import Attachment

NO_PROMISES: Mapping[str, Mapping[str, Reservation]] = MappingProxyType({})


class MemoryReservationStore:
    """Embedded mode: the same contract, in memory; versions increase like resourceVersions.

    One process holds every reservation, so the reservations themselves are the ledger: ``reserve`` checks
    the domain's live reservations and stores under one lock, and there is nothing to prune."""

    synced = True  # nothing to list

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


class MemoryAttachmentStore:
    """Embedded mode: the same contract in memory, mirrored into the ClusterStore for the decisions."""

    def __init__(self, cluster: ClusterStore) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Attachment] = {}
        self._counter = 0
        self._cluster = cluster
        self._listeners: list[Callable[[Attachment], None]] = []

    def subscribe(self, listener: Callable[[Attachment], None]) -> None:
        """Called after every write, outside the lock (the simulated node agent listens here)."""
        self._listeners.append(listener)

    def _store(self, att: Attachment) -> Attachment:
        self._counter += 1
        stored = replace(att, version=str(self._counter))
        self._items[att.name] = stored
        self._cluster.put_attachment(stored)
        return stored

    def _notify(self, att: Attachment) -> None:
        for listener in self._listeners:
            listener(att)

    def all(self) -> list[Attachment]:
        with self._lock:
            return list(self._items.values())

    def get(self, name: str) -> Attachment | None:
        with self._lock:
            return self._items.get(name)

    def create(self, att: Attachment) -> Attachment:
        with self._lock:
            if att.name in self._items:
                raise StoreConflict(f"attachment {att.name} exists")
            stored = self._store(att)
        self._notify(stored)
        return stored

    def update(self, att: Attachment) -> Attachment:
        with self._lock:
            current = self._items.get(att.name)
            if current is None or current.version != att.version:
                raise StoreConflict(f"attachment {att.name} changed since it was read")
            stored = self._store(att)
        self._notify(stored)
        return stored

    def delete(self, att: Attachment) -> None:
        with self._lock:
            if self._items.pop(att.name, None) is not None:
                self._cluster.drop_attachment(att.pod_uid)
