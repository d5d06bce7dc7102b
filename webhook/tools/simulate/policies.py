"""The four placement policies ``imex-webhook simulate`` compares, one pod per call.

- ``ImexPolicy`` is the service itself behind kube-scheduler: each pod goes through the emulated
  scheduling and binding cycle (``cycle``: the in-tree filters of the profile its
  ``spec.schedulerName`` names, then the extender's filter, prioritize and bind), and the extender is
  the engine over a ``ClusterStore`` fed with the simulated cluster's objects, with an in-memory binder
  and an attacher that composes fabric GPUs in the simulated pools. Group pods use the dedicated profile
  (``deploy.scheduler_config``); plain pods, which admission leaves alone, kube-scheduler's default one.
  Nothing of the decision is re-implemented here. It reads the nodes' fabric-health label as the service
  does (``imex-webhook``: ``--fabric-health-policy avoid``; ``imex-webhook-refuse``, ``imex-webhook-allow``),
  and a ComputeDomain's ``imex-webhook.io/exclusive-domain`` annotation (``imex-webhook-exclusive``: every
  ComputeDomain exclusive, ``serve --exclusive-domains``), both through the engine's ``Policy`` and caches.
  ``imex-webhook-pack`` is ``serve --pack-plain-gpu-pods``: admission sends plain GPU pods to the dedicated
  profile too, and the extender scores them (``webhook.domain.placement.plain_pods``).
- ``GangTasPolicy`` is Kueue's Topology-Aware Scheduling with a required topology on the domain, the
  strongest peer: a job is admitted only when one domain (an NVLink clique; a fabric zone too for jobs
  without a ComputeDomain, on its local GPUs: nothing attaches fabric GPUs) has room for all its pods
  now, and then all of them go there, best fit; otherwise the whole job waits. Never split, never stuck.
  A multi-rack job goes as Kueue's podset slices of its segment size, each slice in one domain, all
  slices or none (``racks.pack_slices``).
- ``DefaultPolicy`` is kube-scheduler without us: each pod goes to the fitting node with the most free
  GPUs (least allocated), ties broken at random as the scheduler does; no fabric attach exists.
- ``AffinityPolicy`` adds the required pod affinity on the clique label that NVIDIA's documentation
  suggests: a group's first pod goes anywhere it fits, later pods only to the clique of the pods already
  placed. Co-location without a capacity reservation: a group can start where it cannot finish (a
  multi-rack job always does: one clique never holds it, so it is stuck).

None of the three peers reads fabric health (no generic scheduler does), nor exclusivity: Kueue's TAS has
no notion of a domain kept from other workloads, and kube-scheduler's affinity keeps a group together
without keeping others out; an exclusive job is an ordinary ComputeDomain to them. All of them, like
kube-scheduler, leave a failed node (NotReady, tainted unreachable) alone.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.adapters.embedded import bind_locally, label_locally
from webhook.adapters.memory import MemoryReservationStore
from webhook.domain.health import HealthPolicy
from webhook.domain.model import Node, Pod
from webhook.domain.policy import (
    DEFAULT_HOLD_AFTER,
    DEFAULT_HOLD_TIMEOUT,
    DEFAULT_HOLD_YIELD_AFTER,
    DEFAULT_HOLD_YIELD_UNTIL,
)
from webhook.domain.policy import Policy as EnginePolicy
from webhook.engine.engine import Engine
from webhook.service import deploy
from webhook.sim.cycle.model import Pod as CyclePod
from webhook.sim.dra_objects import channel_device_class
from webhook.state.cluster import ClusterStore
from webhook.tools.simulate import cycle, racks
from webhook.tools.simulate.cluster import SimCluster, job_objects
from webhook.tools.simulate.workload import Job
from webhook.wire.timestamps import rfc3339


@dataclass(frozen=True)
class Holds:
    """The hold knobs ``imex-webhook`` runs with (docs/SCHEDULER.md, "Holds and backfill"): the service's
    defaults, giving way included, with holds on (``serve`` leaves them off: docs/SIMULATE.md says what they
    cost)."""

    max_holds: int = 1
    hold_after: float = DEFAULT_HOLD_AFTER
    hold_timeout: float = DEFAULT_HOLD_TIMEOUT
    hold_yield_after: float = DEFAULT_HOLD_YIELD_AFTER
    hold_yield_until: float = DEFAULT_HOLD_YIELD_UNTIL


HOLDS = Holds()


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

    def nodes_changed(self, nodes: list[int], now: float) -> None:
        """The nodes' health changed (failed, repaired, fabric degraded or healthy again)."""

    def promised(self, job: Job) -> bool:
        """Whether room is promised to the job (a reservation or a hold): then it may fit where a smaller job of
        its shape did not, and a scheduling pass tries it whatever failed before it."""


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

    def nodes_changed(self, nodes: list[int], now: float) -> None:
        pass  # the cluster's ``down`` is all it reads of health

    def promised(self, job: Job) -> bool:
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


class GangTasPolicy(DefaultPolicy):
    """Kueue's Topology-Aware Scheduling with a required topology on the domain: a job is admitted only
    when one domain has room for all its pods now, and then all of them are placed there at once."""

    name = "gang-tas"

    def __init__(self, cluster: SimCluster, seed: int) -> None:
        super().__init__(cluster, seed)
        self.plans: dict[int, list[int]] = {}

    def usable(self, job: Job, node: int) -> int:
        """How many of the job's pods the node can take now: its free GPUs (no fabric attach), one pod per
        node with a free IMEX channel for ComputeDomain pods, and no composable node for them (no NVLink)."""
        c = self.cluster
        if c.down[node] or (job.kind == "nvlink" and c.zones[node] is not None):
            return 0
        fits = c.free_local(node) // job.gpus if job.gpus else job.pods
        if _group(job) is not None:
            return min(fits, 1) if c.channel[node] is None else 0
        return fits

    def plan(self, job: Job) -> list[int] | None:
        """The nodes of the best-fitting domain for every pod, or None when no domain has room for all.

        Best fit: the domain with the fewest usable GPUs left over once the job is in (ties: domain
        name); inside it, the nodes with the fewest free GPUs first (ties: node name)."""
        c = self.cluster
        rooms: dict[str, list[tuple[int, str, int, int]]] = defaultdict(list)
        for n, domain in enumerate(c.domains):
            k = self.usable(job, n)
            if k > 0:
                rooms[domain].append((c.free_local(n), c.names[n], n, k))
        if job.segment_size is not None:
            return self._slices(job, rooms)
        fitting = []
        for domain, nodes in rooms.items():
            if sum(k for *_, k in nodes) >= job.pods:
                fitting.append((sum(free for free, *_ in nodes) - job.gpu_demand, domain))
        if not fitting:
            return None
        _, domain = min(fitting)
        placement: list[int] = []
        for _, _, n, k in sorted(rooms[domain]):
            placement += [n] * min(k, job.pods - len(placement))
        return placement

    def _slices(self, job: Job, rooms: dict[str, list[tuple[int, str, int, int]]]) -> list[int] | None:
        """A multi-rack job as Kueue's podset slices of its segment size, each slice in one domain
        (``racks.pack_slices``), all of them or none; inside a domain, best fit as above."""
        sizes = racks.slice_sizes(job)
        where = racks.pack_slices({d: sum(k for *_, k in nodes) for d, nodes in rooms.items()}, sizes)
        if where is None:
            return None
        free = {d: [node for _, _, node, k in sorted(rooms[d]) for _ in range(k)] for d in set(where.values())}
        placement: list[int] = []
        for index, size in enumerate(sizes):
            nodes = free[where[index]]
            placement += nodes[:size]
            del nodes[:size]
        return placement

    def place(self, job: Job, pod: int, now: float) -> int | None:
        plan = self.plans.get(job.index)
        if plan is None:
            plan = self.plan(job)
            if plan is None:
                return None  # the whole job waits: no partial admission
            self.plans[job.index] = plan
        node = plan[pod]
        self.cluster.bind((job.index, pod), node, job.gpus, _group(job))
        if pod == job.pods - 1:
            del self.plans[job.index]
        return node

    def release(self, job: Job, now: float) -> None:
        self.plans.pop(job.index, None)
        super().release(job, now)


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
        bind_locally(p.store, pod.namespace, pod.name, node, p.now)

    def label_segment(self, pod: Pod, index: int) -> None:
        label_locally(self.policy.store, pod, index)


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

    def __init__(self, cluster: SimCluster, seed: int, health: HealthPolicy = "avoid",
                 exclusive_domains: bool = False, pack_plain: bool = False) -> None:
        self.cluster = cluster
        self.pack_plain = pack_plain
        self.now = 0.0
        policy = EnginePolicy(fabric_health=health, exclusive_domains=exclusive_domains,
                              pack_plain_gpu_pods=pack_plain, max_holds=HOLDS.max_holds, hold_after=HOLDS.hold_after,
                              hold_timeout=HOLDS.hold_timeout, hold_yield_after=HOLDS.hold_yield_after,
                              hold_yield_until=HOLDS.hold_yield_until)
        self.store = ClusterStore(policy)
        self.node_index = cluster.index
        nodes = [cluster.node_object(n) for n in range(len(cluster.names))]
        self.store.replace("Node", nodes)
        for kind in ("Pod", "ComputeDomain", "ResourceClaimTemplate", "ResourceClaim", "Job"):
            self.store.replace(kind, [])
        self.store.set_fabric_free(cluster.zone_free)
        self.engine = Engine(self.store, MemoryReservationStore(), _SimBinder(self), policy,
                             attacher=_SimAttacher(self), holder="simulator", clock=lambda: self.now)
        fabric = cluster.params.fabric_zones > 0
        configs = cycle.profiles(deploy.scheduler_config(fabric=fabric), cycle.DEFAULT_PROFILE)
        self.cycle = cycle.Cycle(configs, nodes, cycle.EngineExtender(self.engine), random.Random(seed),
                                    slices=cluster.channel_slices(), device_classes=[channel_device_class()],
                                    default_binder=self._default_bind)
        self.pods: dict[tuple[int, int], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        self.pending_pod: tuple[Job, int] = (Job(-1, "", "plain", 0, 0, 0.0, 0.0), 0)
        self.attached_now = 0
        self.holds_made = 0  # reservations made as holds (a job in segments makes one per segment)

    def refresh_nodes(self, nodes: list[int]) -> None:
        for n in sorted(set(nodes)):
            obj = self.cluster.node_object(n)
            self.store.apply("Node", "MODIFIED", obj)
            self.cycle.update_node(obj)
        self.store.set_fabric_free(self.cluster.zone_free)

    def submit(self, job: Job, now: float) -> None:
        self.now = now
        objects = job_objects(job, self.pack_plain)
        templates = [o for o in objects if o["kind"] == "ResourceClaimTemplate"]
        for obj in objects:
            obj["metadata"]["creationTimestamp"] = rfc3339(now, "s")  # the wait order's age
            self.store.apply(obj["kind"], "ADDED", obj)
        pods = [o for o in objects if o["kind"] == "Pod"]
        for i, pod in enumerate(pods):
            self.pods[(job.index, i)] = cycle.instantiate(pod, templates)

    def _default_bind(self, pod: CyclePod, node: str) -> None:
        """kube-scheduler's default binder (pods of the default profile): the API server records the
        binding, and the service's cache sees it through its watch."""
        job, index = self.pending_pod
        self.cluster.bind((job.index, index), self.node_index[node], job.gpus, _group(job))
        bind_locally(self.store, pod.namespace, pod.name, node, self.now)

    def place(self, job: Job, pod: int, now: float) -> int | None:
        self.now = now
        raw, claims = self.pods[(job.index, pod)]
        self.pending_pod, self.attached_now = (job, pod), 0
        result = self.cycle.schedule_one(raw, claims)
        return None if result.node is None else self.node_index[result.node]

    def release(self, job: Job, now: float) -> None:
        self.now = now
        touched = self.cluster.release(job)
        self.cycle.release([f"{job.name}/{job.name}-{i}" for i in range(job.pods)])
        for i in range(job.pods):
            self.pods.pop((job.index, i), None)
        for obj in reversed(job_objects(job, self.pack_plain)):
            self.store.apply(obj["kind"], "DELETED", obj)
        if any(self.cluster.zones[n] for n in touched):
            self.refresh_nodes([n for n in touched if self.cluster.zones[n]])

    def tick(self, now: float) -> bool:
        """The upkeep worker's round: housekeeping, then holds for the groups that waited longest."""
        self.now = now
        released = bool(self.engine.housekeep())
        self.holds_made += len(self.engine.plan_holds())
        return released

    def nodes_changed(self, nodes: list[int], now: float) -> None:
        """The Node objects change as the API server would show them; the watch brings them to the cache."""
        self.now = now
        self.refresh_nodes(nodes)

    def promised(self, job: Job) -> bool:
        return any(r.namespace == job.name for r in self.engine.reservations.all().values())  # its own namespace


# The service under each setting compared: the policy name -> (--fabric-health-policy, --exclusive-domains,
# --pack-plain-gpu-pods).
IMEX_SETTINGS: dict[str, tuple[HealthPolicy, bool, bool]] = {
    "imex-webhook": ("avoid", False, False), "imex-webhook-refuse": ("refuse", False, False),
    "imex-webhook-allow": ("allow", False, False), "imex-webhook-exclusive": ("avoid", True, False),
    "imex-webhook-pack": ("avoid", False, True)}


def make(name: str, cluster: SimCluster, seed: int) -> Placer:
    if name in IMEX_SETTINGS:
        imex = ImexPolicy(cluster, seed, *IMEX_SETTINGS[name])
        imex.name = name
        return imex
    kinds: dict[str, type[DefaultPolicy]] = {
        "default": DefaultPolicy, "affinity-only": AffinityPolicy, "gang-tas": GangTasPolicy}
    placer: Placer = kinds[name](cluster, seed)
    return placer
