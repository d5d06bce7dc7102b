"""The simulated cluster's ground truth: nodes, GPUs in use, fabric GPUs attached, ComputeDomain channels.

Every policy places pods through ``bind`` here, which re-checks the physics (free GPUs, the DRA
driver's one ComputeDomain channel per node, fabric slots and pool), so a policy that decides wrongly
fails loudly instead of producing flattering numbers. The imex-webhook policy additionally mirrors
every change into the service's ``ClusterStore`` as the watch caches would, and into the emulated
scheduler's view (``cycle``); ``node_object`` renders a node as the API server would show it
(allocatable grows while fabric GPUs are attached; the fabric-health label the node agent writes; a failed
node NotReady and tainted as the node lifecycle controller leaves it), ``channel_slices`` the IMEX channels
the NVIDIA DRA driver publishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.domain import keys
from webhook.sim.dra_objects import channel_slice
from webhook.tools.simulate.workload import Job, Params

PodKey = tuple[int, int]  # (job index, pod index)
# What a GB200 tray's kubelet reports besides GPUs; the simulated pods request no CPU or memory.
NODE_CPU, NODE_MEMORY, NODE_PODS = "140", "860Gi", "110"
# A node whose kubelet stopped reporting: the node lifecycle controller's taints and Ready condition.
LOST_TAINTS = [{"key": "node.kubernetes.io/unreachable", "effect": effect} for effect in ("NoSchedule", "NoExecute")]


@dataclass
class Bound:
    node: int
    gpus: int
    attached: int  # fabric GPUs attached to the node for this pod
    group: str | None  # ComputeDomain group holding the node's channel, if any


@dataclass
class SimCluster:
    params: Params
    names: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)
    zones: list[str | None] = field(default_factory=list)
    base_gpus: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    attached: list[int] = field(default_factory=list)
    channel: list[str | None] = field(default_factory=list)  # ComputeDomain whose pod holds channel-0
    down: list[int] = field(default_factory=list)  # failures in progress (faults overlap): > 0, out of service
    degraded: list[int] = field(default_factory=list)  # fabric degradations in progress
    zone_free: dict[str, int] = field(default_factory=dict)
    pods: dict[PodKey, Bound] = field(default_factory=dict)
    attaches: int = 0  # attach operations
    attached_gpus: int = 0  # fabric GPUs attached in all

    @classmethod
    def build(cls, p: Params) -> SimCluster:
        c = cls(p)
        for clique in range(p.cliques):
            domain = f"{clique:08x}-0000-4000-8000-{clique:012x}.{32766 - clique % 4}"
            for tray in range(p.clique_nodes):
                c._add(f"nvl-{clique:03d}-{tray:02d}", domain, None, p.gpus_per_node, 0)
        for z in range(p.fabric_zones):
            zone = f"pcie-pool-{z}"
            c.zone_free[zone] = p.fabric_pool
            for n in range(p.fabric_nodes):
                c._add(f"fab-{z}-{n:02d}", zone, zone, p.fabric_local_gpus, p.fabric_slots)
        return c

    def _add(self, name: str, domain: str, zone: str | None, gpus: int, slots: int) -> None:
        self.names.append(name)
        self.domains.append(domain)
        self.zones.append(zone)
        self.base_gpus.append(gpus)
        self.slots.append(slots)
        self.used.append(0)
        self.attached.append(0)
        self.channel.append(None)
        self.down.append(0)
        self.degraded.append(0)

    @property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    def free_local(self, node: int) -> int:
        return self.base_gpus[node] + self.attached[node] - self.used[node]

    def attachable(self, node: int) -> int:
        zone = self.zones[node]
        if zone is None:
            return 0
        return min(self.slots[node] - self.attached[node], self.zone_free[zone])

    def channel_free(self, node: int, group: str | None) -> bool:
        """A ComputeDomain pod needs the node's one IMEX channel, unheld by any other pod."""
        return group is None or self.channel[node] is None

    def fits_locally(self, node: int, gpus: int, group: str | None) -> bool:
        return self.free_local(node) >= gpus and self.channel_free(node, group)

    def fitting(self, gpus: int, needs_channel: bool, fabric: bool = False) -> list[int]:
        """Nodes with ``gpus`` free (or, with ``fabric``, any composable node) and, if needed, a free
        IMEX channel: what kube-scheduler's in-tree filters let through. Inlined: it runs for every
        scheduling attempt over every node."""
        rows = zip(self.base_gpus, self.attached, self.used, self.channel, self.zones, self.down, strict=True)
        return [n for n, (base, att, used, chan, zone, down) in enumerate(rows)
                if not down and (not needs_channel or chan is None)
                and (base + att - used >= gpus or (fabric and zone is not None))]

    def attach(self, node: int, gpus: int) -> None:
        zone = self.zones[node]
        if zone is None or gpus > self.attachable(node):
            raise AssertionError(f"attach of {gpus} fabric GPUs to {self.names[node]} exceeds its slots or pool")
        self.attached[node] += gpus
        self.zone_free[zone] -= gpus
        self.attaches += 1
        self.attached_gpus += gpus

    def bind(self, key: PodKey, node: int, gpus: int, group: str | None, attached: int = 0) -> None:
        """Record a placement; the GPUs (local plus ``attached`` just attached) must be free."""
        if key in self.pods:
            raise AssertionError(f"pod {key} bound twice")
        if self.down[node]:
            raise AssertionError(f"pod {key} bound to {self.names[node]}, which is out of service")
        if self.free_local(node) < gpus:
            raise AssertionError(f"pod {key} needs {gpus} GPUs; {self.names[node]} has {self.free_local(node)} free")
        if not self.channel_free(node, group):
            raise AssertionError(f"pod {key} needs the IMEX channel of {self.names[node]}, held by "
                                 f"{self.channel[node]}")
        self.used[node] += gpus
        if group is not None:
            self.channel[node] = group
        self.pods[key] = Bound(node, gpus, attached, group)

    def release(self, job: Job) -> list[int]:
        """Delete the job's pods; detach the fabric GPUs attached for them. Returns the nodes touched."""
        touched = []
        for i in range(job.pods):
            bound = self.pods.pop((job.index, i), None)
            if bound is None:
                continue
            node = bound.node
            self.used[node] -= bound.gpus
            if bound.group is not None:
                self.channel[node] = None
            if bound.attached:
                zone = self.zones[node]
                assert zone is not None
                self.attached[node] -= bound.attached
                self.zone_free[zone] += bound.attached
            touched.append(node)
        return touched

    def held_gpus(self) -> int:
        return sum(self.used)

    def node_object(self, node: int) -> dict[str, Any]:
        """The Node as the API server shows it now (the node agent publishes attached GPUs)."""
        name, zone = self.names[node], self.zones[node]
        # The node agent's label; a composable node has no multi-node fabric ("none").
        health = "none" if zone is not None else "degraded" if self.degraded[node] else "healthy"
        labels = {"kubernetes.io/hostname": name, keys.HEALTH_LABEL: health}
        annotations = {}
        if zone is None:
            labels[keys.CLIQUE_LABEL] = self.domains[node]
        else:
            labels[keys.FABRIC_ZONE_LABEL] = zone
            annotations[keys.FABRIC_SLOTS_ANNOTATION] = str(self.slots[node] - self.attached[node])
        gpus = self.base_gpus[node] + self.attached[node]
        allocatable = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS, keys.GPU_RESOURCE: str(gpus)}
        ready = {"type": "Ready", "status": "Unknown" if self.down[node] else "True"}
        spec = {"taints": [dict(t) for t in LOST_TAINTS]} if self.down[node] else {}
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels, "annotations": annotations}, "spec": spec,
                "status": {"allocatable": allocatable, "capacity": dict(allocatable), "conditions": [ready]}}

    def channel_slices(self) -> list[dict[str, Any]]:
        """The ResourceSlices the ComputeDomain DRA driver publishes: one IMEX channel per node (every
        node, as ``channel_free`` allows a ComputeDomain pod on every node)."""
        return [channel_slice(name) for name in self.names]

    def jobs_on(self, node: int) -> list[int]:
        """The jobs with a pod bound to ``node``, in index order."""
        return sorted({job for (job, _), b in self.pods.items() if b.node == node})

    def domains_of(self, job: Job) -> set[str]:
        return {self.domains[b.node] for i in range(job.pods) if (b := self.pods.get((job.index, i)))}


def job_objects(job: Job, pack_plain: bool = False) -> list[dict[str, Any]]:
    """The Kubernetes objects a job consists of, in its own namespace: a ComputeDomain and its channel
    template for nvlink jobs, and the pods (group-size annotation for fabric groups). Group pods carry
    ``spec.schedulerName`` of the dedicated scheduler, as admission sets it; plain pods keep the default, or
    get the dedicated one too with ``pack_plain`` (admission under ``--pack-plain-gpu-pods``).
    An exclusive job's ComputeDomain carries ``imex-webhook.io/exclusive-domain: "true"``, where
    docs/SCHEDULER.md says to put it (it counts from the group's first filter); a multi-rack job's carries
    ``imex-webhook.io/segment-size``, and its pods their Job completion index (annotation and label, as the
    Job controller writes them on an Indexed Job's pods); a job that states a walltime carries
    ``imex-webhook.io/max-runtime`` on its ComputeDomain, or on its pods when it has none; the others carry
    nothing."""
    from webhook.demo import cluster as demo
    from webhook.domain.policy import Policy

    ns = job.name
    out: list[dict[str, Any]] = []
    if job.kind == "nvlink":
        cd, rct = demo.compute_domain(job.name, job.pods), demo.channel_template(job.name)
        for obj in (cd, rct):
            obj["metadata"]["namespace"] = ns
        stated: dict[str, str] = {}
        if job.exclusive:
            stated[keys.EXCLUSIVE_ANNOTATION] = "true"
        if job.segment_size is not None:
            stated[keys.SEGMENT_SIZE_ANNOTATION] = str(job.segment_size)
        if job.walltime is not None:
            stated[keys.MAX_RUNTIME_ANNOTATION] = f"{job.walltime:.0f}s"
        if stated:
            cd["metadata"]["annotations"] = stated
        out += [cd, rct]
    for i in range(job.pods):
        annotations = {keys.GROUP_ANNOTATION: job.name, keys.GROUP_SIZE_ANNOTATION: str(job.pods)} \
            if job.kind == "fabric" else None
        if job.segment_size is not None:
            annotations = {keys.COMPLETION_INDEX: str(i)}
        if job.walltime is not None and job.kind != "nvlink":  # a ComputeDomain job states it on its domain
            annotations = {**(annotations or {}), keys.MAX_RUNTIME_ANNOTATION: f"{job.walltime:.0f}s"}
        pod = demo.pod(f"{job.name}-{i}", job.name if job.kind == "nvlink" else None, job.gpus,
                       annotations=annotations, namespace=ns)
        if job.segment_size is not None:
            pod["metadata"]["labels"][keys.COMPLETION_INDEX] = str(i)
        if job.grouped or (pack_plain and job.gpus > 0):
            pod["spec"]["schedulerName"] = Policy().scheduler_name
        out.append(pod)
    return out
