"""One pod's scheduling cycle and binding cycle, as kube-scheduler runs them, the extender behind a protocol.

PreEnqueue (DRA: the pod's claims exist) -> PreFilter -> the nominated node alone, if the pod has one
and it passes everything -> Filter on every node -> each interested extender's filter, in turn, on the
nodes still feasible (nodes failing in-tree never reach it) -> no node: PostFilter (DRA deallocation,
then preemption) and the FailedScheduling text; one node: taken without scoring (no prioritize call);
several: in-tree scores + each interested extender's prioritize, highest total -> the pod is assumed on
the host and DRA writes its allocations (Reserve/PreBind).

Binding cycle: the first extender with a ``bindVerb`` that is interested in the pod binds it (an
ignorable one that fails is passed over); without one, the default binder does (always succeeds here).
A bind ``Error`` (or a failed call) makes kube-scheduler Unreserve and forget the assumed pod: it is
pending again with the error text as its message (reason SchedulerError) and no nomination, and DRA's
allocation stays where PreBind wrote it (see ``dra``). Not modelled: a bind that succeeded on the API
server while its reply was lost (kube-scheduler then sees the pod bound and does not retry it).

Every node is evaluated (kube-scheduler stops at ``percentageOfNodesToScore`` of them once it has 100
feasible nodes; our profile sets 100 %), in the cluster's node order; the pod's ``schedulerName`` is not
checked against the profile's.

A PreFilter rejection by NodeAffinity (terms that name disjoint nodes) happens before DynamicResources'
PreFilter has stored its state, so DynamicResources' PostFilter fails with "not found" and preemption
never runs: kube-scheduler's message then ends in "not found", and so does ours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.sim.cycle import dra, preemption
from webhook.sim.cycle import extender as ext
from webhook.sim.cycle.cluster import ClusterState, NodeInfo, node_infos
from webhook.sim.cycle.config import SchedulerConfig
from webhook.sim.cycle.filters import NODE_AFFINITY, FilterContext, filter_with_nominated, prefilter
from webhook.sim.cycle.model import Pod, parse_pod, with_status
from webhook.sim.cycle.scoring import select_host, total_scores
from webhook.sim.cycle.status import (
    NO_NODES_AVAILABLE,
    NO_REASON_UNRESOLVABLE,
    UNRESOLVABLE,
    Diagnosis,
    Status,
    event_text,
    fit_error_message,
)

ASSUMED, BOUND, UNSCHEDULABLE, ERROR, BIND_ERROR, GATED = (
    "assumed", "bound", "unschedulable", "error", "bind-error", "gated")
DRA_STATE_MISSING = "not found"


@dataclass(frozen=True)
class Attempt:
    """What one scheduling (and binding) cycle did to one pod."""

    pod: str
    outcome: str
    """assumed, bound, unschedulable, error (the cycle aborted), bind-error, gated (never tried)."""
    cluster: ClusterState
    pod_raw: Mapping[str, Any]
    """The pod afterwards: pending ones carry the PodScheduled condition and any nomination."""
    node: str | None = None
    message: str = ""
    reason: str = ""
    """PodScheduled reason: Unschedulable (no node fits) or SchedulerError (an error, a failed bind)."""
    nominated: str | None = None
    victims: tuple[str, ...] = ()
    feasible: tuple[str, ...] = field(default=())
    """Nodes that passed every filter, in-tree and extender (empty unless the pod got a host)."""

    @property
    def event(self) -> str:
        return event_text(self.message)


def _pending(pod: Pod, message: str, reason: str, nominate: str | None, clear: bool) -> Mapping[str, Any]:
    conditions = [c for c in (pod.raw.get("status") or {}).get("conditions") or []
                  if isinstance(c, Mapping) and c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "False", "reason": reason, "message": message})
    nominated = nominate if nominate else (None if clear else pod.nominated_node or None)
    return with_status(pod, conditions=conditions, nominatedNodeName=nominated).raw


def failed(cluster: ClusterState, pod: Pod, outcome: str, message: str, reason: str, *,
           nominate: str | None = None, clear: bool = True, victims: tuple[Pod, ...] = ()) -> Attempt:
    raw = _pending(pod, message, reason, nominate, clear)
    pending = parse_pod(raw)
    if victims:
        cluster = cluster.without_pods(v.key for v in victims)
        for victim in victims:
            cluster = dra.release(cluster, victim)
    cluster = cluster.with_nominated(pending)
    return Attempt(pod.key, outcome, cluster, raw, message=message, reason=reason,
                   nominated=pending.nominated_node or None, victims=tuple(v.key for v in victims))


def _extender_filters(config: SchedulerConfig, extender: ext.Extender, pod: Pod, feasible: list[NodeInfo],
                      statuses: dict[str, Status]) -> list[NodeInfo] | str:
    for ext_config in config.extenders:
        if not feasible:
            break
        if not ext_config.is_interested(pod):
            continue
        outcome = ext.call_filter(ext_config, extender, pod, feasible)
        if isinstance(outcome, str):
            return outcome
        feasible, failed_nodes = outcome
        statuses.update(failed_nodes)
    return feasible


def _filter(ctx: FilterContext, nodes: Sequence[NodeInfo], infos: Sequence[NodeInfo],
            statuses: dict[str, Status], unavailable: set[int]) -> list[NodeInfo]:
    feasible = []
    for info in nodes:
        status, claims = filter_with_nominated(ctx, info, infos)
        unavailable.update(claims)
        if status is None:
            feasible.append(info)
        else:
            statuses[info.name] = status
    return feasible


def schedule(config: SchedulerConfig, cluster: ClusterState, pod_raw: Mapping[str, Any],
             extender: ext.Extender) -> Attempt:
    """The scheduling cycle; on success the pod is ``assumed`` on ``node`` in the returned cluster."""
    pod = parse_pod(pod_raw)
    gate = dra.pre_enqueue(pod, cluster)
    if gate is not None:
        return Attempt(pod.key, GATED, cluster, pod.raw, message=gate)
    infos = node_infos(cluster)
    if not infos:
        return failed(cluster, pod, UNSCHEDULABLE, NO_NODES_AVAILABLE, "Unschedulable")
    ctx = prefilter(pod, cluster, config, infos)
    if isinstance(ctx, Status):
        diagnosis = Diagnosis({}, ctx, ctx.message)
        return _unschedulable(config, cluster, pod, None, infos, diagnosis, frozenset(), extender,
                              dra_state_missing=ctx.plugin == NODE_AFFINITY)
    statuses: dict[str, Status] = {}
    unavailable: set[int] = set()
    feasible: list[NodeInfo] | str = []
    nominated = next((i for i in infos if i.name == pod.nominated_node), None)
    if nominated is not None:
        feasible = _filter(ctx, [nominated], infos, statuses, unavailable)
        feasible = _extender_filters(config, extender, pod, feasible, statuses)
    if not feasible or isinstance(feasible, str):
        candidates = [i for i in infos if ctx.candidates is None or i.name in ctx.candidates]
        feasible = _filter(ctx, candidates, infos, statuses, unavailable)
        feasible = _extender_filters(config, extender, pod, feasible, statuses)
    if isinstance(feasible, str):
        return failed(cluster, pod, ERROR, feasible, "SchedulerError")
    absent = NO_REASON_UNRESOLVABLE if ctx.candidates is None else Status(
        UNRESOLVABLE, (f"node(s) didn't satisfy plugin(s) [{NODE_AFFINITY}]",))
    if not feasible:
        return _unschedulable(config, cluster, pod, ctx, infos, Diagnosis(statuses, absent), frozenset(unavailable),
                              extender)
    host = feasible[0].name if len(feasible) == 1 else _prioritize(config, extender, pod, feasible)
    assumed = cluster.with_pod(pod, host, assumed=True)
    if ctx.dra is not None:
        node = cluster.node(host)
        assert node is not None
        assumed = dra.reserve(assumed, pod, node, ctx.dra)
    return Attempt(pod.key, ASSUMED, assumed, pod.raw, node=host, feasible=tuple(i.name for i in feasible))


def _prioritize(config: SchedulerConfig, extender: ext.Extender, pod: Pod, feasible: Sequence[NodeInfo]) -> str:
    answers = []
    for ext_config in config.extenders:
        if ext_config.is_interested(pod):
            scores = ext.call_prioritize(ext_config, extender, pod, feasible)
            if scores is not None:
                answers.append(scores)
    totals = total_scores(config.fit, config.fit_weight, pod, feasible, answers)
    return select_host(totals)


def _unschedulable(config: SchedulerConfig, cluster: ClusterState, pod: Pod, ctx: FilterContext | None,
                   infos: Sequence[NodeInfo], diagnosis: Diagnosis, unavailable: frozenset[int],
                   extender: ext.Extender, dra_state_missing: bool = False) -> Attempt:
    if dra_state_missing:
        message = fit_error_message(len(infos), diagnosis, DRA_STATE_MISSING)
        return failed(cluster, pod, UNSCHEDULABLE, message, "Unschedulable", clear=False)
    after, deallocated = dra.post_filter(cluster, pod, ctx.dra if ctx else None, unavailable)
    outcome = preemption.preempt(ctx, infos, diagnosis, config, extender)
    if outcome.code in (preemption.SUCCESS, preemption.ERROR):
        post = outcome.message
    else:
        post = ", ".join(m for m in (deallocated, outcome.message) if m)
    message = fit_error_message(len(infos), diagnosis, post)
    return failed(after, pod, UNSCHEDULABLE, message, "Unschedulable", nominate=outcome.node,
                  clear=outcome.clears_nomination, victims=outcome.victims)


def bind(config: SchedulerConfig, attempt: Attempt, extender: ext.Extender, cluster: ClusterState | None = None,
         ) -> Attempt:
    """The binding cycle of the pod ``schedule`` assumed, in ``cluster`` (default: the one the attempt
    left, where the pod is assumed); any other attempt is returned unchanged."""
    if attempt.outcome != ASSUMED or attempt.node is None:
        return attempt
    pod = parse_pod(attempt.pod_raw)
    error = ""
    for ext_config in config.extenders:
        if not ext_config.bind_verb or not ext_config.is_interested(pod):
            continue
        error = ext.call_bind(ext_config, extender, pod, attempt.node)
        if error and ext_config.ignorable:
            error = ""
            continue
        break
    cluster = attempt.cluster if cluster is None else cluster
    if error:
        forgotten = dra.unreserve(cluster.without_pods([pod.key]), pod)
        result = failed(forgotten, pod, BIND_ERROR, error, "SchedulerError")
        return Attempt(result.pod, result.outcome, result.cluster, result.pod_raw, node=attempt.node,
                       message=result.message, reason=result.reason, feasible=attempt.feasible)
    bound = cluster.with_pod(pod, attempt.node, assumed=False)
    placed = bound.pod(pod.key)
    assert placed is not None
    return Attempt(pod.key, BOUND, bound, placed.raw, node=attempt.node, feasible=attempt.feasible)


def schedule_one(config: SchedulerConfig, cluster: ClusterState, pod_raw: Mapping[str, Any],
                 extender: ext.Extender) -> Attempt:
    """A scheduling cycle and, when it found a host, the binding cycle right after it."""
    return bind(config, schedule(config, cluster, pod_raw, extender), extender)
