"""What the agent knows about one GPU, as plain frozen data: the NVML adapter produces it, the pure
decisions (``clique``, ``inventory``) and the procedures (``hotplug``, ``release``) consume it.

Values are already translated from NVML's numbers into names, so nothing here depends on pynvml.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

ZERO_UUID = "00000000-0000-0000-0000-000000000000"


class FabricState(enum.StrEnum):
    """``nvmlGpuFabricState_t``; UNSUPPORTED also stands for a driver whose fabric call is not supported."""

    UNSUPPORTED = "NotSupported"
    NOT_STARTED = "NotStarted"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"


class HealthSummary(enum.StrEnum):
    """``NVML_GPU_FABRIC_HEALTH_SUMMARY_*`` (struct v3 and later)."""

    UNSUPPORTED = "NotSupported"
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    LIMITED_CAPACITY = "LimitedCapacity"


class Health(enum.IntEnum):
    """The node label value, ordered so that ``max`` gives the worst."""

    NONE = 0  # no NVLink fabric on this GPU / node
    HEALTHY = 1
    DEGRADED = 2
    UNHEALTHY = 3

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Fabric:
    """``nvmlGpuFabricInfo_v3_t`` in words. ``health`` holds the decoded healthMask fields that the GPU
    reports (a field NVML marks "not supported" is left out), e.g. ``{"degradedBandwidth": "false"}``."""

    state: FabricState = FabricState.UNSUPPORTED
    status_ok: bool = False  # status == NVML_SUCCESS; only meaningful once state is COMPLETED
    status: str = ""  # NVML's text for the status, e.g. "Success", "Insufficient Resources"
    cluster_uuid: str = ZERO_UUID  # lowercase dashed, from the 16 bytes
    clique_id: int = 0
    health_summary: HealthSummary = HealthSummary.UNSUPPORTED
    health: Mapping[str, str] = field(default_factory=dict)
    note: str = ""  # why the fabric is unsupported, e.g. "nvmlDeviceGetGpuFabricInfoV: Not Supported"

    @property
    def supported(self) -> bool:
        return self.state is not FabricState.UNSUPPORTED

    @property
    def clique(self) -> str:
        return f"{self.cluster_uuid}.{self.clique_id}"


UNSUPPORTED_FABRIC = Fabric()


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    kind: str  # "compute" or "graphics"
    used_memory: int | None = None  # bytes; None when NVML cannot tell


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as NVML reported it. A GPU whose calls failed is a placeholder: ``error`` says what failed
    and only what could be read before the failure is filled in (gpustat's ``InvalidGPU``)."""

    index: int
    uuid: str = ""
    pci_address: str = ""  # sysfs form, lowercase, 4-digit domain: "0000:41:00.0"
    name: str = ""
    memory_total: int | None = None  # bytes
    minor: int | None = None  # N of /dev/nvidiaN
    persistence: bool | None = None
    processes: tuple[Process, ...] | None = ()  # None: NVML cannot list them on this GPU
    fabric: Fabric = UNSUPPORTED_FABRIC
    error: str = ""

    @property
    def valid(self) -> bool:
        return not self.error

    @property
    def ref(self) -> str:
        """How logs and messages name the GPU."""
        if self.uuid and self.pci_address:
            return f"{self.uuid} ({self.pci_address})"
        return self.uuid or self.pci_address or f"GPU index {self.index}"


def normalise_pci(address: str) -> str:
    """``00000000:41:00.0`` (NVML) or ``0000:41:00.0`` (sysfs), any case -> ``0000:41:00.0``."""
    text = address.strip().lower()
    parts = text.split(":")
    if len(parts) == 3:
        domain = parts[0][-4:].rjust(4, "0")
        return f"{domain}:{parts[1]}:{parts[2]}"
    if len(parts) == 2:  # bus:device.function without a domain
        return f"0000:{parts[0]}:{parts[1]}"
    return text
