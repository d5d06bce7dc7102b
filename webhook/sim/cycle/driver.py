"""Play a list of pods through repeated scheduling cycles and report where each one ended.

The queue is kube-scheduler's PrioritySort: higher ``spec.priority`` first, then arrival order. Each
round tries every pending pod once, in that order: a pod that failed to bind or hit an extender error
is retried every round (backoff), one that was unschedulable only once the cluster changed (a pod bound
or evicted, a claim allocated or freed, a phase change), as cluster events requeue it. The resource claim
controller's part is played too: claims from ``templates`` are created for queued pods that reference
them (named ``<pod>-<claim>``), and a pod that finishes releases its claims.

``bind_lag``: how many later scheduling cycles run before a pod's binding cycle, so they see it only
assumed (kube-scheduler binds asynchronously); pending binds are completed at the end of every round.
``phase_changes`` mark pods Running, Succeeded or Failed before a given round; finished pods leave the
scheduler's view. ``arrivals`` (pod key -> round, default 1) hold pods back until that round. Stops when
no pod is eligible and no phase change or arrival is due, or after ``max_rounds``.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from webhook.sim.cycle import dra
from webhook.sim.cycle.claims import parse_claim
from webhook.sim.cycle.cluster import ClusterState
from webhook.sim.cycle.config import SchedulerConfig
from webhook.sim.cycle.extender import Extender
from webhook.sim.cycle.model import parse_pod, with_status
from webhook.sim.cycle.scheduling import ASSUMED, BIND_ERROR, BOUND, ERROR, UNSCHEDULABLE, Attempt, bind, schedule

RETRIED_EVERY_ROUND = (BIND_ERROR, ERROR)
SCHEDULING_OUTCOMES = (ASSUMED, UNSCHEDULABLE, ERROR)


@dataclass(frozen=True)
class PhaseChange:
    round: int
    """Applied before this round's cycles (rounds count from 1)."""
    pod: str
    """namespace/name"""
    phase: str


@dataclass(frozen=True)
class PodOutcome:
    pod: str
    node: str | None
    message: str
    """The last FailedScheduling text (empty once bound)."""
    cycles: int
    """Scheduling cycles the pod went through (gated rounds not counted)."""
    history: tuple[str, ...]
    preempted_by: str | None = None

    @property
    def cycles_lost(self) -> int:
        """Cycles beyond the one that bound it (all of them while it is pending)."""
        return self.cycles - 1 if self.node else self.cycles


@dataclass(frozen=True)
class Play:
    outcomes: Mapping[str, PodOutcome]
    cluster: ClusterState
    attempts: tuple[Attempt, ...]
    """Every scheduling cycle (``assumed`` or a failure) and every binding cycle, in the order they ran."""
    rounds: int


def _instantiate(pod_raw: Mapping[str, Any], templates: Sequence[Mapping[str, Any]],
                 cluster: ClusterState) -> tuple[Mapping[str, Any], ClusterState]:
    pod = parse_pod(pod_raw)
    statuses = list((pod.raw.get("status") or {}).get("resourceClaimStatuses") or [])
    created = []
    for item in (pod.raw.get("spec") or {}).get("resourceClaims") or []:
        name, template_name = item.get("name"), item.get("resourceClaimTemplateName")
        if not template_name or any(s.get("name") == name for s in statuses):
            continue
        template = next((t for t in templates if t.get("metadata", {}).get("name") == template_name
                         and t.get("metadata", {}).get("namespace", "default") == pod.namespace), None)
        if template is None:
            continue
        claim_name = f"{pod.name}-{name}"
        meta = template.get("metadata") or {}
        created.append(parse_claim({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim_name, "namespace": pod.namespace,
                         "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"claim/{pod.namespace}/{claim_name}")),
                         "labels": dict(meta.get("labels") or {}),
                         "annotations": {**(meta.get("annotations") or {}),
                                         "resource.kubernetes.io/pod-claim-name": name},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": dict((template.get("spec") or {}).get("spec") or {})}))
        statuses.append({"name": name, "resourceClaimName": claim_name})
    if not created:
        return pod_raw, cluster
    return (with_status(pod, resourceClaimStatuses=statuses).raw,
            replace(cluster, claims=(*cluster.claims, *created)))


def _apply_phase(cluster: ClusterState, change: PhaseChange) -> ClusterState:
    pod = cluster.pod(change.pod)
    if pod is None:
        return cluster
    if change.phase in ("Succeeded", "Failed"):
        return dra.release(cluster.without_pods([pod.key]), pod)
    running = with_status(pod, phase=change.phase)
    return replace(cluster, pods=tuple(running if p.key == pod.key else p for p in cluster.pods))


def _sorted(queue: Mapping[str, Mapping[str, Any]], arrival: Mapping[str, int]) -> list[str]:
    return sorted(queue, key=lambda k: (-parse_pod(queue[k]).priority, arrival[k]))


def play(config: SchedulerConfig, cluster: ClusterState, pods: Sequence[Mapping[str, Any]], extender: Extender, *,
         phase_changes: Sequence[PhaseChange] = (), templates: Sequence[Mapping[str, Any]] = (),
         arrivals: Mapping[str, int] | None = None, bind_lag: int = 0, max_rounds: int = 20) -> Play:
    queue: dict[str, Mapping[str, Any]] = {}
    arrival: dict[str, int] = {}
    for raw in pods:
        raw, cluster = _instantiate(raw, templates, cluster)
        key = parse_pod(raw).key
        queue[key], arrival[key] = raw, len(arrival)
    history: dict[str, list[Attempt]] = {key: [] for key in queue}
    preempted: dict[str, str] = {}
    seen: dict[str, int] = {}
    version, rounds = 0, 0
    attempts: list[Attempt] = []
    in_flight: deque[Attempt] = deque()

    def settle(attempt: Attempt) -> None:
        nonlocal cluster, version
        if attempt.cluster != cluster:
            version += 1
        cluster = attempt.cluster
        attempts.append(attempt)
        history[attempt.pod].append(attempt)
        for victim in attempt.victims:
            preempted[victim] = attempt.pod
        if attempt.outcome == BOUND:
            queue.pop(attempt.pod, None)
        else:
            queue[attempt.pod] = attempt.pod_raw

    def finish_bind() -> None:
        settle(bind(config, in_flight.popleft(), extender, cluster))

    for rounds in range(1, max_rounds + 1):
        for change in (c for c in phase_changes if c.round == rounds):
            changed = _apply_phase(cluster, change)
            version += changed != cluster
            cluster = changed
        arrived = {k: v for k, v in queue.items() if (arrivals or {}).get(k, 1) <= rounds}
        eligible = [k for k in _sorted(arrived, arrival) if _eligible(history[k], seen.get(k), version)]
        later = [*(c.round for c in phase_changes), *(arrivals or {}).values()]
        if not eligible and not any(r > rounds for r in later):
            rounds -= 1
            break
        for key in eligible:
            seen[key] = version
            attempt = schedule(config, cluster, queue[key], extender)
            if attempt.outcome == ASSUMED:
                queue.pop(key)
                cluster = attempt.cluster
                version += 1
                in_flight.append(attempt)
                attempts.append(attempt)
                history[key].append(attempt)
                if len(in_flight) > bind_lag:
                    finish_bind()
            else:
                settle(attempt)
        while in_flight:
            finish_bind()
    return Play(_outcomes(history, preempted), cluster, tuple(attempts), rounds)


def _eligible(history: Sequence[Attempt], seen: int | None, version: int) -> bool:
    if seen is None or not history:
        return True
    return history[-1].outcome in RETRIED_EVERY_ROUND or version > seen


def _outcomes(history: Mapping[str, Sequence[Attempt]], preempted: Mapping[str, str]) -> dict[str, PodOutcome]:
    outcomes = {}
    for key, attempts in history.items():
        final = [a for a in attempts if a.outcome != ASSUMED]
        last = final[-1] if final else None
        bound = last is not None and last.outcome == BOUND and key not in preempted
        message = "" if bound or last is None else last.message
        if key in preempted:
            message = f"preempted by {preempted[key]}"
        outcomes[key] = PodOutcome(
            pod=key, node=last.node if bound and last is not None else None, message=message,
            cycles=sum(1 for a in attempts if a.outcome in SCHEDULING_OUTCOMES),
            history=tuple(a.outcome for a in attempts), preempted_by=preempted.get(key))
    return outcomes
