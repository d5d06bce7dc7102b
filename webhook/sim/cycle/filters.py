"""The in-tree PreFilter and Filter plugins that decide where a pod may go, in kube-scheduler's order.

Filter order (the first failing plugin gives the node's status): NodeUnschedulable, TaintToleration,
NodeAffinity, NodeResourcesFit, InterPodAffinity, DynamicResources. Not modelled: NodeName, NodePorts,
the volume plugins, PodTopologySpread's DoNotSchedule constraints, gang scheduling (PodGroups).

NodeResourcesFit: "Too many pods" when the node's pods (assumed ones included) fill ``allocatable.pods``;
then for each requested resource ``request > allocatable - requested`` is "Insufficient <name>",
unresolvable (preemption cannot help) when the request exceeds the node's allocatable outright. Extended
resources listed in ``ignoredResources`` (or whose prefix is in ``ignoredResourceGroups``) are not
checked. Nodes that preemption nominated for a pending pod of equal or higher priority count that pod as
if it ran there (and must pass without it too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from webhook.sim.cycle import dra, interpod
from webhook.sim.cycle import resources as res
from webhook.sim.cycle.cluster import ClusterState, NodeInfo, allowed_pods, node_info
from webhook.sim.cycle.config import SchedulerConfig
from webhook.sim.cycle.model import Pod
from webhook.sim.cycle.selectors import Taint, untolerated
from webhook.sim.cycle.status import UNRESOLVABLE, UNSCHEDULABLE, Status

NODE_AFFINITY = "NodeAffinity"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
AFFINITY_CONFLICT = "pod affinity terms conflict"
UNTOLERATED = "node(s) had untolerated taint(s)"
UNSCHEDULABLE_NODE = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


@dataclass(frozen=True)
class FilterContext:
    pod: Pod
    config: SchedulerConfig
    cluster: ClusterState
    interpod: interpod.InterPodState
    dra: dra.DraState | None
    candidates: frozenset[str] | None
    """Node names NodeAffinity's PreFilter narrowed the search to (``matchFields metadata.name In``)."""


def prefilter(pod: Pod, cluster: ClusterState, config: SchedulerConfig,
              infos: Sequence[NodeInfo]) -> FilterContext | Status:
    """The PreFilter phase: a context for the Filter phase, or the status that rejects the pod outright."""
    candidates: frozenset[str] | None = None
    affinity = pod.required_node_affinity
    if affinity is not None and affinity.name_sets and all(s is not None for s in affinity.name_sets):
        candidates = frozenset().union(*(s for s in affinity.name_sets if s is not None))
        if not candidates:
            return Status(UNRESOLVABLE, (AFFINITY_CONFLICT,), NODE_AFFINITY)
    dra_state = dra.prefilter(pod, cluster)
    if isinstance(dra_state, Status):
        return dra_state
    return FilterContext(pod, config, cluster, interpod.prefilter(pod, infos, cluster.namespace_labels),
                         dra_state, candidates)


def _node_affinity(pod: Pod, info: NodeInfo) -> Status | None:
    node = info.node
    if pod.node_selector and any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return Status(UNRESOLVABLE, (AFFINITY_MISMATCH,), NODE_AFFINITY)
    required = pod.required_node_affinity
    if required is not None and not required.matches(node.name, node.labels):
        return Status(UNRESOLVABLE, (AFFINITY_MISMATCH,), NODE_AFFINITY)
    return None


def _fit(ctx: FilterContext, info: NodeInfo) -> Status | None:
    pod, node = ctx.pod, info.node
    reasons: list[str] = []
    unresolvable = False
    if len(info.pods) + 1 > allowed_pods(info):
        reasons.append("Too many pods")
    fit = ctx.config.fit
    for name in sorted(pod.requests):
        want = pod.requests[name]
        if name == res.PODS or want == 0:
            continue
        if res.is_extended(name) and (name in fit.ignored or name.split("/")[0] in fit.ignored_groups):
            continue
        have = node.allocatable.get(name, 0)
        if have == 0 and any(c.extended_resource_name == name for c in ctx.cluster.device_classes.values()):
            raise ValueError(f"{pod.key}: {name} is backed by DRA (a DeviceClass extendedResourceName); "
                             "the emulator does not model that")
        if want > have - info.requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
            unresolvable = unresolvable or want > have
    if not reasons:
        return None
    return Status(UNRESOLVABLE if unresolvable else UNSCHEDULABLE, tuple(reasons), "NodeResourcesFit")


def filter_node(ctx: FilterContext, info: NodeInfo) -> tuple[Status | None, frozenset[int]]:
    """Run the Filter plugins on one node: its status (``None``: fits) and DRA's unavailable claims."""
    pod, node = ctx.pod, info.node
    if node.unschedulable and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in pod.tolerations):
        return Status(UNRESOLVABLE, (UNSCHEDULABLE_NODE,), "NodeUnschedulable"), frozenset()
    if untolerated(node.taints, pod.tolerations) is not None:
        return Status(UNRESOLVABLE, (UNTOLERATED,), "TaintToleration"), frozenset()
    for check in (_node_affinity(pod, info), _fit(ctx, info),
                  interpod.filter_node(ctx.interpod, info, ctx.cluster.namespace_labels)):
        if check is not None:
            return check, frozenset()
    if ctx.dra is not None:
        return dra.filter_node(ctx.dra, node, ctx.cluster)
    return None, frozenset()


def filter_with_nominated(ctx: FilterContext, info: NodeInfo,
                          infos: Sequence[NodeInfo]) -> tuple[Status | None, frozenset[int]]:
    """``RunFilterPluginsWithNominatedPods``: first with the node's nominated pods of equal or higher
    priority added (InterPodAffinity counting them), then, if that passes, without them."""
    nominated = [replace(p, node_name=info.name) for p in ctx.cluster.nominated
                 if p.nominated_node == info.name and p.key != ctx.pod.key and p.priority >= ctx.pod.priority]
    if nominated:
        with_them = node_info(info.node, (*info.pods, *nominated))
        others = [with_them if i.name == info.name else i for i in infos]
        state = interpod.prefilter(ctx.pod, others, ctx.cluster.namespace_labels)
        status, unavailable = filter_node(replace(ctx, interpod=state), with_them)
        if status is not None:
            return status, unavailable
    return filter_node(ctx, info)
