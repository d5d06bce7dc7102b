"""Redfish Composition Service client: the one object callers hold to read a fabric's inventory and to
attach / detach GPU ResourceBlocks (``#ComputerSystem.AddResourceBlock`` / ``RemoveResourceBlock`` when a
system advertises them, else PATCH of ``Links.ResourceBlocks`` with If-Match).

A facade over three parts that share one transport: ``http.py`` (connections, logging in with ``auth.py``,
deadlines, read retries), ``inventory.py`` (discovery, cached reads, the free-blocks snapshot) and
``converger.py`` (attach and detach that never compose a block twice, rollback; tasks in ``tasks.py``);
payload parsing and result types are in ``payloads.py``. ``fabric.py`` adapts it to the attacher's port.
All methods are thread-safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

from webhook.adapters.redfish import payloads as wire
from webhook.adapters.redfish.auth import AuthMode, SessionAuth
from webhook.adapters.redfish.converger import Converger
from webhook.adapters.redfish.http import HttpTransport
from webhook.adapters.redfish.inventory import Discovery, Inventory
from webhook.adapters.redfish.limits import DEFAULT_MAX_RESPONSE
from webhook.adapters.redfish.payloads import BlockInfo, FabricError

__all__ = ["AuthMode", "BlockInfo", "Discovery", "FabricError", "RedfishClient"]

log = logging.getLogger(__name__)


class RedfishClient:
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

    @property
    def base_url(self) -> str:
        """The service URL without credentials (it is logged and shown in /readyz)."""
        return self.http.base_url

    @property
    def auth(self) -> SessionAuth:
        return self.http.auth

    @property
    def last_refresh_error(self) -> str:
        return self.inventory.last_refresh_error

    def close(self) -> None:
        """Log out of the Redfish session and close every connection."""
        self.http.close()

    def __enter__(self) -> RedfishClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- inventory -------------------------------------------------------------------------------

    # ``deadline`` (a ``clock()`` value, None for none) bounds a whole call, every request in it together.

    def discover(self, deadline: float | None = None) -> Discovery:
        """Find the CompositionService, zones, blocks and systems from the service root; refresh the snapshot."""
        return self.inventory.discover(deadline)

    def refresh(self, deadline: float | None = None) -> list[BlockInfo]:
        """Re-read the inventory now (one refresh at a time; concurrent callers share it)."""
        return self.inventory.refresh(deadline)

    def free_blocks(self, deadline: float | None = None) -> dict[str, list[BlockInfo]]:
        """Free GPU blocks by zone Id (every known zone is a key), from a snapshot at most
        ``refresh_interval`` old."""
        return self.inventory.free_blocks(deadline)

    def free_per_zone(self) -> dict[str, int]:
        return {zone: len(blocks) for zone, blocks in self.free_blocks().items()}

    def invalidate(self) -> None:
        """The next capacity read goes to the service."""
        self.inventory.invalidate()

    def read_block(self, uri: str, operation: str = "read", deadline: float | None = None) -> BlockInfo:
        return self.inventory.read_block(uri, operation, deadline)

    def system_for(self, node_name: str, annotation_value: str | None = None, deadline: float | None = None) -> str:
        """The node's ComputerSystem: the ``imex-webhook.io/redfish-system`` annotation when given (checked to
        exist), else ``<Systems collection>/<node>``, else the system whose Id or HostName is the node."""
        return self.inventory.system_for(node_name, annotation_value, deadline)

    def blocks_of(self, system: str) -> list[BlockInfo]:
        """The GPU blocks linked to ``system`` (composed or composing), read now."""
        return self.inventory.blocks_of(system)

    def orphans(self, known: Iterable[str]) -> list[tuple[str, BlockInfo]]:
        """(system, block) for every GPU block composed or composing to a system whose @odata.id (or Id) is
        not in ``known``: what the reconciler releases."""
        return self.inventory.orphans(known)

    # --- attach and detach -----------------------------------------------------------------------

    def attach(self, system: str, block_ids: Sequence[str], deadline: float) -> list[BlockInfo]:
        """Compose the blocks to ``system`` before ``deadline`` (a ``clock()`` value); blocks already composed
        to it count as done, so a repeated call continues where the last one stopped.

        On a refusal or an outage the blocks this call asked for are detached again (rollback may run up to
        ``rollback_grace`` s past an expired deadline). When the deadline itself runs out (FabricError with
        ``deadline`` true) nothing is rolled back: the composition may still be in flight, and a later
        ``attach`` or ``detach`` (the reconciler's) settles it."""
        system = wire.path_of(system)
        uris = [self.inventory.block_uri(b, deadline) for b in block_ids]
        budget = deadline - self.http.clock()
        log.info("attaching %s to %s (deadline in %.3gs)", ", ".join(uris), system, budget)
        try:
            return self.converger.attach(system, uris, deadline)
        except FabricError as exc:
            if exc.deadline:
                log.warning("attach to %s at %s: its deadline of %.3gs passed; what is in flight is left to "
                            "finish (%s)", system, self.base_url, budget, exc.detail)
            raise
        finally:
            self.invalidate()

    def detach(self, system: str, block_ids: Sequence[str], deadline: float) -> None:
        """Make sure the blocks are not composed to ``system``; a block already free (or elsewhere) is done.
        A block still composing (a stuck task) is detached too: the service cancels the composition."""
        system = wire.path_of(system)
        log.info("detaching %s from %s", ", ".join(block_ids), system)
        try:
            self.converger.detach(system, [self.inventory.block_uri(b) for b in block_ids], deadline)
        finally:
            self.invalidate()
