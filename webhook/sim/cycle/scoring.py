"""Scores and host selection, with kube-scheduler's integer arithmetic.

- NodeResourcesFit (the only in-tree score plugin modelled; every other one, TaintToleration,
  NodeAffinity, PodTopologySpread, InterPodAffinity, BalancedAllocation, ImageLocality, DynamicResources,
  is taken as 0): for each configured resource the node's requested amount *after* adding the pod
  (CPU and memory with the 100m / 200 MiB defaults for containers without requests) against its
  allocatable, ``requested * 100 / allocatable`` (MostAllocated, capped at 100) or
  ``(allocatable - requested) * 100 / allocatable`` (LeastAllocated, 0 when over), integer division;
  a resource the node does not have, or an extended resource the pod does not request, is left out of
  the weighted mean ``sum(score * weight) / sum(weight)``. The plugin score is multiplied by its weight.
- An extender's score: ``Score * weight * (MaxNodeScore 100 / MaxExtenderPriority 10)``, not clamped to
  0..10; hosts the extender does not list get nothing from it.
- The highest total wins. Ties: kube-scheduler picks at random among them; the emulator takes the
  smallest node name, so tests are repeatable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from webhook.sim.cycle import resources as res
from webhook.sim.cycle.cluster import NodeInfo
from webhook.sim.cycle.config import MAX_EXTENDER_PRIORITY, MAX_NODE_SCORE, FitArgs
from webhook.sim.cycle.model import Pod


def _pod_amount(pod: Pod, name: str) -> int:
    if name == res.CPU:
        return pod.non_zero_cpu
    if name == res.MEMORY:
        return pod.non_zero_memory
    return pod.requests.get(name, 0)


def _node_amounts(info: NodeInfo, name: str) -> tuple[int, int]:
    """(allocatable, requested) of one resource; allocatable 0 leaves the resource out."""
    allocatable = info.node.allocatable
    if name == res.CPU:
        return allocatable.get(res.CPU, 0), info.non_zero_cpu
    if name == res.MEMORY:
        return allocatable.get(res.MEMORY, 0), info.non_zero_memory
    if name == res.EPHEMERAL_STORAGE:
        return allocatable.get(name, 0), info.requested.get(name, 0)
    if name in allocatable:
        return allocatable[name], info.requested.get(name, 0)
    return 0, 0


def _most(requested: int, capacity: int) -> int:
    return min(requested, capacity) * MAX_NODE_SCORE // capacity


def _least(requested: int, capacity: int) -> int:
    return 0 if requested > capacity else (capacity - requested) * MAX_NODE_SCORE // capacity


def fit_score(fit: FitArgs, pod: Pod, info: NodeInfo) -> int:
    """NodeResourcesFit's score of one node, 0..100, before the plugin weight."""
    per_resource = _most if fit.strategy == "MostAllocated" else _least
    total = weights = 0
    for name, weight in fit.resources:
        wanted = _pod_amount(pod, name)
        if wanted == 0 and res.is_scalar(name):
            continue
        capacity, used = _node_amounts(info, name)
        if capacity == 0:
            continue
        total += per_resource(used + wanted, capacity) * weight
        weights += weight
    return total // weights if weights else 0


def extender_points(score: int, weight: int) -> int:
    return score * weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)


def total_scores(fit: FitArgs, fit_weight: int, pod: Pod, infos: Sequence[NodeInfo],
                 extender_scores: Sequence[tuple[Sequence[tuple[str, int]], int]]) -> dict[str, int]:
    """Node name -> final score; ``extender_scores`` is one ([(Host, Score)], weight) per extender that
    answered (a host listed twice counts twice, as in kube-scheduler)."""
    totals = {info.name: fit_score(fit, pod, info) * fit_weight for info in infos}
    for scores, weight in extender_scores:
        for host, score in scores:
            if host in totals:
                totals[host] += extender_points(score, weight)
    return totals


def select_host(totals: Mapping[str, int]) -> str:
    best = max(totals.values())
    return min(name for name, score in totals.items() if score == best)
