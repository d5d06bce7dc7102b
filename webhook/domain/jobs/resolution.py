"""Which domain a group pod's decision is about: the pod's group (or, for a job cut into segments, its
segment), its demand, and the group's reservation, or the domain chosen now and why.

Every verb starts here (filter, prioritize, preempt, and the views that explain a waiting group): a group
with a live reservation or promise keeps its domain; a group without one gets the domain that hosts it
whole (``webhook.domain.placement.placement``); a job larger than any domain, or a preferred job no domain
holds whole now, gets a plan over several domains (``segment_plan``), and a member without a rank its
segment (``segment_assignment``). A choice made here is a proposal: the engine stores it before any member
passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from webhook.domain.groups import grouping, segments
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import holds, segment_plan
from webhook.domain.jobs import segment_assignment as assignment
from webhook.domain.model import Demand, Group, GroupResolution, Pod, Reservation
from webhook.domain.placement import capacity, placement, quotas, repair

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
    # The group's domain is held for it, and the room of the whole hold (every segment's) is not there yet:
    # its pods wait, none starts alone (webhook.domain.jobs.holds).
    waiting: bool = False

    @property
    def group(self) -> Group | None:
        return self.resolution.group


def _none(resolution: GroupResolution, need: Demand, why: str, pod: Pod, later: bool = False) -> Context:
    return Context(resolution, need, None, None, None, why, later, pod.uid)


def allowed_nodes(candidates: Sequence[str] | None) -> set[str] | None:
    return set(candidates) if candidates is not None else None


def kept_off(group: Group, inputs: DecisionInputs) -> Mapping[str, Reservation]:
    """The promises a choice for ``group`` keeps off: every live one, but the holds it may backfill under."""
    return holds.visible(inputs.live, group, inputs.now, inputs.policy.backfill_enforced_only)


def is_new_member(pod: Pod, group: Group, inputs: DecisionInputs) -> bool:
    """Whether the pod is not among the group's known members yet (it counts on top of them, as every choice
    for its group counts it: ``resolve`` and ``webhook.domain.jobs.held_out``)."""
    known = {m.pod.uid for m in inputs.snapshot.members.get(group.id, ()) if m.pod.uid}
    return not pod.uid or pod.uid not in known


def resolve(pod: Pod, inputs: DecisionInputs, candidates: Sequence[str] | None = None) -> Context | None:
    """Resolve the pod's group and the group's domain; None for a pod outside any group. ``candidates``: the
    nodes the scheduler may still use (a domain is chosen among them), None for every node."""
    snapshot = inputs.snapshot
    resolution = grouping.resolve(pod, snapshot.catalog, inputs.policy)
    group = resolution.group
    if group is None and not resolution.problems:
        return None
    need = capacity.demand(pod, snapshot.catalog, inputs.policy)
    if resolution.problems:  # a group name or a ComputeDomain of another namespace the pod may not join, too
        return _none(resolution, need, "; ".join(resolution.problems), pod)
    assert group is not None
    seg = group.segment
    # Only a job cut into more segments than there are domains can outnumber them: the per-node count of
    # what the domains hold is not made on every filter of every segmented job.
    outnumbered = (segments.outnumbered(group, placement.ceilings(group, need, snapshot, seg.job_size))
                   if seg is not None and seg.count > len(snapshot.domains) else None)
    if outnumbered:  # no domain, as for any job no plan holds, without planning one
        return _none(resolution, need, outnumbered, pod)
    job, job_size, moved = group, resolution.size, ""
    if group.segment is not None and assignment.excess(group, pod, snapshot, inputs.given):
        job, job_size = assignment.whole_job(group)
        moved = f"segment {group.segment.index} holds its {group.segment.pods()} pods without this one; "
    if job.unassigned_per and job_size is not None:
        member, why = assignment.choose(job, job_size, pod, snapshot, inputs.given)
        why = moved + why
        if member is None or member.segment is None:
            return _none(resolution, need, why, pod)
        ctx = resolve_segment(pod, replace(resolution, group=member, size=member.segment.pods()), inputs,
                              need=need, candidates=candidates)
        return replace(ctx, gives_segment=True, reason=f"{why}; {ctx.reason}")
    return resolve_segment(pod, resolution, inputs, need=need, candidates=candidates)


def resolve_segment(pod: Pod, resolution: GroupResolution, inputs: DecisionInputs, *, need: Demand,
                    candidates: Sequence[str] | None = None) -> Context:
    """The domain of a resolved group (a segment, a whole job or any other group) and why."""
    group = resolution.group
    assert group is not None
    existing = inputs.reservation(group.id)
    if existing is not None and existing.namespace != group.namespace:
        # Every source names a group within its namespace; should two namespaces' pods ever meet under one
        # identity, the group stays its first namespace's (a pod never joins another tenant's domain).
        why = (f"group {group.id} is reserved for namespace {existing.namespace}; a pod of namespace "
               f"{group.namespace} does not join it")
        return _none(replace(resolution, problems=(why,)), need, why, pod)
    if existing is not None and holds.is_hold(existing):
        held_back = holds.not_ready(existing, group, need, inputs.snapshot, inputs.live)
        if held_back is not None:
            return Context(resolution, need, existing.domain, existing, None, held_back, True, pod.uid, waiting=True)
    if existing is not None:
        origin = "reserved" if existing.version else "proposed"
        return Context(resolution, need, existing.domain, existing, None,
                       f"domain {origin} for the group at {existing.created_at:.0f}", pod_uid=pod.uid)
    if group.segment is not None:
        return _plan_segments(pod, resolution, need, inputs, candidates)
    if group.preferred:
        split = _split_already(pod, resolution, need, inputs, candidates)
        if split is not None:
            return split
    snapshot = inputs.snapshot
    pending_self = is_new_member(pod, group, inputs)
    choice = placement.choose(group, resolution.size, need, snapshot, kept_off(group, inputs),
                              pending_self=pending_self, allowed=allowed_nodes(candidates),
                              health=inputs.policy.fabric_health, policy=inputs.policy)
    if choice.domain is None and group.preferred and not any(  # a running job is not split afterwards
            m.pod.node_name for m in snapshot.members.get(group.id, ())):
        return _split(pod, resolution, need, inputs, candidates, choice.reason)
    if choice.domain is None:
        return _none(resolution, need, choice.reason, pod, choice.resolvable_later)
    _, placed, _ = placement.members_summary(snapshot.members.get(group.id, ()))
    proposal = Reservation(group_id=group.id, group_name=group.name, namespace=group.namespace,
                           domain=choice.domain, size=placed + choice.remaining, gpus_per_pod=need.gpus,
                           one_pod_per_node=group.one_pod_per_node, created_at=inputs.now, holder=inputs.holder,
                           spares=choice.spares)
    over = quotas.refusal(group, (proposal,), pending_self, snapshot, inputs.live, inputs.policy)
    if over:
        return _none(resolution, need, over, pod)
    return Context(resolution, need, choice.domain, proposal, proposal, choice.reason, pod_uid=pod.uid)


def _split_already(pod: Pod, resolution: GroupResolution, need: Demand, inputs: DecisionInputs,
                   candidates: Sequence[str] | None) -> Context | None:
    """A preferred job whose split this pod's catalog does not show yet, though its segments are promised:
    the pod's segment at the size chosen."""
    group = resolution.group
    assert group is not None
    sizes = {r.segment.size for r in inputs.live.values()
             if r.segment is not None and r.segment.job_id == group.id}
    if not sizes or resolution.size is None:
        return None
    snapshot = inputs.snapshot
    member, size, problems = segments.at_rank(group, resolution.size, min(sizes), pod, PREFERRED, snapshot.catalog)
    gives = bool(member.unassigned_per)
    if gives and not problems:
        found, why = assignment.choose(member, resolution.size, pod, snapshot, inputs.given)
        if found is None or found.segment is None:
            problems = [why]
        else:
            member, size = found, found.segment.pods()
    at = replace(resolution, group=member, size=size, problems=tuple(problems))
    if problems:
        return _none(at, need, "; ".join(problems), pod)
    existing = inputs.reservation(member.id)
    if existing is not None:
        return Context(at, need, existing.domain, existing, None, "domain of the job's segment", pod_uid=pod.uid,
                       gives_segment=gives)
    return replace(_plan_segments(pod, at, need, inputs, candidates), gives_segment=gives)


def _split(pod: Pod, resolution: GroupResolution, need: Demand, inputs: DecisionInputs,
           candidates: Sequence[str] | None, whole: str) -> Context:
    """A preferred job no domain holds whole now: the largest segments that fit, by rank."""
    group = resolution.group
    assert group is not None
    size = resolution.size
    if size is None or size < 4:  # fewer than two segments of two: no split leaves no member alone
        return _none(resolution, need, whole, pod, True)
    snapshot = inputs.snapshot
    asked, _ = segments.requested(pod.annotations, snapshot.catalog.compute_domains.get(group.compute_domain or ""))

    unranked = False  # the pod has no rank: whatever the segment size, it is given its segment

    def at(per: int) -> Group | str:
        nonlocal unranked
        member, _, problems = segments.at_rank(group, size, per, pod, PREFERRED, snapshot.catalog)
        if member.unassigned_per and not problems:
            unranked = True
            found, why = assignment.choose(member, size, pod, snapshot, inputs.given)
            return found if found is not None else why
        return "; ".join(problems) if problems else member

    found = segment_plan.preferred_split(group, size, need, snapshot, kept_off(group, inputs),
                                         allowed_nodes(candidates), inputs.policy, at, asked)
    if isinstance(found, str):
        return _none(resolution, need, f"{whole}; {PREFERRED}: {found}", pod, True)
    member, planned = found
    assert member.segment is not None
    note = (f"{PREFERRED}: no domain holds all {size} pods now ({whole}), so the job is split into "
            f"{member.segment.count} segments of {member.segment.size}: ")
    at_member = replace(resolution, group=member, size=member.segment.pods())
    return replace(_plan_segments(pod, at_member, need, inputs, candidates, planned, note), gives_segment=unranked)


def _plan_segments(pod: Pod, resolution: GroupResolution, need: Demand, inputs: DecisionInputs,
                   candidates: Sequence[str] | None, planned: segment_plan.Plan | None = None,
                   note: str = "") -> Context:
    """A segment without a reservation: plan the whole job, propose this segment's domain and the others'."""
    group = resolution.group
    assert group is not None and group.segment is not None
    seg = group.segment
    snapshot, live = inputs.snapshot, inputs.live
    if planned is None:
        planned = segment_plan.plan(group, need, snapshot, kept_off(group, inputs), allowed_nodes(candidates),
                                    inputs.policy)
    if planned.domains is None:
        return _none(resolution, need, planned.reason, pod, planned.resolvable_later)
    domains = planned.domains

    def proposal(member: Group) -> Reservation:
        assert member.segment is not None
        return Reservation(group_id=member.id, group_name=member.name, namespace=member.namespace,
                           domain=domains[member.segment.index], size=seg.pods(member.segment.index),
                           gpus_per_pod=need.gpus, one_pod_per_node=member.one_pod_per_node, created_at=inputs.now,
                           holder=inputs.holder, segment=member.segment)

    own = proposal(group)
    siblings = tuple((g, proposal(g)) for i in range(seg.count) if i != seg.index
                     and (g := segments.sibling(group, seg, i)).id not in live
                     and repair.running_domain(g, snapshot) is None)
    over = quotas.refusal(group, (own, *(r for _, r in siblings)), is_new_member(pod, group, inputs), snapshot,
                          live, inputs.policy)
    if over:
        return _none(resolution, need, note + over, pod)
    return Context(resolution, need, own.domain, own, own, note + planned.reason, pod_uid=pod.uid,
                   siblings=siblings)
