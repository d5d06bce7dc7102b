"""What keeps each node of a candidate domain from taking a member of a group, counted per domain, so a
group that does not fit is told which constraint ran out (docs/SCHEDULER.md, "What a domain can take").

Generic gang schedulers count GPUs per domain; a ComputeDomain's pods then fail one by one on what they do
not see. Here every node is judged against all of them together, first match wins so the counts add up to
the domain's nodes: the GPU source (device plugin or DRA), health (``webhook.domain.health``), the IMEX
channel the compute-domain plugin publishes, the driver's one-ComputeDomain-per-node lock (its node label,
members of other ComputeDomains bound there, allocated channel or daemon claims), the scheduler's own
filters, other groups' promises, free GPUs and fabric slots. The result reads like
"domain X: 18 nodes, 3 held by ComputeDomain ml/cd-a, 2 not Ready, 13 < 16 needed".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from webhook.domain.health import UNHEALTHY_FABRIC
from webhook.domain.model import Demand, Group, Node, Snapshot
from webhook.domain.placement.capacity import source_mismatch

WRONG_SOURCE = "with GPUs from the other source (device plugin vs DRA)"
UNHEALTHY = "with an unhealthy NVLink fabric"
NOT_READY = "not Ready"
TAINTED = "tainted for their conditions"
CORDONED = "cordoned"
NO_CHANNEL = "without an IMEX channel (no compute-domain.nvidia.com ResourceSlice)"
FILTERED = "rejected by the scheduler's own filters"
OWN_MEMBER = "already running a member"
PROMISED = "promised to other groups"
BUSY = "with too few free GPUs"
NO_FABRIC = "with too few free GPUs and no fabric GPUs to attach"
UNKNOWN_HOLDER = "claim:"  # prefix of a holder named by its claim when no ComputeDomain is known


def lasting(node: Node, need: Demand, group: Group, snapshot: Snapshot) -> str | None:
    """A constraint that holds while the node stays as it is: the node never takes a member then, so it
    counts for neither the domain's capacity now nor its ceiling (what it could host once pods finish)."""
    if source_mismatch(node, need) is not None:
        return WRONG_SOURCE
    if node.fabric_health == UNHEALTHY_FABRIC:
        return UNHEALTHY
    if node.not_ready:
        return NOT_READY
    if node.taints:
        return TAINTED
    if node.unschedulable:
        return CORDONED
    channels = snapshot.channel_nodes
    if group.compute_domain is not None and channels is not None and node.name not in channels:
        return NO_CHANNEL
    return None


def holders(node: Node, snapshot: Snapshot) -> set[str]:
    """Every ComputeDomain (or unattributed claim) that holds the node: the driver's node label, members
    bound there, allocated channel and daemon devices."""
    held = set(snapshot.node_compute_domains.get(node.name, frozenset()))
    held |= snapshot.imex_holds.get(node.name, frozenset())
    if node.compute_domain:
        held.add(node.compute_domain)
    return held


def held_by(node: Node, group: Group, snapshot: Snapshot) -> str | None:
    """The driver's one-ComputeDomain-per-node lock, for a group of a ComputeDomain: who else holds the
    node (that ComputeDomain ends, and the node is free again)."""
    if group.compute_domain is None:
        return None
    others = holders(node, snapshot) - {group.compute_domain}
    return f"held by {holder_name(min(others), snapshot)}" if others else None


def holder_name(holder: str, snapshot: Snapshot) -> str:
    if holder.startswith(UNKNOWN_HOLDER):
        return f"ResourceClaim {holder[len(UNKNOWN_HOLDER):]}"
    cd = snapshot.catalog.compute_domains.get(holder)
    return f"ComputeDomain {cd.namespace}/{cd.name}" if cd is not None else f"ComputeDomain {holder}"


def summary(domain: str, nodes: int, ruled_out: Iterable[tuple[str, int]], pods: int, remaining: int,
            one_pod_per_node: bool) -> str:
    """``domain X: 18 nodes, 3 held by ComputeDomain ml/a, 2 not Ready, 13 < 16 needed``."""
    parts = [f"domain {domain}: {nodes} nodes"]
    parts += [f"{count} {why}" for why, count in ruled_out]
    have = f"{pods}" if one_pod_per_node else f"room for {pods} pods"
    return ", ".join(parts) + f", {have} < {remaining} needed"


def ordered(tally: Counter[str]) -> tuple[tuple[str, int], ...]:
    """Largest first, then by text, so the same state reads the same on every replica."""
    return tuple(sorted(((why, n) for why, n in tally.items() if n > 0), key=lambda item: (-item[1], item[0])))


