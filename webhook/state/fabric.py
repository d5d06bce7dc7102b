"""Attach before bind: compose fabric GPUs to the chosen node and wait until its agent reports them Ready.

The attachment object is written *before* each fabric call (intent first: ``Composing`` with the block
ids), so a crash at any point leaves a record the reconciler can finish or roll back, and a retried bind
(the scheduler retries when we answer with an Error) continues the same attachment instead of starting
another. Adapters come in through two small protocols: the attachment store (the API server, or memory in
embedded mode) and the fabric manager (``webhook.adapters.redfish.client``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol

from webhook.domain import attachments as fa
from webhook.domain.attachments import Attachment, Block, Phase
from webhook.domain.fabric_plan import since
from webhook.domain.model import Node, Pod
from webhook.errors import DecisionError, ImexWebhookError, StoreConflict
from webhook.state.cluster import ClusterStore

log = logging.getLogger(__name__)


class FabricFailure(ImexWebhookError):
    """A fabric manager refused or failed an operation; the message is for an operator."""


class Fabric(Protocol):
    def free_per_zone(self) -> dict[str, int]: ...

    def free_blocks(self, zone: str) -> list[Block]: ...

    def system_for(self, node: str, annotation: str | None) -> str: ...

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


def now_rfc3339(clock: Callable[[], float] = time.time) -> str:
    return datetime.fromtimestamp(clock(), tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


class FabricAttacher:
    """The engine's Attacher: implements attach-before-bind on top of a Fabric and an AttachmentStore."""

    def __init__(self, store: AttachmentStore, fabric: Fabric, observer: Observer | None = None,
                 clock: Callable[[], float] = time.time, poll: float = 0.01) -> None:
        self.store = store
        self.fabric = fabric
        self.observer: Observer = observer or NoObserver()
        self.clock = clock
        self.poll = poll

    def _advance(self, att: Attachment, phase: Phase, message: str = "", blocks: tuple[Block, ...] | None = None
                 ) -> Attachment:
        changed = replace(att, phase=phase, message=message, phase_since=now_rfc3339(self.clock),
                          blocks=att.blocks if blocks is None else blocks)
        try:
            return self.store.update(changed)
        except StoreConflict as exc:
            raise DecisionError(f"attachment {att.name} changed under us ({exc}); the scheduler retries") from exc

    def attach(self, pod: Pod, node: Node, gpus: int, deadline: float) -> None:
        started = self.clock()
        composed_at = started
        try:
            att = self._start(pod, node, gpus)
            if att.phase in (Phase.PENDING, Phase.COMPOSING):
                fabric_started = self.clock()
                att = self._compose(att, deadline)
                composed_at = self.clock()
                fabric_seconds = composed_at - fabric_started
            else:
                fabric_seconds = 0.0
            self._wait_ready(att, deadline)
        except DecisionError:
            self.observer.attach_done("error", self.clock() - started)
            raise
        done = self.clock()
        self.observer.attach_done("ready", done - started)
        # The split shows where an attach spends its time: ours, the fabric manager's, the node agent's.
        log.info("attachment %s Ready for pod %s on %s: %.3fs in all, %.3fs in fabric calls, %.3fs waiting "
                 "for the node agent", att.name, pod.ref, node.name, done - started, fabric_seconds,
                 done - composed_at)

    def _start(self, pod: Pod, node: Node, gpus: int) -> Attachment:
        name = fa.name_for(pod.uid)
        current = self.store.get(name)
        if current is not None:
            if current.node != node.name:
                raise DecisionError(f"fabric GPUs for pod {pod.ref} are being attached to node {current.node}; "
                                    "the scheduler retries there")
            if current.phase is Phase.FAILED and not current.blocks:
                # Nothing is composed: this bind is the scheduler's retry, so start over with it.
                return self._advance(replace(current, gpus=gpus), Phase.PENDING)
            if current.phase in (Phase.FAILED, Phase.RELEASING, Phase.DETACHED):
                raise DecisionError(f"the last fabric attach for pod {pod.ref} ended {current.phase.value}: "
                                    f"{current.message or 'no reason recorded'}; it is being cleaned up, then "
                                    "the scheduler retries")
            return current
        if not node.fabric_zone:
            raise DecisionError(f"pod {pod.ref} needs {gpus} more GPUs on node {node.name}, which is in no fabric "
                                "zone")
        system = self.fabric.system_for(node.name, None)
        att = Attachment(name=name, node=node.name, pod_namespace=pod.namespace, pod_name=pod.name,
                         pod_uid=pod.uid, zone=node.fabric_zone, gpus=gpus, system=system,
                         phase_since=now_rfc3339(self.clock))
        try:
            return self.store.create(att)
        except StoreConflict as exc:
            existing = self.store.get(name)
            if existing is None:
                raise DecisionError(f"attachment {name} vanished while being created; the scheduler retries") from exc
            return existing

    def _compose(self, att: Attachment, deadline: float) -> Attachment:
        if att.phase is Phase.PENDING:
            free = self.fabric.free_blocks(att.zone)
            if len(free) < att.gpus:
                self._advance(att, Phase.FAILED, f"fabric zone {att.zone} has {len(free)} free GPU blocks, "
                                                 f"the pod needs {att.gpus}")
                raise DecisionError(f"fabric zone {att.zone} has {len(free)} free GPU blocks, pod "
                                    f"{att.pod_namespace}/{att.pod_name} needs {att.gpus}")
            # Intent first: a crash after the compose still leaves the block ids on record.
            att = self._advance(att, Phase.COMPOSING, blocks=tuple(free[: att.gpus]))
        ids = [b.id for b in att.blocks]
        try:
            composed = self.fabric.attach(att.system, ids, self._fabric_deadline(deadline))
        except FabricFailure as exc:
            self._advance(att, Phase.FAILED, str(exc), blocks=())
            raise DecisionError(f"fabric attach of {att.gpus} GPUs to node {att.node} failed: {exc}") from exc
        except TimeoutError as exc:
            raise DecisionError(self._waiting(att, "the fabric manager to finish composing")) from exc
        return self._advance(att, Phase.ATTACHED, blocks=tuple(composed))

    def _fabric_deadline(self, deadline: float) -> float:
        # The fabric client measures time on the monotonic clock; the engine's deadline is wall time.
        return time.monotonic() + max(0.0, deadline - self.clock())

    def _wait_ready(self, att: Attachment, deadline: float) -> None:
        while True:
            current = self.store.get(att.name) or att
            if current.phase is Phase.READY:
                return
            if current.phase is Phase.FAILED:
                raise DecisionError(f"node {current.node} could not prepare the attached GPUs: {current.message}")
            if current.phase in (Phase.RELEASING, Phase.DETACHED):
                raise DecisionError(f"attachment {current.name} is being released ({current.message}); "
                                    "the scheduler retries")
            if self.clock() >= deadline:
                raise DecisionError(self._waiting(current, f"the node agent on {current.node} to report the "
                                                           "GPUs Ready"))
            time.sleep(self.poll)

    def _waiting(self, att: Attachment, what: str) -> str:
        return (f"attachment {att.name} for pod {att.pod_namespace}/{att.pod_name} is in phase {att.phase.value} "
                f"for {since(att, self.clock()):.1f}s, waiting for {what}; the scheduler retries and the next "
                "bind continues it")
