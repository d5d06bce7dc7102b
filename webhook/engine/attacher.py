"""Attach before bind: compose fabric GPUs to the chosen node and wait until its agent reports them Ready.

The attachment object is written *before* each fabric call (intent first: ``Composing`` with the block
ids), so a crash at any point leaves a record the reconciler can finish or roll back, and a retried bind
(the scheduler retries when we answer with an Error) continues the same attachment instead of starting
another. An attach that fails before any block was chosen (the fabric manager did not list the free
blocks within the bind's deadline) ends the attachment Failed with no blocks: nothing was composed, so
it holds none of the node's slots and the retry starts over, on whichever node it names.

Adapters come in through the ports of ``webhook.engine.ports``: the attachment store (the API server, or
memory in embedded mode) and the fabric manager (``webhook.adapters.redfish.fabric``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from webhook.domain.fabric_plan import since
from webhook.domain.model import Node, Pod
from webhook.engine.ports import AttachmentStore, FabricManager, NoObserver, Observer
from webhook.errors import DecisionError, FabricFailure, StoreConflict
from webhook.wire import fabric_attachment as fa
from webhook.wire.fabric_attachment import Attachment, Block, Phase
from webhook.wire.timestamps import rfc3339

log = logging.getLogger(__name__)


class FabricAttacher:
    """The engine's Attacher: implements attach-before-bind on top of a Fabric and an AttachmentStore."""

    def __init__(self, store: AttachmentStore, fabric: FabricManager, observer: Observer | None = None,
                 clock: Callable[[], float] = time.time, poll: float = 0.01,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.fabric = fabric
        self.observer: Observer = observer or NoObserver()
        self.clock = clock  # wall time, as the engine's deadlines
        self.poll = poll
        self.sleep = sleep
        self.monotonic = monotonic  # the fabric client's clock
        self._choosing = threading.Lock()
        self._claimed: set[str] = set()  # block ids chosen by a bind whose intent is not on record yet

    def _advance(self, att: Attachment, phase: Phase, message: str = "", blocks: tuple[Block, ...] | None = None
                 ) -> Attachment:
        changed = replace(att, phase=phase, message=message, phase_since=rfc3339(self.clock(), "ms"),
                          blocks=att.blocks if blocks is None else blocks)
        try:
            return self.store.update(changed)
        except StoreConflict as exc:
            raise DecisionError(f"attachment {att.name} changed under us ({exc}); the scheduler retries") from exc

    def attach(self, pod: Pod, node: Node, gpus: int, deadline: float) -> None:
        started = self.clock()
        composed_at = started
        try:
            att = self._start(pod, node, gpus, deadline)
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

    def _start(self, pod: Pod, node: Node, gpus: int, deadline: float) -> Attachment:
        name = fa.name_for(pod.uid)
        current = self.store.get(name)
        if current is not None and not _nothing_composed(current):
            if current.node != node.name:
                raise DecisionError(f"fabric GPUs for pod {pod.ref} are being attached to node {current.node}; "
                                    "the scheduler retries there")
            if current.phase in (Phase.FAILED, Phase.RELEASING, Phase.DETACHED):
                raise DecisionError(f"the last fabric attach for pod {pod.ref} ended {current.phase.value}: "
                                    f"{current.message or 'no reason recorded'}; it is being cleaned up, then "
                                    "the scheduler retries")
            return current
        if not node.fabric_zone:
            raise DecisionError(f"pod {pod.ref} needs {gpus} more GPUs on node {node.name}, which is in no fabric "
                                "zone")
        try:
            system = self.fabric.system_for(node.name, node.fabric_system, deadline=self._fabric_deadline(deadline))
        except (FabricFailure, TimeoutError) as exc:
            raise DecisionError(f"cannot find node {node.name}'s system in the fabric manager: {_why(exc)}; "
                                "the scheduler retries") from exc
        if current is not None:
            # Nothing is composed: this bind is the scheduler's retry, so start over with it, on the node it
            # names now (the domain lets a failed attachment's pod go to any node: capacity.own_attachment).
            again = replace(current, node=node.name, zone=node.fabric_zone, gpus=gpus, system=system)
            return self._advance(again, Phase.PENDING, blocks=())
        att = Attachment(name=name, node=node.name, pod_namespace=pod.namespace, pod_name=pod.name,
                         pod_uid=pod.uid, zone=node.fabric_zone, gpus=gpus, system=system,
                         phase_since=rfc3339(self.clock(), "ms"))
        try:
            return self.store.create(att)
        except StoreConflict as exc:
            existing = self.store.get(name)
            if existing is None:
                raise DecisionError(f"attachment {name} vanished while being created; the scheduler retries") from exc
            return existing

    def _compose(self, att: Attachment, deadline: float) -> Attachment:
        if att.phase is Phase.PENDING:
            try:
                free = self.fabric.free_blocks(att.zone, deadline=self._fabric_deadline(deadline))
            except (FabricFailure, TimeoutError) as exc:
                raise self._give_up(att, f"cannot read the free GPU blocks of fabric zone {att.zone}: "
                                         f"{_why(exc)}; the scheduler retries") from exc
            with self._choosing:
                # Blocks another attachment names are taken even where the fabric still lists them free:
                # concurrent binds read the same list. Chosen ones count as taken until their intent is on
                # record. No request is made under this lock (``all`` reads a cache or memory).
                taken = self._claimed | {b.id for a in self.store.all() if a.name != att.name
                                         and a.phase is not Phase.DETACHED for b in a.blocks}
                free = [b for b in free if b.id not in taken]
                chosen = tuple(free[: att.gpus])
                if len(chosen) == att.gpus:
                    self._claimed.update(b.id for b in chosen)
            if len(chosen) < att.gpus:
                self._advance(att, Phase.FAILED, f"fabric zone {att.zone} has {len(free)} free GPU blocks, "
                                                 f"the pod needs {att.gpus}")
                raise DecisionError(f"fabric zone {att.zone} has {len(free)} free GPU blocks, pod "
                                    f"{att.pod_namespace}/{att.pod_name} needs {att.gpus}")
            try:
                # Intent first: a crash after the compose still leaves the block ids on record.
                att = self._advance(att, Phase.COMPOSING, blocks=chosen)
            finally:
                with self._choosing:
                    self._claimed.difference_update(b.id for b in chosen)
        ids = [b.id for b in att.blocks]
        try:
            composed = self.fabric.attach(att.system, ids, self._fabric_deadline(deadline))
        except FabricFailure as exc:
            self._advance(att, Phase.FAILED, str(exc), blocks=())
            raise DecisionError(f"fabric attach of {att.gpus} GPUs to node {att.node} failed: {exc}") from exc
        except TimeoutError as exc:
            raise DecisionError(self._waiting(att, "the fabric manager to finish composing")) from exc
        return self._advance(att, Phase.ATTACHED, blocks=tuple(composed))

    def _give_up(self, att: Attachment, reason: str) -> DecisionError:
        """No block chosen, nothing composed: the attachment ends Failed without blocks. Left Pending, it would
        hold the node's slots and the pod's node until the reconciler's attach timeout; Failed, the retry
        starts over wherever the scheduler binds next."""
        try:
            self._advance(att, Phase.FAILED, reason)
        except DecisionError as exc:
            log.info("attachment %s not marked Failed: %s", att.name, exc)  # whoever changed it carries on
        return DecisionError(reason)

    def _fabric_deadline(self, deadline: float) -> float:
        # The fabric client measures time on the monotonic clock; the engine's deadline is wall time.
        return self.monotonic() + max(0.0, deadline - self.clock())

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
            self.sleep(self.poll)

    def _waiting(self, att: Attachment, what: str) -> str:
        return (f"attachment {att.name} for pod {att.pod_namespace}/{att.pod_name} is in phase {att.phase.value} "
                f"for {since(att, self.clock()):.1f}s, waiting for {what}; the scheduler retries and the next "
                "bind continues it")


def _nothing_composed(att: Attachment) -> bool:
    return att.phase is Phase.FAILED and not att.blocks


def _why(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return f"the fabric manager did not answer in time ({exc or 'no detail'})"
    return str(exc)
