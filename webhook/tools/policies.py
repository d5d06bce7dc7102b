"""The three placement policies ``imex-webhook simulate`` compares, one pod per call.

- ``ImexPolicy`` is the service itself: the engine's ``filter``, ``prioritize`` and ``bind`` over a
  ``ClusterStore`` fed with the simulated cluster's objects, an in-memory binder and an attacher that
  composes fabric GPUs in the simulated pools. Nothing of the decision is re-implemented here; the
  candidate list is what kube-scheduler's in-tree filters would pass on (enough free GPUs, or a
  composable node, and a free IMEX channel for ComputeDomain pods).
- ``DefaultPolicy`` is kube-scheduler without us: each pod goes to the fitting node with the most free
  GPUs (least allocated), ties broken at random as the scheduler does; no fabric attach exists.
- ``AffinityPolicy`` adds the required pod affinity on the clique label that NVIDIA's documentation
  suggests: a group's first pod goes anywhere it fits, later pods only to the clique of the pods already
  placed. Co-location without a capacity reservation: a group can start where it cannot finish.
"""

from __future__ import annotations

import random
from typing import Protocol

from webhook.domain.errors import DecisionError
from webhook.domain.model import Node, Pod
from webhook.domain.policy import Policy as EnginePolicy
from webhook.state.cluster import ClusterStore
from webhook.state.engine import Engine
from webhook.state.reservations import MemoryReservationStore
from webhook.tools.simcluster import SimCluster, job_objects
from webhook.tools.workload import Job


class Placer(Protocol):
    name: str

    def submit(self, job: Job, now: float) -> None:
        """The job's objects were created (the API server has them; caches see them)."""

    def place(self, job: Job, pod: int, now: float) -> int | None:
        """One scheduling attempt for one pod: the node it was bound to, or None (stays pending)."""

    def release(self, job: Job, now: float) -> None:
        """The job finished or was torn down: its pods are deleted, attached GPUs detached."""

    def tick(self, now: float) -> bool:
        """Periodic housekeeping; True when it freed something (a scheduling pass is due)."""


def _group(job: Job) -> str | None:
    """The ComputeDomain whose channel the job's pods hold (None: no channel needed)."""
    return job.name if job.kind == "nvlink" else None


class DefaultPolicy:
    name = "default"

    def __init__(self, cluster: SimCluster, seed: int) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)

    def submit(self, job: Job, now: float) -> None:
        pass

    def candidates(self, job: Job, pod: int) -> list[int]:
        return self.cluster.fitting(job.gpus, _group(job) is not None)

    def place(self, job: Job, pod: int, now: float) -> int | None:
        nodes = self.candidates(job, pod)
        if not nodes:
            return None
        free = self.cluster.free_local
        most = max(free(n) for n in nodes)
        node = self.rng.choice([n for n in nodes if free(n) == most])
        self.cluster.bind((job.index, pod), node, job.gpus, _group(job))
        return node

    def release(self, job: Job, now: float) -> None:
        self.cluster.release(job)

    def tick(self, now: float) -> bool:
        return False


class AffinityPolicy(DefaultPolicy):
    name = "affinity-only"

    def candidates(self, job: Job, pod: int) -> list[int]:
        nodes = super().candidates(job, pod)
        if not job.grouped:
            return nodes
        c = self.cluster
        # topologyKey is the clique label: nodes without it (composable zones) never satisfy the term.
        nodes = [n for n in nodes if c.zones[n] is None]
        placed = c.domains_of(job)
        if placed:
            domain = next(iter(placed))
            nodes = [n for n in nodes if c.domains[n] == domain]
        return nodes


class _SimBinder:
    """The engine's Binder: record the binding in the store and in the simulated cluster."""

    def __init__(self, policy: ImexPolicy) -> None:
        self.policy = policy

    def read_pod(self, namespace: str, name: str) -> Pod | None:
        return self.policy.store.pod(namespace, name)

    def bind(self, pod: Pod, node: str) -> None:
        p = self.policy
        job, index = p.pending_pod
        attached = p.attached_now
        p.cluster.bind((job.index, index), p.node_index[node], job.gpus, _group(job), attached)
        p.store.bind_locally(pod.namespace, pod.name, node)


class _SimAttacher:
    """The fabric seam: compose GPUs from the zone's pool onto the node, as the node agent reports them."""

    def __init__(self, policy: ImexPolicy) -> None:
        self.policy = policy

    def attach(self, pod: Pod, node: Node, gpus: int, deadline: float) -> None:
        p = self.policy
        index = p.node_index[node.name]
        p.cluster.attach(index, gpus)
        p.attached_now = gpus
        p.refresh_nodes([index])


class ImexPolicy:
    name = "imex-webhook"

    def __init__(self, cluster: SimCluster, seed: int) -> None:
        self.cluster = cluster
        self.now = 0.0
        policy = EnginePolicy()
        self.store = ClusterStore(policy)
        self.node_index = cluster.index
        self.store.replace("Node", [cluster.node_object(n) for n in range(len(cluster.names))])
        for kind in ("Pod", "ComputeDomain", "ResourceClaimTemplate", "ResourceClaim", "Job"):
            self.store.replace(kind, [])
        self.store.set_fabric_free(cluster.zone_free)
        self.engine = Engine(self.store, MemoryReservationStore(), _SimBinder(self), policy,
                             attacher=_SimAttacher(self), holder="simulator", clock=lambda: self.now)
        self.pending_pod: tuple[Job, int] = (Job(-1, "", "plain", 0, 0, 0.0, 0.0), 0)
        self.attached_now = 0

    def refresh_nodes(self, nodes: list[int]) -> None:
        for n in sorted(set(nodes)):
            self.store.apply("Node", "MODIFIED", self.cluster.node_object(n))
        self.store.set_fabric_free(self.cluster.zone_free)

    def submit(self, job: Job, now: float) -> None:
        self.now = now
        for obj in job_objects(job):
            self.store.apply(obj["kind"], "ADDED", obj)

    def candidates(self, job: Job) -> list[str]:
        """What kube-scheduler's in-tree filters pass to the extender: nodes with the GPUs free, or
        composable nodes for group pods (only a group's bind attaches fabric GPUs), and a free IMEX
        channel for ComputeDomain pods."""
        names = self.cluster.names
        return [names[n] for n in self.cluster.fitting(job.gpus, _group(job) is not None, fabric=job.grouped)]

    def place(self, job: Job, pod: int, now: float) -> int | None:
        self.now = now
        p = self.store.pod(job.name, f"{job.name}-{pod}")
        if p is None:
            raise AssertionError(f"pod {job.name}-{pod} is not in the store")
        passed = self.engine.filter(p, self.candidates(job)).passed
        if not passed:
            return None
        scores = self.engine.prioritize(p, passed)
        free = self.cluster.free_local
        # Extender score first (its weight dominates the profile), then least allocated, then name.
        host = max(scores, key=lambda hs: (hs[1], free(self.node_index[hs[0]]), hs[0]))[0]
        self.pending_pod, self.attached_now = (job, pod), 0
        try:
            self.engine.bind(p.namespace, p.name, p.uid, host)
        except DecisionError:
            return None
        return self.node_index[host]

    def release(self, job: Job, now: float) -> None:
        self.now = now
        touched = self.cluster.release(job)
        for obj in reversed(job_objects(job)):
            self.store.apply(obj["kind"], "DELETED", obj)
        if any(self.cluster.zones[n] for n in touched):
            self.refresh_nodes([n for n in touched if self.cluster.zones[n]])

    def tick(self, now: float) -> bool:
        self.now = now
        return bool(self.engine.housekeep())


def make(name: str, cluster: SimCluster, seed: int) -> Placer:
    kinds: dict[str, type[DefaultPolicy] | type[ImexPolicy]] = {
        "imex-webhook": ImexPolicy, "default": DefaultPolicy, "affinity-only": AffinityPolicy}
    placer: Placer = kinds[name](cluster, seed)
    return placer
