"""ResourceClaims, ResourceSlice devices and DeviceClasses, at the level the emulator needs.

Modelled: a claim's device requests (``exactly`` and ``firstAvailable`` of resource.k8s.io/v1, and the
older flat shape) with ``ExactCount``/``All``; its allocation (devices and node selector) and
``reservedFor``; devices published in node-local ResourceSlices (``spec.nodeName``); DeviceClasses
whose CEL selectors are conjunctions of equality tests on ``device.driver`` and
``device.attributes['<domain>'].<name>`` (what NVIDIA's driver ships); a class's ``extendedResourceName``.

Not modelled (documented simplifications): request-level selectors, admin access, shared or consumable
device capacity, device taints, slices for several nodes (``nodeSelector``, ``allNodes``,
``perDeviceNodeSelection``), other CEL expressions (they raise ``ValueError`` rather than guess).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.sim.cycle.selectors import NodeSelector, parse_node_selector

MAX_RESERVED_FOR = 256
_DRIVER = re.compile(r"""^device\.driver\s*==\s*(?:'([^']*)'|"([^"]*)")$""")
_ATTRIBUTE = re.compile(
    r"""^device\.attributes\[\s*(?:'([^']*)'|"([^"]*)")\s*\]\.(\w+)\s*==\s*(?:'([^']*)'|"([^"]*)"|(-?\d+)|(true|false))$""")


@dataclass(frozen=True)
class DeviceClass:
    name: str
    driver: str | None
    attributes: tuple[tuple[str, str | int | bool], ...]
    extended_resource_name: str


def _clause(clause: str, where: str) -> tuple[str | None, tuple[str, str | int | bool] | None]:
    driver = _DRIVER.match(clause)
    if driver:
        return driver.group(1) if driver.group(1) is not None else driver.group(2), None
    attr = _ATTRIBUTE.match(clause)
    if attr is None:
        raise ValueError(f"{where}: unsupported CEL clause {clause!r} (the emulator reads conjunctions of "
                         "equality tests on device.driver and device.attributes)")
    domain = attr.group(1) if attr.group(1) is not None else attr.group(2)
    text = attr.group(4) if attr.group(4) is not None else attr.group(5)
    value: str | int | bool = (text if text is not None else int(attr.group(6)) if attr.group(6) is not None
                               else attr.group(7) == "true")
    return None, (f"{domain}/{attr.group(3)}", value)


def parse_device_class(raw: Any) -> DeviceClass:
    name = str(raw.get("metadata", {}).get("name", ""))
    spec = raw.get("spec") or {}
    driver: str | None = None
    attributes: list[tuple[str, str | int | bool]] = []
    for i, selector in enumerate(spec.get("selectors") or []):
        expression = str((selector.get("cel") or {}).get("expression", ""))
        for clause in expression.split("&&"):
            found_driver, attribute = _clause(clause.strip(), f"deviceclass {name}: spec.selectors[{i}]")
            driver = found_driver if found_driver is not None else driver
            if attribute is not None:
                attributes.append(attribute)
    return DeviceClass(name, driver, tuple(attributes), str(spec.get("extendedResourceName") or ""))


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    node: str
    attributes: Mapping[str, str | int | bool]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.driver, self.pool, self.name

    def in_class(self, device_class: DeviceClass) -> bool:
        if device_class.driver is not None and device_class.driver != self.driver:
            return False
        return all(self.attributes.get(name) == value for name, value in device_class.attributes)


def parse_slice(raw: Any) -> tuple[Device, ...]:
    spec = raw.get("spec") or {}
    driver, node = str(spec.get("driver", "")), str(spec.get("nodeName") or "")
    pool = str((spec.get("pool") or {}).get("name", ""))
    devices = []
    for item in spec.get("devices") or []:
        attributes: dict[str, str | int | bool] = {}
        for key, typed in (item.get("attributes") or {}).items():
            qualified = key if "/" in key else f"{driver}/{key}"
            for kind in ("string", "int", "bool", "version"):
                if isinstance(typed, Mapping) and kind in typed:
                    attributes[qualified] = typed[kind]
        devices.append(Device(driver, pool, str(item.get("name", "")), node, attributes))
    return tuple(devices)


@dataclass(frozen=True)
class Alternative:
    name: str
    device_class: str
    count: int
    all_devices: bool


@dataclass(frozen=True)
class DeviceRequest:
    name: str
    alternatives: tuple[Alternative, ...]
    """One for ``exactly``; the ``firstAvailable`` subrequests in order (named ``request/sub``)."""


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...]
    allocated_devices: tuple[tuple[str, str, str], ...] | None
    """(driver, pool, device) of the allocation; ``None`` while unallocated."""
    available_on: NodeSelector | None
    reserved_for: tuple[str, ...]
    raw: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _alternative(raw: Mapping[str, Any], name: str) -> Alternative:
    mode = str(raw.get("allocationMode") or "ExactCount")
    count = raw.get("count")
    return Alternative(name, str(raw.get("deviceClassName", "")),
                       count if isinstance(count, int) and not isinstance(count, bool) else 1, mode == "All")


def parse_claim(raw: Any) -> Claim:
    meta = raw.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name", ""))
    requests = []
    for item in ((raw.get("spec") or {}).get("devices") or {}).get("requests") or []:
        req_name = str(item.get("name", ""))
        if isinstance(item.get("exactly"), Mapping):
            alternatives: tuple[Alternative, ...] = (_alternative(item["exactly"], req_name),)
        elif item.get("firstAvailable"):
            alternatives = tuple(_alternative(sub, f"{req_name}/{sub.get('name', '')}")
                                 for sub in item["firstAvailable"])
        else:
            alternatives = (_alternative(item, req_name),)
        requests.append(DeviceRequest(req_name, alternatives))
    status = raw.get("status") or {}
    allocation = status.get("allocation")
    devices = None
    available_on = None
    if isinstance(allocation, Mapping):
        devices = tuple((str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
                        for r in (allocation.get("devices") or {}).get("results") or [])
        if allocation.get("nodeSelector") is not None:
            available_on = parse_node_selector(allocation["nodeSelector"],
                                               f"resourceclaim {namespace}/{name}: status.allocation.nodeSelector")
    reserved = tuple(str(r.get("uid", "")) for r in status.get("reservedFor") or [] if isinstance(r, Mapping))
    return Claim(namespace, name, str(meta.get("uid") or ""), tuple(requests), devices, available_on,
                 reserved, raw)


def claim_with_status(claim: Claim, allocation: Mapping[str, Any] | None,
                      reserved_for: list[Mapping[str, Any]]) -> Claim:
    """The claim with ``status.allocation`` (``None``: deallocated) and ``status.reservedFor`` replaced."""
    status = {k: v for k, v in (claim.raw.get("status") or {}).items() if k not in ("allocation", "reservedFor")}
    if allocation is not None:
        status["allocation"] = dict(allocation)
    if reserved_for:
        status["reservedFor"] = [dict(r) for r in reserved_for]
    return parse_claim({**claim.raw, "status": status})


def reserved_entries(claim: Claim) -> list[Mapping[str, Any]]:
    return [r for r in (claim.raw.get("status") or {}).get("reservedFor") or [] if isinstance(r, Mapping)]
