"""The NVML adapter: the only module that imports ``pynvml`` (the official ``nvidia-ml-py`` binding).

It takes the binding as a parameter (default: the real ``pynvml``), so that the simulation, a fake
module with the same function, struct and constant names (``webhook.sim.nvml``), runs this exact code.

Failure rules, after gpustat:
- NVML missing (no driver, no ``libnvidia-ml.so.1``) or failing to initialise: ``error`` says why, no
  GPU is listed, and the agent keeps serving its endpoints (``/readyz`` reports it).
- A GPU whose identity or state calls fail becomes a placeholder ``Gpu`` with the error; the loop goes
  on with the next one. An optional field NVML does not support on this GPU is ``None``.
- Fabric info comes from ``nvmlDeviceGetGpuFabricInfoV`` with the **v3** struct (health summary); a
  driver that only knows v2 (version mismatch) is asked again with v2; a driver without the call, or
  that answers NOT_SUPPORTED, means "no fabric".
GPUs are always found by UUID or PCI address, never by index: indices shift when GPUs come and go.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import uuid as uuidlib
from collections.abc import Callable
from typing import Any, TypeVar

from webhook.agent.model import (
    ZERO_UUID,
    Fabric,
    FabricState,
    Gpu,
    HealthSummary,
    Process,
    normalise_pci,
)
from webhook.errors import ImexWebhookError

log = logging.getLogger(__name__)
T = TypeVar("T")

_STATES = {0: FabricState.UNSUPPORTED, 1: FabricState.NOT_STARTED, 2: FabricState.IN_PROGRESS,
           3: FabricState.COMPLETED}
_SUMMARIES = {0: HealthSummary.UNSUPPORTED, 1: HealthSummary.HEALTHY, 2: HealthSummary.UNHEALTHY,
              3: HealthSummary.LIMITED_CAPACITY}
_TRUE_FALSE = {1: "true", 2: "false"}
# healthMask fields: (our name, NVML constant stem, default shift, default width, value names).
_MASK_FIELDS: tuple[tuple[str, str, int, int, dict[int, str]], ...] = (
    ("degradedBandwidth", "DEGRADED_BW", 0, 0x3, _TRUE_FALSE),
    ("routeRecovery", "ROUTE_RECOVERY", 2, 0x3, _TRUE_FALSE),
    ("routeUnhealthy", "ROUTE_UNHEALTHY", 4, 0x3, _TRUE_FALSE),
    ("accessTimeoutRecovery", "ACCESS_TIMEOUT_RECOVERY", 6, 0x3, _TRUE_FALSE),
    ("incorrectConfiguration", "INCORRECT_CONFIGURATION", 8, 0xF,
     {1: "none", 2: "incorrectSysguid", 3: "incorrectChassisSn", 4: "noPartition", 5: "insufficientNvlinks",
      6: "incompatibleGpuFw", 7: "invalidLocation", 8: "gpuStateInvalid"}),
    ("partitionAssigned", "PARTITION_ASSIGNED", 12, 0x3, _TRUE_FALSE),
    ("gfmState", "GFM_STATE", 14, 0x3, {1: "connected", 2: "disconnected"}),
)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """NVML for the agent. Thread-safe: every call holds one lock, since a re-initialisation must not
    interleave with a read."""

    def __init__(self, module: Any = None) -> None:
        self._nv = module
        self._lock = threading.RLock()
        self.initialised = False
        self.error = ""  # why NVML is not usable; empty when it is
        self.driver = ""

    # -- life cycle --------------------------------------------------------------------------------

    def _module(self) -> Any:
        if self._nv is None:
            import pynvml  # the official binding, PyPI nvidia-ml-py (the "pynvml" package is only a shim)

            self._nv = pynvml
        return self._nv

    @staticmethod
    def _describe(call: str, exc: BaseException) -> str:
        return f"{call}: {str(exc) or type(exc).__name__}"

    def init(self) -> bool:
        """Initialise NVML once; False (and ``error``) when it cannot be used."""
        with self._lock:
            if self.initialised:
                return True
            try:
                nv = self._module()
                nv.nvmlInit()
            except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, NoPermission, ...
                error, self.error = self.error, self._describe("nvmlInit", exc)
                (log.error if error != self.error else log.debug)(
                    "NVML is not available: %s; the agent keeps serving its endpoints", self.error)
                return False
            self.initialised, self.error, first = True, "", not self.driver
            try:
                self.driver = _text(nv.nvmlSystemGetDriverVersion())
            except nv.NVMLError as exc:
                log.warning("%s", self._describe("nvmlSystemGetDriverVersion", exc))
            (log.info if first else log.debug)("NVML initialised (driver %s)", self.driver or "unknown")
            return True

    def shutdown(self) -> None:
        with self._lock:
            if not self.initialised:
                return
            self.initialised = False
            try:
                self._module().nvmlShutdown()
            except Exception as exc:
                log.warning("NVML shutdown: %s", self._describe("nvmlShutdown", exc))

    def reinit(self) -> bool:
        """Shut down and initialise again so NVML enumerates the GPUs afresh (after a hot-add or removal).
        NVML init is reference-counted; we hold exactly one reference, so this is a real re-enumeration."""
        with self._lock:
            self.shutdown()
            return self.init()

    # -- reading -----------------------------------------------------------------------------------

    def _is(self, exc: BaseException, name: str) -> bool:
        nv = self._module()
        return getattr(exc, "value", None) == getattr(nv, name, object())

    def _optional(self, call: str, fn: Callable[[], T]) -> T | None:
        """A field NVML may not support on this GPU: None then; any other failure propagates."""
        try:
            return fn()
        except self._module().NVMLError as exc:
            if self._is(exc, "NVML_ERROR_NOT_SUPPORTED") or self._is(exc, "NVML_ERROR_NO_PERMISSION"):
                log.debug("%s", self._describe(call, exc))
                return None
            raise

    def gpus(self) -> list[Gpu]:
        """Every GPU NVML enumerates now; one that fails is a placeholder, the others still come."""
        with self._lock:
            if not self.initialised and not self.init():
                return []
            nv = self._module()
            try:
                count = int(nv.nvmlDeviceGetCount())
            except nv.NVMLError as exc:
                self.error = self._describe("nvmlDeviceGetCount", exc)
                log.error("cannot count GPUs: %s", self.error)
                return []
            out = []
            for index in range(count):
                try:
                    handle = nv.nvmlDeviceGetHandleByIndex(index)
                except nv.NVMLError as exc:
                    out.append(self._placeholder(Gpu(index=index), "nvmlDeviceGetHandleByIndex", exc))
                    continue
                out.append(self._read(handle, index))
            return out

    def find(self, uuid: str = "", pci_address: str = "") -> Gpu | None:
        """The GPU with this UUID (preferred) or PCI address, or None when NVML does not see it."""
        with self._lock:
            if not self.initialised and not self.init():
                return None
            handle = self._handle(uuid, pci_address)
            return None if handle is None else self._read(handle, -1)

    def _handle(self, uuid: str, pci_address: str) -> Any:
        nv = self._module()
        lookups: list[tuple[str, Callable[[], Any]]] = []
        if uuid:
            lookups.append(("nvmlDeviceGetHandleByUUID", lambda: nv.nvmlDeviceGetHandleByUUID(uuid)))
        if pci_address:
            lookups.append(("nvmlDeviceGetHandleByPciBusId",
                            lambda: nv.nvmlDeviceGetHandleByPciBusId(normalise_pci(pci_address))))
        for call, lookup in lookups:
            try:
                return lookup()
            except nv.NVMLError as exc:
                if not (self._is(exc, "NVML_ERROR_NOT_FOUND") or self._is(exc, "NVML_ERROR_INVALID_ARGUMENT")
                        or self._is(exc, "NVML_ERROR_GPU_IS_LOST")):
                    raise
                log.debug("%s", self._describe(call, exc))
        return None

    def _placeholder(self, gpu: Gpu, call: str, exc: BaseException) -> Gpu:
        error = self._describe(call, exc)
        log.warning("%s is unusable: %s", gpu.ref, error)
        return Gpu(index=gpu.index, uuid=gpu.uuid, pci_address=gpu.pci_address, name=gpu.name, error=error)

    def _read(self, handle: Any, index: int) -> Gpu:
        nv = self._module()
        known: dict[str, Any] = {"index": index}
        enabled = getattr(nv, "NVML_FEATURE_ENABLED", 1)
        call = "nvmlDeviceGetUUID"
        try:
            known["uuid"] = _text(nv.nvmlDeviceGetUUID(handle))
            call = "nvmlDeviceGetPciInfo"
            known["pci_address"] = normalise_pci(_text(nv.nvmlDeviceGetPciInfo(handle).busId))
            if index < 0:
                call = "nvmlDeviceGetIndex"
                known["index"] = int(nv.nvmlDeviceGetIndex(handle))
            optional: tuple[tuple[str, str, Callable[[], Any]], ...] = (
                ("nvmlDeviceGetName", "name", lambda: _text(nv.nvmlDeviceGetName(handle))),
                ("nvmlDeviceGetMemoryInfo", "memory_total", lambda: int(nv.nvmlDeviceGetMemoryInfo(handle).total)),
                ("nvmlDeviceGetMinorNumber", "minor", lambda: int(nv.nvmlDeviceGetMinorNumber(handle))),
                ("nvmlDeviceGetPersistenceMode", "persistence",
                 lambda: int(nv.nvmlDeviceGetPersistenceMode(handle)) == enabled),
            )
            for call, field_name, read in optional:
                known[field_name] = self._optional(call, read)
            call = "nvmlDeviceGetComputeRunningProcesses"
            known["processes"] = self._processes(handle)
            call = "nvmlDeviceGetGpuFabricInfoV"
            known["fabric"] = self._fabric(handle)
        except nv.NVMLError as exc:
            partial = Gpu(index=known["index"], uuid=known.get("uuid", ""), pci_address=known.get("pci_address", ""))
            return self._placeholder(partial, call, exc)
        known["name"] = known["name"] or ""
        return Gpu(**known)

    def _processes(self, handle: Any) -> tuple[Process, ...] | None:
        nv = self._module()
        found: list[Process] = []
        for kind, call in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                           ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            fn = getattr(nv, call)
            listed = self._optional(call, lambda fn=fn: list(fn(handle)))  # type: ignore[misc]
            if listed is None:
                return None
            for p in listed:
                used = getattr(p, "usedGpuMemory", None)
                found.append(Process(pid=int(p.pid), kind=kind, used_memory=None if used is None else int(used)))
        return tuple(found)

    def _fabric(self, handle: Any) -> Fabric:
        nv = self._module()
        call = getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None)
        if call is None or not hasattr(nv, "c_nvmlGpuFabricInfo_v3_t"):
            return Fabric(note="the NVML binding has no nvmlDeviceGetGpuFabricInfoV")
        for struct in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
            info = getattr(nv, struct)()
            try:
                call(handle, ctypes.byref(info))
                break
            except nv.NVMLError as exc:  # a driver older than struct v3: ask with v2 (no health summary)
                if not (struct.endswith("v3_t") and self._is(exc, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")):
                    if not self._unsupported(exc):
                        raise
                    return Fabric(note=self._describe("nvmlDeviceGetGpuFabricInfoV", exc))
        raw_uuid = bytes(bytearray(info.clusterUuid))
        status = int(info.status)
        try:
            status_text = "Success" if status == 0 else str(nv.NVMLError(status))
        except Exception:
            status_text = f"NVML return code {status}"
        return Fabric(
            state=_STATES.get(int(info.state), FabricState.UNSUPPORTED),
            status_ok=status == getattr(nv, "NVML_SUCCESS", 0),
            status=status_text,
            cluster_uuid=str(uuidlib.UUID(bytes=raw_uuid)) if len(raw_uuid) == 16 else ZERO_UUID,
            clique_id=int(info.cliqueId),
            health_summary=_SUMMARIES.get(int(getattr(info, "healthSummary", 0)), HealthSummary.UNSUPPORTED),
            health=self._decode_mask(int(info.healthMask)),
        )

    def _unsupported(self, exc: BaseException) -> bool:
        return self._is(exc, "NVML_ERROR_NOT_SUPPORTED") or self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND")

    def _decode_mask(self, mask: int) -> dict[str, str]:
        nv = self._module()
        out: dict[str, str] = {}
        for name, stem, shift, width, values in _MASK_FIELDS:
            shift = int(getattr(nv, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{stem}", shift))
            width = int(getattr(nv, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{stem}", width))
            value = (mask >> shift) & width
            if value in values:
                out[name] = values[value]
            elif value:
                out[name] = f"unknown({value})"
        return out

    # -- changing ----------------------------------------------------------------------------------

    def set_persistence(self, gpu: Gpu, enabled: bool) -> None:
        """Persistence mode on or off for this GPU only. Raises ``NvmlCallError``."""
        with self._lock:
            nv = self._module()
            handle = self._required_handle(gpu)
            mode = nv.NVML_FEATURE_ENABLED if enabled else nv.NVML_FEATURE_DISABLED
            self._call("nvmlDeviceSetPersistenceMode", lambda: nv.nvmlDeviceSetPersistenceMode(handle, mode))

    def drain(self, gpu: Gpu, enabled: bool) -> bool:
        """Drain state (no new work, hidden from new NVML clients); False when this NVML cannot drain."""
        with self._lock:
            nv = self._module()
            modify = getattr(nv, "nvmlDeviceModifyDrainState", None)
            if modify is None:
                return False
            pci = self._pci_info(gpu)
            mode = nv.NVML_FEATURE_ENABLED if enabled else nv.NVML_FEATURE_DISABLED
            try:
                modify(pci, mode)
            except nv.NVMLError as exc:
                if self._unsupported(exc):
                    return False
                raise NvmlCallError(self._describe("nvmlDeviceModifyDrainState", exc), in_use=False) from exc
            return True

    def can_remove(self) -> bool:
        """Whether the binding offers ``nvmlDeviceRemoveGpu_v2`` (nvidia-ml-py 13.615 does not)."""
        return hasattr(self._module(), "nvmlDeviceRemoveGpu_v2")

    def remove(self, gpu: Gpu) -> None:
        """Remove the GPU from NVML and the kernel driver (PCIe link kept for the fabric to detach).
        Raises ``NvmlCallError`` (``in_use`` when a process still holds it)."""
        with self._lock:
            nv = self._module()
            pci = self._pci_info(gpu)
            self._call("nvmlDeviceRemoveGpu_v2", lambda: nv.nvmlDeviceRemoveGpu_v2(
                pci, nv.NVML_DETACH_GPU_REMOVE, nv.NVML_PCIE_LINK_KEEP))

    def _required_handle(self, gpu: Gpu) -> Any:
        handle = self._handle(gpu.uuid, gpu.pci_address)
        if handle is None:
            raise NvmlCallError(f"NVML does not see GPU {gpu.ref}", in_use=False)
        return handle

    def _pci_info(self, gpu: Gpu) -> Any:
        nv = self._module()
        handle = self._required_handle(gpu)
        return self._call("nvmlDeviceGetPciInfo", lambda: nv.nvmlDeviceGetPciInfo(handle))

    def _call(self, call: str, fn: Callable[[], T]) -> T:
        nv = self._module()
        try:
            return fn()
        except nv.NVMLError as exc:
            raise NvmlCallError(self._describe(call, exc), in_use=self._is(exc, "NVML_ERROR_IN_USE")) from exc


class NvmlCallError(ImexWebhookError):
    """A changing NVML call failed; the message names the call and NVML's reason."""

    def __init__(self, message: str, in_use: bool) -> None:
        super().__init__(message)
        self.in_use = in_use
