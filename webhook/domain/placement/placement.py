"""Choosing one domain for a whole group (docs/ARCHITECTURE.md, "How it decides").

Only domains that can host every remaining member count; among them the best fit (least capacity left
over) wins so that large domains stay whole, then the one needing fewer fabric attaches, then the
domain name, so every replica makes the same choice from the same state. Capacity already promised to
other groups (their reservations, minus members they placed) is taken out first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from webhook.domain.groups import segments
from webhook.domain.health import HealthPolicy, domain_health
from webhook.domain.model import Demand, Group, Member, Node, Reservation, Snapshot
from webhook.domain.placement import exclusive, refusal
from webhook.domain.placement.capacity import attachable, free_local
from webhook.domain.placement.node_constraints import (
    BUSY,
    FILTERED,
    NO_FABRIC,
    OWN_MEMBER,
    PROMISED,
    held_by,
    lasting,
    ordered,
    summary,
)
from webhook.domain.policy import Policy


@dataclass(frozen=True, slots=True)
class Offer:
    """What one domain can do for the group."""

    domain: str
    pods: int  # members it can host now (capped at the members still to place)
    attaches: int  # fabric GPUs needed to host them
    spare_gpus: int  # free GPUs left in the domain after hosting them
    spare_nodes: int  # eligible nodes left untouched
    ceiling: int  # members it could host if every pod in it finished (ignores current use)
    nodes: int = 0  # nodes in the domain
    ruled_out: tuple[tuple[str, int], ...] = ()  # (constraint, nodes it keeps from taking a member), largest first
    offered: int = 0  # nodes of the domain among the scheduler's candidates (all of them without candidates)

    def shortfall(self, remaining: int, one_pod_per_node: bool) -> str:
        """Which constraints ran out, with counts, for a group this domain cannot host."""
        return summary(self.domain, self.nodes, self.ruled_out, self.pods, remaining, one_pod_per_node)


@dataclass(frozen=True, slots=True)
class Choice:
    domain: str | None
    reason: str  # why this domain, or why none
    remaining: int  # members still to place
    offers: tuple[Offer, ...] = ()
    resolvable_later: bool = False  # no domain now, but one could host the group once pods finish
    spares: int = 0  # spare members' worth of the chosen domain held for the group (webhook.domain.groups.spares)


@dataclass(frozen=True, slots=True)
class Hold:
    """Capacity another group has been promised in a domain and not used yet."""

    domain: str
    pods: int
    gpus_per_pod: int
    compute_domain: bool


def members_summary(members: Iterable[Member]) -> tuple[int, int, set[str]]:
    """(known non-terminated members, placed members, node names they are placed on)."""
    seen = placed = 0
    nodes: set[str] = set()
    for m in members:
        if m.pod.terminated:
            continue
        seen += 1
        if m.pod.node_name:
            placed += 1
            nodes.add(m.pod.node_name)
    return seen, placed, nodes


def holds(snapshot: Snapshot, others: Mapping[str, Reservation], exclude: str) -> list[Hold]:
    out = []
    for group_id, res in sorted(others.items()):
        if group_id == exclude:
            continue
        _, placed, _ = members_summary(snapshot.members.get(group_id, ()))
        unplaced = res.size - placed
        if unplaced + res.spares > 0:  # its spare nodes are kept off like members still to place
            out.append(Hold(res.domain, max(unplaced, 0) + res.spares, res.gpus_per_pod, res.one_pod_per_node))
    return out


def eligible(node: Node, group: Group, snapshot: Snapshot) -> bool:
    """Not held by another ComputeDomain (the driver allows one per node; ``node_constraints.held_by``)."""
    return held_by(node, group, snapshot) is None


def offer(domain: str, group: Group, need: Demand, remaining: int, snapshot: Snapshot,
          held: list[Hold], allowed: Set[str] | None = None) -> Offer:
    """``allowed``: the nodes the scheduler found feasible for this pod (its own filters: node selectors,
    affinity, taints); only they can take members now. The ceiling still counts the whole domain. Every
    node not taking a member is counted under the first constraint that rules it out (``node_constraints``)."""
    names = [n for n in snapshot.domains.get(domain, ()) if n in snapshot.nodes]
    tally: Counter[str] = Counter()
    # A node whose GPUs are of another kind than the pod asks for, that is unhealthy, not Ready, tainted
    # for its conditions or cordoned, or lacks the IMEX channel a ComputeDomain pod claims, never hosts it.
    every = []
    for name in names:
        why = lasting(snapshot.nodes[name], need, group, snapshot)
        if why is None:
            every.append(snapshot.nodes[name])
        else:
            tally[why] += 1
    nodes = every if allowed is None else [n for n in every if n.name in allowed]
    tally[FILTERED] += len(every) - len(nodes)
    already = snapshot.node_groups
    local = {n.name: free_local(n, snapshot) for n in nodes}
    slots = {n.name: attachable(n, snapshot) for n in nodes}
    zone_budget: dict[str | None, int] = {
        n.fabric_zone: snapshot.fabric_free.get(n.fabric_zone, 0) for n in nodes if n.fabric_zone
    }
    blocked: dict[str, str] = {}
    for n in nodes:
        why_held = held_by(n, group, snapshot)
        if why_held is not None:
            blocked[n.name] = why_held
        elif group.one_pod_per_node and segments.runs_member(group, already.get(n.name, frozenset())):
            blocked[n.name] = OWN_MEMBER  # a node that already runs a member takes no second one
    before_holds = dict(local)

    # Take other groups' promised pods out first, best fit, preferring local GPUs.
    for hold in held:
        if hold.domain != domain:
            continue
        for _ in range(hold.pods):
            candidates = [
                n for n in nodes
                if (not hold.compute_domain or n.name not in blocked)
                and local[n.name] + min(slots[n.name], zone_budget.get(n.fabric_zone, 0)) >= hold.gpus_per_pod
            ]
            if not candidates:
                break
            best = min(candidates, key=lambda n: (local[n.name] < hold.gpus_per_pod, local[n.name], n.name))
            take_local = min(local[best.name], hold.gpus_per_pod)
            local[best.name] -= take_local
            rest = hold.gpus_per_pod - take_local
            if rest:
                slots[best.name] -= rest
                zone_budget[best.fabric_zone] = zone_budget.get(best.fabric_zone, 0) - rest
            if hold.compute_domain:
                blocked[best.name] = PROMISED

    tally.update(blocked.values())
    usable = [n for n in nodes if n.name not in blocked]
    placed, total, attaches = _place(usable, group, need, remaining, local, slots, zone_budget)
    if total < remaining:
        for n in usable:
            if n.name not in placed:
                tally[_short(n, need, before_holds[n.name], local[n.name])] += 1
    spare_fabric = sum(max(0, v) for v in zone_budget.values())
    spare_gpus = sum(local[n.name] for n in usable) + spare_fabric
    spare_nodes = len([n for n in usable if n.name not in placed])
    ceiling = _ceiling(group, need, remaining, every)
    offered = len(names) if allowed is None else sum(1 for name in names if name in allowed)
    return Offer(domain, total, attaches, spare_gpus, spare_nodes, ceiling, len(names), ordered(tally), offered)


def _ceiling(group: Group, need: Demand, remaining: int, nodes: Sequence[Node]) -> int:
    """Members of ``need`` (at most ``remaining``) the nodes could host if every pod on them finished: the
    ceiling ignores current use, holds of other ComputeDomains included."""
    per_node = 1 if group.one_pod_per_node else remaining
    if need.whole_node:
        return sum(1 for n in nodes if n.gpus > 0)
    if need.gpus == 0:
        return len(nodes) if group.one_pod_per_node else remaining
    return sum(min(per_node, (n.gpus + n.fabric_slots) // need.gpus) for n in nodes)


def ceilings(group: Group, need: Demand, snapshot: Snapshot, most: int) -> dict[str, int]:
    """Per domain, the members of ``group`` it could host when empty, at most ``most`` (``Offer.ceiling``)."""
    return {domain: _ceiling(group, need, most, [snapshot.nodes[n] for n in names if n in snapshot.nodes])
            for domain, names in snapshot.domains.items()}


def _place(usable: list[Node], group: Group, need: Demand, remaining: int, local: dict[str, int],
           slots: dict[str, int], zone_budget: dict[str | None, int]) -> tuple[dict[str, int], int, int]:
    """Members per node (local GPUs first, then fabric attaches), how many in all, fabric GPUs to attach.
    Updates ``local``, ``slots`` and ``zone_budget`` to what is left."""
    per_node = 1 if group.one_pod_per_node else remaining
    placed: dict[str, int] = {}
    total = attaches = 0
    if need.whole_node:
        for n in usable:
            if total < remaining and n.gpus > 0 and local[n.name] == n.gpus:
                placed[n.name] = 1
                total += 1
                local[n.name] = 0
        return placed, total, attaches
    if need.gpus == 0:
        for n in usable:
            if total < remaining:
                k = min(per_node, remaining - total)
                placed[n.name] = k
                total += k
        return placed, total, attaches
    # Local GPUs first, so a domain that needs no fabric attach is recognised as such.
    for n in usable:
        k = min(per_node, remaining - total, local[n.name] // need.gpus)
        if k > 0:
            placed[n.name] = k
            total += k
            local[n.name] -= k * need.gpus
    for n in usable:
        if total >= remaining or not n.fabric_zone:
            continue
        room = per_node - placed.get(n.name, 0)
        budget = min(slots[n.name], zone_budget.get(n.fabric_zone, 0))
        k = min(room, remaining - total, (local[n.name] + budget) // need.gpus)
        if k > 0:
            used_fabric = k * need.gpus - local[n.name]
            local[n.name] = max(0, local[n.name] - k * need.gpus)
            if used_fabric > 0:
                slots[n.name] -= used_fabric
                zone_budget[n.fabric_zone] -= used_fabric
                attaches += used_fabric
            placed[n.name] = placed.get(n.name, 0) + k
            total += k
    return placed, total, attaches


def _short(node: Node, need: Demand, before_holds: int, now: int) -> str:
    """Why a usable node took no member: other groups' promises took what it had, or it is busy."""
    wanted = node.gpus if need.whole_node else need.gpus
    if before_holds >= wanted > now:
        return PROMISED
    return NO_FABRIC if node.fabric_zone and node.fabric_slots > 0 else BUSY


def still_fits(domain: str, group: Group, need: Demand, remaining: int, snapshot: Snapshot,
               others: Mapping[str, Reservation], allowed: Set[str] | None = None,
               policy: Policy | None = None) -> bool:
    """Whether ``domain`` can still host ``remaining`` members of ``group`` once every promise in ``others``
    is taken out: the test a choice passes again when it is recorded next to the domain's latest promises
    (another replica may have promised some of the domain to another group since the choice was made).
    With ``policy``, an exclusive ComputeDomain recorded there meanwhile counts too (``exclusive``)."""
    # Only the promises in this domain matter; a plan of many segments checks one domain per segment.
    others = {g: r for g, r in others.items() if r.domain == domain}
    if policy is not None and exclusive.conflict(domain, group, snapshot, others, policy) is not None:
        return False
    return offer(domain, group, need, remaining, snapshot, holds(snapshot, others, group.id), allowed).pods >= remaining


def choose(group: Group, size: int | None, need: Demand, snapshot: Snapshot,
           others: Mapping[str, Reservation], pending_self: bool = True, allowed: Set[str] | None = None,
           health: HealthPolicy = "avoid", policy: Policy | None = None) -> Choice:
    """The domain for the whole group, or a reason a human can act on when there is none.

    ``pending_self``: the pod being scheduled is not yet among the known members (a filter request for a
    pod the caches have not seen); it counts as one more member to place. ``allowed``: the candidate
    nodes the scheduler sent (None: every node). ``health``: how a domain with a degraded NVLink fabric is
    weighed for a group that runs nowhere yet (``webhook.domain.health``). ``policy``: weigh exclusive
    ComputeDomains too (``webhook.domain.placement.exclusive``).
    """
    seen, placed, placed_nodes = members_summary(snapshot.members.get(group.id, ()))
    total = max(size or 0, seen + (1 if pending_self else 0), 1)
    remaining = max(total - placed, 1)
    what = _describe(group, total, need)
    placed_domains = sorted({snapshot.nodes[n].domain or "" for n in placed_nodes if n in snapshot.nodes})
    candidates = placed_domains if placed_domains else sorted(snapshot.domains)
    if len(placed_domains) > 1:
        return Choice(None, f"{what} already runs in {len(placed_domains)} domains ({', '.join(placed_domains)}); "
                      "it is split and cannot be kept in one NVLink domain: delete and resubmit the job",
                      remaining)
    held = holds(snapshot, others, group.id)
    excluded: dict[str, str] = {}
    if policy is not None and not placed_domains:
        excluded = {d: why for d in candidates if d and (why := exclusive.conflict(d, group, snapshot, others, policy))}
    spares, spares_note = group.spares, ""
    offers = tuple(offer(d, group, need, remaining + spares, snapshot, held, allowed) for d in candidates
                   if d and d not in excluded)
    fitting = [o for o in offers if o.pods >= remaining + spares]
    if not fitting and spares:
        # The group runs without spares rather than waits for them.
        offers = tuple(offer(d, group, need, remaining, snapshot, held, allowed) for d in candidates
                       if d and d not in excluded)
        fitting = [o for o in offers if o.pods >= remaining]
        spares, spares_note = 0, f"; no domain has room for its {group.spares} spare nodes as well, none are held"
    degraded_note = ""
    if fitting and health != "allow" and not placed_domains:
        fitting, degraded_note, refused = _by_health(fitting, snapshot, health)
        if refused:
            return Choice(None, f"no healthy domain can host {remaining} pods of {what}: {refused}", remaining,
                          offers, resolvable_later=True)
    if fitting:
        best = min(fitting, key=lambda o: (o.spare_gpus, o.spare_nodes, o.attaches, o.domain))
        why = (f"best fit for {what}: {best.spare_gpus} GPUs and {best.spare_nodes} nodes left over"
               + (f", {best.attaches} fabric GPUs to attach" if best.attaches else "")
               + (f", {spares} spare nodes held" if spares else "") + degraded_note + spares_note)
        return Choice(best.domain, why, remaining, offers, spares=spares)
    if not offers and excluded:
        first = sorted(excluded)[0]
        return Choice(None, f"no domain can host {what}: every domain is ruled out by exclusive ComputeDomains "
                      f"({len(excluded)}; {excluded[first]})", remaining, offers, resolvable_later=True)
    if not offers:
        return Choice(None, f"no NVLink or fabric domain exists for {what}: no node carries a domain label",
                      remaining, offers)
    reason, later = refusal.no_room(what, remaining, placed, placed_domains, offers, group.one_pod_per_node)
    if excluded:
        first = sorted(excluded)[0]
        reason += f"; {len(excluded)} more ruled out by exclusive ComputeDomains ({excluded[first]})"
        later = True  # the holders end
    return Choice(None, reason, remaining, offers, resolvable_later=later)


def _by_health(fitting: list[Offer], snapshot: Snapshot, health: HealthPolicy) -> tuple[list[Offer], str, str]:
    """(the offers to choose from, a note for the reason, why none may be chosen): the healthy domains when
    any fits; else, with ``avoid``, the degraded ones (the note names their nodes); with ``refuse``, none."""
    judged = {o.domain: domain_health(snapshot.nodes[n] for n in snapshot.domains.get(o.domain, ())
                                      if n in snapshot.nodes) for o in fitting}
    healthy = [o for o in fitting if judged[o.domain].health == "healthy"]
    if healthy:
        return healthy, "", ""
    first = sorted(fitting, key=lambda o: o.domain)[:3]
    shown = ", ".join(f"{o.domain} ({judged[o.domain].describe()})" for o in first)
    if health == "refuse":
        return [], "", (f"domains with room have a degraded NVLink fabric: {shown}; --fabric-health-policy is "
                        "refuse, so the group waits until one recovers")
    return fitting, f"; every domain with room has a degraded NVLink fabric ({shown})", ""


def _describe(group: Group, total: int, need: Demand) -> str:
    gpus = "all GPUs of a node" if need.whole_node else f"{need.gpus} GPUs"
    per_node = ", one per node" if group.one_pod_per_node else ""
    return f"{group.kind.value} group {group.namespace}/{group.name} ({total} pods x {gpus}{per_node})"

