"""What the cluster map (``/ui``) and ``imex-webhook explain`` need beyond ``/inspect``'s totals: each
node's GPUs by group, what kind of domain a domain is, and each group's state with the reason it waits.

Plain data in, plain data out; ``webhook.domain.views.inspection`` merges it into the ``/inspect`` answer.
The reason a group without a domain waits is the one the scheduler's ``/filter`` would give now
(``placement.choose``), so the map and ``explain`` say what FailedScheduling says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.domain import domain_kinds
from webhook.domain.groups import grouping, walltime
from webhook.domain.health import HealthPolicy
from webhook.domain.model import Group, Member, Node, Reservation, Snapshot
from webhook.domain.placement import placement
from webhook.domain.placement.capacity import IN_FLIGHT, free_local
from webhook.domain.policy import Policy
from webhook.wire.fabric_attachment import Phase
from webhook.wire.timestamps import rfc3339

# Computing why a group without a domain waits costs a pass over every domain; past this many such
# groups in one answer the rest say so instead, so /inspect stays cheap on a crowded cluster (each costs
# about 40 ms on 5,000 nodes).
MAX_REASONED = 16


domain_kind = domain_kinds.kind_of  # what kind of domain a domain is: one table names them all


def node_detail(node: Node, snapshot: Snapshot, by_group: Mapping[str, int]) -> dict[str, Any]:
    """One node as the map draws it: its GPUs, those in use (by which group; the rest by pods outside any
    group), and for fabric nodes the slots free and in use."""
    used = snapshot.used_gpus.get(node.name, 0)
    return {
        "node": node.name,
        "gpus": node.gpus,
        "used": used,
        "free": free_local(node, snapshot),
        "groups": dict(sorted(by_group.items())),
        "otherUsed": max(0, used - sum(by_group.values())),
        "heldByComputeDomain": bool(node.compute_domain),
        "unschedulable": node.unschedulable,
        "fabricSlots": node.fabric_slots,
        "attachedBlocks": snapshot.attached_blocks.get(node.name, 0),
    }


def gpus_by_node(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """node -> group id -> GPUs its bound, running members hold there."""
    out: dict[str, dict[str, int]] = {}
    for group_id, members in snapshot.members.items():
        for m in members:
            if m.pod.node_name and not m.pod.terminated:
                per = out.setdefault(m.pod.node_name, {})
                per[group_id] = per.get(group_id, 0) + m.demand.gpus
    return out


def _attach_notes(live: Sequence[Member], snapshot: Snapshot) -> list[str]:
    notes = []
    for m in live:
        att = snapshot.attachments.get(m.pod.uid) if m.pod.uid else None
        if att is not None and (att.phase in IN_FLIGHT or att.phase == Phase.FAILED):
            note = f"fabric attach of {att.gpus} GPUs for {m.pod.ref} on {att.node} is {att.phase.value}"
            notes.append(note + (f": {att.message}" if att.message else ""))
    return notes


def group_detail(group_id: str, members: Sequence[Member], snapshot: Snapshot,
                 others: Mapping[str, Reservation], proposals: Mapping[str, Reservation], policy: Policy,
                 reason_budget: list[int]) -> dict[str, Any]:
    """The group's name and kind, its state and, for a person, why it is in that state.

    States: ``placed`` (every member bound), ``reserved``/``proposed`` (a domain chosen, members still to
    place), ``pending`` (no domain: the reason is the scheduler's), ``running`` (bound without a
    reservation: started before the service knew it, or its reservation was released), ``invalid`` (the
    pods' own objects contradict each other), ``split`` (already in two domains), ``finished``.
    ``reason_budget``: how many more no-domain reasons this answer may compute (shared, decremented).
    """
    live = [m for m in members if not m.pod.terminated]
    placed_nodes = sorted({m.pod.node_name for m in live if m.pod.node_name})
    placed = sum(1 for m in live if m.pod.node_name)
    placed_domains = sorted({d for n in placed_nodes if (d := _domain_of(n, snapshot))})
    stored = snapshot.reservations.get(group_id)
    res = stored or proposals.get(group_id)
    subject = (live or list(members))[:1]  # a finished group is still named after its pods
    resolution = grouping.resolve(subject[0].pod, snapshot.catalog, policy) if subject else None
    group = resolution.group if resolution else None
    if group is not None:
        name, kind = f"{group.namespace}/{group.name}", group.kind.value
    else:
        name, kind = (f"{res.namespace}/{res.group_name}" if res else group_id), None
    size = res.size if res else (resolution.size if resolution else None)
    expected = max(size or 0, len(live))
    notes = _attach_notes(live, snapshot)
    if not live:
        state, reason = ("finished", "every known pod of the group has finished") if members else \
            ("reserved" if stored else "proposed", "no pod of the group is known yet")
    elif resolution is not None and resolution.problems:
        state, reason = "invalid", "; ".join(resolution.problems)
    elif len(placed_domains) > 1:
        state = "split"
        reason = (f"pods run in {len(placed_domains)} domains ({', '.join(placed_domains)}); the group cannot be "
                  "kept in one NVLink domain: delete and resubmit the job")
    elif res is not None:
        origin = "reserved" if stored else "proposed"
        if placed >= expected:
            state, reason = "placed", f"all {placed} pods placed in domain {res.domain}"
        else:
            state = origin
            reason = (f"domain {res.domain} {origin} for {res.size} pods; {placed} placed, {expected - placed} "
                      "wait for the scheduler to place them")
    elif placed >= expected:
        state = "running"
        reason = (f"all {placed} known pods run in domain {placed_domains[0] if placed_domains else '-'} "
                  "without a reservation (placed before the service chose, or the reservation was released)")
    else:
        state = "pending"
        reason = _why_no_domain(group, live, size, snapshot, others, reason_budget, policy.fabric_health)
    return {
        "name": name,
        "kind": kind,
        "state": state,
        "pending": placed < expected and state != "finished",
        "reason": "; ".join([reason, *notes]),
        "expectedPods": expected,
        "placedDomains": placed_domains,
        "gpusPerPod": live[0].demand.gpus if live else (res.gpus_per_pod if res else None),
        **_walltime(group, live),
    }


def _walltime(group: Group | None, live: Sequence[Member]) -> dict[str, Any]:
    """The group's walltime as it states it, and when it ends at the latest once running (``walltime``)."""
    bound = group.walltime if group is not None else None
    if bound is None:
        return {"walltime": None, "expectedEnd": None}
    end = walltime.expected_end(bound, live)
    try:
        shown = rfc3339(end, "s") if end is not None else None
    except (ValueError, OverflowError, OSError):  # a start time near the calendar's end: no date to show
        shown = None
    return {"walltime": {"seconds": bound.seconds, "source": bound.source, "enforced": bound.enforced},
            "expectedEnd": shown}


def _why_no_domain(group: Group | None, live: Sequence[Member], size: int | None, snapshot: Snapshot,
                   others: Mapping[str, Reservation], reason_budget: list[int], health: HealthPolicy) -> str:
    if group is None:
        return "the group of its pods cannot be resolved from the cached objects yet"
    if reason_budget[0] <= 0:
        return (f"no domain chosen yet (the reason is computed for the first {MAX_REASONED} such groups only; "
                "the scheduler's FailedScheduling event has it)")
    reason_budget[0] -= 1
    choice = placement.choose(group, size, live[0].demand, snapshot, others, pending_self=False, health=health)
    if choice.domain is None:
        return choice.reason
    return ("no domain chosen yet: no pod of the group was filtered since one could be placed; "
            f"now it would go to domain {choice.domain} ({choice.reason})")


def _domain_of(node: str, snapshot: Snapshot) -> str | None:
    found = snapshot.nodes.get(node)
    return found.domain if found else None
