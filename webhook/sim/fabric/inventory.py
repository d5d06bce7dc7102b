"""The simulator's inventory: zones, GPU blocks, systems, credentials, options and faults.

Loaded from a YAML or JSON file (JSON is YAML, so one loader reads both) or built in (:func:`demo`, which
matches the demo cluster of ``webhook.demo.cluster``: zone ``pcie-pool-1``, nodes fab-00..fab-03 with
4 fabric slots each). Unknown keys are errors, so a typo in a fault name does not silently run a test
without its fault. The format is documented in docs/FABRIC.md.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webhook.errors import ImexWebhookError
from webhook.wire.text import clip

DEMO_ZONE = "pcie-pool-1"
DEMO_SYSTEMS = ("fab-00", "fab-01", "fab-02", "fab-03")
DEMO_SLOTS = 4
DEMO_BLOCKS = 8
DEMO_MODEL = "NVIDIA H100 PCIe"
STATES = ("Unused", "Composed", "Failed", "Unavailable")
# Ids become URI segments; keep them to characters that need no escaping.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_PCI = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


MAX_SECONDS = 86400  # any *_s value: a day is past every test's patience
_MAX_NUMBER = 2**63 - 1


def _shown(value: Any) -> str:
    return clip(repr(value), 80)


class InventoryError(ImexWebhookError, ValueError):
    """An inventory that cannot be used; the message names the key and the problem."""


@dataclass(frozen=True)
class Credentials:
    username: str = "admin"
    password: str = "admin"


@dataclass(frozen=True)
class ZoneSpec:
    id: str
    name: str = ""


@dataclass(frozen=True)
class SystemSpec:
    id: str  # the Kubernetes node name
    zone: str
    max_blocks: int = 4  # fabric slots: GPU blocks the system can take


@dataclass(frozen=True)
class BlockSpec:
    id: str
    zone: str
    model: str = DEMO_MODEL
    manufacturer: str = "NVIDIA"
    uuid: str = ""  # "GPU-<uuid>" as NVML prints it
    pci_address: str = ""  # where the GPU appears on the node it is composed to
    state: str = "Unused"
    system: str = ""  # for state Composed: the system it is composed to


@dataclass(frozen=True)
class Faults:
    latency_s: float = 0.0  # added to every /redfish request
    error_rate: float = 0.0  # fraction of requests answered error_status before any processing
    error_status: int = 503
    error_methods: tuple[str, ...] = ()  # methods error_rate / fail_next apply to; empty: all
    fail_next: int = 0  # the next N matching requests fail like error_rate, deterministically
    fail_compose: tuple[str, ...] = ()  # block Ids whose composition fails (block ends Failed)
    stuck_tasks: bool = False  # tasks started while set never finish
    hang: bool = False  # requests wait until cleared or hang_cap_s, then the connection is dropped
    hang_cap_s: float = 30.0
    crash_after_compose: int = 0  # the next N attach/detach requests change state, then answer 500
    seed: int = 0


@dataclass(frozen=True)
class Options:
    compose_delay_s: float = 0.0  # > 0: attach/detach answer 202 with a task monitor
    require_if_match: bool = False  # PATCH and actions without If-Match get 428
    no_location_header: bool = False  # quirk: 202 without Location (the body names the task)
    etag_header: bool = True  # quirk when false: @odata.etag in the body only
    page_size: int = 0  # > 0: collections are paged with Members@odata.nextLink
    actions: bool = True  # quirk when false: no Add/RemoveResourceBlock actions, only PATCH of the system
    basic_auth: bool = True  # false: HTTP Basic is refused, as services that allow sessions only do
    sessions: bool = True  # the SessionService's ServiceEnabled: false refuses new sessions
    session_timeout_s: int = 1800  # SessionTimeout: a session unused this long is closed (30..86400)
    max_sessions: int = 64  # more open sessions than this: 503 SessionLimitExceeded
    faults: Faults = field(default_factory=Faults)


@dataclass(frozen=True)
class Inventory:
    zones: tuple[ZoneSpec, ...]
    systems: tuple[SystemSpec, ...]
    blocks: tuple[BlockSpec, ...]
    credentials: Credentials = field(default_factory=Credentials)
    options: Options = field(default_factory=Options)


def system_block_id(system: str) -> str:
    """The Id of the ComputerSystem-type ResourceBlock that places an expandable system in its zone."""
    return f"host-{system}"


def gpu_uuid(seed: str) -> str:
    """A stable NVML-style GPU UUID, so two runs (and the docs) show the same identities."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, "imex-webhook-fabric-sim/" + seed))


def demo() -> Inventory:
    zones = (ZoneSpec(DEMO_ZONE, "PCIe composable pool 1"),)
    systems = tuple(SystemSpec(name, DEMO_ZONE, DEMO_SLOTS) for name in DEMO_SYSTEMS)
    blocks = tuple(
        BlockSpec(f"gpu-{i:02d}", DEMO_ZONE, uuid=gpu_uuid(f"{DEMO_ZONE}/gpu-{i:02d}"),
                  pci_address=f"0000:{0x41 + i:02x}:00.0")
        for i in range(DEMO_BLOCKS)
    )
    return Inventory(zones, systems, blocks)


def load(path: str | Path) -> Inventory:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InventoryError(f"{path}: {exc}") from exc
    try:
        return from_dict(data)
    except InventoryError as exc:
        raise InventoryError(f"{path}: {exc}") from exc


def _fields(cls: type, obj: Any, where: str) -> dict[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise InventoryError(f"{where}: expected a mapping, got {type(obj).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key not in known:
            raise InventoryError(f"{where}.{key}: unknown key (known: {', '.join(sorted(known))})")
        default = known[key].default
        if isinstance(default, tuple):
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise InventoryError(f"{where}.{key}: expected a list of strings")
            value = tuple(v.upper() if key == "error_methods" else v for v in value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise InventoryError(f"{where}.{key}: expected true or false, got {_shown(value)}")
        elif isinstance(default, int | float):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= _MAX_NUMBER:
                raise InventoryError(f"{where}.{key}: expected a non-negative number, got {_shown(value)}")
            if isinstance(default, int) and not isinstance(value, int):
                raise InventoryError(f"{where}.{key}: expected an integer, got {_shown(value)}")
            if key.endswith("_s") and value > MAX_SECONDS:
                raise InventoryError(f"{where}.{key}: at most {MAX_SECONDS} seconds, got {_shown(value)}")
        elif isinstance(default, str) and not isinstance(value, str):
            raise InventoryError(f"{where}.{key}: expected a string, got {_shown(value)}")
        out[key] = value
    return out


def faults_from(obj: Any, base: Faults | None = None, where: str = "options.faults") -> Faults:
    faults = dataclasses.replace(base or Faults(), **_fields(Faults, obj, where))
    if faults.error_rate > 1:
        raise InventoryError(f"{where}.error_rate: expected a fraction 0..1, got {faults.error_rate}")
    if not 400 <= faults.error_status <= 599:
        raise InventoryError(f"{where}.error_status: expected an HTTP error status, got {faults.error_status}")
    return faults


def options_from(obj: Any, base: Options | None = None, where: str = "options") -> Options:
    raw = dict(obj or {}) if isinstance(obj, Mapping) else obj
    faults_raw = raw.pop("faults", None) if isinstance(raw, dict) else None
    start = base or Options()
    opts = dataclasses.replace(start, **_fields(Options, raw, where))
    if not 30 <= opts.session_timeout_s <= 86400:  # the range SessionService.SessionTimeout allows
        raise InventoryError(f"{where}.session_timeout_s: expected 30..86400 seconds, got {opts.session_timeout_s}")
    if opts.max_sessions < 1:
        raise InventoryError(f"{where}.max_sessions: expected at least 1")
    if not opts.basic_auth and not opts.sessions:
        raise InventoryError(f"{where}: basic_auth and sessions cannot both be off (no way in)")
    return dataclasses.replace(opts, faults=faults_from(faults_raw, start.faults, f"{where}.faults"))


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise InventoryError(f"{key}: expected a list")
    return value


def _required(spec: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if not spec.get(key):
            raise InventoryError(f"{where}.{key}: missing")
    if not _ID.match(spec["id"]):
        raise InventoryError(f"{where}.id: {spec['id']!r} is not a valid Id (letters, digits, '.', '_', '-')")


def from_dict(data: Any) -> Inventory:
    if not isinstance(data, Mapping):
        raise InventoryError("expected a mapping with zones, systems and blocks")
    extra = set(data) - {"credentials", "zones", "systems", "blocks", "options"}
    if extra:
        raise InventoryError(f"{sorted(extra)[0]}: unknown key")
    zones = []
    for i, raw in enumerate(_list(data, "zones")):
        spec = _fields(ZoneSpec, raw, f"zones[{i}]")
        _required(spec, ("id",), f"zones[{i}]")
        zones.append(ZoneSpec(**spec))
    zone_ids = {z.id for z in zones}
    systems = []
    for i, raw in enumerate(_list(data, "systems")):
        spec = _fields(SystemSpec, raw, f"systems[{i}]")
        _required(spec, ("id", "zone"), f"systems[{i}]")
        systems.append(SystemSpec(**spec))
    system_ids = {s.id for s in systems}
    blocks = []
    for i, raw in enumerate(_list(data, "blocks")):
        where = f"blocks[{i}]"
        spec = _fields(BlockSpec, raw, where)
        _required(spec, ("id", "zone"), where)
        spec.setdefault("uuid", gpu_uuid(f"{spec['zone']}/{spec['id']}"))
        if not spec["uuid"].startswith("GPU-"):
            spec["uuid"] = "GPU-" + spec["uuid"]
        try:
            uuid.UUID(spec["uuid"][4:])
        except ValueError as exc:
            raise InventoryError(f"{where}.uuid: {spec['uuid']!r} is not GPU-<uuid>") from exc
        spec.setdefault("pci_address", f"0000:{0x41 + i % 0xB0:02x}:00.0")
        if not _PCI.match(spec["pci_address"]):
            raise InventoryError(f"{where}.pci_address: expected dddd:bb:dd.f, got {spec['pci_address']!r}")
        blocks.append(BlockSpec(**spec))
    for where, items in (("zones", zones), ("systems", systems), ("blocks", blocks)):
        ids = [x.id for x in items]
        dup = next((x for x in ids if ids.count(x) > 1), None)
        if dup:
            raise InventoryError(f"{where}: duplicate id {dup!r}")
    for i, s in enumerate(systems):
        if s.zone not in zone_ids:
            raise InventoryError(f"systems[{i}].zone: unknown zone {s.zone!r}")
        if any(b.id == system_block_id(s.id) for b in blocks):
            raise InventoryError(f"blocks: the id {system_block_id(s.id)!r} is taken by system {s.id!r}")
    for i, b in enumerate(blocks):
        if b.zone not in zone_ids:
            raise InventoryError(f"blocks[{i}].zone: unknown zone {b.zone!r}")
        if b.state not in STATES:
            raise InventoryError(f"blocks[{i}].state: {b.state!r} is not one of {', '.join(STATES)}")
        if (b.state == "Composed") != bool(b.system):
            raise InventoryError(f"blocks[{i}]: a Composed block names its system, and only a Composed one")
        if b.system and b.system not in system_ids:
            raise InventoryError(f"blocks[{i}].system: unknown system {b.system!r}")
    creds = Credentials(**_fields(Credentials, data.get("credentials"), "credentials"))
    return Inventory(tuple(zones), tuple(systems), tuple(blocks), creds,
                     options_from(data.get("options"), None, "options"))


def to_dict(inv: Inventory) -> dict[str, Any]:
    """The inventory as the file format (for docs, and to write a starting point with --print-inventory)."""
    out = dataclasses.asdict(inv)
    faults = out["options"]["faults"]
    for key in ("error_methods", "fail_compose"):
        faults[key] = list(faults[key])
    for key in ("zones", "systems", "blocks"):
        out[key] = list(out[key])
    return out
