"""The Redfish client seen through the ``Fabric`` protocol the attacher and the reconciler use.

Translates ``BlockInfo`` into the attachment's ``Block`` and ``FabricError`` into ``FabricFailure`` (or
``TimeoutError`` when only the deadline ran out, so that the attacher reports "still composing" and the
next bind continues instead of declaring the attach failed). Also refreshes the free GPUs per zone into
the ClusterStore on an interval: that is the "attachable" capacity every filter call reads, and the only
background refresh of the fabric inventory (the client itself refreshes only when a read finds its
snapshot older than ``refresh_interval``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Protocol

from webhook.adapters.redfish.client import RedfishClient
from webhook.adapters.redfish.payloads import FabricError
from webhook.state.attachments import FabricFailure
from webhook.wire.fabric_attachment import Block

log = logging.getLogger(__name__)


def _failure(exc: FabricError) -> Exception:
    # Only the caller's deadline ran out: the composition may still be running and a later attach call
    # carries on without composing twice, so this is "not yet", not a failure to roll back.
    if exc.deadline:
        return TimeoutError(str(exc))
    return FabricFailure(str(exc))


class FreeSink(Protocol):
    """Where the free fabric GPUs per zone go (``ClusterStore``)."""

    def set_fabric_free(self, free: Mapping[str, int]) -> None: ...


class RedfishFabric:
    def __init__(self, client: RedfishClient) -> None:
        self.client = client
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        self._last_error = "no inventory read yet"

    def ready(self) -> tuple[bool, str]:
        """Ready once the free blocks were read at least once: before that, fabric capacity reads as 0."""
        if self._loaded.is_set():
            return True, f"fabric inventory from {self.client.base_url}"
        return False, f"fabric inventory not read yet from {self.client.base_url}: {self._last_error}"

    def free_per_zone(self) -> dict[str, int]:
        return self.client.free_per_zone()

    # ``deadline``: a time.monotonic() value, as attach's; the bind path passes its own so that a slow
    # fabric cannot hold /bind past its budget (every request in the call counts against it).

    def free_blocks(self, zone: str, deadline: float | None = None) -> list[Block]:
        self.client.invalidate()  # choosing blocks wants the current state, not the last refresh
        try:
            return [b.to_block() for b in self.client.free_blocks(deadline).get(zone, [])]
        except FabricError as exc:
            raise FabricFailure(str(exc)) from exc

    def system_for(self, node: str, annotation: str | None, deadline: float | None = None) -> str:
        try:
            return self.client.system_for(node, annotation, deadline)
        except FabricError as exc:
            raise FabricFailure(str(exc)) from exc

    def attach(self, system: str, block_ids: list[str], deadline: float) -> list[Block]:
        try:
            return [b.to_block() for b in self.client.attach(system, block_ids, deadline)]
        except FabricError as exc:
            raise _failure(exc) from exc

    def detach(self, system: str, block_ids: list[str], deadline: float) -> None:
        try:
            self.client.detach(system, block_ids, deadline)
        except FabricError as exc:
            raise FabricFailure(str(exc)) from exc

    def composed(self) -> dict[str, set[str]]:
        try:
            blocks = self.client.refresh()
        except FabricError as exc:
            raise FabricFailure(str(exc)) from exc
        out: dict[str, set[str]] = {}
        for block in blocks:
            for system in block.systems:
                out.setdefault(system, set()).add(block.id)
        return out

    def feed(self, store: FreeSink, interval: float) -> None:
        """Keep ``store``'s free-blocks-per-zone current (a background thread until ``stop``)."""
        def loop() -> None:
            while True:
                try:
                    store.set_fabric_free(self.client.free_per_zone())
                    self._loaded.set()
                except (FabricError, OSError) as exc:
                    self._last_error = str(exc)
                    log.warning("fabric inventory refresh failed, keeping the last figures: %s", exc)
                if self._stop.wait(interval):
                    return

        self._thread = threading.Thread(target=loop, name="fabric-inventory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.client.close()
