"""The /filter decision: which candidate nodes a pod may use, and why not the others.

Pods outside any group pass through unchanged. For a group pod, nodes that will not fit while the
cluster stays as it is (outside any domain, in another domain than the group's, held by another
ComputeDomain, too small even when empty) are unresolvable, so preemption leaves them alone; nodes that
could fit once other pods finish are merely failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from webhook.domain import health
from webhook.domain.groups import grouping, segments
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import holds, resolution
from webhook.domain.jobs.resolution import Context
from webhook.domain.model import Group, Node, Pod, Snapshot
from webhook.domain.placement import candidates as candidates_
from webhook.domain.placement import capacity, node_constraints, plain_pods
from webhook.domain.placement.capacity import Verdict
from webhook.errors import DecisionError

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


def filter_nodes(pod: Pod, candidates: Sequence[str], inputs: DecisionInputs,
                 node_view: Mapping[str, Node] | None = None) -> FilterOutcome:
    """Split ``candidates`` into passed, failed and unresolvable nodes, each failure with its reason.

    ``node_view`` holds the nodes as the scheduler sent them (full NodeList mode); otherwise the cache. The
    group's domain comes from ``webhook.domain.jobs.resolution``; this only filters.
    """
    ctx = resolution.resolve(pod, inputs, candidates)
    snapshot, policy = inputs.snapshot, inputs.policy
    nodes = node_view if node_view is not None else snapshot.nodes
    if ctx is None:
        pending = grouping.unresolved_claims(pod, snapshot.catalog)
        if pending:
            # The scheduler asks about a pod only once its claims exist, so a template or claim missing here
            # is our cache lagging the API server: passing every node could place an IMEX pod outside its
            # group. An Error makes the scheduler retry after its backoff, by when the cache has it.
            raise DecisionError(f"pod {pod.ref} uses {', '.join(pending)}, which imex-webhook's cache does not "
                                "have yet; its group is resolved once it does (the scheduler retries)")
        return _outside_groups(pod, candidates, nodes, inputs)
    if ctx.resolution.problems:
        return _all_fail(candidates, ctx, "invalid-group", "invalid-group", unresolvable=True)
    group = ctx.group
    assert group is not None
    if ctx.domain is None:
        return _all_fail(candidates, ctx, "no-domain", "no-domain", unresolvable=not ctx.resolvable_later)
    if ctx.waiting:  # a held domain whose room is not all there: the group's pods start together
        return _all_fail(candidates, ctx, "no-fit", "no-fit", unresolvable=False)

    domain = ctx.domain
    why = candidates_.Reasons.of(domain, group, policy)
    attaching = capacity.own_attachment(pod.uid, snapshot)
    if attaching is not None:
        elsewhere = (f"fabric GPUs are being attached to node {attaching.node} for this pod (attachment "
                     f"{attaching.name}, phase {attaching.phase.value}); it binds there")
        inside, unresolvable = candidates_.split_each(candidates, nodes, domain, why, attaching.node, elsewhere)
    elif node_view is None:
        inside, unresolvable = candidates_.split(candidates, nodes, domain, snapshot.domains.get(domain, ()),
                                                 inputs.sets or candidates_.DERIVED, why)
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
                    inputs: DecisionInputs) -> FilterOutcome:
    """A pod in no group passes every node with room for its device-plugin GPUs (``plain_pods.short``) outside
    the domains held for a waiting group it may not backfill under; a node the cache does not know yet is
    left to kube-scheduler's own filters."""
    if not plain_pods.asks_gpus(pod):
        return FilterOutcome(passed=tuple(candidates))  # before the holds are read: most pods stop here
    snapshot, held = inputs.snapshot, holds.kept_from(pod, inputs)
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name in candidates:
        node = nodes.get(name)
        if node is not None and (never := plain_pods.never(pod, node)) is not None:
            unresolvable[name] = never
        elif node is not None and node.domain is not None and node.domain in held:
            failed[name] = held[node.domain]
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
