"""Repair inside the domain (docs/SCHEDULER.md, "Repair inside the domain").

When a member of a running group fails or its node is lost, its controller (Job, JobSet, a training
operator) creates a replacement. The replacement belongs where its peers run: ``placement.choose`` only
offers a group with placed members the domain they run in, and the reservation keeps that domain while
members run. When the domain has no usable node left, the replacement waits there, never elsewhere; this
module words why, with the counts of what ran out, for the pod's FailedScheduling and an Event on the
group's ComputeDomain.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.domain.model import Demand, Group, Reservation, Snapshot
from webhook.domain.placement import placement


def running_domain(group: Group, snapshot: Snapshot) -> tuple[str, int] | None:
    """(the domain where the group's members run, how many run there), or None when none runs."""
    domains: dict[str, int] = {}
    for member in snapshot.members.get(group.id, ()):
        pod = member.pod
        node = snapshot.nodes.get(pod.node_name) if pod.node_name else None
        if node is not None and node.domain and not pod.terminated and not pod.deleting:
            domains[node.domain] = domains.get(node.domain, 0) + 1
    if len(domains) != 1:
        return None  # none runs, or a split group (its reason says so already)
    ((domain, running),) = domains.items()
    return domain, running


def waiting(group: Group, size: int | None, need: Demand, snapshot: Snapshot,
            others: Mapping[str, Reservation], pending_self: bool) -> str | None:
    """Why a replacement of ``group`` cannot be placed in the domain its members run in, or None when the
    group runs nowhere (a new group: its reason is the usual one) or the domain still has room."""
    where = running_domain(group, snapshot)
    if where is None:
        return None
    domain, running = where
    others = {g: r for g, r in others.items() if g != group.id}
    choice = placement.choose(group, size, need, snapshot, others, pending_self=pending_self, health="allow")
    if choice.domain is not None:
        return None
    return (f"replacement for group {group.namespace}/{group.name} waits in NVLink domain {domain}, where "
            f"{running} members run; it is never placed in another domain: {choice.reason}")
