"""What the Redfish client reads out of a composition service's payloads: results, errors, task states.

Pure functions over decoded JSON, kept apart from the HTTP code (``http.py``) and the engines using it, so each
tolerance for a real-world quirk is visible and testable on its own: ``Processors`` as an array of links
(the DMTF mockup) or as a link to a ProcessorCollection; the zone of a block from its ``Links.Zones``
or from the zone's ``Links.ResourceBlocks``; the GPU UUID from ``Oem.ImexWebhook.GpuUuid``, the
standard ``UUID`` or ``SerialNumber``; error bodies with or without ``@Message.ExtendedInfo``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from webhook.errors import ImexWebhookError
from webhook.wire.fabric_attachment import Block
from webhook.wire.text import clip

MAX_TEXT = 256  # bodies and messages quoted in errors are cut to this many characters
IN_USE = "ResourceBlockInUse"
RUNNING_TASK_STATES = frozenset({"New", "Starting", "Running", "Pending", "Suspended", "Interrupted", "Service",
                                 "Stopping", "Cancelling"})
FAILED_TASK_STATES = frozenset({"Exception", "Killed", "Cancelled"})


class FabricError(ImexWebhookError):
    """A fabric operation that did not succeed, in words an operator can act on.

    ``message_ids`` are the Redfish MessageIds the service sent (e.g. ``Composition.1.1.ResourceBlockInUse``);
    ``phase`` says where it stopped (discover, read, submit, task, confirm); ``retryable`` is true for
    outages and deadlines, false for refusals that a retry would meet again; ``deadline`` is true when the
    caller's deadline ran out (an attach then leaves what is in flight as it is); ``leftover`` names
    blocks that a failed attach could not roll back (the reconciler's to release).
    """

    def __init__(self, operation: str, resource: str, detail: str, *, message_ids: Iterable[str] = (),
                 status: int | None = None, phase: str = "", retryable: bool = False,
                 leftover: Iterable[str] = (), deadline: bool = False) -> None:
        self.operation = operation
        self.resource = resource
        self.detail = short(detail)
        self.message_ids = tuple(message_ids)
        self.status = status
        self.phase = phase
        self.retryable = retryable
        self.leftover = tuple(leftover)
        self.deadline = deadline
        super().__init__(self._text())

    def _text(self) -> str:
        where = f" [{self.phase}]" if self.phase else ""
        text = f"{self.operation} {self.resource}{where}: {self.detail}"
        if self.leftover:
            text += f"; still composed after rollback: {', '.join(self.leftover)}"
        return text

    def with_leftover(self, leftover: Iterable[str]) -> FabricError:
        return FabricError(self.operation, self.resource, self.detail, message_ids=self.message_ids,
                           status=self.status, phase=self.phase, retryable=self.retryable, leftover=leftover,
                           deadline=self.deadline)

    def has(self, key: str) -> bool:
        """True when a MessageId ends with ``key`` (version-independent: ``has("ResourceBlockInUse")``)."""
        return any(mid.rsplit(".", 1)[-1] == key for mid in self.message_ids)


@dataclass(frozen=True)
class Gpu:
    """What the block's Processor says about the GPU (fixed for the life of the block, so cached)."""

    is_gpu: bool
    uuid: str = ""
    pci_address: str = ""
    model: str = ""


@dataclass(frozen=True)
class BlockInfo:
    """A fabric GPU block as the service reports it now."""

    id: str  # the ResourceBlock @odata.id (FabricAttachment Block.id)
    name: str  # its Redfish Id
    zone: str  # the Zone Id (equals the node label imex-webhook.io/fabric-zone)
    state: str  # CompositionState: Unused, Composing, Composed, Failed, Unavailable, ...
    systems: tuple[str, ...]  # @odata.id of the ComputerSystems it is composed (or composing) to
    uuid: str = ""  # "GPU-<uuid>" as NVML prints it
    pci_address: str = ""  # dddd:bb:dd.f on the node it is composed to
    model: str = ""
    reserved: bool = False  # CompositionStatus.Reserved (advisory: another client claimed it)
    healthy: bool = True
    etag: str = ""

    @property
    def free(self) -> bool:
        return self.state == "Unused" and not self.systems and not self.reserved and self.healthy

    def composed_to(self, system: str) -> bool:
        return self.state in ("Composed", "ComposedAndAvailable") and system in self.systems

    def composing_to(self, system: str) -> bool:
        return self.state == "Composing" and system in self.systems

    def to_block(self) -> Block:
        return Block(id=self.id, uuid=self.uuid, pci_address=self.pci_address)


def short(text: str, limit: int = MAX_TEXT) -> str:
    return clip(" ".join(str(text).split()), limit)


def path_of(uri: str) -> str:
    """The path of a URI (services may answer absolute URLs), without a trailing slash except the root's."""
    path = urlsplit(uri).path if "://" in uri else uri.split("?", 1)[0]
    return path if path in ("/", "/redfish/v1/") else path.rstrip("/")


def odata_id(obj: Any) -> str:
    value = obj.get("@odata.id") if isinstance(obj, Mapping) else None
    return path_of(value) if isinstance(value, str) and value else ""


def link_list(obj: Any) -> list[str]:
    """The @odata.id of each link in an array of links (absent, null or malformed entries are skipped)."""
    return [u for u in (odata_id(x) for x in obj) if u] if isinstance(obj, list) else []


def links(body: Mapping[str, Any], key: str) -> list[str]:
    section = body.get("Links")
    return link_list(section.get(key)) if isinstance(section, Mapping) else []


def _error_part(body: Mapping[str, Any]) -> Mapping[str, Any]:
    error = body.get("error")
    return error if isinstance(error, Mapping) else body


def message_ids(body: Any) -> tuple[str, ...]:
    """Every MessageId in an error body (or a success body with @Message.ExtendedInfo), specific ones first."""
    if not isinstance(body, Mapping):
        return ()
    error = _error_part(body)
    infos = error.get("@Message.ExtendedInfo") or error.get("Messages") or []  # Messages: a Task's
    ids = [i["MessageId"] for i in infos if isinstance(i, Mapping) and isinstance(i.get("MessageId"), str)]
    code = error.get("code")
    if isinstance(code, str) and code not in ids:
        ids.append(code)
    return tuple(ids)


def messages_text(body: Any) -> str:
    if not isinstance(body, Mapping):
        return ""
    error = _error_part(body)
    infos = [i for i in error.get("@Message.ExtendedInfo") or error.get("Messages") or [] if isinstance(i, Mapping)]
    texts = [f"{i.get('MessageId', '')}: {i.get('Message', '')}".strip(": ") for i in infos]
    if not texts and isinstance(error.get("message"), str):
        texts = [error["message"]]
    return short("; ".join(texts))


def retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (an HTTP date is treated as absent: the client polls on its own schedule)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def block_types(body: Mapping[str, Any]) -> list[str]:
    value = body.get("ResourceBlockType")
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []


def processor_links(body: Mapping[str, Any]) -> tuple[list[str], str]:
    """(processor URIs, collection URI): the mockup lists links, a service may link a ProcessorCollection."""
    value = body.get("Processors")
    if isinstance(value, list):
        return link_list(value), ""
    return [], odata_id(value)


def parse_gpu(processor: Mapping[str, Any]) -> Gpu:
    if processor.get("ProcessorType") != "GPU":
        return Gpu(False)
    oem = processor.get("Oem")
    ours = oem.get("ImexWebhook") if isinstance(oem, Mapping) else None
    ours = ours if isinstance(ours, Mapping) else {}
    uuid = ours.get("GpuUuid") or ""
    if not uuid and isinstance(processor.get("UUID"), str) and processor["UUID"]:
        uuid = "GPU-" + processor["UUID"]
    if not uuid and isinstance(processor.get("SerialNumber"), str):
        uuid = processor["SerialNumber"]
    model = processor.get("Model")
    return Gpu(True, str(uuid), str(ours.get("PciAddress") or ""), model if isinstance(model, str) else "")


def parse_block(body: Mapping[str, Any], zone: str, gpu: Gpu, etag: str = "") -> BlockInfo:
    status = body.get("CompositionStatus")
    status = status if isinstance(status, Mapping) else {}
    health = body.get("Status")
    healthy = not (isinstance(health, Mapping) and health.get("Health") == "Critical")
    state = status.get("CompositionState")
    return BlockInfo(
        id=odata_id(body), name=str(body.get("Id") or odata_id(body).rsplit("/", 1)[-1]), zone=zone,
        state=state if isinstance(state, str) else "", systems=tuple(links(body, "ComputerSystems")),
        uuid=gpu.uuid, pci_address=gpu.pci_address, model=gpu.model, reserved=status.get("Reserved") is True,
        healthy=healthy, etag=etag or str(body.get("@odata.etag") or ""),
    )


def task_state(body: Any) -> tuple[str, int | None]:
    """(TaskState, PercentComplete) of a Task body; ("", None) for anything else."""
    if not isinstance(body, Mapping) or not isinstance(body.get("TaskState"), str):
        return "", None
    percent = body.get("PercentComplete")
    return body["TaskState"], percent if isinstance(percent, int) else None


def action_target(system: Mapping[str, Any], name: str) -> str:
    actions = system.get("Actions")
    action = actions.get(f"#{name}") if isinstance(actions, Mapping) else None
    target = action.get("target") if isinstance(action, Mapping) else None
    return path_of(target) if isinstance(target, str) and target else ""


@dataclass
class SystemView:
    """A ComputerSystem as last read: the ETag for If-Match ("" = read again first) and its block links."""

    uri: str
    id: str
    host_name: str
    etag: str
    blocks: list[str]
    add: str  # action targets, "" when the system does not advertise them
    remove: str

    def update(self, fresh: SystemView) -> None:
        """Take over a fresh read in place (the caller's reference is the one stored afterwards)."""
        self.etag, self.blocks, self.add, self.remove = fresh.etag, list(fresh.blocks), fresh.add, fresh.remove


@dataclass(frozen=True)
class Goal:
    attach: bool
    system: str

    @property
    def operation(self) -> str:
        return f"attach to {self.system}" if self.attach else f"detach from {self.system}"

    def reached(self, b: BlockInfo) -> bool:
        return b.composed_to(self.system) if self.attach else self.system not in b.systems

    def in_flight(self, b: BlockInfo) -> bool:
        return self.attach and b.composing_to(self.system)

    def refusal(self, b: BlockInfo) -> FabricError | None:
        """Why the block cannot be attached (taken, failed, unavailable); None when it can be tried."""
        if not self.attach:
            return None
        others = [s for s in b.systems if s != self.system]
        if others or b.state in ("Composed", "Composing"):
            where = ", ".join(others) or "another system"
            return FabricError(self.operation, b.id, f"the block is {b.state} to {where}",
                               message_ids=(f"Composition.1.1.{IN_USE}",), status=409, phase="submit")
        if b.state != "Unused" or not b.healthy:
            return FabricError(self.operation, b.id, f"the block is {b.state or 'in no CompositionState'}"
                               f"{'' if b.healthy else ' with Health Critical'}", phase="submit")
        return None
