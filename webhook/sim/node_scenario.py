"""A simulated GPU node, loaded from a scenario file (YAML or JSON); the state that the fake pynvml
(``webhook.sim.nvml``) and the fake kernel (``webhook.sim.host``: sysfs and procfs) share.

A scenario describes one node::

    node: tray-1                 # optional
    driver: "570.133.20"
    nvml: present                # or "missing": nvmlInit raises NVMLError_LibraryNotFound
    fabric_api: v3               # v3 | v2 (the v3 struct gets ARGUMENT_VERSION_MISMATCH) | none (NOT_SUPPORTED)
    remove_gpu_v2: false         # whether the binding offers nvmlDeviceRemoveGpu_v2
    live_enumeration: false      # true: an initialised NVML sees hot-added GPUs without re-init
    appear_delay: 0.05           # seconds from a PCI rescan to the device directory
    bind_delay: 0.05             # seconds from the device directory to the nvidia driver binding
    fabric:                      # default fabric info of every GPU (a GPU's own "fabric" overrides it)
      state: completed           # not_supported | not_started | in_progress | completed
      status: success            # or an NVML error name (insufficient_resources) or number
      cluster_uuid: 9277d399-7d0a-4d4a-9b0e-d85bb19ce2b0
      clique_id: 32766
      health_summary: healthy    # not_supported | healthy | unhealthy | limited_capacity
      health_mask: {degraded_bw: false, gfm_state: connected}   # or the raw integer
    gpus:
      - uuid: GPU-...
        pci: "0000:41:00.0"
        name: NVIDIA GB200
        memory_mib: 189471
        minor: 0                 # default: the position in the list
        persistence: true
        fabric: none             # the fabric call answers NOT_SUPPORTED for this GPU
        processes: [{pid: 4242, kind: compute, used_memory_mib: 1024}]
        fail: {nvmlDeviceGetMemoryInfo: unknown}    # this call fails with this NVML error
        lost_after: 1            # after this many enumerations every call answers GPU_IS_LOST
        hotplug: pending         # present (default) | pending (appears after a rescan) | never
        driver: nvidia           # the driver that binds after the rescan (vfio-pci: invisible to NVML)
    procs:                       # processes in the fake /proc; a GPU process also holds /dev/nvidiaN
      - {pid: 77, comm: dcgm-exporter, fds: [/dev/nvidia0, /dev/nvidiactl]}
"""

from __future__ import annotations

import json
import threading
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webhook.agent.model import normalise_pci
from webhook.errors import ImexWebhookError

MIB = 1024 * 1024
ERROR_CODES = {
    "success": 0, "uninitialized": 1, "invalid_argument": 2, "not_supported": 3, "no_permission": 4,
    "already_initialized": 5, "not_found": 6, "insufficient_size": 7, "insufficient_power": 8,
    "driver_not_loaded": 9, "timeout": 10, "irq_issue": 11, "library_not_found": 12, "function_not_found": 13,
    "corrupted_inforom": 14, "gpu_is_lost": 15, "reset_required": 16, "operating_system": 17,
    "lib_rm_version_mismatch": 18, "in_use": 19, "memory": 20, "no_data": 21, "vgpu_ecc_not_supported": 22,
    "insufficient_resources": 23, "freq_not_supported": 24, "argument_version_mismatch": 25, "deprecated": 26,
    "not_ready": 27, "gpu_not_found": 28, "invalid_state": 29, "unknown": 999,
}
STATES = {"not_supported": 0, "not_started": 1, "in_progress": 2, "completed": 3}
SUMMARIES = {"not_supported": 0, "healthy": 1, "unhealthy": 2, "limited_capacity": 3}
# healthMask fields: name -> (shift, {value name: number}); booleans are 1 true, 2 false.
MASK = {
    "degraded_bw": (0, {}), "route_recovery": (2, {}), "route_unhealthy": (4, {}),
    "access_timeout_recovery": (6, {}),
    "incorrect_configuration": (8, {"none": 1, "incorrect_sysguid": 2, "incorrect_chassis_sn": 3, "no_partition": 4,
                                    "insufficient_nvlinks": 5, "incompatible_gpu_fw": 6, "invalid_location": 7,
                                    "gpu_state_invalid": 8}),
    "partition_assigned": (12, {}),
    "gfm_state": (14, {"connected": 1, "disconnected": 2}),
}


class ScenarioError(ImexWebhookError, ValueError):
    """A scenario file that cannot be used; the message names the file and the field."""


@dataclass
class SimFabric:
    state: int = 3
    status: int = 0
    cluster_uuid: bytes = bytes(16)
    clique_id: int = 0
    health_summary: int = 0
    health_mask: int = 0


@dataclass
class SimProcess:
    pid: int
    kind: str = "compute"
    used_memory: int = 0


@dataclass
class SimProc:
    pid: int
    comm: str
    fds: list[str] = field(default_factory=list)


@dataclass
class SimGpu:
    uuid: str
    pci: str
    name: str = "NVIDIA GB200"
    memory: int = 189471 * MIB
    minor: int = 0
    persistence: bool = False
    fabric: SimFabric | None = None  # None: the fabric call answers NOT_SUPPORTED
    processes: list[SimProcess] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    lost_after: int | None = None
    presence: str = "present"  # present | pending | never | removed
    driver: str = "nvidia"  # the driver that binds once the device is enumerated
    enumerated: bool = False  # the kernel sees the device (sysfs directory)
    bound: str = ""  # the driver bound to it now
    enumerations: int = 0
    lost: bool = False
    drained: bool = False


class SimNode:
    """The whole simulated node; every access from the fakes holds ``lock``."""

    def __init__(self, name: str = "sim-node") -> None:
        self.name = name
        self.lock = threading.RLock()
        self.driver_version = "570.133.20"
        self.nvml_missing = False
        self.fabric_api = "v3"
        self.remove_gpu_v2 = False
        self.live_enumeration = False
        self.appear_delay = 0.05
        self.bind_delay = 0.05
        self.default_fabric: SimFabric | None = None
        self.gpus: list[SimGpu] = []
        self.procs: dict[int, SimProc] = {}
        self.violations: list[str] = []  # unsafe things done to the simulated node (removal in use)
        self.version = 0  # bumped on every change, so the fake kernel knows when to redraw its trees

    def changed(self) -> None:
        with self.lock:
            self.version += 1

    def gpu(self, key: str) -> SimGpu:
        """By UUID or PCI address."""
        with self.lock:
            for gpu in self.gpus:
                if key in (gpu.uuid, gpu.pci) or normalise_pci(key) == gpu.pci:
                    return gpu
        raise KeyError(key)

    def attach(self, uuid: str, pci: str, *, name: str = "NVIDIA H200", memory: int = 143771 * MIB,
               fabric: SimFabric | None = None, presence: str = "pending") -> SimGpu:
        """The fabric composed a GPU to this node: it shows up at the next PCI rescan."""
        with self.lock:
            try:
                gpu = self.gpu(pci or uuid)
            except KeyError:
                minor = max((g.minor for g in self.gpus), default=-1) + 1
                gpu = SimGpu(uuid=uuid, pci=normalise_pci(pci), name=name, memory=memory, minor=minor,
                             fabric=fabric, presence=presence)
                self.gpus.append(gpu)
            if gpu.presence in ("removed", "never"):
                gpu.presence = presence
            self.changed()
            return gpu

    def detach(self, key: str) -> None:
        """The fabric took the GPU back: it is gone for good (a rescan does not find it)."""
        with self.lock:
            gpu = self.gpu(key)
            if gpu.enumerated:
                self.violations.append(f"{gpu.pci} detached from the fabric while the kernel still had it")
            self.gpus.remove(gpu)
            self.changed()

    def lose(self, key: str) -> None:
        with self.lock:
            self.gpu(key).lost = True
            self.changed()

    def start_process(self, pid: int, comm: str, gpu_key: str, kind: str = "compute") -> None:
        """A process with a context on the GPU: NVML lists it and it holds /dev/nvidiaN open."""
        with self.lock:
            gpu = self.gpu(gpu_key)
            gpu.processes.append(SimProcess(pid=pid, kind=kind))
            proc = self.procs.setdefault(pid, SimProc(pid=pid, comm=comm))
            proc.fds.append(f"/dev/nvidia{gpu.minor}")
            self.changed()

    def open_device(self, pid: int, comm: str, path: str) -> None:
        """A process holding a device node without a GPU context (DCGM, exporters, plugins)."""
        with self.lock:
            self.procs.setdefault(pid, SimProc(pid=pid, comm=comm)).fds.append(path)
            self.changed()

    def end_process(self, pid: int) -> None:
        with self.lock:
            for gpu in self.gpus:
                gpu.processes = [p for p in gpu.processes if p.pid != pid]
            self.procs.pop(pid, None)
            self.changed()


# -- loading ---------------------------------------------------------------------------------------


def _pick(table: Mapping[str, int], value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise ScenarioError(f"{where}: expected one of {sorted(table)}, got {value!r}")
    if isinstance(value, int):
        return value
    key = str(value).lower().replace("-", "_").removeprefix("nvml_error_")
    if key not in table:
        raise ScenarioError(f"{where}: expected one of {sorted(table)}, got {value!r}")
    return table[key]


def _mask(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where}: expected a mapping of fields or an integer")
    mask = 0
    for key, raw in value.items():
        if key not in MASK:
            raise ScenarioError(f"{where}.{key}: unknown field; known: {sorted(MASK)}")
        shift, names = MASK[key]
        number = {True: 1, False: 2}[raw] if isinstance(raw, bool) else _pick(names, raw, f"{where}.{key}")
        mask |= number << shift
    return mask


def _fabric(raw: Any, where: str) -> SimFabric | None:
    if raw in (None, "none", "not_supported"):
        return None
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{where}: expected a mapping or 'none'")
    try:
        cluster = uuidlib.UUID(str(raw.get("cluster_uuid") or "0" * 32)).bytes
    except ValueError as exc:
        raise ScenarioError(f"{where}.cluster_uuid: not a UUID: {raw.get('cluster_uuid')!r}") from exc
    return SimFabric(
        state=_pick(STATES, raw.get("state", "completed"), f"{where}.state"),
        status=_pick(ERROR_CODES, raw.get("status", "success"), f"{where}.status"),
        cluster_uuid=cluster, clique_id=int(raw.get("clique_id", 0)),
        health_summary=_pick(SUMMARIES, raw.get("health_summary", "not_supported"), f"{where}.health_summary"),
        health_mask=_mask(raw.get("health_mask", 0), f"{where}.health_mask"),
    )


def _gpu(raw: Any, position: int, node: SimNode, where: str) -> SimGpu:
    if not isinstance(raw, Mapping) or not raw.get("uuid") or not raw.get("pci"):
        raise ScenarioError(f"{where}: a GPU needs at least uuid and pci")
    fabric = _fabric(raw["fabric"], f"{where}.fabric") if "fabric" in raw else node.default_fabric
    presence = str(raw.get("hotplug", "present"))
    if presence not in ("present", "pending", "never"):
        raise ScenarioError(f"{where}.hotplug: expected present, pending or never, got {presence!r}")
    gpu = SimGpu(
        uuid=str(raw["uuid"]), pci=normalise_pci(str(raw["pci"])), name=str(raw.get("name", "NVIDIA GB200")),
        memory=int(raw.get("memory_mib", 189471)) * MIB, minor=int(raw.get("minor", position)),
        persistence=bool(raw.get("persistence", False)),
        fabric=None if fabric is None else SimFabric(**vars(fabric)),
        failures={str(k): _pick(ERROR_CODES, v, f"{where}.fail.{k}") for k, v in (raw.get("fail") or {}).items()},
        lost_after=None if raw.get("lost_after") is None else int(raw["lost_after"]),
        presence=presence, driver=str(raw.get("driver", "nvidia")),
    )
    for i, p in enumerate(raw.get("processes") or ()):
        proc = SimProcess(pid=int(p["pid"]), kind=str(p.get("kind", "compute")),
                          used_memory=int(p.get("used_memory_mib", 0)) * MIB)
        if proc.kind not in ("compute", "graphics"):
            raise ScenarioError(f"{where}.processes[{i}].kind: expected compute or graphics")
        gpu.processes.append(proc)
    return gpu


def from_mapping(doc: Any, source: str = "scenario") -> SimNode:
    if not isinstance(doc, Mapping):
        raise ScenarioError(f"{source}: expected a mapping at the top level")
    node = SimNode(str(doc.get("node") or "sim-node"))
    node.driver_version = str(doc.get("driver", node.driver_version))
    nvml = str(doc.get("nvml", "present"))
    if nvml not in ("present", "missing"):
        raise ScenarioError(f"{source}: nvml: expected present or missing, got {nvml!r}")
    node.nvml_missing = nvml == "missing"
    node.fabric_api = str(doc.get("fabric_api", "v3"))
    if node.fabric_api not in ("v3", "v2", "none"):
        raise ScenarioError(f"{source}: fabric_api: expected v3, v2 or none, got {node.fabric_api!r}")
    node.remove_gpu_v2 = bool(doc.get("remove_gpu_v2", False))
    node.live_enumeration = bool(doc.get("live_enumeration", False))
    node.appear_delay = float(doc.get("appear_delay", node.appear_delay))
    node.bind_delay = float(doc.get("bind_delay", node.bind_delay))
    node.default_fabric = _fabric(doc.get("fabric"), f"{source}: fabric")
    try:
        for i, raw in enumerate(doc.get("gpus") or ()):
            node.gpus.append(_gpu(raw, i, node, f"{source}: gpus[{i}]"))
        for raw in doc.get("procs") or ():
            node.procs[int(raw["pid"])] = SimProc(pid=int(raw["pid"]), comm=str(raw.get("comm", "unknown")),
                                                  fds=[str(f) for f in raw.get("fds") or ()])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError(f"{source}: {type(exc).__name__}: {exc}") from exc
    for gpu in node.gpus:
        if gpu.presence == "present":
            gpu.enumerated, gpu.bound = True, gpu.driver
    for gpu in node.gpus:  # a process with a context also holds the device node open
        for p in gpu.processes:
            proc = node.procs.setdefault(p.pid, SimProc(pid=p.pid, comm=f"proc-{p.pid}"))
            device = f"/dev/nvidia{gpu.minor}"
            if device not in proc.fds:
                proc.fds.append(device)
    return node


def load(path: Path) -> SimNode:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path}: not valid YAML or JSON: {exc}") from exc
    return from_mapping(doc, str(path))
