"""The read-only picture ``/inspect`` shows: domains with capacity, groups, reservations (plain data)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.domain.inputs import live_reservations
from webhook.domain.jobs import holds
from webhook.domain.model import Reservation, Snapshot
from webhook.domain.placement.capacity import free_local
from webhook.domain.policy import Policy
from webhook.domain.views import figures
from webhook.domain.views import inspection_detail as detail
from webhook.wire.text import clip
from webhook.wire.timestamps import rfc3339


def _reservation(res: Reservation, stored: bool) -> dict[str, Any]:
    return {
        "group": res.group_id,
        "name": f"{res.namespace}/{res.group_name}",
        "domain": res.domain,
        "size": res.size,
        "gpusPerPod": res.gpus_per_pod,
        "onePodPerNode": res.one_pod_per_node,
        "createdAt": res.created_at,
        "placedAt": res.placed_at,
        "holder": res.holder,
        "spares": res.spares,
        # held: kept for a group that waits longest until its room is expected (docs/SCHEDULER.md, "Holds")
        "state": "held" if holds.is_hold(res) else ("reserved" if stored else "proposed"),
        **({"expectedStart": rfc3339(res.expected_start, "s")} if res.expected_start is not None else {}),
        **({"segment": {"job": res.segment.job_name, "index": res.segment.index, "count": res.segment.count}}
           if res.segment is not None else {}),
    }


def summarize(snapshot: Snapshot, proposals: Mapping[str, Reservation], policy: Policy | None = None,
              now: float | None = None) -> dict[str, Any]:
    """``policy`` and ``now`` (the service's) make the reasons of waiting groups the scheduler's own;
    without ``now`` every reservation counts as live."""
    policy = policy or Policy()
    others = live_reservations(snapshot, proposals, policy, now) if now is not None else \
        {**proposals, **snapshot.reservations}
    by_node, budget = detail.gpus_by_node(snapshot), [detail.MAX_REASONED]
    fits = figures.fits_beside(snapshot, others, policy)
    healths, spares = figures.domain_healths(snapshot), figures.spare_nodes(snapshot, others)
    held = figures.held_gpus(snapshot, others)
    domains = []
    for name, node_names in sorted(snapshot.domains.items()):
        nodes = [snapshot.nodes[n] for n in node_names if n in snapshot.nodes]
        gpus, health = figures.gpus_of(nodes, snapshot), healths[name]
        domains.append({
            "domain": name,
            "label": nodes[0].domain_key if nodes else None,
            "nodes": len(nodes),
            "gpus": gpus.total,
            "freeGpus": gpus.free,
            "attachableGpus": gpus.attachable,
            "fabricZones": sorted({n.fabric_zone for n in nodes if n.fabric_zone}),
            "idleNodes": sum(1 for n in nodes if n.gpus and free_local(n, snapshot) == n.gpus),
            "heldByComputeDomain": sorted({n.name for n in nodes if n.compute_domain}),
            "fitPods": {str(gpus): pods for gpus, pods in fits[name].items()},  # pods per GPUs one new group gets
            "health": health.health,  # healthy | degraded | unhealthy, as placement weighs it
            "degradedNodes": list(health.degraded),
            "unhealthyNodes": list(health.unhealthy),
            "spareNodes": spares[name],  # held by live reservations for their groups' replacements
            "heldGpus": held[name],  # kept for a waiting group's hold as they free
            "kind": detail.domain_kind(nodes[0].domain_key if nodes else None, nodes),
            "nodeDetails": [detail.node_detail(n, snapshot, by_node.get(n.name, {})) for n in nodes],
        })
    groups = []
    for group_id, members in sorted(snapshot.members.items()):
        live = [m for m in members if not m.pod.terminated]
        res = snapshot.reservations.get(group_id) or proposals.get(group_id)
        groups.append({
            "group": group_id,
            "domain": res.domain if res else None,
            "size": res.size if res else None,
            "pods": [
                {"pod": m.pod.ref, "node": m.pod.node_name, "gpus": m.demand.gpus}
                for m in sorted(live, key=lambda m: m.pod.ref)
            ],
            "placed": sum(1 for m in live if m.pod.node_name),
            **detail.group_detail(group_id, members, snapshot, others, proposals, policy, budget),
        })
    reservations = [_reservation(r, True) for _, r in sorted(snapshot.reservations.items())]
    reservations += [_reservation(r, False) for g, r in sorted(proposals.items()) if g not in snapshot.reservations]
    attachments = [
        {"name": a.name, "pod": f"{a.pod_namespace}/{a.pod_name}", "node": a.node, "zone": a.zone, "gpus": a.gpus,
         "phase": a.phase.value, "message": clip(a.message, 512), "since": a.phase_since,
         "blocks": [{"id": b.id, "uuid": b.uuid, "pciAddress": b.pci_address} for b in a.blocks]}
        for a in sorted(snapshot.attachments.values(), key=lambda a: (a.pod_namespace, a.pod_name))
    ]
    return {
        "version": snapshot.version,
        "nodes": len(snapshot.nodes),
        "nodesWithoutDomain": sum(1 for n in snapshot.nodes.values() if n.domain is None),
        "domains": domains,
        "largestGroupFits": {str(gpus): pods for gpus, pods in figures.largest_group_fits(fits).items()},
        "groups": groups,
        "reservations": reservations,
        "fabricFree": dict(sorted(snapshot.fabric_free.items())),
        "attachments": attachments,
    }
