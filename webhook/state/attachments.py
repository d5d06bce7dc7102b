"""The fabric's ports: what attach-before-bind (``webhook.engine.attacher``) and the reconciler
(``webhook.engine.reconciler``) need from the fabric manager (``webhook.adapters.redfish.fabric``), from the
attachment store (the API server: ``webhook.adapters.kube.attachments``), and from whoever observes them
(``/metrics``); and the attachment store of embedded mode, in memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from webhook.errors import ImexWebhookError, StoreConflict
from webhook.state.cluster import ClusterStore
from webhook.wire.fabric_attachment import Attachment, Block


class FabricFailure(ImexWebhookError):
    """A fabric manager refused or failed an operation; the message is for an operator."""


class Fabric(Protocol):
    def free_per_zone(self) -> dict[str, int]: ...

    def free_blocks(self, zone: str, deadline: float | None = None) -> list[Block]:
        """The zone's free blocks, read fresh; ``deadline`` (monotonic) bounds the reads (TimeoutError)."""
        ...

    def system_for(self, node: str, annotation: str | None, deadline: float | None = None) -> str: ...

    def attach(self, system: str, block_ids: list[str], deadline: float) -> list[Block]:
        """Compose the blocks (never twice); on failure nothing from this call stays composed."""
        ...

    def detach(self, system: str, block_ids: list[str], deadline: float) -> None: ...

    def composed(self) -> dict[str, set[str]]:
        """System -> ids of the blocks composed to it."""
        ...


class AttachmentStore(Protocol):
    def all(self) -> list[Attachment]: ...

    def get(self, name: str) -> Attachment | None: ...

    def create(self, att: Attachment) -> Attachment:
        """Raise StoreConflict when it exists already."""
        ...

    def update(self, att: Attachment) -> Attachment:
        """Write spec and status guarded by ``att.version``; raise StoreConflict when it changed."""
        ...

    def delete(self, att: Attachment) -> None:
        """Remove the finalizer and the object."""
        ...


class Observer(Protocol):
    def attach_done(self, outcome: str, seconds: float) -> None: ...

    def cleanup(self, what: str) -> None: ...


class NoObserver:
    def attach_done(self, outcome: str, seconds: float) -> None:
        pass

    def cleanup(self, what: str) -> None:
        pass


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
