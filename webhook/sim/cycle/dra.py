"""DynamicResources at the level that decides where a pod can go, and what a failed bind leaves behind.

- PreEnqueue: every claim of the pod must exist (a template's claim is created by the resource claim
  controller and named in ``status.resourceClaimStatuses``); until then the pod is not even tried.
- PreFilter: an allocated claim reserved for 256 consumers is "in use"; an unallocated claim's device
  classes must exist.
- Filter, per node: unallocated claims need free devices of their class published for this node (greedy,
  in request order; ``firstAvailable`` takes the first subrequest that fits; ``All`` needs every matching
  device free) or the node fails with "cannot allocate all claims"; an allocated claim whose node
  selector does not match the node makes it fail with "resourceclaim not available on the node" (both
  UnschedulableAndUnresolvable, so preemption ignores these nodes).
- Reserve/PreBind: the allocation (devices, ``metadata.name`` node selector) and a ``reservedFor`` entry
  are written. Unreserve (after a bind ``Error``) removes only the ``reservedFor`` entry: the allocation
  stays on that node, and the next cycles can use no other node for the pod.
- PostFilter (a later cycle with no feasible node): one claim that made some node fail and that no other
  pod uses is deallocated ("deallocation of ResourceClaim completed"); the cycle after can place it anew.
- A pod that finishes releases its ``reservedFor`` entries; the claim controller deallocates a claim when
  it removes the last one.
Preemption's dry run does not free victims' devices (the plugin has no PreFilter extensions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.sim.cycle.claims import MAX_RESERVED_FOR, Claim, Device, claim_with_status, reserved_entries
from webhook.sim.cycle.cluster import ClusterState
from webhook.sim.cycle.model import Node, Pod
from webhook.sim.cycle.selectors import node_name_selector
from webhook.sim.cycle.status import UNRESOLVABLE, Status

PLUGIN = "DynamicResources"
NOT_AVAILABLE = "resourceclaim not available on the node"
CANNOT_ALLOCATE = "cannot allocate all claims"
IN_USE = "resourceclaim in use"
DEALLOCATED = "deallocation of ResourceClaim completed"

Picks = tuple[tuple[str, Device], ...]
"""(request name, device) chosen for one claim."""


def pre_enqueue(pod: Pod, cluster: ClusterState) -> str | None:
    """Why the pod cannot enter the scheduling queue yet, or ``None``."""
    for ref in pod.claims:
        if ref.claim_name is None:
            return f'pod "{pod.key}": ResourceClaim not created yet'
        if cluster.claim(pod.namespace, ref.claim_name) is None:
            return f'could not find ResourceClaim "{pod.namespace}/{ref.claim_name}"'
    return None


@dataclass(frozen=True)
class DraState:
    claims: tuple[Claim, ...]
    allocated: frozenset[tuple[str, str, str]]


def prefilter(pod: Pod, cluster: ClusterState) -> DraState | Status | None:
    """``None`` when the pod has no claims (the plugin skips it)."""
    if not pod.claims:
        return None
    claims = tuple(c for ref in pod.claims if ref.claim_name
                   for c in [cluster.claim(pod.namespace, ref.claim_name)] if c is not None)
    for claim in claims:
        if claim.allocated_devices is not None:
            if len(claim.reserved_for) >= MAX_RESERVED_FOR and pod.uid not in claim.reserved_for:
                return Status(UNRESOLVABLE, (IN_USE,), PLUGIN)
            continue
        for request in claim.requests:
            for alternative in request.alternatives:
                if alternative.device_class not in cluster.device_classes:
                    reason = f"request {alternative.name}: device class {alternative.device_class} does not exist"
                    return Status(UNRESOLVABLE, (reason,), PLUGIN)
    allocated = frozenset(d for c in cluster.claims for d in c.allocated_devices or ())
    return DraState(claims, allocated)


def _allocate(state: DraState, node: Node, cluster: ClusterState) -> dict[int, Picks] | None:
    local = [d for d in cluster.devices if d.node == node.name]
    used: set[tuple[str, str, str]] = set(state.allocated)
    result: dict[int, Picks] = {}
    for index, claim in enumerate(state.claims):
        if claim.allocated_devices is not None:
            continue
        picks: list[tuple[str, Device]] = []
        for request in claim.requests:
            for alternative in request.alternatives:
                device_class = cluster.device_classes[alternative.device_class]
                matching = [d for d in local if d.in_class(device_class)]
                free = [d for d in matching if d.key not in used]
                if alternative.all_devices:
                    chosen = free if matching and len(free) == len(matching) else None
                else:
                    chosen = free[:alternative.count] if len(free) >= alternative.count else None
                if chosen is not None:
                    picks.extend((alternative.name, d) for d in chosen)
                    used.update(d.key for d in chosen)
                    break
            else:
                return None
        result[index] = tuple(picks)
    return result


def filter_node(state: DraState, node: Node, cluster: ClusterState) -> tuple[Status | None, frozenset[int]]:
    """The node's status, and the indices of allocated claims that are not available on it."""
    unavailable = frozenset(
        i for i, c in enumerate(state.claims)
        if c.allocated_devices is not None and c.available_on is not None
        and not c.available_on.matches(node.name, node.labels))
    if any(c.allocated_devices is None for c in state.claims) and _allocate(state, node, cluster) is None:
        return Status(UNRESOLVABLE, (CANNOT_ALLOCATE,), PLUGIN), frozenset()
    if unavailable:
        return Status(UNRESOLVABLE, (NOT_AVAILABLE,), PLUGIN), unavailable
    return None, frozenset()


def _consumer(pod: Pod) -> dict[str, Any]:
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}


def reserve(cluster: ClusterState, pod: Pod, node: Node, state: DraState) -> ClusterState:
    """Reserve + PreBind: write the allocations chosen for ``node`` and reserve every claim for the pod."""
    picks = _allocate(state, node, cluster) or {}
    for index, claim in enumerate(state.claims):
        current = cluster.claim(claim.namespace, claim.name) or claim
        allocation: Mapping[str, Any] | None = (current.raw.get("status") or {}).get("allocation")
        if index in picks:
            allocation = {"devices": {"results": [{"request": name, "driver": d.driver, "pool": d.pool,
                                                   "device": d.name} for name, d in picks[index]]},
                          "nodeSelector": node_name_selector(node.name)}
        entries = reserved_entries(current)
        if pod.uid not in current.reserved_for:
            entries = [*entries, _consumer(pod)]
        cluster = cluster.with_claim(claim_with_status(current, allocation, entries))
    return cluster


def _edit_claims(cluster: ClusterState, pod: Pod, deallocate_when_empty: bool) -> ClusterState:
    for ref in pod.claims:
        claim = cluster.claim(pod.namespace, ref.claim_name) if ref.claim_name else None
        if claim is None or pod.uid not in claim.reserved_for:
            continue
        entries = [e for e in reserved_entries(claim) if str(e.get("uid", "")) != pod.uid]
        allocation = (claim.raw.get("status") or {}).get("allocation")
        if deallocate_when_empty and not entries:
            allocation = None
        cluster = cluster.with_claim(claim_with_status(claim, allocation, entries))
    return cluster


def unreserve(cluster: ClusterState, pod: Pod) -> ClusterState:
    """After a failed bind: drop the pod's reservations, keep the allocations."""
    return _edit_claims(cluster, pod, deallocate_when_empty=False)


def release(cluster: ClusterState, pod: Pod) -> ClusterState:
    """The pod finished: the claim controller drops it and deallocates claims nobody else uses."""
    return _edit_claims(cluster, pod, deallocate_when_empty=True)


def post_filter(cluster: ClusterState, pod: Pod, state: DraState | None,
                unavailable: frozenset[int]) -> tuple[ClusterState, str]:
    """Deallocate one claim that kept the pod off some node and that no other pod uses."""
    if state is None:
        return cluster, ""
    for index in sorted(unavailable):
        claim = cluster.claim(state.claims[index].namespace, state.claims[index].name)
        if claim is None or claim.allocated_devices is None:
            continue
        if not claim.reserved_for or claim.reserved_for == (pod.uid,):
            return cluster.with_claim(claim_with_status(claim, None, [])), DEALLOCATED
    return cluster, ""
