"""DefaultPreemption's dry run, the extender's preempt verb, and the choice of a node.

1. A pod with ``preemptionPolicy: Never`` is "not eligible".
2. Only nodes whose status is Unschedulable (not UnschedulableAndUnresolvable: taints, node affinity,
   "Insufficient" beyond the node's size, pod affinity, DRA, the extender's ``FailedAndUnresolvableNodes``)
   are tried. None: "0/N nodes are available: N Preemption is not helpful for scheduling."
3. On each, every pod of lower priority is removed and the in-tree filters re-run (never the extender's
   filter); then victims are reprieved one by one, most important first (higher priority, then earlier
   start), keeping those the pod still fits beside. A node with no lower-priority pod: "No preemption
   victims found for incoming pod"; one where the pod does not fit even then keeps the filter's reasons.
4. Each interested extender with a ``preemptVerb`` gets the candidates and returns the ones it keeps.
5. The node: fewest PDB violations (none are modelled), lowest highest-priority victim, lowest sum of
   priorities, fewest victims, latest start of the most important victims; then, where kube-scheduler
   takes whichever comes first in a Go map, the smallest name.
Every message is prefixed ``preemption: `` as the plugin does; success reads "found a potential placement
for pod on node N, preempting K victims". PodDisruptionBudgets and the random candidate offset are not
modelled; all candidate nodes are tried (kube-scheduler tries at least 100).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from webhook.sim.cycle import interpod
from webhook.sim.cycle.cluster import NodeInfo, node_info
from webhook.sim.cycle.config import SchedulerConfig
from webhook.sim.cycle.extender import Extender, call_preempt
from webhook.sim.cycle.filters import FilterContext, filter_with_nominated
from webhook.sim.cycle.model import Pod
from webhook.sim.cycle.status import UNRESOLVABLE, UNSCHEDULABLE, Diagnosis, Status, fit_error_message

PREFIX = "preemption: "
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_ELIGIBLE = "not eligible due to preemptionPolicy=Never."
NO_CANDIDATE = "no candidate node for preemption"
SUCCESS, ERROR = "Success", "Error"
_LATEST = "\uffff"


@dataclass(frozen=True)
class Preemption:
    code: str
    message: str
    node: str | None = None
    victims: tuple[Pod, ...] = ()
    clears_nomination: bool = False


def _start(pod: Pod) -> str:
    return str((pod.raw.get("status") or {}).get("startTime") or _LATEST)


def _importance(pod: Pod) -> tuple[int, str]:
    """Sort key, most important first: higher priority, then the earlier start (unknown = now)."""
    return -pod.priority, _start(pod)


def _fits(ctx: FilterContext, info: NodeInfo, infos: Sequence[NodeInfo]) -> Status | None:
    others = [info if i.name == info.name else i for i in infos]
    state = interpod.prefilter(ctx.pod, others, ctx.cluster.namespace_labels)
    status, _ = filter_with_nominated(replace(ctx, interpod=state), info, others)
    return status


def select_victims(ctx: FilterContext, info: NodeInfo, infos: Sequence[NodeInfo]) -> tuple[Pod, ...] | Status:
    lower = sorted((p for p in info.pods if p.priority < ctx.pod.priority), key=_importance)
    if not lower:
        return Status(UNRESOLVABLE, (NO_VICTIMS,))
    remaining = [p for p in info.pods if p not in lower]
    status = _fits(ctx, node_info(info.node, remaining), infos)
    if status is not None:
        return status
    victims: list[Pod] = []
    for candidate in lower:
        if _fits(ctx, node_info(info.node, [*remaining, candidate]), infos) is None:
            remaining.append(candidate)
        else:
            victims.append(candidate)
    return tuple(victims) if victims else Status(ERROR, (f'expected at least one victim pod on node "{info.name}"',))


def _pick(candidates: dict[str, tuple[tuple[Pod, ...], int]]) -> str:
    def earliest_of_most_important(node: str) -> str:
        pods = candidates[node][0]
        top = max(p.priority for p in pods)
        return min(_start(p) for p in pods if p.priority == top)

    rules: list[Callable[[str], tuple[int, str]]] = [
        lambda n: (-candidates[n][1], ""),
        lambda n: (-candidates[n][0][0].priority, ""),
        lambda n: (-sum(p.priority + 2**31 for p in candidates[n][0]), ""),
        lambda n: (-len(candidates[n][0]), ""),
        lambda n: (0, earliest_of_most_important(n)),
    ]
    nodes = sorted(candidates)
    for rule in rules:
        best = max(rule(n) for n in nodes)
        nodes = [n for n in nodes if rule(n) == best]
        if len(nodes) == 1:
            break
    return nodes[0]


def preempt(ctx: FilterContext | None, infos: Sequence[NodeInfo], diagnosis: Diagnosis, config: SchedulerConfig,
            extender: Extender) -> Preemption:
    pod = ctx.pod if ctx is not None else None
    if pod is not None and pod.preempt_never:
        return Preemption(UNSCHEDULABLE, PREFIX + NOT_ELIGIBLE)
    potential = [i for i in infos if diagnosis.status_of(i.name).code == UNSCHEDULABLE]
    not_helpful = Status(UNRESOLVABLE, (NOT_HELPFUL,))
    if ctx is None or not potential:
        text = fit_error_message(len(infos), Diagnosis({}, not_helpful))
        return Preemption(UNSCHEDULABLE, PREFIX + text, clears_nomination=True)
    candidates: dict[str, tuple[tuple[Pod, ...], int]] = {}
    statuses: dict[str, Status] = {}
    for info in potential:
        outcome = select_victims(ctx, info, infos)
        if isinstance(outcome, Status):
            statuses[info.name] = outcome
        else:
            candidates[info.name] = (outcome, 0)
    errors = [s for s in statuses.values() if s.code == ERROR]
    if not candidates and errors:
        return Preemption(ERROR, PREFIX + errors[0].message)
    if not candidates:
        text = fit_error_message(len(infos), Diagnosis(statuses, not_helpful))
        return Preemption(UNSCHEDULABLE, PREFIX + text, clears_nomination=True)
    pods_on = {i.name: i.pods for i in infos}
    for ext in config.extenders:
        if not ext.preempt_verb or not ext.is_interested(ctx.pod):
            continue
        kept = call_preempt(ext, extender, ctx.pod, candidates, pods_on)
        if isinstance(kept, str):
            if ext.ignorable:
                continue
            return Preemption(ERROR, PREFIX + kept)
        empty = [node for node, (victims, _) in kept.items() if not victims]
        if empty and not ext.ignorable:
            return Preemption(ERROR, PREFIX + f'expected at least one victim pod on node "{empty[0]}"')
        candidates = {node: entry for node, entry in kept.items() if entry[0]}
        if not candidates:
            break
    if not candidates:
        return Preemption(UNSCHEDULABLE, PREFIX + NO_CANDIDATE)
    node = next(iter(candidates)) if len(candidates) == 1 else _pick(candidates)
    victims = candidates[node][0]
    text = f"found a potential placement for pod on node {node}, preempting {len(victims)} victims"
    return Preemption(SUCCESS, PREFIX + text, node, victims)
