"""GPU demand of a pod and what a node (and a domain) can still offer it; docs/ARCHITECTURE.md, "How it decides".

Capacity of a node for a demand = free local GPUs (allocatable minus what bound, non-terminated pods
hold) plus attachable fabric GPUs (free blocks of the node's fabric zone, up to the node's free slots).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from webhook.domain.model import Catalog, Demand, Node, Pod, Snapshot
from webhook.domain.policy import Policy
from webhook.wire.fabric_attachment import Attachment, Phase

# Phases in which a pod's attached GPUs are composed to the node but not yet in its allocatable.
IN_FLIGHT = frozenset({Phase.PENDING, Phase.COMPOSING, Phase.ATTACHED})
# Phases in which the attachment still belongs to the pod (it has not been given up).
LIVE = IN_FLIGHT | {Phase.READY}


def demand(pod: Pod, catalog: Catalog, policy: Policy) -> Demand:
    """Container ``nvidia.com/gpu`` plus the device counts of the pod's ``gpu.nvidia.com`` claims."""
    gpus = pod.gpu_limit
    claimed = 0
    whole = False
    for ref in pod.claims:
        if ref.template:
            spec = catalog.templates.get((pod.namespace, ref.template))
        else:
            spec = catalog.claims.get((pod.namespace, ref.claim or ""))
        if spec is None:
            continue
        for req in spec.requests:
            if req.device_class in policy.gpu_device_classes:
                if req.all_devices:
                    whole = True
                else:
                    claimed += req.count
    return Demand(gpus=gpus + claimed, whole_node=whole, claim_gpus=claimed)


def only_dra_devices(plugin_gpus: int) -> str:
    return (f"pod requests {plugin_gpus} nvidia.com/gpu from the device plugin; node publishes its GPUs only "
            "as DRA devices")


def source_mismatch(node: Node, need: Demand) -> str | None:
    """A pod asking the device plugin for GPUs cannot get DRA devices, and the other way round: a node
    offers the GPUs of the kind it publishes (the device plugin's nvidia.com/gpu, or DRA ResourceSlices).
    Attached fabric GPUs come through the device plugin."""
    plugin_need = need.gpus - need.claim_gpus
    if plugin_need > 0 and node.gpus - node.dra_gpus + node.fabric_slots == 0:
        return only_dra_devices(plugin_need)
    if (need.claim_gpus > 0 or need.whole_node) and node.dra_gpus == 0 and node.gpus > 0:
        return "pod claims GPUs through DRA; node has only device-plugin GPUs (no GPU ResourceSlice)"
    return None


class Verdict(enum.StrEnum):
    FITS = "fits"
    BUSY = "busy"  # could fit once pods on it finish -> FailedNodes
    NEVER = "never"  # will not fit while the cluster stays as it is -> FailedAndUnresolvableNodes


@dataclass(frozen=True, slots=True)
class Fit:
    verdict: Verdict
    reason: str
    local_free: int
    attach: int  # fabric GPUs that would have to be attached for the pod to fit
    left_over: int  # GPUs free on the node after the pod, counting attachable ones


def own_attachment(pod_uid: str, snapshot: Snapshot) -> Attachment | None:
    """The pod's fabric attachment while it is still live (not failed, released or detached)."""
    att = snapshot.attachments.get(pod_uid) if pod_uid else None
    return att if att is not None and att.phase in LIVE and not att.deleting else None


def free_local(node: Node, snapshot: Snapshot, pod_uid: str = "") -> int:
    """Free GPUs on the node for this pod: allocatable minus bound pods, minus GPUs attached for other
    pods that have not bound yet, plus this pod's own attachment while it is still on its way in."""
    free = node.gpus - snapshot.used_gpus.get(node.name, 0) - snapshot.promised_gpus.get(node.name, 0)
    own = own_attachment(pod_uid, snapshot)
    if own is not None and own.node == node.name:
        # In flight: composed but not in allocatable yet. Ready: in allocatable and in promised_gpus, but
        # promised to this very pod. Either way the pod may count them.
        free += own.gpus
    return max(0, free)


def attachable(node: Node, snapshot: Snapshot) -> int:
    """Fabric GPUs the node can still take: its free slots, and no more than its zone has free blocks."""
    slots = node.fabric_slots - snapshot.attached_blocks.get(node.name, 0)
    if not node.fabric_zone or slots <= 0:
        return 0
    return min(slots, snapshot.fabric_free.get(node.fabric_zone, 0))


def node_fit(node: Node, need: Demand, snapshot: Snapshot, pod_uid: str = "") -> Fit:
    """Whether one pod with ``need`` fits on ``node`` right now, and why not if it does not."""
    local = free_local(node, snapshot, pod_uid)
    fabric = attachable(node, snapshot)
    mismatch = source_mismatch(node, need)
    if mismatch is not None:
        return Fit(Verdict.NEVER, mismatch, local, 0, 0)
    if need.whole_node:
        if node.gpus == 0:
            return Fit(Verdict.NEVER, "node has no GPUs and the pod claims all GPUs of a node", local, 0, 0)
        if local < node.gpus:
            return Fit(Verdict.BUSY, f"pod claims all {node.gpus} GPUs but {node.gpus - local} are in use",
                       local, 0, 0)
        return Fit(Verdict.FITS, "", local, 0, 0)
    wanted = need.gpus
    if local >= wanted:
        return Fit(Verdict.FITS, "", local, 0, local - wanted + fabric)
    if local + fabric >= wanted:
        return Fit(Verdict.FITS, "", local, wanted - local, local + fabric - wanted)
    ceiling = node.gpus + node.fabric_slots
    if ceiling < wanted:
        extra = f" plus {node.fabric_slots} attachable fabric slots" if node.fabric_slots else ""
        return Fit(Verdict.NEVER, f"pod needs {wanted} GPUs; node has {node.gpus}{extra} even when empty",
                   local, 0, 0)
    fabric_note = f" and {fabric} attachable from fabric zone {node.fabric_zone}" if node.fabric_zone else ""
    return Fit(Verdict.BUSY, f"pod needs {wanted} GPUs; {local} free{fabric_note} now", local, 0, 0)


def domain_gpus(snapshot: Snapshot) -> dict[str, int]:
    """GPUs per NVLink domain: its nodes' own, and the fabric GPUs its nodes can take while its zone has them."""
    own: dict[str, int] = {}
    slots: dict[tuple[str, str], int] = {}
    for node in snapshot.nodes.values():
        if node.domain is None:
            continue
        own[node.domain] = own.get(node.domain, 0) + node.gpus
        if node.fabric_zone and node.fabric_slots:
            key = (node.domain, node.fabric_zone)
            slots[key] = slots.get(key, 0) + node.fabric_slots
    for (domain, zone), count in slots.items():
        own[domain] += min(count, snapshot.fabric_free.get(zone, 0))
    return own

