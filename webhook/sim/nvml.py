"""A fake ``pynvml`` over a simulated node (``scenario.SimNode``): the same function, struct, constant and
exception names as nvidia-ml-py, so ``nvml.Nvml(FakePynvml(node))`` runs the real adapter unchanged.

What it models, beyond returning the scenario's values:
- init is reference-counted, and the GPUs a process sees are enumerated when the count goes from 0
  to 1 (sorted by PCI address, as NVML orders them); a GPU hot-added later is seen only after a full
  shutdown and init (unless the scenario sets ``live_enumeration``), and a drained GPU is hidden from
  a new enumeration;
- a GPU exists for NVML only while the kernel has it enumerated and bound to ``nvidia`` (``webhook.sim.host``);
- handles are stable objects per GPU; a call on a removed or lost GPU answers GPU_IS_LOST;
- ``nvmlDeviceGetGpuFabricInfoV`` checks the struct version it is given against the scenario's
  ``fabric_api`` and fills the struct the caller passed by reference;
- ``nvmlDeviceRemoveGpu_v2`` exists only when the scenario says so, and refuses (IN_USE) while a process
  or persistence mode holds the GPU; ``calls`` records every changing call, for tests.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any, ClassVar

from webhook.agent.model import normalise_pci
from webhook.sim.node_scenario import ERROR_CODES, SimGpu, SimNode

_TEXT = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
         5: "Already Initialized", 6: "Not Found", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
         13: "Function Not Found", 15: "GPU is lost", 19: "In use by another client",
         23: "Insufficient Resources", 25: "Argument version mismatch", 999: "Unknown Error"}


class NVMLError(Exception):
    """Like pynvml's: ``NVMLError(code)`` becomes the subclass for that code; ``value`` is the code."""

    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"NVML Error with code {self.value}")


def _class_name(name: str) -> str:
    return "NVMLError_" + "".join(part.capitalize() for part in name.split("_"))


ERRORS: dict[str, type[NVMLError]] = {}
for _name, _code in ERROR_CODES.items():
    if _code:
        _cls = type(_class_name(_name), (NVMLError,), {})
        NVMLError._by_code[_code] = _cls
        ERRORS[_class_name(_name)] = _cls


class c_nvmlGpuFabricInfo_v2_t(ctypes.Structure):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint8), ("healthMask", ctypes.c_uint32)]

    def __init__(self) -> None:
        super().__init__(version=0x02000024)


class c_nvmlGpuFabricInfo_v3_t(ctypes.Structure):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint8), ("healthMask", ctypes.c_uint32),
        ("healthSummary", ctypes.c_uint8)]

    def __init__(self) -> None:
        super().__init__(version=0x3000028)


class nvmlPciInfo_t(ctypes.Structure):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32)]


class FakeHandle:
    def __init__(self, gpu: SimGpu) -> None:
        self.gpu = gpu

    def __repr__(self) -> str:
        return f"<FakeHandle {self.gpu.uuid}>"


def _struct(ref: Any) -> Any:
    """What the caller passed: the struct itself, ``ctypes.byref(struct)`` or ``ctypes.pointer(struct)``."""
    if hasattr(ref, "_obj"):
        return ref._obj
    if hasattr(ref, "contents"):
        return ref.contents
    return ref


class FakePynvml:
    """One instance per simulated node; attribute names as in ``pynvml``."""

    NVMLError = NVMLError
    c_nvmlGpuFabricInfo_v2_t = c_nvmlGpuFabricInfo_v2_t
    c_nvmlGpuFabricInfo_v3_t = c_nvmlGpuFabricInfo_v3_t
    c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfo_v2_t  # as in pynvml: the "V" alias is v2
    nvmlPciInfo_t = nvmlPciInfo_t
    nvmlGpuFabricInfo_v2 = 0x02000024
    nvmlGpuFabricInfo_v3 = 0x3000028
    NVML_SUCCESS = 0
    NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1
    NVML_DETACH_GPU_KEEP, NVML_DETACH_GPU_REMOVE = 0, 1
    NVML_PCIE_LINK_KEEP, NVML_PCIE_LINK_SHUT_DOWN = 0, 1
    NVML_GPU_FABRIC_UUID_LEN = 16
    NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, NVML_GPU_FABRIC_STATE_NOT_STARTED = 0, 1
    NVML_GPU_FABRIC_STATE_IN_PROGRESS, NVML_GPU_FABRIC_STATE_COMPLETED = 2, 3
    NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED, NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY = 0, 1
    NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY, NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY = 2, 3

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.refcount = 0
        self.calls: list[tuple[str, str]] = []  # (call, GPU uuid) of every changing call
        self._visible: list[SimGpu] = []
        self._handles: dict[int, FakeHandle] = {}
        if node.remove_gpu_v2:
            self.nvmlDeviceRemoveGpu_v2 = self._remove_gpu_v2

    def __getattr__(self, name: str) -> Any:
        if name in ERRORS:
            return ERRORS[name]
        if name.startswith("NVML_ERROR_"):
            key = name.removeprefix("NVML_ERROR_").lower()
            if key in ERROR_CODES:
                return ERROR_CODES[key]
        raise AttributeError(name)

    # -- helpers -----------------------------------------------------------------------------------

    def _fail(self, name: str) -> Exception:
        return NVMLError(ERROR_CODES[name])

    def _nvml_sees(self, gpu: SimGpu) -> bool:
        return gpu.enumerated and gpu.bound == "nvidia" and gpu.presence != "removed"

    def _enumerate(self) -> list[SimGpu]:
        return sorted((g for g in self.node.gpus if self._nvml_sees(g) and not g.drained), key=lambda g: g.pci)

    def _gpus(self) -> list[SimGpu]:
        if self.refcount <= 0:
            raise self._fail("uninitialized")
        if self.node.live_enumeration:
            self._visible = self._enumerate()
        return self._visible

    def _handle(self, gpu: SimGpu) -> FakeHandle:
        return self._handles.setdefault(id(gpu), FakeHandle(gpu))

    def _gpu(self, handle: Any, call: str) -> SimGpu:
        if self.refcount <= 0:
            raise self._fail("uninitialized")
        if not isinstance(handle, FakeHandle):
            raise self._fail("invalid_argument")
        gpu = handle.gpu
        if gpu.lost or not self._nvml_sees(gpu) or gpu not in self.node.gpus:
            raise self._fail("gpu_is_lost")
        if call in gpu.failures:
            raise NVMLError(gpu.failures[call])
        return gpu

    def _by_pci(self, pci: Any) -> SimGpu:
        bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
        for gpu in self.node.gpus:
            if gpu.pci == normalise_pci(bus_id) and self._nvml_sees(gpu):
                return gpu
        raise self._fail("not_found")

    # -- life cycle --------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        with self.node.lock:
            if self.node.nvml_missing:
                raise self._fail("library_not_found")
            if self.refcount == 0:
                self._visible = self._enumerate()
            self.refcount += 1

    def nvmlShutdown(self) -> None:
        with self.node.lock:
            if self.refcount <= 0:
                raise self._fail("uninitialized")
            self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.node.driver_version

    # -- enumeration -------------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        with self.node.lock:
            return len(self._gpus())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        with self.node.lock:
            gpus = self._gpus()
            if not 0 <= index < len(gpus):
                raise self._fail("invalid_argument")
            gpu = gpus[index]
            gpu.enumerations += 1
            if gpu.lost_after is not None and gpu.enumerations > gpu.lost_after:
                gpu.lost = True
            return self._handle(gpu)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:
        key = uuid.decode() if isinstance(uuid, bytes) else uuid
        with self.node.lock:
            for gpu in self._gpus():
                if gpu.uuid == key and gpu in self.node.gpus and self._nvml_sees(gpu):
                    return self._handle(gpu)
            raise self._fail("not_found")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> FakeHandle:
        key = normalise_pci(bus_id.decode() if isinstance(bus_id, bytes) else bus_id)
        with self.node.lock:
            for gpu in self._gpus():
                if gpu.pci == key and gpu in self.node.gpus and self._nvml_sees(gpu):
                    return self._handle(gpu)
            raise self._fail("not_found")

    # -- reads -------------------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        with self.node.lock:
            return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        with self.node.lock:
            gpu = self._gpu(handle, "nvmlDeviceGetIndex")
            return self._gpus().index(gpu) if gpu in self._gpus() else 0

    def nvmlDeviceGetName(self, handle: Any) -> str:
        with self.node.lock:
            return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        with self.node.lock:
            gpu = self._gpu(handle, "nvmlDeviceGetPciInfo")
            domain, bus, rest = gpu.pci.split(":")
            device = rest.split(".")[0]
            info = nvmlPciInfo_t(domain=int(domain, 16), bus=int(bus, 16), device=int(device, 16),
                                 pciDeviceId=0x233510DE)
            info.busId = f"{int(domain, 16):08X}:{bus.upper()}:{device.upper()}.0".encode()
            info.busIdLegacy = f"{int(domain, 16):04X}:{bus.upper()}:{device.upper()}.0".encode()
            return info

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> SimpleNamespace:
        with self.node.lock:
            gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
            used = sum(p.used_memory for p in gpu.processes)
            return SimpleNamespace(total=gpu.memory, free=gpu.memory - used, used=used)

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        with self.node.lock:
            return self._gpu(handle, "nvmlDeviceGetMinorNumber").minor

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        with self.node.lock:
            return int(self._gpu(handle, "nvmlDeviceGetPersistenceMode").persistence)

    def _processes(self, handle: Any, call: str, kind: str) -> list[SimpleNamespace]:
        with self.node.lock:
            gpu = self._gpu(handle, call)
            return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_memory, gpuInstanceId=0xFFFFFFFF,
                                    computeInstanceId=0xFFFFFFFF) for p in gpu.processes if p.kind == kind]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        return self._processes(handle, "nvmlDeviceGetComputeRunningProcesses", "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        return self._processes(handle, "nvmlDeviceGetGraphicsRunningProcesses", "graphics")

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, ref: Any) -> int:
        with self.node.lock:
            gpu = self._gpu(handle, "nvmlDeviceGetGpuFabricInfoV")
            info = _struct(ref)
            if self.node.fabric_api == "none" or gpu.fabric is None:
                raise self._fail("not_supported")
            wanted = self.nvmlGpuFabricInfo_v3 if self.node.fabric_api == "v3" else self.nvmlGpuFabricInfo_v2
            if info.version != wanted:
                raise self._fail("argument_version_mismatch")
            fabric = gpu.fabric
            info.clusterUuid[:] = list(fabric.cluster_uuid)
            info.status, info.cliqueId, info.state = fabric.status, fabric.clique_id, fabric.state
            info.healthMask = fabric.health_mask
            if hasattr(info, "healthSummary"):
                info.healthSummary = fabric.health_summary
            return 0

    # -- changes -----------------------------------------------------------------------------------

    def nvmlDeviceSetPersistenceMode(self, handle: Any, mode: int) -> None:
        with self.node.lock:
            gpu = self._gpu(handle, "nvmlDeviceSetPersistenceMode")
            self.calls.append(("nvmlDeviceSetPersistenceMode", gpu.uuid))
            gpu.persistence = bool(mode)
            self.node.changed()

    def nvmlDeviceModifyDrainState(self, pci: Any, state: int) -> None:
        with self.node.lock:
            gpu = self._by_pci(_struct(pci))
            if "nvmlDeviceModifyDrainState" in gpu.failures:
                raise NVMLError(gpu.failures["nvmlDeviceModifyDrainState"])
            if state and gpu.persistence:
                raise self._fail("in_use")  # NVML: persistence mode must be off before draining
            self.calls.append(("nvmlDeviceModifyDrainState", gpu.uuid))
            gpu.drained = bool(state)
            self.node.changed()

    def _remove_gpu_v2(self, pci: Any, gpu_state: int, link_state: int) -> None:
        with self.node.lock:
            gpu = self._by_pci(_struct(pci))
            self.calls.append(("nvmlDeviceRemoveGpu_v2", gpu.uuid))
            if gpu.processes or gpu.persistence or any(
                    f"/dev/nvidia{gpu.minor}" in p.fds for p in self.node.procs.values()):
                gpu.drained = True  # NVML: back to draining
                raise self._fail("in_use")
            gpu.presence, gpu.enumerated, gpu.bound = "removed", False, ""
            self.node.changed()
