"""The Redfish Composition Service as the engine's ``FabricManager`` (``webhook.engine.ports``): one object
that builds the adapter's three parts around one transport and answers the port from them.

The parts stay reachable as attributes, for tests, tools and the simulators: ``http`` (``http.py``:
connections, logging in with ``auth.py``, deadlines, read retries; ``fabric.http.auth``,
``fabric.http.base_url``), ``inventory`` (``inventory.py``: discovery, cached reads, the free-blocks
snapshot by zone as ``BlockInfo``, ``orphans``, ``invalidate``) and ``converger`` (``converger.py``: attach
and detach that never compose a block twice, rollback; tasks in ``tasks.py``).

Attach and detach come twice. ``compose`` and ``decompose`` speak Redfish: ``BlockInfo`` results and
``FabricError`` with the service's message ids, the phase and a rollback's leftover. The port's ``attach``
and ``detach`` run them and translate: ``BlockInfo`` into the attachment's ``Block``, ``FabricError`` into
``FabricFailure``, or into ``TimeoutError`` when only the deadline ran out, so that the attacher reports
"still composing" and the next bind continues instead of declaring the attach failed (a read cut short
raises ``ReadTimeout``, both: the attacher says the fabric manager did not answer in time).

``feed`` refreshes the free GPUs per zone into the ClusterStore on an interval: that is the "attachable"
capacity every filter call reads, and the only background refresh of the fabric inventory (the inventory
itself re-reads only when a read finds its snapshot older than ``refresh_interval``). A bind never waits
for that refresh: it reads the free blocks itself, within its own deadline (``inventory.py``). All methods
are thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from webhook.adapters.redfish import payloads as wire
from webhook.adapters.redfish.auth import AuthMode
from webhook.adapters.redfish.converger import Converger
from webhook.adapters.redfish.http import HttpTransport
from webhook.adapters.redfish.inventory import Inventory
from webhook.adapters.redfish.payloads import BlockInfo, FabricError
from webhook.domain.limits import DEFAULT_MAX_RESPONSE
from webhook.engine.ports import FreeSink
from webhook.errors import FabricFailure
from webhook.wire.fabric_attachment import Block

log = logging.getLogger(__name__)


class ReadTimeout(FabricFailure, TimeoutError):
    """A read the caller's deadline cut short: a ``TimeoutError`` as ``ports.FabricManager`` says (the
    attacher then reports that the fabric manager did not answer in time), and still the ``FabricFailure``
    that callers of the reads have always caught."""


def _failure(exc: FabricError) -> Exception:
    # Only the caller's deadline ran out: the composition may still be running and a later attach call
    # carries on without composing twice, so this is "not yet", not a failure to roll back.
    if exc.deadline:
        return TimeoutError(str(exc))
    return FabricFailure(str(exc))


def _read_failure(exc: FabricError) -> Exception:
    return ReadTimeout(str(exc)) if exc.deadline else FabricFailure(str(exc))


class RedfishFabric:
    def __init__(self, base_url: str, username: str, password: str, verify: bool | str = True,
                 timeout: float = 5.0, retries: int = 3, backoff: float = 0.2, refresh_interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, *, sleep: Callable[[float], None] = time.sleep,
                 max_poll_interval: float = 2.0, max_polls: int = 600, rollback_grace: float = 2.0,
                 auth: AuthMode = "auto", max_response: int = DEFAULT_MAX_RESPONSE) -> None:
        """``timeout``: seconds one request may take in all (connect, headers, body); ``max_response``: the
        largest reply body in bytes. Both are what keeps a slow or hostile service from holding a worker."""
        self.http = HttpTransport(base_url, username, password, verify, timeout, retries, backoff, clock, sleep, auth,
                                  max_response)
        self.inventory = Inventory(self.http, refresh_interval)
        self.converger = Converger(self.http, self.inventory, max_poll_interval=max_poll_interval,
                                   max_polls=max_polls, rollback_grace=rollback_grace)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        self._last_error = "no inventory read yet"

    def __enter__(self) -> RedfishFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def ready(self) -> tuple[bool, str]:
        """Ready once the free blocks were read at least once: before that, fabric capacity reads as 0."""
        if self._loaded.is_set():
            return True, f"fabric inventory from {self.http.base_url}"
        return False, f"fabric inventory not read yet from {self.http.base_url}: {self._last_error}"

    def free_per_zone(self) -> dict[str, int]:
        """Free GPU blocks per zone, from a snapshot at most ``refresh_interval`` old."""
        return {zone: len(blocks) for zone, blocks in self.inventory.free_blocks().items()}

    # ``deadline``: a ``clock()`` value (time.monotonic() unless told), None for none; the bind path passes
    # its own so that a slow fabric cannot hold /bind past its budget (every request in the call counts).

    def free_blocks(self, zone: str, deadline: float | None = None) -> list[Block]:
        # Choosing blocks wants the current state, not the last refresh: a read of our own, begun now.
        try:
            return [b.to_block() for b in self.inventory.free_blocks(deadline, fresh=True).get(zone, [])]
        except FabricError as exc:
            raise _read_failure(exc) from exc

    def system_for(self, node: str, annotation: str | None, deadline: float | None = None) -> str:
        try:
            return self.inventory.system_for(node, annotation, deadline)
        except FabricError as exc:
            raise _read_failure(exc) from exc

    def attach(self, system: str, block_ids: list[str], deadline: float) -> list[Block]:
        try:
            return [b.to_block() for b in self.compose(system, block_ids, deadline)]
        except FabricError as exc:
            raise _failure(exc) from exc

    def detach(self, system: str, block_ids: list[str], deadline: float) -> None:
        try:
            self.decompose(system, block_ids, deadline)
        except FabricError as exc:
            raise FabricFailure(str(exc)) from exc

    def composed(self) -> dict[str, set[str]]:
        try:
            blocks = self.inventory.refresh()
        except FabricError as exc:
            raise FabricFailure(str(exc)) from exc
        out: dict[str, set[str]] = {}
        for block in blocks:
            for system in block.systems:
                out.setdefault(system, set()).add(block.id)
        return out

    def feed(self, sink: FreeSink, interval: float) -> None:
        """Keep ``sink``'s free-blocks-per-zone current (a background thread until ``stop``)."""
        def loop() -> None:
            while True:
                try:
                    sink.set_fabric_free(self.free_per_zone())
                    self._loaded.set()
                except (FabricError, OSError) as exc:
                    self._last_error = str(exc)
                    log.warning("fabric inventory refresh failed, keeping the last figures: %s", exc)
                if self._stop.wait(interval):
                    return

        self._thread = threading.Thread(target=loop, name="fabric-inventory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the feed, log out of the Redfish session and close every connection."""
        self._stop.set()
        self.http.close()

    # --- attach and detach in Redfish's terms ------------------------------------------------------

    def compose(self, system: str, block_ids: Sequence[str], deadline: float) -> list[BlockInfo]:
        """Compose the blocks (@odata.id, URL or Id) to ``system`` before ``deadline``; blocks already
        composed to it count as done, so a repeated call continues where the last one stopped.

        On a refusal or an outage the blocks this call asked for are detached again (rollback may run up to
        ``rollback_grace`` s past an expired deadline). When the deadline itself runs out (FabricError with
        ``deadline`` true) nothing is rolled back: the composition may still be in flight, and a later
        ``compose`` or ``decompose`` (the reconciler's) settles it."""
        system = wire.path_of(system)
        uris = [self.inventory.block_uri(b, deadline) for b in block_ids]
        budget = deadline - self.http.clock()
        log.info("attaching %s to %s (deadline in %.3gs)", ", ".join(uris), system, budget)
        try:
            return self.converger.attach(system, uris, deadline)
        except FabricError as exc:
            if exc.deadline:
                log.warning("attach to %s at %s: its deadline of %.3gs passed; what is in flight is left to "
                            "finish (%s)", system, self.http.base_url, budget, exc.detail)
            raise
        finally:
            self.inventory.invalidate()

    def decompose(self, system: str, block_ids: Sequence[str], deadline: float) -> None:
        """Make sure the blocks are not composed to ``system``; a block already free (or elsewhere) is done.
        A block still composing (a stuck task) is detached too: the service cancels the composition."""
        system = wire.path_of(system)
        log.info("detaching %s from %s", ", ".join(block_ids), system)
        try:
            self.converger.detach(system, [self.inventory.block_uri(b, deadline) for b in block_ids], deadline)
        finally:
            self.inventory.invalidate()
