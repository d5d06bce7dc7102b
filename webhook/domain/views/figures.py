"""The figures an operator reads about each domain (GPUs, health, spare nodes held) and each waiting group,
and the room one new group has in each domain, computed once here for every view that shows them
(``/metrics``, ``/inspect``, the cluster map, ``imex-webhook explain``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.domain.health import DomainHealth, domain_health
from webhook.domain.inputs import DecisionInputs, live_reservations
from webhook.domain.jobs import holds, resolution
from webhook.domain.model import Demand, Group, GroupKind, Node, Reservation, Snapshot
from webhook.domain.placement import placement
from webhook.domain.placement.capacity import attachable, free_local
from webhook.domain.placement.placement import members_summary
from webhook.domain.policy import Policy

# Why a group with pods still to place waits (label values of imex_webhook_groups_waiting):
# in-domain: its domain is reserved, the scheduler has members still to place there (a gang gathering);
# domain-fits: no domain recorded yet but one fits now (the scheduler has not filtered a member since);
# no-domain-now: no domain has room now, one would once running pods finish;
# no-domain-ever: no domain could hold the group even empty (or it already runs split across domains);
# invalid-group: the pods' own objects contradict each other (admission says why);
# not-evaluated: past MAX_EVALUATED groups without a domain in one call.
WAITING_REASONS = ("in-domain", "domain-fits", "no-domain-now", "no-domain-ever", "invalid-group", "not-evaluated")
# Judging a group without a domain is a pass over every domain (what /filter does): bounded per call.
MAX_EVALUATED = 64


@dataclass(frozen=True, slots=True)
class DomainGpus:
    total: int
    free: int  # local GPUs not held by pods or attaches
    attachable: int  # fabric GPUs the domain's nodes could take now (bounded by each zone's free blocks)
    # promised by live reservations in the domain: to members still to be placed, and to spare nodes
    reserved: int = 0

    @property
    def used(self) -> int:
        return self.total - self.free


def attachable_gpus(nodes: Sequence[Node], snapshot: Snapshot) -> int:
    """Fabric GPUs these nodes could take now: per fabric zone, what the nodes could hold, at most the
    zone's free blocks."""
    zones = {n.fabric_zone for n in nodes if n.fabric_zone}
    return sum(min(snapshot.fabric_free.get(z, 0), sum(attachable(n, snapshot) for n in nodes if n.fabric_zone == z))
               for z in zones)


def gpus_of(nodes: Sequence[Node], snapshot: Snapshot) -> DomainGpus:
    return DomainGpus(total=sum(n.gpus for n in nodes), free=sum(free_local(n, snapshot) for n in nodes),
                      attachable=attachable_gpus(nodes, snapshot))


def domain_gpus(snapshot: Snapshot, promised: Mapping[str, Reservation], policy: Policy,
                now: float) -> dict[str, DomainGpus]:
    """Every domain's GPUs, with what live reservations hold for their members still to be placed and for
    their spare nodes (held while the group runs, until its reservation is released: ``placement.holds``
    keeps other groups off both alike)."""
    reserved: dict[str, int] = {}
    for group_id, res in live_reservations(snapshot, promised, policy, now).items():
        _, placed, _ = members_summary(snapshot.members.get(group_id, ()))
        held = max(res.size - placed, 0) + res.spares
        reserved[res.domain] = reserved.get(res.domain, 0) + held * res.gpus_per_pod
    out = {}
    for domain, names in snapshot.domains.items():
        figures = gpus_of([snapshot.nodes[n] for n in names if n in snapshot.nodes], snapshot)
        out[domain] = DomainGpus(figures.total, figures.free, figures.attachable, reserved.get(domain, 0))
    return out


def spare_nodes(snapshot: Snapshot, live: Mapping[str, Reservation]) -> dict[str, int]:
    """Every domain's spare nodes: those the reservations in ``live`` (the live ones, as the caller judged
    them) hold there for their groups' replacements; 0 where none."""
    out = dict.fromkeys(snapshot.domains, 0)
    for res in live.values():
        if res.domain in out:
            out[res.domain] += res.spares
    return out


def held_gpus(snapshot: Snapshot, live: Mapping[str, Reservation]) -> dict[str, int]:
    """Every domain's GPUs held for a waiting group (``webhook.domain.jobs.holds``): what its holds keep for
    the members still to place, as free GPUs come; 0 where nothing is held."""
    out = dict.fromkeys(snapshot.domains, 0)
    for group_id, res in live.items():
        if holds.is_hold(res) and res.domain in out:
            _, placed, _ = members_summary(snapshot.members.get(group_id, ()))
            out[res.domain] += max(res.size - placed, 0) * res.gpus_per_pod
    return out


def domain_healths(snapshot: Snapshot) -> dict[str, DomainHealth]:
    """Every domain's health, as placement weighs it (``health.domain_health``)."""
    return {domain: domain_health(snapshot.nodes[n] for n in names if n in snapshot.nodes)
            for domain, names in snapshot.domains.items()}


def waiting_reasons(snapshot: Snapshot, promised: Mapping[str, Reservation], policy: Policy,
                    now: float) -> dict[str, int]:
    """Each group with a live pod not yet bound, by the reason /filter would give for it now."""
    out = dict.fromkeys(WAITING_REASONS, 0)
    budget = MAX_EVALUATED
    inputs = DecisionInputs(snapshot, policy, now, promised)
    for group_id, members in snapshot.members.items():
        waiting = [m for m in members if not m.pod.terminated and not m.pod.deleting and not m.pod.node_name]
        if not waiting:
            continue
        chosen = group_id in snapshot.reservations or group_id in promised
        if not chosen:
            if budget == 0:
                out["not-evaluated"] += 1
                continue
            budget -= 1
        ctx = resolution.resolve(waiting[0].pod, inputs)
        if ctx is None:
            continue
        if ctx.resolution.problems:
            out["invalid-group"] += 1
        elif ctx.domain is None:
            out["no-domain-now" if ctx.resolvable_later else "no-domain-ever"] += 1
        else:
            out["domain-fits" if ctx.proposal is not None else "in-domain"] += 1
    return out


# -- Free slots: what one new group could be given now ---------------------------------------------------

# GPUs per pod the free-slot figures are computed for (label values of imex_webhook_domain_fit_pods): fixed,
# so that no caller can grow the label set or the work of a scrape.
FIT_SIZES = (1, 2, 4)
# The group the free-slot figures ask about: no ComputeDomain (any node may take several of its pods), no
# reservation of its own, an id no group source makes (so no promise is its own and none is skipped).
NEW_GROUP = Group(id="figures:new-group", kind=GroupKind.ANNOTATION, namespace="", name="a new group",
                  compute_domain=None, one_pod_per_node=False)


def fit_pods(snapshot: Snapshot, promised: Mapping[str, Reservation], policy: Policy, now: float,
             sizes: Sequence[int] = FIT_SIZES) -> dict[str, dict[int, int]]:
    """For every domain and each size in ``sizes``: how many pods of that many GPUs one new group could be
    given there now, with what live reservations promise other groups taken out first."""
    return fits_beside(snapshot, live_reservations(snapshot, promised, policy, now), policy, sizes)


def fits_beside(snapshot: Snapshot, others: Mapping[str, Reservation], policy: Policy,
                sizes: Sequence[int] = FIT_SIZES) -> dict[str, dict[int, int]]:
    """``fit_pods`` beside the promises in ``others`` (live ones, as the caller judged them).

    The figure is the /filter decision's own: ``placement.offer`` for a group no promise belongs to,
    asked for more pods than the domain could ever hold, so what it offers is the domain's whole room now
    (nodes that take no member, such as unhealthy, not Ready or cordoned ones, are left out by the offer
    itself). A new group asks for GPUs either from the device plugin or as DRA devices; a domain offers it
    the larger of the two. With ``fabric_health`` ``refuse`` a domain whose NVLink fabric is degraded gets
    no new group, so it has room for none.
    """
    held: dict[str, list[placement.Hold]] = {}
    for hold in placement.holds(snapshot, others, NEW_GROUP.id):
        held.setdefault(hold.domain, []).append(hold)
    out: dict[str, dict[int, int]] = {}
    for domain, names in snapshot.domains.items():
        nodes = [snapshot.nodes[n] for n in names if n in snapshot.nodes]
        if policy.fabric_health == "refuse" and domain_health(nodes).health != "healthy":
            out[domain] = dict.fromkeys(sizes, 0)
            continue
        # Every pod takes at least one GPU of a node, local or attached: the room can never reach this.
        ceiling = sum(n.gpus + n.fabric_slots for n in nodes)
        mine = held.get(domain, [])
        dra = any(n.dra_gpus for n in nodes)
        out[domain] = {gpus: max(_room(domain, Demand(gpus), ceiling, snapshot, mine),
                                 _room(domain, Demand(gpus, claim_gpus=gpus), ceiling, snapshot, mine) if dra else 0)
                       for gpus in sizes}
    return out


def _room(domain: str, need: Demand, ceiling: int, snapshot: Snapshot, held: list[placement.Hold]) -> int:
    return placement.offer(domain, NEW_GROUP, need, ceiling, snapshot, held).pods


def largest_group_fits(fits: Mapping[str, Mapping[int, int]], sizes: Sequence[int] = FIT_SIZES) -> dict[int, int]:
    """For each size: the most pods of that many GPUs one new group could be given in any one domain now
    (0 with no domain), from ``fit_pods``' figures."""
    return {gpus: max((by_size.get(gpus, 0) for by_size in fits.values()), default=0) for gpus in sizes}
