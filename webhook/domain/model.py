"""The plain data every decision works on: frozen dataclasses parsed once from the wire.

Nothing here knows where the data came from (watch cache, embedded file, request body); see
``webhook.domain.reading.parsing`` for the one place that reads Kubernetes JSON.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from webhook.wire.fabric_attachment import Attachment

ObjectKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    domain: str | None  # the value of the first domain label present; compared as an opaque string
    domain_key: str | None  # which label it came from
    gpus: int  # allocatable nvidia.com/gpu plus dra_gpus
    fabric_zone: str | None
    fabric_slots: int  # how many more fabric GPUs this node can take
    compute_domain: str | None  # UID in the DRA driver's node label, if a ComputeDomain holds the node
    unschedulable: bool = False
    dra_gpus: int = 0  # of gpus, those published as DRA devices (ResourceSlices), not by the device plugin
    # The annotation imex-webhook.io/redfish-system, as documented: the system (a Redfish ComputerSystem for
    # the Redfish backend) the fabric manager attaches GPUs to; the fabric seam names it in its own words.
    fabric_system: str | None = None
    # What keeps a node from taking members, or makes its domain a second choice (webhook.domain.health):
    fabric_health: str = ""  # imex-webhook.io/fabric-health as the node agent writes it ("" when absent)
    not_ready: bool = False  # the Ready condition is present and not True
    taints: tuple[str, ...] = ()  # node-condition taints (node.kubernetes.io/*) that keep pods off, key:Effect
    # The values of Policy.block_labels on the node, in that order ("" when absent): the network blocks above
    # its domain that a segmented job's domains must share (webhook.domain.groups.segments).
    blocks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of ``spec.resourceClaims``: from a template (one claim per pod) or a shared claim."""

    name: str
    template: str | None
    claim: str | None


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str
    controller: bool


@dataclass(frozen=True, slots=True)
class WorkloadRefs:
    """What Kubernetes' gang scheduling and the workload controllers put on a pod about its group, read
    once when the pod is parsed (``webhook.domain.reading.workload_parsing``): only these few values are kept, not
    the pod's foreign labels. Empty strings mean absent; sizes stay raw text until a group uses them."""

    pod_group: str = ""  # spec.schedulingGroup.podGroupName (Kubernetes 1.36+)
    workload: str = ""  # spec.workloadRef.name (Kubernetes 1.35)
    workload_pod_group: str = ""  # spec.workloadRef.podGroup
    workload_replica_key: str = ""  # spec.workloadRef.podGroupReplicaKey
    jobset: str = ""
    replicated_job: str = ""
    job_index: str = ""
    jobset_exclusive: bool = False  # each child Job has a topology domain of its own
    lws: str = ""
    lws_group_key: str = ""  # the label, or for a leader not labelled yet the key the LWS webhook gives it
    lws_leader: str = ""  # the leader pod's name (the pod itself, or a worker's annotation)
    lws_size: str | None = None
    training_job: str = ""
    training_kind: str = ""  # PyTorchJob, MPIJob...: from the operator-name label
    training_replica: str = ""  # "<replica type>/<replica index>", for a member's rank (webhook.domain.groups.segments)
    lws_worker_index: str = ""  # a member's rank inside its LeaderWorkerSet group
    kueue_group: str = ""
    kueue_total: str | None = None


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node_name: str | None
    terminated: bool  # Succeeded/Failed: holds no resources any more
    gpu_limit: int  # effective nvidia.com/gpu of the pod, computed as Kubernetes does
    claims: tuple[PodClaim, ...]
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    owners: tuple[OwnerRef, ...] = ()
    scheduler_name: str = "default-scheduler"
    deleting: bool = False
    workload: WorkloadRefs | None = None  # None: no gang API or controller names a group for it
    rank: str | None = None  # the Job completion index as written (webhook.domain.groups.segments)
    active_deadline: int | None = None  # spec.activeDeadlineSeconds: the kubelet ends the pod past it
    started_at: float | None = None  # status.startTime, seconds since the epoch (None: not started)
    created_at: float | None = None  # metadata.creationTimestamp (None: not created yet, at admission)
    priority: int = 0  # spec.priority, as the admission plugin resolved it from the priority class

    @property
    def key(self) -> ObjectKey:
        return (self.namespace, self.name)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A device request of a claim (``exactly``, or the first ``firstAvailable`` alternative)."""

    name: str
    device_class: str
    count: int
    all_devices: bool = False


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """A ResourceClaim or ResourceClaimTemplate, reduced to what grouping and demand need."""

    namespace: str
    name: str
    uid: str
    compute_domain: str | None  # from the driver's label or the opaque ComputeDomainChannelConfig.domainID
    requests: tuple[DeviceRequest, ...]
    reserved_for: tuple[str, ...] = ()  # pod UIDs (ResourceClaim status.reservedFor)
    daemon_for: str | None = None  # ComputeDomain UID of an IMEX daemon's claim (never makes a group)
    imex_nodes: tuple[str, ...] = ()  # nodes whose compute-domain devices the allocation holds


@dataclass(frozen=True, slots=True)
class ComputeDomain:
    namespace: str
    name: str
    uid: str
    num_nodes: int
    template: str | None  # spec.channel.resourceClaimTemplate.name
    exclusive: str | None = None  # imex-webhook.io/exclusive-domain as written (grouping.exclusive_requested)
    spare_nodes: str | None = None  # imex-webhook.io/spare-nodes as written (webhook.domain.groups.spares)
    segment_size: str | None = None  # imex-webhook.io/segment-size as written (webhook.domain.groups.segments)
    placement: str | None = None  # imex-webhook.io/placement as written (webhook.domain.groups.segments)
    max_runtime: str | None = None  # imex-webhook.io/max-runtime as written (webhook.domain.groups.walltime)


@dataclass(frozen=True, slots=True)
class Job:
    namespace: str
    name: str
    uid: str
    parallelism: int | None
    active_deadline: int | None = None  # spec.activeDeadlineSeconds: the Job controller ends the Job past it
    max_exec: str | None = None  # Kueue's kueue.x-k8s.io/max-exec-time-seconds label as written


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """What a controller's pod template asks for: enough to tell whether its pods join a group."""

    gpus: int  # effective nvidia.com/gpu
    claims: tuple[PodClaim, ...]


@dataclass(frozen=True, slots=True)
class Replicas:
    """One kind of pod a controller makes: a JobSet's replicated job, a training job's replica type."""

    name: str
    replicas: int  # child Jobs of a replicated job; pods of a replica type
    pods_each: int  # pods per replica: a child Job's active pods (min of parallelism and completions), or 1
    template: PodTemplate


@dataclass(frozen=True, slots=True)
class ControllerObject:
    """A JobSet or a Kubeflow training job, reduced to how many pods of which template it makes."""

    kind: str  # "JobSet", "PyTorchJob", "MPIJob"
    namespace: str
    name: str
    uid: str
    parts: tuple[Replicas, ...]
    problem: str | None = None  # why its pod count cannot be used (a negative or absurd count)


@dataclass(frozen=True, slots=True)
class GangGroup:
    """A scheduling.k8s.io PodGroup (or one pod group of a Kubernetes 1.35 Workload)."""

    namespace: str
    name: str
    gang: bool  # the gang policy; the basic policy schedules the pods one by one
    min_count: int | None  # the gang's minCount
    problem: str | None = None  # why min_count cannot be used
    # spec.schedulingConstraints.topology[].key (KEP-5732), in order: node labels kube-scheduler keeps the
    # whole group within one value of (it applies the first). Empty: no topology constraint.
    topology_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GangWorkload:
    """A Kubernetes 1.35 scheduling.k8s.io/v1alpha1 Workload: its pod groups by name."""

    namespace: str
    name: str
    groups: Mapping[str, GangGroup]


@dataclass(frozen=True, slots=True)
class GpuQuota:
    """The GPU lines of a ResourceQuota that bounds every pod of its namespace (no scopes): what the namespace
    may still request, which bounds what it may reserve for pods it has not created
    (webhook.domain.placement.quotas)."""

    namespace: str
    name: str
    lines: tuple[tuple[str, int, int], ...]  # (resource, hard, used), e.g. ("requests.nvidia.com/gpu", 16, 8)


@dataclass(frozen=True, slots=True)
class Catalog:
    """The objects group identity and demand are resolved through (all from watch caches)."""

    templates: Mapping[ObjectKey, ClaimSpec] = field(default_factory=dict)
    claims: Mapping[ObjectKey, ClaimSpec] = field(default_factory=dict)
    compute_domains: Mapping[str, ComputeDomain] = field(default_factory=dict)  # by UID
    jobs: Mapping[ObjectKey, Job] = field(default_factory=dict)
    pod_groups: Mapping[ObjectKey, GangGroup] = field(default_factory=dict)
    gang_workloads: Mapping[ObjectKey, GangWorkload] = field(default_factory=dict)
    controllers: Mapping[tuple[str, str, str], ControllerObject] = field(default_factory=dict)  # kind, ns, name
    # Pods per segment of the preferred jobs split at their first filter, by the job's group id (from their
    # segments' reservations): the jobs' members belong to those segments (webhook.domain.groups.segments).
    split_jobs: Mapping[str, int] = field(default_factory=dict)


class GroupKind(enum.StrEnum):
    ANNOTATION = "annotation"
    COMPUTE_DOMAIN = "compute-domain"
    SHARED_CLAIM = "shared-claim"
    POD_GROUP = "pod-group"  # scheduling.k8s.io gang
    JOBSET = "jobset"
    LEADER_WORKER_SET = "leaderworkerset"
    TRAINING_JOB = "training-job"
    KUEUE = "kueue-pod-group"


@dataclass(frozen=True, slots=True)
class Group:
    id: str  # canonical identity, e.g. "cd:<uid>", "claim:<uid>", "ann:<namespace>/<value>"
    kind: GroupKind
    namespace: str
    name: str  # what a human calls it: the annotation value, ComputeDomain name or claim name
    compute_domain: str | None  # ComputeDomain UID when the group uses one
    one_pod_per_node: bool  # the driver publishes one channel per node: one CD pod per node
    exclusive: bool = False  # wants an NVLink domain no other ComputeDomain uses (webhook.domain.placement.exclusive)
    spares: int = 0  # nodes of its domain its reservation holds for replacements (webhook.domain.groups.spares)
    segment: Segment | None = None  # one segment of a job larger than a domain (webhook.domain.groups.segments)
    preferred: bool = False  # imex-webhook.io/placement: preferred (split only when no domain fits)
    # A member of a job cut into segments of this many pods that has no rank and no segment label yet: its
    # segment is given at its first filter (webhook.domain.jobs.segment_assignment). 0 for every other group.
    unassigned_per: int = 0
    walltime: Walltime | None = None  # how long it runs at most, when anything says (webhook.domain.groups.walltime)


@dataclass(frozen=True, slots=True)
class Walltime:
    """How long a group runs at most: the smallest bound anything states, and which one it is."""

    seconds: float
    source: str  # what states it, as a person reads it ("Job ml/train's activeDeadlineSeconds")
    enforced: bool  # Kubernetes or Kueue ends the group past it; else only its owner says so


@dataclass(frozen=True, slots=True)
class Segment:
    """Where a segment group stands in its job: the job's pods are cut into ``count`` segments of ``size``
    pods (the last may be smaller), each placed wholly in one domain."""

    job_id: str  # the whole job's group id; the segment's own id is ``segment_id(job_id, index)``
    job_name: str
    index: int
    count: int
    size: int  # pods per segment, as the annotation says (a preferred job's: as its first filter chose)
    job_size: int
    preferred: bool = False  # a preferred job split because no domain held it whole

    def pods(self, index: int | None = None) -> int:
        """Pods of segment ``index`` (this one by default)."""
        i = self.index if index is None else index
        return min(self.size, self.job_size - i * self.size)


@dataclass(frozen=True, slots=True)
class GroupResolution:
    group: Group | None
    size: int | None  # None: unknown, treated as "at least the pods seen"
    size_source: str  # "annotation", "computeDomain.numNodes", a controller's (docs/GROUPS.md), "job.parallelism"...
    problems: tuple[str, ...] = ()  # contradictions the user must fix (admission denies them)
    warnings: tuple[str, ...] = ()  # things that may resolve themselves (a template not cached yet)
    pending: bool = False  # a group source waits for an object not cached yet (a PodGroup): resolve again


@dataclass(frozen=True, slots=True)
class Demand:
    gpus: int
    whole_node: bool = False  # a gpu.nvidia.com claim with allocationMode All
    claim_gpus: int = 0  # of gpus, those requested through DRA claims (the rest: nvidia.com/gpu limits)


@dataclass(frozen=True, slots=True)
class Member:
    """A pod of a group as the cluster knows it."""

    pod: Pod
    demand: Demand


# A bind refreshes its reservation's placement time (an API write) at most this often. The time only moves
# the reservation's expiry (the reservation TTL, minutes) and the grace before a reservation with no member in
# the cache is released (webhook.engine.housekeeping.GRACE, 30 s); a few seconds of lag change neither, and
# the pods of one group, bound within seconds of each other, then cost one write instead of one each.
PLACEMENT_REFRESH = 5.0


@dataclass(frozen=True, slots=True)
class Reservation:
    """Group -> domain, chosen once for the whole group; lives in the API server in Kubernetes mode."""

    group_id: str
    group_name: str
    namespace: str
    domain: str
    size: int  # members the domain was chosen for
    gpus_per_pod: int
    one_pod_per_node: bool
    created_at: float  # unix seconds
    placed_at: float | None = None  # last time a member was bound
    holder: str = ""  # which replica created it
    version: str = ""  # resourceVersion, for guarded updates
    # More members' worth of the domain held for the group's replacements (webhook.domain.groups.spares).
    spares: int = 0
    segment: Segment | None = None  # where a segment's reservation stands in its job (webhook.domain.groups.segments)
    # A hold: the domain is held for a group that waits longest, from now until its room is expected at this
    # time (unix seconds; webhook.domain.jobs.holds). None for a reservation made because the group fits now.
    expected_start: float | None = None

    def expired(self, now: float, ttl: float) -> bool:
        """True when no member was placed within ``ttl`` seconds of creation or of the last placement."""
        return now - (self.placed_at or self.created_at) > ttl

    def placement_due(self, now: float) -> bool:
        """Whether a bind at ``now`` writes its placement into the stored reservation: the first one does,
        later ones only once the recorded time is ``PLACEMENT_REFRESH`` seconds old."""
        return self.placed_at is None or now - self.placed_at >= PLACEMENT_REFRESH


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Cluster state at one instant; decisions never see anything that can change under them."""

    nodes: Mapping[str, Node]
    used_gpus: Mapping[str, int]  # node -> GPUs of bound, non-terminated pods
    node_groups: Mapping[str, frozenset[str]]  # node -> group ids with a bound member there
    node_compute_domains: Mapping[str, frozenset[str]]  # node -> ComputeDomain UIDs of bound members
    members: Mapping[str, tuple[Member, ...]]  # group id -> its known pods
    domains: Mapping[str, tuple[str, ...]]  # domain -> node names, sorted
    catalog: Catalog
    fabric_free: Mapping[str, int]  # fabric zone -> free GPU blocks
    reservations: Mapping[str, Reservation]  # group id -> reservation
    version: int = 0
    attachments: Mapping[str, Attachment] = field(default_factory=dict)  # pod UID -> its fabric attachment
    promised_gpus: Mapping[str, int] = field(default_factory=dict)  # node -> Ready attached GPUs of unbound pods
    attached_blocks: Mapping[str, int] = field(default_factory=dict)  # node -> fabric slots in use
    # Groups seen placed whose members are now all deleted or finished (webhook.state.pod_index).
    ended_groups: frozenset[str] = frozenset()
    # Nodes whose compute-domain plugin publishes an IMEX channel; None: published nowhere, not checked.
    channel_nodes: frozenset[str] | None = None
    # node -> ComputeDomain UIDs (or "claim:<ns>/<name>") whose allocated claims hold its compute-domain devices
    imex_holds: Mapping[str, frozenset[str]] = field(default_factory=dict)
    gpu_quotas: Mapping[str, tuple[GpuQuota, ...]] = field(default_factory=dict)  # namespace -> its GPU quotas
