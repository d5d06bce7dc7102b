"""kube-scheduler's scheduling and binding cycle for ``imex-webhook simulate``, from ``webhook.sim.cycle``.

The imex-webhook policy does not hand-pick the nodes it shows the service: every attempt goes through
the emulator's phases, in kube-scheduler's order, with the profile the pod's ``spec.schedulerName``
names (the dedicated profile of ``deploy.scheduler_config``, or kube-scheduler's default profile):

1. PreFilter and Filter: the emulator's in-tree plugins (``filters.prefilter`` and
   ``filters.filter_with_nominated``: NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit
   with the profile's ``ignoredResources``, InterPodAffinity, DynamicResources) on every node, in node order;
2. each interested extender's filter on the nodes still feasible (``extender.call_filter``: the wire
   dicts kube-scheduler sends, and its decoding of the reply);
3. no node: the FailedScheduling text (``status.fit_error_message``); one node: taken without scoring;
   several: NodeResourcesFit's score plus each extender's prioritize (``extender.call_prioritize``,
   ``scoring.total_scores``), highest total;
4. the binding cycle: the first interested extender with a bind verb (``extender.call_bind``), else the
   default binder; a bind ``Error`` leaves the pod pending. A bound pod's claims get the devices the
   DynamicResources plugin picked for its node (``dra.reserve``).

Incremental instead of re-parsed, so a default run stays fast: running ``cycle.schedule`` on the whole
cluster costs about 70 ms per attempt at the default size (its DynamicResources filter scans every
device for every node), some 20 minutes for one policy's run. Here each node keeps its own one-node
``ClusterState`` (its pods, its published devices, the claims allocated on it), updated per bind,
release and node change, and the Filter plugins run against it. That is exact because a node's Filter
verdict reads only the pod, that node, its pods and devices, and InterPodAffinity's cluster-wide counts,
which are empty as long as no pod has (anti-)affinity terms: ``Cycle`` refuses a pod that has any
instead of deciding it wrongly. A node's verdict is memoised per profile and pod shape until the node
changes.

Left out: PreEnqueue (a pod's claims are created with it, as the resource claim controller does before
its first cycle), PostFilter (the simulated workload has no priorities, so preemption never finds a
victim) and nominated pods (only preemption makes them). Ties between the highest totals are broken at
random with the caller's seeded generator, as kube-scheduler breaks them (the emulator's ``select_host``
takes the smallest name, for repeatable tests).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.domain.model import Pod as DomainPod
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine
from webhook.errors import DecisionError
from webhook.sim import cycle
from webhook.sim.cycle import dra, filters, scoring
from webhook.sim.cycle import extender as ext
from webhook.sim.cycle.claims import Claim, parse_claim
from webhook.sim.cycle.cluster import ClusterState, NodeInfo, node_info
from webhook.sim.cycle.model import Pod, parse_node, parse_pod
from webhook.sim.cycle.status import NO_REASON_UNRESOLVABLE, UNRESOLVABLE, Diagnosis, Status, fit_error_message

DEFAULT_PROFILE: dict[str, Any] = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
"""kube-scheduler's default profile (``default-scheduler``): LeastAllocated, no extender."""


def profiles(*raw_configs: Mapping[str, Any]) -> dict[str, cycle.SchedulerConfig]:
    """Scheduler name -> parsed profile, for each KubeSchedulerConfiguration given."""
    parsed = [cycle.parse_config(raw) for raw in raw_configs]
    return {p.scheduler_name: p for p in parsed}


def instantiate(pod_raw: Mapping[str, Any], templates: Sequence[Mapping[str, Any]],
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The resource claim controller's part: a claim ``<pod>-<claim>`` per template reference, named in
    the pod's ``status.resourceClaimStatuses``. Returns the pod and the claims."""
    pod = dict(pod_raw)
    meta = pod.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace") or "default")
    claims, statuses = [], []
    for item in (pod.get("spec") or {}).get("resourceClaims") or []:
        template_name = item.get("resourceClaimTemplateName")
        template = next((t for t in templates if t["metadata"]["name"] == template_name
                         and t["metadata"].get("namespace", "default") == namespace), None)
        if template is None:
            continue
        claim_name = f"{name}-{item['name']}"
        claims.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim_name, "namespace": namespace,
                         "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"claim/{namespace}/{claim_name}")),
                         "labels": dict(template["metadata"].get("labels") or {}),
                         "annotations": {"resource.kubernetes.io/pod-claim-name": item["name"]}},
            "spec": dict((template.get("spec") or {}).get("spec") or {})})
        statuses.append({"name": item["name"], "resourceClaimName": claim_name})
    if statuses:
        pod["status"] = {**(pod.get("status") or {}), "resourceClaimStatuses": statuses}
    return pod, claims


@dataclass(frozen=True)
class Result:
    """One pod's scheduling and binding cycle."""

    pod: str
    node: str | None
    """Where it was bound; ``None``: it stays pending."""
    outcome: str
    """bound, unschedulable, error (an extender's filter Error), bind-error."""
    bound_by_extender: bool = False
    error: str = ""
    statuses: Mapping[str, Status] = field(default_factory=dict)
    absent: Status = NO_REASON_UNRESOLVABLE
    """The status of nodes no filter looked at (NodeAffinity's PreFilter left them out)."""
    prefilter: str = ""
    """The message of the PreFilter plugin that rejected the pod, if one did."""
    nodes: int = 0

    @property
    def message(self) -> str:
        """kube-scheduler's FailedScheduling text (for an unschedulable pod), or the error."""
        if self.outcome == "unschedulable":
            return fit_error_message(self.nodes, Diagnosis(self.statuses, self.absent, self.prefilter))
        return self.error


class _Node:
    __slots__ = ("info", "state")

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.info = node_info(state.nodes[0], state.pods)


class _Verdicts:
    """One pod shape's Filter verdicts per node, valid up to ``seen`` in the cycle's change log."""

    __slots__ = ("seen", "status")

    def __init__(self) -> None:
        self.seen = -1
        self.status: dict[str, Status | None] = {}


class Cycle:
    """The cluster as kube-scheduler sees it, per node, and one pod's cycle at a time through the emulator."""

    def __init__(self, configs: Mapping[str, cycle.SchedulerConfig], nodes: Sequence[Mapping[str, Any]],
                 extender: cycle.Extender, rng: random.Random, *, slices: Sequence[Mapping[str, Any]] = (),
                 device_classes: Sequence[Mapping[str, Any]] = (),
                 default_binder: Callable[[Pod, str], None] | None = None) -> None:
        self.configs = configs
        self.extender = extender
        self.rng = rng
        self.default_binder = default_binder
        whole = cycle.parse_cluster(nodes, slices=slices, device_classes=device_classes)
        self.base = replace(whole, nodes=(), devices=())
        by_node: dict[str, list[Any]] = {n.name: [] for n in whole.nodes}
        for device in whole.devices:
            by_node.setdefault(device.node, []).append(device)
        self.order = tuple(n.name for n in whole.nodes)
        self.nodes = {n.name: _Node(replace(self.base, nodes=(n,), devices=tuple(by_node[n.name])))
                      for n in whole.nodes}
        self.where: dict[str, str] = {}  # pod key -> node
        self.changes: list[str] = []  # names of the nodes that changed, in order
        self.memo: dict[str, _Verdicts] = {}
        self.parsed: dict[str, tuple[Mapping[str, Any], Sequence[Mapping[str, Any]],
                                     tuple[Pod, tuple[Claim, ...], cycle.SchedulerConfig, str]]] = {}

    def _set(self, name: str, state: ClusterState) -> None:
        entry = self.nodes[name]
        entry.state = state
        entry.info = node_info(state.nodes[0], state.pods)
        self.changes.append(name)

    # -- the cluster changes ----------------------------------------------------------------------------

    def update_node(self, raw: Mapping[str, Any]) -> None:
        """The Node object changed (the node agent published attached GPUs, say)."""
        node = parse_node(raw)
        self._set(node.name, replace(self.nodes[node.name].state, nodes=(node,)))

    def release(self, keys: Sequence[str]) -> None:
        """Pods were deleted: they leave their nodes, and their claims (owned by them) go with them."""
        for key in keys:
            self.parsed.pop(key, None)
            name = self.where.pop(key, None)
            if name is None:
                continue
            before = self.nodes[name].state
            pod = before.pod(key)
            assert pod is not None
            owned = {f"{pod.namespace}/{ref.claim_name}" for ref in pod.claims if ref.from_template}
            state = before.without_pods([key])
            self._set(name, replace(state, claims=tuple(c for c in state.claims if c.key not in owned)))

    # -- one pod ----------------------------------------------------------------------------------------

    def _config(self, pod: Pod) -> cycle.SchedulerConfig:
        config = self.configs.get(pod.scheduler_name)
        if config is None:
            raise ValueError(f"{pod.key}: no scheduler profile {pod.scheduler_name!r} (have {sorted(self.configs)})")
        if pod.affinity or pod.anti_affinity:
            raise ValueError(f"{pod.key}: pods with inter-pod (anti-)affinity need the cluster-wide counts; "
                             "the incremental cycle decides only pods without them")
        return config

    def _on_node(self, pod: Pod, claims: tuple[Claim, ...], config: cycle.SchedulerConfig,
                 name: str) -> tuple[filters.FilterContext | Status, ClusterState]:
        entry = self.nodes[name]
        state = replace(entry.state, claims=(*entry.state.claims, *claims))
        return filters.prefilter(pod, state, config, (entry.info,)), state

    def _verdict(self, pod: Pod, claims: tuple[Claim, ...], config: cycle.SchedulerConfig,
                 name: str) -> Status | None:
        ctx, _ = self._on_node(pod, claims, config, name)
        if isinstance(ctx, Status):
            return ctx
        info = self.nodes[name].info
        return filters.filter_with_nominated(ctx, info, (info,))[0]

    def _filter(self, pod: Pod, claims: tuple[Claim, ...], config: cycle.SchedulerConfig, shape: str,
                ) -> tuple[list[NodeInfo], _Verdicts, frozenset[str] | None] | Status:
        """PreFilter, then Filter on every node (on the nodes NodeAffinity's PreFilter names, if it does)."""
        whole = filters.prefilter(pod, replace(self.base, claims=claims), config, ())
        if isinstance(whole, Status):
            return whole
        verdicts = self.memo.setdefault(shape, _Verdicts())
        stale = self.order if verdicts.seen < 0 else dict.fromkeys(self.changes[verdicts.seen:])
        for name in stale:
            verdicts.status[name] = self._verdict(pod, claims, config, name)
        verdicts.seen = len(self.changes)
        status, only = verdicts.status, whole.candidates
        if only is None:
            feasible = [entry.info for name, entry in self.nodes.items() if status[name] is None]
        else:
            feasible = [entry.info for name, entry in self.nodes.items() if status[name] is None and name in only]
        return feasible, verdicts, only

    def _parse(self, pod_raw: Mapping[str, Any], claims_raw: Sequence[Mapping[str, Any]],
               ) -> tuple[Pod, tuple[Claim, ...], cycle.SchedulerConfig, str]:
        """The pod, its claims, its profile and its shape (what the Filter plugins read of it), parsed once
        per pod object: a pending pod is tried again and again unchanged."""
        meta = pod_raw.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        hit = self.parsed.get(key)
        if hit is not None and hit[0] is pod_raw and hit[1] is claims_raw:
            return hit[2]
        pod = parse_pod(pod_raw)
        config = self._config(pod)
        claims = tuple(parse_claim(c) for c in claims_raw)
        shape = repr((config.scheduler_name, sorted(pod.requests.items()), pod.node_selector,
                      pod.required_node_affinity, pod.tolerations, pod.priority, [c.requests for c in claims]))
        self.parsed[key] = (pod_raw, claims_raw, (pod, claims, config, shape))
        return pod, claims, config, shape

    def schedule_one(self, pod_raw: Mapping[str, Any], claims_raw: Sequence[Mapping[str, Any]] = ()) -> Result:
        """A scheduling cycle and, when it found a host, the binding cycle right after it."""
        pod, claims, config, shape = self._parse(pod_raw, claims_raw)
        filtered = self._filter(pod, claims, config, shape)
        if isinstance(filtered, Status):  # a PreFilter plugin rejected the pod outright
            return Result(pod.key, None, "unschedulable", prefilter=filtered.message, nodes=len(self.order))
        feasible, verdicts, only = filtered
        statuses: dict[str, Status] = {}
        for ext_config in config.extenders:
            if not feasible:
                break
            if not ext_config.is_interested(pod):
                continue
            outcome = ext.call_filter(ext_config, self.extender, pod, feasible)
            if isinstance(outcome, str):
                return Result(pod.key, None, "error", error=outcome)
            feasible, failed = outcome
            statuses.update(failed)
        if not feasible:
            in_tree = {n: s for n, s in verdicts.status.items() if s is not None and (only is None or n in only)}
            absent = NO_REASON_UNRESOLVABLE if only is None else Status(
                UNRESOLVABLE, (f"node(s) didn't satisfy plugin(s) [{filters.NODE_AFFINITY}]",))
            return Result(pod.key, None, "unschedulable", statuses={**in_tree, **statuses}, absent=absent,
                          nodes=len(self.order))
        host = feasible[0].name if len(feasible) == 1 else self._prioritize(config, pod, feasible)
        return self._bind(config, pod, claims, host)

    def _prioritize(self, config: cycle.SchedulerConfig, pod: Pod, feasible: Sequence[NodeInfo]) -> str:
        answers = []
        for ext_config in config.extenders:
            if ext_config.is_interested(pod):
                scores = ext.call_prioritize(ext_config, self.extender, pod, feasible)
                if scores is not None:
                    answers.append(scores)
        totals = scoring.total_scores(config.fit, config.fit_weight, pod, feasible, answers)
        best = max(totals.values())
        return self.rng.choice(sorted(name for name, score in totals.items() if score == best))

    def _bind(self, config: cycle.SchedulerConfig, pod: Pod, claims: tuple[Claim, ...], host: str) -> Result:
        binder = next((e for e in config.extenders if e.bind_verb and e.is_interested(pod)), None)
        if binder is not None:
            error = ext.call_bind(binder, self.extender, pod, host)
            if error:
                return Result(pod.key, None, "bind-error", error=error)
        elif self.default_binder is not None:
            self.default_binder(pod, host)
        # Read the node again: the bind may have changed it (fabric GPUs attached).
        ctx, state = self._on_node(pod, claims, config, host)
        if not isinstance(ctx, Status) and ctx.dra is not None:
            state = dra.reserve(state, pod, self.nodes[host].info.node, ctx.dra)
        self._set(host, state.with_pod(pod, host))
        self.where[pod.key] = host
        return Result(pod.key, host, "bound", bound_by_extender=binder is not None)


class EngineExtender:
    """The extender as kube-scheduler reaches it, in process: wire dicts (Go field names) in and out, the
    service's ``Engine`` behind, answering as ``webhook.http.extender`` does (a refusal is an ``Error``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._last: tuple[list[Any], DomainPod] | None = None

    def _pod(self, raw: Mapping[str, Any]) -> DomainPod:
        """``parsing.pod``, as the HTTP layer parses every request's pod; the last one is kept, as filter and
        prioritize send the same pod object (the cycle copies only its top level)."""
        parts = [raw.get("metadata"), raw.get("spec"), raw.get("status")]
        if self._last is not None and all(a is b for a, b in zip(self._last[0], parts, strict=True)):
            return self._last[1]
        pod = parsing.pod(raw, "Pod")
        self._last = (parts, pod)
        return pod

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        pod = self._pod(args["Pod"])
        try:
            result = self.engine.filter(pod, args["NodeNames"])
        except DecisionError as exc:
            return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                    "Error": str(exc)}
        return {"Nodes": None, "NodeNames": list(result.passed), "FailedNodes": result.failed,
                "FailedAndUnresolvableNodes": result.unresolvable, "Error": ""}

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        pod = self._pod(args["Pod"])
        return [{"Host": host, "Score": score} for host, score in self.engine.prioritize(pod, args["NodeNames"])]

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            self.engine.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
        except DecisionError as exc:
            return {"Error": str(exc)}
        return {"Error": ""}

    def preempt(self, args: dict[str, Any]) -> dict[str, Any]:
        pod = parsing.pod(args["Pod"], "Pod")
        meta = args.get("NodeNameToMetaVictims") or {}
        candidates = {node: [p["UID"] for p in entry.get("Pods") or []] for node, entry in meta.items()}
        result = self.engine.preempt(pod, candidates, {})
        return {"NodeNameToMetaVictims": {n: meta[n] for n in result.kept}}

