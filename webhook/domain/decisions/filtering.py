"""The /filter decision: which candidate nodes a pod may use, and why not the others.

Pods outside any group pass through unchanged. For a group pod, nodes that will not fit while the
cluster stays as it is (outside any domain, in another domain than the group's, held by another
ComputeDomain, too small even when empty) are unresolvable, so preemption leaves them alone; nodes that
could fit once other pods finish are merely failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from webhook.domain import health
from webhook.domain.groups import grouping, segments
from webhook.domain.jobs import segment_assignment as assignment
from webhook.domain.jobs import segment_plan
from webhook.domain.model import Demand, Group, GroupResolution, Node, Pod, Reservation, Snapshot
from webhook.domain.placement import candidates as candidates_
from webhook.domain.placement import capacity, node_constraints, placement, plain_pods, quotas, repair
from webhook.domain.placement.capacity import Verdict
from webhook.domain.policy import Policy
from webhook.errors import DecisionError

PREFERRED = "imex-webhook.io/placement=preferred"


@dataclass(frozen=True, slots=True)
class Context:
    """What a group pod's decision rests on: its group, demand and the domain chosen for the group."""

    resolution: GroupResolution
    demand: Demand
    domain: str | None
    reservation: Reservation | None  # the stored or proposed reservation the domain comes from
    proposal: Reservation | None  # a choice made by this call, to be remembered until bind stores it
    reason: str  # why this domain, or why none
    resolvable_later: bool = False
    pod_uid: str = ""
    # A segment's choice is the whole job's plan: the other segments' reservations, stored with this one.
    siblings: tuple[tuple[Group, Reservation], ...] = ()
    # A member without a rank given its segment by this decision: the engine writes the segment label on the
    # pod before it passes (webhook.domain.jobs.segment_assignment).
    gives_segment: bool = False

    @property
    def group(self) -> Group | None:
        return self.resolution.group


# What a /filter decision came to, as the decisions metric and the decision log label it:
# pass-through (not a group pod) | placed (some node passed) | no-fit (in the domain, none fits) |
# no-domain (no domain can host the group) | invalid-group (the group's definition is inconsistent).
FilterResult = Literal["pass-through", "placed", "no-fit", "no-domain", "invalid-group"]
# The same, except a pod outside any group: not-a-group | placed | no-fit | no-domain | invalid-group.
FilterReasonClass = Literal["not-a-group", "placed", "no-fit", "no-domain", "invalid-group"]


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    passed: tuple[str, ...]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    context: Context | None = None
    outcome: FilterResult = "pass-through"
    reason_class: FilterReasonClass = "not-a-group"


def current_reservation(group: Group, snapshot: Snapshot, proposals: Mapping[str, Reservation],
                        policy: Policy, now: float) -> Reservation | None:
    stored = snapshot.reservations.get(group.id)
    if stored is not None and policy.live(stored, now, stored=True):
        return stored
    proposed = proposals.get(group.id)
    if proposed is not None and policy.live(proposed, now, stored=False):
        return proposed
    return None


def live_reservations(snapshot: Snapshot, proposals: Mapping[str, Reservation], policy: Policy,
                      now: float) -> dict[str, Reservation]:
    """Every group's promise that still holds: stored ones, then this process's proposals."""
    out = {g: r for g, r in proposals.items() if policy.live(r, now, stored=False)}
    out.update({g: r for g, r in snapshot.reservations.items() if policy.live(r, now, stored=True)})
    return out


def context(pod: Pod, snapshot: Snapshot, proposals: Mapping[str, Reservation], policy: Policy,
            now: float, holder: str = "", candidates: Sequence[str] | None = None,
            given: Mapping[str, str] | None = None) -> Context | None:
    """Resolve the pod's group and the group's domain; None for a pod outside any group. ``given``: the
    segments this process gave members without a rank that the cache does not show yet (pod uid -> id)."""
    resolution = grouping.resolve(pod, snapshot.catalog, policy)
    group = resolution.group
    if group is None and not resolution.problems:
        return None
    need = capacity.demand(pod, snapshot.catalog, policy)
    if resolution.problems:  # a group name or a ComputeDomain of another namespace the pod may not join, too
        return Context(resolution, need, None, None, None, "; ".join(resolution.problems), pod_uid=pod.uid)
    assert group is not None
    seg = group.segment
    # Only a job cut into more segments than there are domains can outnumber them: the per-node count of
    # what the domains hold is not made on every filter of every segmented job.
    outnumbered = (segments.outnumbered(group, placement.ceilings(group, need, snapshot, seg.job_size))
                   if seg is not None and seg.count > len(snapshot.domains) else None)
    if outnumbered:  # no domain, as for any job no plan holds, without planning one
        return Context(resolution, need, None, None, None, outnumbered, pod_uid=pod.uid)
    job, job_size, moved = group, resolution.size, ""
    if group.segment is not None and assignment.excess(group, pod, snapshot, given or {}):
        job, job_size = assignment.whole_job(group)
        moved = f"segment {group.segment.index} holds its {group.segment.pods()} pods without this one; "
    if job.unassigned_per and job_size is not None:
        member, why = assignment.choose(job, job_size, pod, snapshot, given or {})
        why = moved + why
        if member is None or member.segment is None:
            return Context(resolution, need, None, None, None, why, pod_uid=pod.uid)
        ctx = context_of_segment(pod, replace(resolution, group=member, size=member.segment.pods()), need,
                                 snapshot, proposals, policy, now, holder, candidates)
        return replace(ctx, gives_segment=True, reason=f"{why}; {ctx.reason}")
    return context_of_segment(pod, resolution, need, snapshot, proposals, policy, now, holder, candidates, given)


def context_of_segment(pod: Pod, resolution: GroupResolution, need: Demand, snapshot: Snapshot,
                       proposals: Mapping[str, Reservation], policy: Policy, now: float, holder: str,
                       candidates: Sequence[str] | None, given: Mapping[str, str] | None = None) -> Context:
    """The domain of a resolved group (a segment, a whole job or any other group) and why."""
    group = resolution.group
    assert group is not None
    existing = current_reservation(group, snapshot, proposals, policy, now)
    if existing is not None and existing.namespace != group.namespace:
        # Every source names a group within its namespace; should two namespaces' pods ever meet under one
        # identity, the group stays its first namespace's (a pod never joins another tenant's domain).
        why = (f"group {group.id} is reserved for namespace {existing.namespace}; a pod of namespace "
               f"{group.namespace} does not join it")
        return Context(replace(resolution, problems=(why,)), need, None, None, None, why, pod_uid=pod.uid)
    if existing is not None:
        origin = "reserved" if existing.version else "proposed"
        return Context(resolution, need, existing.domain, existing, None,
                       f"domain {origin} for the group at {existing.created_at:.0f}", pod_uid=pod.uid)
    if group.segment is not None:
        return _segment_context(pod, resolution, need, snapshot, proposals, policy, now, holder, candidates)
    if group.preferred:
        split = _split_already(pod, resolution, need, snapshot, proposals, policy, now, holder, candidates,
                               given or {})
        if split is not None:
            return split
    known = {m.pod.uid for m in snapshot.members.get(group.id, ()) if m.pod.uid}
    live = live_reservations(snapshot, proposals, policy, now)
    choice = placement.choose(
        group, resolution.size, need, snapshot, live,
        pending_self=not pod.uid or pod.uid not in known,
        allowed=set(candidates) if candidates is not None else None,
        health=policy.fabric_health,
        policy=policy,
    )
    if choice.domain is None and group.preferred and not any(  # a running job is not split afterwards
            m.pod.node_name for m in snapshot.members.get(group.id, ())):
        return _split(pod, resolution, need, snapshot, proposals, policy, now, holder, candidates, choice.reason,
                      given or {})
    if choice.domain is None:
        return Context(resolution, need, None, None, None, choice.reason, choice.resolvable_later, pod.uid)
    _, placed, _ = placement.members_summary(snapshot.members.get(group.id, ()))
    proposal = Reservation(
        group_id=group.id,
        group_name=group.name,
        namespace=group.namespace,
        domain=choice.domain,
        size=placed + choice.remaining,
        gpus_per_pod=need.gpus,
        one_pod_per_node=group.one_pod_per_node,
        created_at=now,
        holder=holder,
        spares=choice.spares,
    )
    over = quotas.refusal(group, (proposal,), not pod.uid or pod.uid not in known, snapshot, live, policy)
    if over:
        return Context(resolution, need, None, None, None, over, pod_uid=pod.uid)
    return Context(resolution, need, choice.domain, proposal, proposal, choice.reason, pod_uid=pod.uid)


def _split_already(pod: Pod, resolution: GroupResolution, need: Demand, snapshot: Snapshot,
                   proposals: Mapping[str, Reservation], policy: Policy, now: float, holder: str,
                   candidates: Sequence[str] | None, given: Mapping[str, str]) -> Context | None:
    """A preferred job whose split this pod's catalog does not show yet, though its segments are promised:
    the pod's segment at the size chosen."""
    group = resolution.group
    assert group is not None
    live = live_reservations(snapshot, proposals, policy, now)
    sizes = {r.segment.size for r in live.values() if r.segment is not None and r.segment.job_id == group.id}
    if not sizes or resolution.size is None:
        return None
    member, size, problems = segments.at_rank(group, resolution.size, min(sizes), pod, PREFERRED,
                                                  snapshot.catalog)
    gives = bool(member.unassigned_per)
    if gives and not problems:
        found, why = assignment.choose(member, resolution.size, pod, snapshot, given)
        if found is None or found.segment is None:
            problems = [why]
        else:
            member, size = found, found.segment.pods()
    at = replace(resolution, group=member, size=size, problems=tuple(problems))
    if problems:
        return Context(at, need, None, None, None, "; ".join(problems), pod_uid=pod.uid)
    existing = current_reservation(member, snapshot, proposals, policy, now)
    if existing is not None:
        return Context(at, need, existing.domain, existing, None, "domain of the job's segment", pod_uid=pod.uid,
                       gives_segment=gives)
    return replace(_segment_context(pod, at, need, snapshot, proposals, policy, now, holder, candidates),
                   gives_segment=gives)


def _split(pod: Pod, resolution: GroupResolution, need: Demand, snapshot: Snapshot,
           proposals: Mapping[str, Reservation], policy: Policy, now: float, holder: str,
           candidates: Sequence[str] | None, whole: str, given: Mapping[str, str]) -> Context:
    """A preferred job no domain holds whole now: the largest segments that fit, by rank."""
    group = resolution.group
    assert group is not None
    size = resolution.size
    if size is None or size < 4:  # fewer than two segments of two: no split leaves no member alone
        return Context(resolution, need, None, None, None, whole, True, pod.uid)
    asked, _ = segments.requested(pod.annotations, snapshot.catalog.compute_domains.get(group.compute_domain or ""))

    unranked = False  # the pod has no rank: whatever the segment size, it is given its segment

    def at(per: int) -> Group | str:
        nonlocal unranked
        member, _, problems = segments.at_rank(group, size, per, pod, PREFERRED, snapshot.catalog)
        if member.unassigned_per and not problems:
            unranked = True
            found, why = assignment.choose(member, size, pod, snapshot, given)
            return found if found is not None else why
        return "; ".join(problems) if problems else member

    live = live_reservations(snapshot, proposals, policy, now)
    found = segment_plan.preferred_split(group, size, need, snapshot, live,
                                         set(candidates) if candidates is not None else None, policy, at, asked)
    if isinstance(found, str):
        return Context(resolution, need, None, None, None, f"{whole}; {PREFERRED}: {found}", True, pod.uid)
    member, planned = found
    assert member.segment is not None
    note = (f"{PREFERRED}: no domain holds all {size} pods now ({whole}), so the job is split into "
            f"{member.segment.count} segments of {member.segment.size}: ")
    at_member = replace(resolution, group=member, size=member.segment.pods())
    return replace(_segment_context(pod, at_member, need, snapshot, proposals, policy, now, holder, candidates,
                                    planned, note), gives_segment=unranked)


def _segment_context(pod: Pod, resolution: GroupResolution, need: Demand, snapshot: Snapshot,
                     proposals: Mapping[str, Reservation], policy: Policy, now: float, holder: str,
                     candidates: Sequence[str] | None, planned: segment_plan.Plan | None = None,
                     note: str = "") -> Context:
    """A segment without a reservation: plan the whole job, propose this segment's domain and the others'."""
    group = resolution.group
    assert group is not None and group.segment is not None
    seg = group.segment
    live = live_reservations(snapshot, proposals, policy, now)
    if planned is None:
        planned = segment_plan.plan(group, need, snapshot, live,
                                    set(candidates) if candidates is not None else None, policy)
    if planned.domains is None:
        return Context(resolution, need, None, None, None, planned.reason, planned.resolvable_later, pod.uid)

    def proposal(member: Group) -> Reservation:
        assert member.segment is not None and planned.domains is not None
        return Reservation(group_id=member.id, group_name=member.name, namespace=member.namespace,
                           domain=planned.domains[member.segment.index], size=seg.pods(member.segment.index),
                           gpus_per_pod=need.gpus, one_pod_per_node=member.one_pod_per_node, created_at=now,
                           holder=holder, segment=member.segment)

    own = proposal(group)
    siblings = tuple((g, proposal(g)) for i in range(seg.count) if i != seg.index
                     and (g := segments.sibling(group, seg, i)).id not in live
                     and repair.running_domain(g, snapshot) is None)
    known = {m.pod.uid for m in snapshot.members.get(group.id, ()) if m.pod.uid}
    over = quotas.refusal(group, (own, *(r for _, r in siblings)), not pod.uid or pod.uid not in known, snapshot,
                          live, policy)
    if over:
        return Context(resolution, need, None, None, None, note + over, pod_uid=pod.uid)
    return Context(resolution, need, own.domain, own, own, note + planned.reason, pod_uid=pod.uid,
                   siblings=siblings)


def filter_nodes(pod: Pod, candidates: Sequence[str], snapshot: Snapshot, policy: Policy,
                 proposals: Mapping[str, Reservation], now: float,
                 node_view: Mapping[str, Node] | None = None, holder: str = "",
                 sets: candidates_.NodeSets = candidates_.DERIVED,
                 given: Mapping[str, str] | None = None) -> FilterOutcome:
    """Split ``candidates`` into passed, failed and unresolvable nodes, each failure with its reason.

    ``node_view`` holds the nodes as the scheduler sent them (full NodeList mode); otherwise the cache.
    ``sets``: what the split derives from the cache's nodes, computed or memoized (``candidates.NodeSets``).
    """
    ctx = context(pod, snapshot, proposals, policy, now, holder, candidates, given)
    nodes = node_view if node_view is not None else snapshot.nodes
    if ctx is None:
        pending = grouping.unresolved_claims(pod, snapshot.catalog)
        if pending:
            # The scheduler asks about a pod only once its claims exist, so a template or claim missing here
            # is our cache lagging the API server: passing every node could place an IMEX pod outside its
            # group. An Error makes the scheduler retry after its backoff, by when the cache has it.
            raise DecisionError(f"pod {pod.ref} uses {', '.join(pending)}, which imex-webhook's cache does not "
                                "have yet; its group is resolved once it does (the scheduler retries)")
        return _outside_groups(pod, candidates, nodes, snapshot)
    if ctx.resolution.problems:
        return _all_fail(candidates, ctx, "invalid-group", "invalid-group", unresolvable=True)
    group = ctx.group
    assert group is not None
    if ctx.domain is None:
        return _all_fail(candidates, ctx, "no-domain", "no-domain", unresolvable=not ctx.resolvable_later)

    domain = ctx.domain
    why = candidates_.Reasons.of(domain, group, policy)
    attaching = capacity.own_attachment(pod.uid, snapshot)
    if attaching is not None:
        elsewhere = (f"fabric GPUs are being attached to node {attaching.node} for this pod (attachment "
                     f"{attaching.name}, phase {attaching.phase.value}); it binds there")
        inside, unresolvable = candidates_.split_each(candidates, nodes, domain, why, attaching.node, elsewhere)
    elif node_view is None:
        inside, unresolvable = candidates_.split(candidates, nodes, domain, snapshot.domains.get(domain, ()), sets,
                                                 why)
    else:
        members = [name for name, node in node_view.items() if node.domain == domain]
        inside, unresolvable = candidates_.split(candidates, nodes, domain, members, candidates_.DERIVED, why)

    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in inside:
        verdict, reason = _in_domain(nodes[name], group, ctx, snapshot, pod.uid)
        if verdict is Verdict.FITS:
            passed.append(name)
        elif verdict is Verdict.BUSY:
            failed[name] = reason
        else:
            unresolvable[name] = reason
    outcome: Literal["placed", "no-fit"] = "placed" if passed else "no-fit"
    return FilterOutcome(tuple(passed), failed, unresolvable, ctx, outcome, outcome)


def _outside_groups(pod: Pod, candidates: Sequence[str], nodes: Mapping[str, Node],
                    snapshot: Snapshot) -> FilterOutcome:
    """A pod in no group passes every node with room for its device-plugin GPUs (``plain_pods.short``); a node
    the cache does not know yet is left to kube-scheduler's own filters."""
    if not plain_pods.asks_gpus(pod):
        return FilterOutcome(passed=tuple(candidates))
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name in candidates:
        node = nodes.get(name)
        if node is not None and (never := plain_pods.never(pod, node)) is not None:
            unresolvable[name] = never
        elif node is None or (why := plain_pods.short(pod, node, snapshot)) is None:
            passed.append(name)
        else:
            failed[name] = why
    if passed or not (failed or unresolvable):
        return FilterOutcome(tuple(passed), failed, unresolvable)
    return FilterOutcome((), failed, unresolvable, outcome="no-fit", reason_class="no-fit")


def _in_domain(node: Node, group: Group, ctx: Context, snapshot: Snapshot, pod_uid: str) -> tuple[Verdict, str]:
    """The checks for a node inside the group's domain: its health, ComputeDomain exclusivity, then capacity."""
    problem = health.node_problem(node)
    if problem is not None:
        # Unresolvable: evicting pods there would not help, and the node's update requeues the pod.
        return Verdict.NEVER, problem
    cd = group.compute_domain
    name = node.name
    if cd and node.compute_domain and node.compute_domain != cd:
        return Verdict.NEVER, (f"node is held by ComputeDomain {node.compute_domain} "
                               "(the NVIDIA DRA driver allows one ComputeDomain per node)")
    held = snapshot.node_compute_domains.get(name)
    if cd and held and held - {cd}:
        return Verdict.NEVER, (f"node runs a pod of ComputeDomain {sorted(held - {cd})[0]} "
                               "(the NVIDIA DRA driver allows one ComputeDomain per node)")
    by_claims = snapshot.imex_holds.get(name, frozenset()) - {cd} if cd else frozenset()
    if by_claims:
        holder = node_constraints.holder_name(min(by_claims), snapshot)
        return Verdict.NEVER, (f"node's IMEX channel or daemon device is allocated to {holder} (the NVIDIA DRA "
                               "driver allows one ComputeDomain per node)")
    channels = snapshot.channel_nodes
    if cd and channels is not None and name not in channels:
        return Verdict.NEVER, ("node publishes no IMEX channel (no compute-domain.nvidia.com ResourceSlice for it), "
                               "so a ComputeDomain pod's channel claim cannot be allocated here")
    if group.one_pod_per_node and segments.runs_member(group, snapshot.node_groups.get(name, frozenset())):
        return Verdict.NEVER, ("node already runs a pod of this ComputeDomain; the driver publishes one "
                               "IMEX channel per node, so members need one node each")
    fit = capacity.node_fit(node, ctx.demand, snapshot, pod_uid)
    return fit.verdict, fit.reason


def _all_fail(candidates: Sequence[str], ctx: Context, outcome: FilterResult, reason_class: FilterReasonClass,
              unresolvable: bool) -> FilterOutcome:
    reasons = {name: ctx.reason for name in candidates}
    if unresolvable:
        return FilterOutcome((), {}, reasons, ctx, outcome, reason_class)
    return FilterOutcome((), reasons, {}, ctx, outcome, reason_class)
