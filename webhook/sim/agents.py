"""Simulated node agents for the embedded ``serve`` mode: no node, no NVML, no API server, yet the real
hot-add and release code runs, against a fake pynvml and a fake kernel per node (``webhook.sim.nvml``,
``webhook.sim.host``) and an in-memory Node (``MemoryNodeApi``).

The seam for the fabric attach state machine::

    agents = SimulatedNodeAgents(node_objects, on_node_change=lambda node: store.apply("Node", "MODIFIED", node))
    att = agents.on_attached(att)     # Attached -> Ready (blocks carry UUID + PCI address) or Failed
    att = agents.on_releasing(att)    # Releasing -> condition Released=True (or False with the reason)
    agents.on_detached(att)           # the fabric took the GPUs back
    agents.close()

Each simulated node starts with the GPUs its Node advertises (``status.allocatable["nvidia.com/gpu"]``),
in the clique of its ``nvidia.com/gpu.clique`` label if it has one. A fabric GPU of an attachment appears
at the next PCI rescan; the simulated device plugin re-counts at once when its pod is "deleted", so the
Node's allocatable follows, and ``on_node_change`` gets every new version of the Node object.

``EmbeddedAgents`` runs them for ``serve``: in a thread of their own, fed by the attachment store's
changes (``webhook.composition`` hands it to the service).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
import queue
import shutil
import tempfile
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from webhook.adapters.memory import MemoryAttachmentStore
from webhook.agent import hotplug, release
from webhook.agent.loop import Agent
from webhook.agent.nvml import Nvml
from webhook.agent.steps import Deadlines
from webhook.agent.sysfs import Host
from webhook.domain import keys
from webhook.domain.admission.patches import merge_patch
from webhook.errors import StoreConflict
from webhook.sim.host import SimHost
from webhook.sim.node_scenario import SimFabric, SimGpu, SimNode
from webhook.sim.nvml import FakePynvml
from webhook.state.cluster import ClusterStore
from webhook.wire import fabric_attachment as fa
from webhook.wire import gpu_inventory
from webhook.wire.gpu_inventory import GpuInventory

log = logging.getLogger(__name__)
NodeCallback = Callable[[dict[str, Any]], None]
# Quick enough for an interactive demo, long enough to show every step in the logs.
SIM_DEADLINES = Deadlines(rescan=2, enumerate=5, driver=5, nvml=5, check=5, persistence=2, device_plugin=2,
                          allocatable=5, gone=5, poll=0.02)


class MemoryNodeApi:
    """``ports.NodeApi`` over one Node object held in memory."""

    def __init__(self, node: Mapping[str, Any], sim: SimNode, on_change: NodeCallback | None = None) -> None:
        self.node = str((node.get("metadata") or {}).get("name"))
        self._obj = copy.deepcopy(dict(node))
        self._sim = sim
        self._on_change = on_change
        self._attachments: dict[str, fa.Attachment] = {}
        self._version = 0
        self._lock = threading.Lock()
        self.device_plugin_restarts = 0

    def start(self, changed: Callable[[], None]) -> None:
        pass

    def stop(self) -> None:
        pass

    def synced(self) -> bool:
        return True

    def read_node(self) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._obj)

    def _changed(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._obj = obj
        if self._on_change is not None:
            self._on_change(copy.deepcopy(obj))
        return copy.deepcopy(obj)

    def patch_node(self, patch: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return self._changed(merge_patch(self._obj, patch))

    def refresh_device_plugin(self) -> list[str]:
        """The simulated device plugin restarts and advertises every GPU bound to nvidia."""
        with self._sim.lock:
            count = sum(1 for g in self._sim.gpus if g.enumerated and g.bound == "nvidia" and not g.lost)
        with self._lock:
            self.device_plugin_restarts += 1
            status = {"status": {"capacity": {keys.GPU_RESOURCE: str(count)},
                                 "allocatable": {keys.GPU_RESOURCE: str(count)}}}
            self._changed(merge_patch(self._obj, status))
        return [f"kube-system/nvidia-device-plugin-{self.node}"]

    def attachments(self) -> list[fa.Attachment]:
        with self._lock:
            return sorted(self._attachments.values(), key=lambda a: a.name)

    def read_attachment(self, name: str) -> fa.Attachment | None:
        with self._lock:
            return self._attachments.get(name)

    def write_status(self, att: fa.Attachment) -> fa.Attachment:
        with self._lock:
            self._version += 1
            stored = dataclasses.replace(att, version=str(self._version))
            self._attachments[att.name] = stored
            return stored

    def forget(self, name: str) -> None:
        with self._lock:
            self._attachments.pop(name, None)


def _clique_fabric(node: Mapping[str, Any]) -> SimFabric | None:
    value = ((node.get("metadata") or {}).get("labels") or {}).get(keys.CLIQUE_LABEL)
    if not value or "." not in value:
        return None
    cluster, _, clique_id = value.rpartition(".")
    try:
        raw = uuidlib.UUID(cluster).bytes
    except ValueError:
        raw = hashlib.sha256(cluster.encode()).digest()[:16]  # a demo label that is not a UUID
    return SimFabric(state=3, status=0, cluster_uuid=raw, clique_id=int(clique_id) if clique_id.isdigit() else 0,
                     health_summary=1, health_mask=(1 << 8) | (1 << 12) | (1 << 14))


def _local_gpus(name: str, node: Mapping[str, Any]) -> list[SimGpu]:
    count = int(str(((node.get("status") or {}).get("allocatable") or {}).get(keys.GPU_RESOURCE) or 0))
    fabric = _clique_fabric(node)
    seed = hashlib.sha256(name.encode()).hexdigest()
    return [SimGpu(uuid=f"GPU-{uuidlib.UUID(hashlib.sha256(f'{seed}/{i}'.encode()).hexdigest()[:32])}",
                   pci=f"{0x8 + i:04x}:01:00.0", minor=i, fabric=fabric, enumerated=True, bound="nvidia")
            for i in range(count)]


class SimulatedNode:
    def __init__(self, node: Mapping[str, Any], root: Path, on_change: NodeCallback | None,
                 deadlines: Deadlines) -> None:
        self.name = str((node.get("metadata") or {}).get("name"))
        self.sim = SimNode(self.name)
        self.sim.appear_delay = self.sim.bind_delay = 0.0
        self.sim.gpus = _local_gpus(self.name, node)
        self.host_sim = SimHost(self.sim, root / self.name / "sys", root / self.name / "proc").start()
        self.api = MemoryNodeApi(node, self.sim, on_change)
        self.nvml = Nvml(FakePynvml(self.sim))
        host = Host(self.host_sim.sysfs_root, self.host_sim.proc_root, own_pid=-1)
        self.agent = Agent(self.nvml, host, self.api, hot_add=hotplug.Options(deadlines=deadlines, rescan_every=0.5),
                           releasing=release.Options(deadlines=deadlines))
        self.lock = threading.Lock()

    def publish(self) -> None:
        self.agent.gpus = self.nvml.gpus()
        self.agent.publish(self.api.attachments())

    def close(self) -> None:
        self.host_sim.close()
        self.nvml.shutdown()


class SimulatedNodeAgents:
    """One simulated agent per Node, created on first use."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]], *, on_node_change: NodeCallback | None = None,
                 root: Path | None = None, deadlines: Deadlines = SIM_DEADLINES) -> None:
        self._nodes = {str((n.get("metadata") or {}).get("name")): copy.deepcopy(dict(n)) for n in nodes}
        self._on_change = on_node_change
        self._own_root = root is None
        self._root = root or Path(tempfile.mkdtemp(prefix="imex-sim-agents-"))
        self._deadlines = deadlines
        self._agents: dict[str, SimulatedNode] = {}
        self._lock = threading.Lock()

    def agent(self, node: str) -> SimulatedNode:
        with self._lock:
            if node not in self._agents:
                if node not in self._nodes:
                    raise KeyError(f"no Node {node!r} in the embedded cluster")
                self._agents[node] = SimulatedNode(self._nodes[node], self._root, self._on_change, self._deadlines)
            return self._agents[node]

    def node(self, name: str) -> dict[str, Any]:
        return self.agent(name).api.read_node()

    def inventory(self, name: str) -> GpuInventory | None:
        return gpu_inventory.of_node(self.node(name))

    def on_attached(self, att: fa.Attachment) -> fa.Attachment:
        """Compose the blocks into the simulated node, run the real hot-add; Ready or Failed."""
        sim = self.agent(att.node)
        with sim.lock:
            blocks = []
            for i, block in enumerate(att.blocks):
                pci = block.pci_address or f"0000:{0xc0 + len(sim.sim.gpus) + i:02x}:00.0"
                gpu_uuid = block.uuid or f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, block.id)}"
                sim.sim.attach(gpu_uuid, pci)
                blocks.append(fa.Block(block.id, uuid=gpu_uuid, pci_address=pci))
            att = sim.api.write_status(dataclasses.replace(att, blocks=tuple(blocks)))
            result = sim.agent.hot_add.run(att)
            sim.api.write_status(result)
            sim.publish()
            return result

    def on_releasing(self, att: fa.Attachment) -> fa.Attachment:
        """Run the real safe release: condition Released=True once the devices are removed."""
        sim = self.agent(att.node)
        with sim.lock:
            sim.api.write_status(att)
            sim.publish()  # marks them releasing first, as the agent does
            result = sim.agent.release.run(att)
            sim.api.write_status(result)
            sim.publish()
            return result

    def on_detached(self, att: fa.Attachment) -> None:
        """The fabric took the blocks back: the GPUs can never come back with a rescan."""
        sim = self.agent(att.node)
        with sim.lock:
            for block in att.blocks:
                try:
                    sim.sim.detach(block.pci_address or block.uuid)
                except KeyError:
                    pass
            sim.api.forget(att.name)
            sim.publish()

    def close(self) -> None:
        with self._lock:
            for agent in self._agents.values():
                agent.close()
            self._agents.clear()
        if self._own_root:
            shutil.rmtree(self._root, ignore_errors=True)


class EmbeddedAgents:
    """The simulated node agents of ``serve``'s embedded mode, run like DaemonSet agents: they react to
    attachment changes in their own thread (as a watch would deliver them), never inside the writer's call."""

    def __init__(self, store: MemoryAttachmentStore, cluster: ClusterStore, node_objects: list[dict[str, Any]]):
        self.store = store
        self.agents = SimulatedNodeAgents(node_objects,
                                          on_node_change=lambda node: cluster.apply("Node", "MODIFIED", node))
        self._queue: queue.Queue[str | None] = queue.Queue()
        store.subscribe(lambda att: self._queue.put(att.name))
        self._thread = threading.Thread(target=self._run, name="simulated-node-agents", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (name := self._queue.get()) is not None:
            try:
                self._handle(name)
            except Exception:  # one bad attachment must not stop the simulated agents
                log.exception("simulated node agent failed on %s", name)

    def _handle(self, name: str) -> None:
        current = self.store.get(name)
        if current is None:
            return
        if current.phase is fa.Phase.ATTACHED:
            self._write(current, self.agents.on_attached(current))
        elif current.phase is fa.Phase.RELEASING and not current.released:
            self._write(current, self.agents.on_releasing(current))
        elif current.phase is fa.Phase.DETACHED:
            self.agents.on_detached(current)

    def _write(self, current: fa.Attachment, result: fa.Attachment) -> None:
        # The agent owns the status fields it reports; the rest stays as the store has it.
        update = dataclasses.replace(current, phase=result.phase, blocks=result.blocks, conditions=result.conditions,
                                     message=result.message, phase_since=result.phase_since or current.phase_since)
        try:
            self.store.update(update)
        except StoreConflict:
            self._queue.put(current.name)  # changed meanwhile: look again

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)
        self.agents.close()
