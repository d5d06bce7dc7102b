"""What a Redfish composition service holds, as the client last read it: discovery by following links from the
service root ``/redfish/v1/`` and nothing else, GPU ResourceBlocks and expandable ComputerSystems, and a
snapshot of free blocks per zone (at most ``refresh_interval`` old) for the extender's capacity.

Zone keys are the Zone resources' ``Id`` (= the node label ``imex-webhook.io/fabric-zone``). A system's
zone comes from the ComputerSystem-type ResourceBlock that registers it (DMTF's expandable system model).
Each block's Processor is read once (GPU identity does not change). Systems are cached with their ETag and
block links for the converger (``BlockReads`` in ``converger.py``). All methods are thread-safe; the
caches are shared behind one lock, which is never held across a request.

A read of the whole inventory (``discover``) fetches with no lock held and swaps its result in at the
end, so a read that fails half-way changes nothing and a slow one keeps no one else waiting: a bind, which
must answer within its budget, reads for itself and never queues behind the feed's read (it used to, for
as long as that read took: tests/engine/test_bind_budget_under_refresh.py). Reads are numbered; an older
read that ends after a newer one was swapped in is dropped, and one that began before an ``invalidate``
(our own compose or decompose) is kept but not counted fresh.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from webhook.adapters.redfish import payloads as wire
from webhook.adapters.redfish.http import HttpTransport
from webhook.adapters.redfish.payloads import BlockInfo, FabricError, SystemView

SERVICE_ROOT = "/redfish/v1/"
ADD = "ComputerSystem.AddResourceBlock"
REMOVE = "ComputerSystem.RemoveResourceBlock"
EXPAND = "?$expand=.($levels=1)"
MAX_PAGES = 1000  # a service whose nextLink points back at itself must not keep us forever


@dataclass(frozen=True)
class Discovery:
    """Where things are, as the service root and its links say."""

    composition_service: str
    blocks: str  # the ResourceBlock collection
    systems_collection: str
    zones: dict[str, str]  # zone Id -> @odata.id
    systems: dict[str, str]  # system @odata.id -> zone Id ("" when no ComputerSystem block says)


@dataclass(frozen=True)
class _Places:
    """Which zone a block is in, as one read of the zones found it."""

    zone_ids: dict[str, str]  # zone @odata.id -> Id
    zone_of_block: dict[str, str]  # block @odata.id -> zone Id (from the zones' links)

    def zone(self, body: dict[str, Any]) -> str:
        for uri in wire.links(body, "Zones"):
            if uri in self.zone_ids:
                return self.zone_ids[uri]
        return self.zone_of_block.get(wire.odata_id(body), "")


class Inventory:
    def __init__(self, http: HttpTransport, refresh_interval: float) -> None:
        self.http = http
        self.refresh_interval = refresh_interval
        self._lock = threading.RLock()
        self._refreshing = threading.Lock()  # background reads (no deadline), one at a time
        self._reads = 0  # reads begun; each read's number is the count when it began
        self._installed = 0  # the read whose result the caches hold
        self._changed = 0  # the last read begun before the last invalidate()
        self._discovery: Discovery | None = None
        self._expand = False
        self._places = _Places({}, {})
        self._gpus: dict[str, wire.Gpu] = {}  # block @odata.id -> identity (fixed, so kept)
        self._systems: dict[str, SystemView] = {}
        self._blocks: list[BlockInfo] | None = None  # GPU blocks at the last refresh
        self._refreshed_at = 0.0
        self.last_refresh_error = ""

    # --- discovery -------------------------------------------------------------------------------

    def _collection(self, path: str, operation: str, deadline: float | None) -> list[tuple[dict[str, Any], str]]:
        """Every member (body, etag): expanded by the service when it can, else one GET each; pages followed
        (the transport checks that every link, ``nextLink`` included, stays on the service's origin)."""
        out: list[tuple[dict[str, Any], str]] = []
        uri = path + (EXPAND if self._expand else "")
        for _ in range(MAX_PAGES):
            page, _ = self.http.get(uri, operation, deadline)
            for member in page.get("Members") or []:
                if isinstance(member, dict) and "@odata.type" in member and "Id" in member:
                    out.append((member, str(member.get("@odata.etag") or "")))
                elif wire.odata_id(member):
                    out.append(self.http.get(wire.odata_id(member), operation, deadline))
            next_link = page.get("Members@odata.nextLink")
            if not isinstance(next_link, str) or not next_link:
                return out
            uri = next_link
        raise FabricError(operation, path, f"more than {MAX_PAGES} pages of members", phase="discover")

    def discover(self, deadline: float | None = None) -> Discovery:
        """Find the CompositionService, zones, blocks and systems from the service root; refresh the snapshot."""
        return self._read_all(deadline)[0]

    def _read_all(self, deadline: float | None) -> tuple[Discovery, list[BlockInfo]]:
        """One read of the whole inventory, fetched with no lock held and swapped in at the end."""
        with self._lock:
            self._reads += 1
            number = self._reads
        op = "discover"

        def get(uri: str, operation: str) -> tuple[dict[str, Any], str]:
            return self.http.get(uri, operation, deadline)

        root, _ = get(SERVICE_ROOT, op)
        comp_uri = wire.odata_id(root.get("CompositionService"))
        systems_uri = wire.odata_id(root.get("Systems"))
        if not comp_uri or not systems_uri:
            raise FabricError(op, self.http.base_url, "the service root links no CompositionService or Systems: "
                              "not a Redfish composition service", phase="discover")
        features = root.get("ProtocolFeaturesSupported")
        expand = features.get("ExpandQuery") if isinstance(features, dict) else None
        expand = expand if isinstance(expand, dict) else {}
        self._expand = bool(expand.get("NoLinks")) and (bool(expand.get("Levels")) or bool(expand.get("ExpandAll")))
        comp, _ = get(comp_uri, op)
        blocks_uri, zones_uri = wire.odata_id(comp.get("ResourceBlocks")), wire.odata_id(comp.get("ResourceZones"))
        if not blocks_uri:
            raise FabricError(op, comp_uri, "the CompositionService links no ResourceBlocks", phase="discover")
        zones: dict[str, str] = {}
        zone_of_block: dict[str, str] = {}
        for body, _ in self._collection(zones_uri, op, deadline) if zones_uri else []:
            zone_id = str(body.get("Id") or wire.odata_id(body).rsplit("/", 1)[-1])
            zones[zone_id] = wire.odata_id(body)
            zone_of_block.update(dict.fromkeys(wire.links(body, "ResourceBlocks"), zone_id))
        places = _Places({uri: zone_id for zone_id, uri in zones.items()}, zone_of_block)
        systems = {self._remember_system(body, etag).uri: ""
                   for body, etag in self._collection(systems_uri, op, deadline)}
        gpus: list[BlockInfo] = []
        for body, etag in self._collection(blocks_uri, op, deadline):
            types = wire.block_types(body)
            if "ComputerSystem" in types:
                zone = places.zone(body)
                for system in wire.link_list(body.get("ComputerSystems")) + wire.links(body, "ComputerSystems"):
                    systems[system] = zone
            if "Processor" in types:
                info = self._parse(body, etag, op, deadline, places)
                if info is not None:
                    gpus.append(info)
        found = Discovery(comp_uri, blocks_uri, systems_uri, zones, systems)
        with self._lock:
            if number > self._installed:
                self._installed = number
                self._discovery, self._places, self._blocks = found, places, gpus
                # Begun before our last compose or decompose, it may show a block as it was before.
                self._refreshed_at = self.http.clock() if number > self._changed else -float("inf")
        return found, gpus

    def _parse(self, body: dict[str, Any], etag: str, operation: str, deadline: float | None = None,
               places: _Places | None = None) -> BlockInfo | None:
        """A GPU block's BlockInfo, or None for a block without a GPU Processor; its zone from ``places``
        (a read in progress), else from the last read."""
        uri = wire.odata_id(body)
        with self._lock:
            gpu = self._gpus.get(uri)
        if gpu is None:
            gpu = wire.Gpu(False)
            procs, collection = wire.processor_links(body)
            if collection:
                procs = [wire.odata_id(b) for b, _ in self._collection(collection, operation, deadline)]
            for proc in procs:
                found = wire.parse_gpu(self.http.get(proc, operation, deadline)[0])
                if found.is_gpu:
                    gpu = found
                    break
            with self._lock:
                self._gpus[uri] = gpu
        if places is None:
            with self._lock:
                places = self._places
        return wire.parse_block(body, places.zone(body), gpu, etag) if gpu.is_gpu else None

    def _remember_system(self, body: dict[str, Any], etag: str) -> SystemView:
        view = SystemView(wire.odata_id(body), str(body.get("Id") or ""), str(body.get("HostName") or ""), etag,
                          wire.links(body, "ResourceBlocks"), wire.action_target(body, ADD),
                          wire.action_target(body, REMOVE))
        with self._lock:
            self._systems[view.uri] = view
        return view

    def discovery(self, deadline: float | None = None) -> Discovery:
        with self._lock:
            found = self._discovery
        return found if found is not None else self.discover(deadline)

    # --- capacity snapshot -----------------------------------------------------------------------

    def refresh(self, deadline: float | None = None) -> list[BlockInfo]:
        """Re-read the inventory now. With a deadline (a bind) the read starts at once: waiting for a read
        in flight would put that read's length, which no deadline of ours bounds, into the bind's. Without
        one (the feed, the reconciler) reads go one at a time, and a caller that waited takes the result
        of a read that began after it asked instead of reading again."""
        if deadline is not None:
            return self._read(deadline)
        with self._lock:
            asked = self._reads
        with self._refreshing:
            with self._lock:
                if self._blocks is not None and self._installed > max(asked, self._changed):
                    return list(self._blocks)
            return self._read(None)

    def _read(self, deadline: float | None) -> list[BlockInfo]:
        try:
            blocks = self._read_all(deadline)[1]
        except FabricError as exc:
            self.last_refresh_error = str(exc)
            raise
        self.last_refresh_error = ""
        return list(blocks)

    def _snapshot(self, deadline: float | None) -> list[BlockInfo]:
        with self._lock:
            blocks, age = self._blocks, self.http.clock() - self._refreshed_at
        if blocks is not None and age < self.refresh_interval:
            return list(blocks)
        return self.refresh(deadline)

    def free_blocks(self, deadline: float | None = None, fresh: bool = False) -> dict[str, list[BlockInfo]]:
        """Free GPU blocks by zone Id (every known zone is a key), from a snapshot at most
        ``refresh_interval`` old, or from a read begun now (``fresh``)."""
        blocks = self.refresh(deadline) if fresh else self._snapshot(deadline)
        out: dict[str, list[BlockInfo]] = {zone: [] for zone in self.discovery(deadline).zones}
        for block in blocks:
            if block.free:
                out.setdefault(block.zone, []).append(block)
        return out

    def invalidate(self) -> None:
        """Something changed (a compose or decompose): reads begun until now may predate it."""
        with self._lock:
            self._changed = self._reads
            self._refreshed_at = -float("inf")
            self._blocks = None

    # --- reads -----------------------------------------------------------------------------------

    def block_uri(self, block: str, deadline: float | None = None) -> str:
        """A block's @odata.id from its @odata.id, URL or Id."""
        if block.startswith("/") or "://" in block:
            return wire.path_of(block)
        return f"{self.discovery(deadline).blocks}/{block}"

    def read_block(self, uri: str, operation: str = "read", deadline: float | None = None) -> BlockInfo:
        body, etag = self.http.get(uri, operation, deadline)
        info = self._parse(body, etag, operation, deadline)
        if info is None:
            raise FabricError(operation, uri, "not a GPU ResourceBlock (no Processor with ProcessorType GPU)",
                              phase="read")
        return info

    def read_system(self, uri: str, operation: str, deadline: float | None = None) -> SystemView:
        body, etag = self.http.get(uri, operation, deadline)
        return self._remember_system(body, etag)

    def system_view(self, uri: str, operation: str, deadline: float | None) -> SystemView:
        with self._lock:
            cached = self._systems.get(uri)
        # A copy: concurrent operations on one system each keep their own ETag and list.
        return replace(cached, blocks=list(cached.blocks)) if cached else self.read_system(uri, operation, deadline)

    def store_system(self, view: SystemView) -> None:
        with self._lock:
            self._systems[view.uri] = view

    def system_for(self, node_name: str, annotation_value: str | None = None, deadline: float | None = None) -> str:
        """The node's ComputerSystem: the ``imex-webhook.io/redfish-system`` annotation when given (checked to
        exist), else ``<Systems collection>/<node>``, else the system whose Id or HostName is the node."""
        found = self.discovery(deadline)
        if annotation_value:
            # The operator's annotation names the system; only its path is used, on the service's origin.
            uri = wire.path_of(annotation_value)
            if uri not in found.systems:
                self.read_system(uri, f"find the system of node {node_name}", deadline)
            return uri
        direct = f"{found.systems_collection}/{node_name}"
        if direct in found.systems:
            return direct
        with self._lock:
            match = [v.uri for v in self._systems.values() if node_name in (v.id, v.host_name)]
        if match:
            return match[0]
        raise FabricError("find the system of node", node_name, "no ComputerSystem with this Id or HostName; set "
                          "the node annotation imex-webhook.io/redfish-system", phase="discover")

    def blocks_of(self, system: str) -> list[BlockInfo]:
        """The GPU blocks linked to ``system`` (composed or composing), read now."""
        view = self.read_system(wire.path_of(system), "list blocks of")
        out = []
        for uri in view.blocks:
            body, etag = self.http.get(uri, "list blocks of")
            info = self._parse(body, etag, "list blocks of")
            if info is not None:
                out.append(info)
        return out

    def orphans(self, known: Iterable[str]) -> list[tuple[str, BlockInfo]]:
        """(system, block) for every GPU block composed or composing to a system whose @odata.id (or Id) is
        not in ``known``: what the reconciler releases."""
        keep = set(known)
        return [(system, block) for block in self.refresh() if block.state in ("Composed", "Composing")
                and block.id not in keep and block.name not in keep for system in block.systems]
