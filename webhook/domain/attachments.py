"""The FabricAttachment contract shared by the extender (which creates and advances it), the node agent
(which prepares and releases the GPUs) and the reconciler (which rolls back and cleans up).

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
from typing import Any

from webhook.domain import keys
from webhook.errors import WireError

GROUP = "imex-webhook.io"
VERSION = "v1alpha1"
KIND = "FabricAttachment"
PLURAL = "fabricattachments"
NODE_LABEL = f"{keys.PREFIX}/node"
POD_UID_LABEL = f"{keys.PREFIX}/pod-uid"
FINALIZER = f"{keys.PREFIX}/detach"
RELEASED_CONDITION = "Released"
READY_CONDITION = "Ready"


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


def _str(obj: Mapping[str, Any], key: str, path: str, required: bool = False) -> str:
    value = obj.get(key)
    if value is None or value == "":
        if required:
            raise WireError(f"{path}.{key}", "missing")
        return ""
    if not isinstance(value, str):
        raise WireError(f"{path}.{key}", f"expected a string, got {type(value).__name__}")
    return value


def parse(obj: Mapping[str, Any]) -> Attachment:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    pod = spec.get("pod") or {}
    gpus = spec.get("gpus", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise WireError("spec.gpus", f"expected a non-negative integer, got {gpus!r}")
    phase_raw = status.get("phase") or Phase.PENDING.value
    try:
        phase = Phase(phase_raw)
    except ValueError as exc:
        raise WireError("status.phase", f"unknown phase {phase_raw!r}") from exc
    blocks = tuple(
        Block(id=_str(b, "id", f"status.blocks[{i}]", required=True), uuid=_str(b, "uuid", "b"),
              pci_address=_str(b, "pciAddress", "b"))
        for i, b in enumerate(status.get("blocks") or ())
    )
    conditions = tuple(
        Condition(type=_str(c, "type", "c", True), status=_str(c, "status", "c", True), reason=_str(c, "reason", "c"),
                  message=_str(c, "message", "c"), last_transition_time=_str(c, "lastTransitionTime", "c"))
        for c in status.get("conditions") or ()
    )
    return Attachment(
        name=_str(meta, "name", "metadata", required=True),
        node=_str(spec, "node", "spec", required=True),
        pod_namespace=_str(pod, "namespace", "spec.pod"),
        pod_name=_str(pod, "name", "spec.pod"),
        pod_uid=_str(pod, "uid", "spec.pod"),
        zone=_str(spec, "zone", "spec"),
        gpus=gpus,
        system=_str(spec, "system", "spec"),
        phase=phase,
        blocks=blocks,
        message=_str(status, "message", "status"),
        phase_since=_str(status, "phaseSince", "status"),
        conditions=conditions,
        version=_str(meta, "resourceVersion", "metadata"),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def status_body(att: Attachment) -> dict[str, Any]:
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


def to_object(att: Attachment) -> dict[str, Any]:
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
