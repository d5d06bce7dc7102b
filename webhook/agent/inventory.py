"""Pure: what the agent publishes on its Node, and the merge patch that gets it there.

- label ``imex-webhook.io/fabric-health``: healthy / degraded / unhealthy / none (``clique.node_health``);
- label ``nvidia.com/gpu.clique``: only with ``--own-clique-label`` (GFD or NVIDIA's DRA plugin usually
  own it); then set to the decided clique, and removed when there is none;
- annotation ``imex-webhook.io/gpus``: the GPU inventory, whose format and codec are
  ``webhook.wire.gpu_inventory``; ``owner`` names the FabricAttachment a fabric GPU belongs to and
  ``releasing`` marks GPUs being released, which the extender must no longer count as free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from webhook.agent import clique
from webhook.agent.model import FabricState, Gpu, normalise_pci
from webhook.domain import keys
from webhook.wire import gpu_inventory
from webhook.wire.fabric_attachment import Attachment, Phase
from webhook.wire.gpu_inventory import GpuEntry, GpuInventory

INVENTORY_ANNOTATION = gpu_inventory.ANNOTATION
HEALTH_LABEL = keys.HEALTH_LABEL
OWNING_PHASES = frozenset({Phase.ATTACHED, Phase.READY, Phase.RELEASING})


@dataclass(frozen=True, slots=True)
class Ownership:
    """Which attachment each fabric GPU belongs to (by UUID and by PCI address), and which are releasing."""

    owners: Mapping[str, str] = field(default_factory=dict)
    releasing: frozenset[str] = frozenset()

    def owner(self, gpu: Gpu) -> str:
        return self.owners.get(gpu.uuid) or self.owners.get(gpu.pci_address) or ""

    def is_releasing(self, gpu: Gpu) -> bool:
        return bool({gpu.uuid, gpu.pci_address} & self.releasing - {""})


def ownership(attachments: Iterable[Attachment]) -> Ownership:
    owners: dict[str, str] = {}
    releasing: set[str] = set()
    for att in sorted(attachments, key=lambda a: a.name):
        if att.phase not in OWNING_PHASES:
            continue
        for block in att.blocks:
            ids = [i for i in (block.uuid, normalise_pci(block.pci_address) if block.pci_address else "") if i]
            for ident in ids:
                owners.setdefault(ident, att.name)
            if att.phase is Phase.RELEASING:
                releasing.update(ids)
    return Ownership(owners, frozenset(releasing))


def _entry(gpu: Gpu, own: Ownership) -> GpuEntry:
    entry: dict[str, Any] = {"uuid": gpu.uuid, "pci": gpu.pci_address}
    fabric = gpu.fabric
    if gpu.valid and fabric.supported and fabric.state is FabricState.COMPLETED and fabric.status_ok:
        entry["clique"] = fabric.clique
    health = clique.gpu_health(gpu)
    entry["health"] = "unknown" if not gpu.valid else health.health.label
    if health.flags:
        entry["flags"] = list(health.flags)
    if owner := own.owner(gpu):
        entry["owner"] = owner
    if own.is_releasing(gpu):
        entry["releasing"] = True
    if gpu.error:
        entry["error"] = gpu.error
    return cast(GpuEntry, {k: v for k, v in entry.items() if v not in ("", None)})


def annotation(gpus: Sequence[Gpu], own: Ownership) -> str:
    decision = clique.node_clique(gpus)
    doc: GpuInventory = {
        "clique": decision.clique,
        "reason": decision.reason,
        "health": clique.node_health(gpus).label,
        "gpus": [_entry(g, own) for g in sorted(gpus, key=lambda g: (g.pci_address or "~", g.index))],
    }
    return gpu_inventory.encode(doc)


@dataclass(frozen=True, slots=True)
class Desired:
    labels: Mapping[str, str | None]  # None: remove the label
    annotations: Mapping[str, str]


def desired(gpus: Sequence[Gpu], own: Ownership, own_clique_label: bool) -> Desired:
    labels: dict[str, str | None] = {HEALTH_LABEL: clique.node_health(gpus).label}
    if own_clique_label:
        labels[keys.CLIQUE_LABEL] = clique.node_clique(gpus).clique
    return Desired(labels, {INVENTORY_ANNOTATION: annotation(gpus, own)})


def unavailable(reason: str) -> Desired:
    """Without NVML the agent knows nothing about the fabric: labels stay as they are, the annotation says why."""
    doc: GpuInventory = {"clique": None, "reason": reason, "health": "unknown", "gpus": []}
    return Desired({}, {INVENTORY_ANNOTATION: gpu_inventory.encode(doc)})


def node_patch(node: Mapping[str, Any], want: Desired) -> dict[str, Any] | None:
    """The RFC 7386 merge patch from the Node as it is to what we want; None when nothing differs."""
    meta = node.get("metadata") or {}
    have_labels = meta.get("labels") or {}
    have_annotations = meta.get("annotations") or {}
    labels: dict[str, str | None] = {}
    for key, value in want.labels.items():
        if value is None:
            if key in have_labels:
                labels[key] = None
        elif have_labels.get(key) != value:
            labels[key] = value
    annotations = {k: v for k, v in want.annotations.items() if have_annotations.get(k) != v}
    patch: dict[str, Any] = {}
    if labels:
        patch["labels"] = labels
    if annotations:
        patch["annotations"] = annotations
    return {"metadata": patch} if patch else None
