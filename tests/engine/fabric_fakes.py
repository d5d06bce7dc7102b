"""In-memory fakes for the fabric tests: a fabric manager, a clock that sleeps by moving itself on, and a
node agent that reports attached GPUs Ready."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from webhook.adapters.memory import MemoryAttachmentStore
from webhook.errors import FabricFailure, StoreConflict
from webhook.wire.fabric_attachment import Attachment, Block, Phase

EPOCH = 1_700_000_000.0  # wall time: phase times are written and read as RFC 3339


@dataclass
class Clock:
    now: float = EPOCH

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeFabric:
    """Blocks per zone; composes each at most once. ``fail`` and ``hang`` make the next attach fail or time out."""

    free: dict[str, list[Block]] = field(default_factory=dict)
    systems: dict[str, set[str]] = field(default_factory=dict)
    fail: str = ""
    hang: bool = False
    fail_listing: bool = False
    calls: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def free_per_zone(self) -> dict[str, int]:
        return {zone: len(blocks) for zone, blocks in self.free.items()}

    def free_blocks(self, zone: str, deadline: float | None = None) -> list[Block]:
        composed = {b for ids in self.systems.values() for b in ids}
        return [b for b in self.free.get(zone, []) if b.id not in composed]

    def system_for(self, node: str, annotation: str | None, deadline: float | None = None) -> str:
        return annotation or f"/redfish/v1/Systems/{node}"

    def attach(self, system: str, block_ids: list[str], deadline: float) -> list[Block]:
        self.calls.append(("attach", system, tuple(block_ids)))
        if self.fail:
            raise FabricFailure(self.fail)
        if self.hang:
            raise TimeoutError("the fabric manager did not answer")
        self.systems.setdefault(system, set()).update(block_ids)
        known = {b.id: b for blocks in self.free.values() for b in blocks}
        return [replace(known[i], uuid=f"GPU-{i}") for i in block_ids]

    def detach(self, system: str, block_ids: list[str], deadline: float) -> None:
        self.calls.append(("detach", system, tuple(block_ids)))
        if self.fail:
            raise FabricFailure(self.fail)
        self.systems.get(system, set()).difference_update(block_ids)

    def composed(self) -> dict[str, set[str]]:
        if self.fail_listing:
            raise FabricFailure("the fabric manager is down")
        return {s: set(ids) for s, ids in self.systems.items() if ids}


def blocks(zone: str, n: int) -> list[Block]:
    return [Block(f"/redfish/v1/CompositionService/ResourceBlocks/{zone}-{i}") for i in range(n)]


def node_agent(store: MemoryAttachmentStore, outcome: Phase = Phase.READY) -> Callable[[Attachment], None]:
    """Moves every Attached attachment to ``outcome`` as the node agent would; subscribed to ``store``."""
    def on_write(att: Attachment) -> None:
        if att.phase is Phase.ATTACHED:
            try:
                store.update(replace(att, phase=outcome, message="" if outcome is Phase.READY else "no GPU found"))
            except StoreConflict:
                pass  # the attacher wrote again meanwhile; the next write calls us again
    store.subscribe(on_write)
    return on_write


@dataclass
class Observed:
    """The Observer port, remembering what it was told."""

    attaches: list[str] = field(default_factory=list)
    cleanups: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach_done(self, outcome: str, seconds: float) -> None:
        with self.lock:
            self.attaches.append(outcome)

    def cleanup(self, what: str) -> None:
        with self.lock:
            self.cleanups.append(what)
