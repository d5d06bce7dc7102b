"""The FabricAttachment custom resource and its codec: the contract shared by the extender (which creates
and advances it), the node agent (which prepares and releases the GPUs) and the reconciler (which rolls
back and cleans up).

``imex-webhook.io/v1alpha1``, kind ``FabricAttachment``, cluster-scoped (the agent watches the ones for
its node with the label selector ``imex-webhook.io/node=<node>``). One object per pod that needs fabric
GPUs; named after the pod UID so a retried bind finds the attachment it started.

Phases (docs/FABRIC.md)::

    Pending -> Composing -> Attached -> Ready -> Releasing -> Detached
         \\__________\\___________\\________\\______________> Failed

- Pending:   created by /bind, nothing asked of the fabric yet.
- Composing: AddResourceBlock requested for ``status.blocks``.
- Attached:  the fabric reports the blocks composed to the node's system; the agent takes over.
- Ready:     the agent found the GPUs (by UUID or PCI address), checked them, and the node advertises them.
- Releasing: the pod is gone (or the attach is rolled back); the agent stops new use and removes the
             devices, then sets the condition ``Released=True``; only then the fabric detach runs.
- Detached:  the blocks are back in the pool; the object can be deleted (the finalizer is removed).
- Failed:    with ``status.message`` saying why; blocks still composed are released by the reconciler.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from webhook.errors import WireError
from webhook.wire import PREFIX
from webhook.wire.fields import int_, list_, map_, str_at
from webhook.wire.text import shown

GROUP = PREFIX
VERSION = "v1alpha1"
KIND = "FabricAttachment"
PLURAL = "fabricattachments"
NODE_LABEL = f"{PREFIX}/node"
POD_UID_LABEL = f"{PREFIX}/pod-uid"
FINALIZER = f"{PREFIX}/detach"
RELEASED_CONDITION = "Released"
READY_CONDITION = "Ready"


class PodRef(TypedDict):
    namespace: str
    name: str
    uid: str


class FabricAttachmentSpec(TypedDict):
    node: str
    pod: PodRef
    zone: str
    gpus: int
    system: str  # the node's Redfish ComputerSystem @odata.id


class BlockStatus(TypedDict):
    id: str
    uuid: str
    pciAddress: str


class AttachmentCondition(TypedDict):
    """``metav1.Condition``, as much of it as the project writes."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class FabricAttachmentStatus(TypedDict):
    phase: str
    blocks: list[BlockStatus]
    message: str
    phaseSince: str
    conditions: list[AttachmentCondition]


class FabricAttachment(TypedDict):
    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    spec: FabricAttachmentSpec
    status: NotRequired[FabricAttachmentStatus]


class Phase(enum.StrEnum):
    PENDING = "Pending"
    COMPOSING = "Composing"
    ATTACHED = "Attached"
    READY = "Ready"
    RELEASING = "Releasing"
    DETACHED = "Detached"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class Block:
    """A fabric GPU composed (or being composed) to the node."""

    id: str  # the Redfish ResourceBlock @odata.id
    uuid: str = ""  # the GPU UUID the fabric reports (Processor UUID / SerialNumber)
    pci_address: str = ""  # domain:bus:device.function the node will see, e.g. "0000:41:00.0"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


@dataclass(frozen=True, slots=True)
class Attachment:
    name: str
    node: str
    pod_namespace: str
    pod_name: str
    pod_uid: str
    zone: str
    gpus: int
    system: str  # the node's Redfish ComputerSystem @odata.id
    phase: Phase = Phase.PENDING
    blocks: tuple[Block, ...] = ()
    message: str = ""
    phase_since: str = ""  # RFC 3339, when the phase was entered
    conditions: tuple[Condition, ...] = field(default_factory=tuple)
    version: str = ""  # resourceVersion
    deleting: bool = False

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def released(self) -> bool:
        cond = self.condition(RELEASED_CONDITION)
        return cond is not None and cond.status == "True"


def name_for(pod_uid: str) -> str:
    return "fa-" + hashlib.sha256(pod_uid.encode()).hexdigest()[:24]


def _block(raw: Any, path: str) -> Block:
    raw = map_(raw, path)
    return Block(id=str_at(raw, "id", path, required=True), uuid=str_at(raw, "uuid", path),
                 pci_address=str_at(raw, "pciAddress", path))


def _condition(raw: Any, path: str) -> Condition:
    raw = map_(raw, path)
    return Condition(type=str_at(raw, "type", path, True), status=str_at(raw, "status", path, True),
                     reason=str_at(raw, "reason", path), message=str_at(raw, "message", path),
                     last_transition_time=str_at(raw, "lastTransitionTime", path))


def _phase(status: Mapping[str, Any]) -> Phase:
    text = str_at(status, "phase", "status") or Phase.PENDING.value
    try:
        return Phase(text)
    except ValueError:
        raise WireError("status.phase", f"unknown phase {shown(text)}") from None


def parse(obj: Any) -> Attachment:
    """A FabricAttachment object as the API server returns it; a malformed one raises ``WireError``."""
    obj = map_(obj, "")
    meta = map_(obj.get("metadata"), "metadata")
    spec = map_(obj.get("spec"), "spec")
    status = map_(obj.get("status"), "status")
    pod = map_(spec.get("pod"), "spec.pod")
    return Attachment(
        name=str_at(meta, "name", "metadata", required=True),
        node=str_at(spec, "node", "spec", required=True),
        pod_namespace=str_at(pod, "namespace", "spec.pod"),
        pod_name=str_at(pod, "name", "spec.pod"),
        pod_uid=str_at(pod, "uid", "spec.pod"),
        zone=str_at(spec, "zone", "spec"),
        gpus=int_(spec.get("gpus"), "spec.gpus"),
        system=str_at(spec, "system", "spec"),
        phase=_phase(status),
        blocks=tuple(_block(b, f"status.blocks[{i}]")
                     for i, b in enumerate(list_(status.get("blocks"), "status.blocks"))),
        message=str_at(status, "message", "status"),
        phase_since=str_at(status, "phaseSince", "status"),
        conditions=tuple(_condition(c, f"status.conditions[{i}]")
                         for i, c in enumerate(list_(status.get("conditions"), "status.conditions"))),
        version=str_at(meta, "resourceVersion", "metadata"),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def status_body(att: Attachment) -> FabricAttachmentStatus:
    return {
        "phase": att.phase.value,
        "blocks": [{"id": b.id, "uuid": b.uuid, "pciAddress": b.pci_address} for b in att.blocks],
        "message": att.message,
        "phaseSince": att.phase_since,
        "conditions": [
            {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
             "lastTransitionTime": c.last_transition_time}
            for c in att.conditions
        ],
    }


def to_object(att: Attachment) -> FabricAttachment:
    meta: dict[str, Any] = {
        "name": att.name,
        "labels": {NODE_LABEL: att.node, POD_UID_LABEL: att.pod_uid},
        "finalizers": [FINALIZER],
    }
    if att.version:
        meta["resourceVersion"] = att.version
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": meta,
        "spec": {
            "node": att.node,
            "pod": {"namespace": att.pod_namespace, "name": att.pod_name, "uid": att.pod_uid},
            "zone": att.zone,
            "gpus": att.gpus,
            "system": att.system,
        },
        "status": status_body(att),
    }
