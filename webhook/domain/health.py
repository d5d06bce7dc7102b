"""Health of nodes and domains, as the placement decision weighs it (docs/SCHEDULER.md, "Fabric health").

A node takes no group member while something says it cannot run one well: the node agent reports its
NVLink fabric ``unhealthy`` (label ``imex-webhook.io/fabric-health``, from NVML's fabric state, status and
health mask), its Ready condition is not True, a node-condition taint keeps new pods off it, or it is
cordoned. A node whose fabric is ``degraded`` (some paths or links down, still usable) takes members, but
its domain is a second choice: a new group gets it only when no healthy domain fits (``avoid``, the
default), never (``refuse``), or as any other domain (``allow``). A group already running in a domain
stays there whatever its health (it cannot be moved); the operator gets an Event instead.

Generic topology schedulers see the clique as one more label: none of them reads this signal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from webhook.domain.model import Node

HealthPolicy = Literal["avoid", "allow", "refuse"]
HEALTH_POLICIES: tuple[HealthPolicy, ...] = ("avoid", "allow", "refuse")
# The health of a node or a domain: healthy | degraded (usable, fabric impaired) | unhealthy (takes no
# member; for a domain: no node can take one).
Health = Literal["healthy", "degraded", "unhealthy"]
HEALTHS: tuple[Health, ...] = ("healthy", "degraded", "unhealthy")

UNHEALTHY_FABRIC = "unhealthy"
DEGRADED_FABRIC = "degraded"


def node_problem(node: Node) -> str | None:
    """Why ``node`` takes no group member now, or None. The text ends up in the pod's FailedScheduling."""
    if node.fabric_health == UNHEALTHY_FABRIC:
        return ("the node agent reports this node's NVLink fabric unhealthy (imex-webhook.io/fabric-health="
                "unhealthy); it takes no group member until the fabric recovers")
    if node.not_ready:
        return "node is not Ready"
    if node.taints:
        return f"node has taint {node.taints[0]}"
    if node.unschedulable:
        return "node is cordoned (spec.unschedulable)"
    return None


def node_health(node: Node) -> Health:
    if node_problem(node) is not None:
        return "unhealthy"
    return "degraded" if node.fabric_health == DEGRADED_FABRIC else "healthy"


@dataclass(frozen=True, slots=True)
class DomainHealth:
    health: Health
    degraded: tuple[str, ...] = ()  # nodes whose fabric is degraded
    unhealthy: tuple[str, ...] = ()  # nodes that take no member, each for its node_problem

    def describe(self, shown: int = 3) -> str:
        """The nodes behind a domain's health, for a reason or an Event."""
        parts = []
        for what, names in (("degraded fabric", self.degraded), ("taking no pods", self.unhealthy)):
            if names:
                more = f" and {len(names) - shown} more" if len(names) > shown else ""
                parts.append(f"{what} on {', '.join(names[:shown])}{more}")
        return "; ".join(parts) or "every node healthy"


def domain_health(nodes: Iterable[Node]) -> DomainHealth:
    """``degraded`` when any node's NVLink fabric is degraded or unhealthy (an impaired fabric anywhere in
    the domain is a risk for every job in it); ``unhealthy`` when no node can take a member; else healthy.
    Nodes kept off only by readiness, taints or a cordon lower the domain's capacity, not its health."""
    degraded, unhealthy, usable = [], [], 0
    for node in nodes:
        if node.fabric_health in (DEGRADED_FABRIC, UNHEALTHY_FABRIC):
            degraded.append(node.name)
        if node_problem(node) is not None:
            unhealthy.append(node.name)
        else:
            usable += 1
    if usable == 0 and unhealthy:
        return DomainHealth("unhealthy", tuple(sorted(degraded)), tuple(sorted(unhealthy)))
    return DomainHealth("degraded" if degraded else "healthy", tuple(sorted(degraded)), tuple(sorted(unhealthy)))
