"""ResourceSlice -> the whole GPUs a DRA driver publishes on one node.

On clusters where GPUs come from NVIDIA's DRA driver instead of the device plugin, a node's allocatable
has no ``nvidia.com/gpu``; its GPUs exist only as devices of ``gpu.nvidia.com`` ResourceSlices (one pool
per node, ``spec.nodeName`` set). A node's GPU count is what its allocatable shows plus these devices;
what bound pods hold is counted from their claims (``capacity.demand``), so the two add up the same way
as with the device plugin.

Counted: devices of a configured GPU driver whose ``type`` attribute is ``gpu`` (or absent). MIG slices
and VFIO devices are other types and are not whole GPUs. Slices for many nodes (``nodeSelector``,
``allNodes``) carry no per-node GPUs and count for no node.

The compute-domain kubelet plugin's slices are read too: a node whose pool publishes an IMEX channel
(type ``channel``) can take one ComputeDomain pod; once the plugin publishes anywhere in the cluster, a node
without a channel can take none (docs/SCHEDULER.md, "What a domain can take").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.domain import keys
from webhook.errors import WireError

WHOLE_GPU_TYPES = frozenset({"gpu"})


@dataclass(frozen=True, slots=True)
class SliceGpus:
    name: str
    node: str | None  # None: not a per-node slice, or neither a GPU driver's nor the compute-domain plugin's
    gpus: int
    channels: int = 0  # IMEX channel devices of the compute-domain plugin


def _field(obj: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    value = obj.get(key)
    if value is not None and not isinstance(value, kind):
        raise WireError(f"{path}.{key}", f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _device_type(device: Mapping[str, Any], driver: str, path: str) -> str | None:
    attributes = _field(device, "attributes", dict, path) or {}
    # Attribute names may be qualified with the driver's domain; both spellings name the same attribute.
    attr = attributes.get("type", attributes.get(f"{driver}/type"))
    if attr is None:
        return None
    if not isinstance(attr, dict):
        raise WireError(f"{path}.attributes.type", f"expected an object, got {type(attr).__name__}")
    value = attr.get("string")
    return value if isinstance(value, str) else None


def resource_slice(obj: Any, gpu_drivers: Sequence[str], path: str = "resourceSlice") -> SliceGpus:
    if not isinstance(obj, Mapping):
        raise WireError(path, f"expected an object, got {type(obj).__name__}")
    meta = _field(obj, "metadata", dict, path) or {}
    name = _field(meta, "name", str, f"{path}.metadata") or ""
    spec = _field(obj, "spec", dict, path) or {}
    driver = _field(spec, "driver", str, f"{path}.spec") or ""
    node = _field(spec, "nodeName", str, f"{path}.spec")
    imex = driver == keys.COMPUTE_DOMAIN_DRIVER
    if not (imex or driver in gpu_drivers) or not node:
        return SliceGpus(name, None, 0)
    devices = _field(spec, "devices", list, f"{path}.spec") or []
    gpus = channels = 0
    for i, device in enumerate(devices):
        where = f"{path}.spec.devices[{i}]"
        if not isinstance(device, dict):
            raise WireError(where, f"expected an object, got {type(device).__name__}")
        kind = _device_type(device, driver, where)
        if imex:
            channels += kind == keys.IMEX_CHANNEL_TYPE
        elif kind is None or kind in WHOLE_GPU_TYPES:
            gpus += 1
    return SliceGpus(name, node, gpus, channels)
