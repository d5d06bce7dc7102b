"""Pure: what the agent publishes on its Node, and the merge patch that gets it there.

- label ``imex-webhook.io/fabric-health``: healthy / degraded / unhealthy / none (``clique.node_health``);
- label ``nvidia.com/gpu.clique``: only with ``--own-clique-label`` (GFD or NVIDIA's DRA plugin usually
  own it); then set to the decided clique, and removed when there is none;
- annotation ``imex-webhook.io/gpus``: compact JSON, stable for equal input, so that an unchanged node
  is never patched::

      {"clique": "<uuid>.<id>" | null, "reason": "...", "health": "healthy",
       "gpus": [{"uuid": "GPU-...", "pci": "0000:41:00.0", "clique": "...", "health": "healthy",
                 "flags": ["degradedBandwidth"], "owner": "fa-...", "releasing": true, "error": "..."}]}

  ``owner`` names the FabricAttachment a fabric GPU belongs to; ``releasing`` marks GPUs being released,
  which the extender must no longer count as free. Empty fields are left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.agent import clique
from webhook.agent.model import FabricState, Gpu, normalise_pci
from webhook.domain import keys
from webhook.domain.attachments import Attachment, Phase

INVENTORY_ANNOTATION = keys.INVENTORY_ANNOTATION
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


def _entry(gpu: Gpu, own: Ownership) -> dict[str, Any]:
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
    return {k: v for k, v in entry.items() if v not in ("", None)}


def annotation(gpus: Sequence[Gpu], own: Ownership) -> str:
    decision = clique.node_clique(gpus)
    doc = {
        "clique": decision.clique,
        "reason": decision.reason,
        "health": clique.node_health(gpus).label,
        "gpus": [_entry(g, own) for g in sorted(gpus, key=lambda g: (g.pci_address or "~", g.index))],
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


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
    doc: dict[str, Any] = {"clique": None, "reason": reason, "health": "unknown", "gpus": []}
    return Desired({}, {INVENTORY_ANNOTATION: json.dumps(doc, separators=(",", ":"), sort_keys=True)})


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


def read_inventory(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The published inventory of a Node, for readers (the extender, tests); None if absent or unreadable."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(INVENTORY_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
