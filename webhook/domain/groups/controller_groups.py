"""Groups from Kubernetes' gang scheduling and the workload controllers people use (docs/GROUPS.md).

After imex-webhook's own sources (the group annotation, a ComputeDomain, a shared IMEX-channel claim),
in this order (``group_sources.SOURCES``, which lists each source's function here), first match wins:

1. a scheduling.k8s.io PodGroup with the gang policy (``spec.schedulingGroup``, 1.36+), or a gang pod
   group of a 1.35 Workload (``spec.workloadRef``): size = the gang's ``minCount``;
2. a JobSet: the whole JobSet, size = replicas x active pods per Job over the replicated jobs whose pods
   are members; or, when each child Job has a topology domain of its own (``exclusive-topology``), the
   child Job, size = its active pods;
3. a LeaderWorkerSet group (one leader and its workers, ``group-key``): size = the ``size`` annotation;
4. a Kubeflow training job (PyTorchJob, MPIJob...): size = the replicas of the replica types whose pods
   are members;
5. a Kueue pod group: size = ``pod-group-total-count``.

Members are the pods that ask for GPUs (``nvidia.com/gpu``, a GPU claim) or an IMEX channel: an MPI
launcher or a JobSet's driver without GPUs is not part of the group and not counted in its size.

A source that decides whether the pod has a group (a PodGroup: gang or basic) but is not cached yet makes
the resolution wait (``GroupResolution.pending``). One that only sizes it (a JobSet) leaves the size unknown
until it arrives. A count that cannot be used is a problem of the group, never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from webhook.domain import keys
from webhook.domain.model import (
    Catalog,
    ClaimSpec,
    ControllerObject,
    Group,
    GroupKind,
    Pod,
    PodClaim,
    PodTemplate,
    WorkloadRefs,
)
from webhook.domain.policy import Policy
from webhook.wire.text import shown

Member = Callable[[PodTemplate], bool]  # whether the pods of a controller's template are group members
_DIGITS = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True, slots=True)
class Candidate:
    """The group one source puts the pod in."""

    group: Group
    what: str  # how a person names it: "JobSet 'train'"
    size: int | None
    size_source: str
    problem: str | None = None  # its size cannot be used: the user has to fix it
    note: str | None = None  # its size is not known yet
    waiting: str | None = None  # the object that says whether there is a group at all is not cached yet


def _spec(namespace: str, ref: PodClaim, catalog: Catalog) -> ClaimSpec | None:
    if ref.template:
        return catalog.templates.get((namespace, ref.template))
    return catalog.claims.get((namespace, ref.claim or ""))


def asks(gpus: int, claims: Sequence[PodClaim], namespace: str, catalog: Catalog, policy: Policy) -> bool:
    """Whether pods with these GPUs and claims ask for GPUs or an IMEX channel (a claim not cached yet
    counts as asking: the pod waits for it anyway)."""
    if gpus > 0:
        return True
    wanted = (*policy.gpu_device_classes, *policy.channel_device_classes)
    for ref in claims:
        spec = _spec(namespace, ref, catalog)
        if spec is None or any(r.device_class in wanted for r in spec.requests):
            return True
    return False


def member(namespace: str, catalog: Catalog, policy: Policy) -> Member:
    """Templates whose pods ask for GPUs or an IMEX channel."""
    return lambda t: asks(t.gpus, t.claims, namespace, catalog, policy)


def joins_compute_domain(uid: str, namespace: str, catalog: Catalog) -> Member:
    """Templates whose pods join the ComputeDomain ``uid``: the members of that ComputeDomain's group."""
    def joins(t: PodTemplate) -> bool:
        return any((s := _spec(namespace, ref, catalog)) is not None and s.compute_domain == uid for ref in t.claims)
    return joins


def shares_claim(name: str) -> Member:
    """Templates whose pods share the ResourceClaim ``name``."""
    return lambda t: any(ref.claim == name for ref in t.claims)


def _group(gid: str, kind: GroupKind, namespace: str, name: str) -> Group:
    return Group(id=gid, kind=kind, namespace=namespace, name=name, compute_domain=None, one_pod_per_node=False)


def _count(raw: str | None, where: str, max_size: int) -> tuple[int | None, str | None]:
    if raw is None:
        return None, None
    text = raw.strip()
    if _DIGITS.fullmatch(text) and 0 < int(text) <= max_size:
        return int(text), None
    return None, f"{where}={shown(raw)} is not a number of pods from 1 to {max_size}"


def _bounded(size: int | None, what: str, max_size: int) -> tuple[int | None, str | None]:
    if size is not None and size > max_size:
        return None, f"{what} makes {size} pods, more than the {max_size} a group may have"
    return (size or None), None  # none of its pods is a member: nothing to size the group by


def gang(pod: Pod, refs: WorkloadRefs, catalog: Catalog, joins: Member, max_size: int) -> Candidate | None:
    """The PodGroup (1.36+) or the 1.35 Workload's pod group the pod names, when its policy is the gang."""
    if not (refs.pod_group or (refs.workload and refs.workload_pod_group)):
        return None
    ns = pod.namespace
    if refs.pod_group:
        what = f"PodGroup {shown(refs.pod_group)}"
        gid, name, where = f"podgroup:{ns}/{refs.pod_group}", refs.pod_group, "spec.schedulingGroup.podGroupName"
        pg = catalog.pod_groups.get((ns, refs.pod_group))
        source = "podGroup.minCount"
        missing = f"{what} ({where}) is not known yet"
    else:
        what = f"pod group {shown(refs.workload_pod_group)} of Workload {shown(refs.workload)}"
        gid = f"workload:{ns}/{refs.workload}/{refs.workload_pod_group}"
        gid += f"/{refs.workload_replica_key}" if refs.workload_replica_key else ""
        name = f"{refs.workload}/{refs.workload_pod_group}"
        workload = catalog.gang_workloads.get((ns, refs.workload))
        pg = workload.groups.get(refs.workload_pod_group) if workload is not None else None
        source = "workload.minCount"
        missing = f"{what} (spec.workloadRef) is not known yet"
    group = _group(gid, GroupKind.POD_GROUP, ns, name)
    if pg is None:
        return Candidate(group, what, None, source, waiting=f"{missing}; group resolved again at scheduling")
    if not pg.gang:
        return None  # the basic policy: its pods are scheduled one by one, as if in no group
    size, problem = _bounded(pg.min_count, what, max_size)
    return Candidate(group, what, size, source, problem=pg.problem or problem)


def _counted(obj: ControllerObject | None, what: str, joins: Member, max_size: int,
             only: str | None = None) -> tuple[int | None, str | None, str | None]:
    """Pods of ``obj`` that are members (of the replicated job ``only``), its problem, or why it is unknown."""
    if obj is None:
        return None, None, f"{what} is not known yet; the group's size is resolved at scheduling"
    if obj.problem:
        return None, f"{what}: {obj.problem}", None
    if only is not None:
        size = sum(p.pods_each for p in obj.parts if p.name == only)
    else:
        size = sum(p.replicas * p.pods_each for p in obj.parts if joins(p.template))
    bounded, problem = _bounded(size, what, max_size)
    return bounded, problem, None


def jobset(pod: Pod, refs: WorkloadRefs, catalog: Catalog, joins: Member, max_size: int) -> Candidate | None:
    """The JobSet of the pod, or its child Job when each child Job has a topology domain of its own."""
    if not refs.jobset:
        return None
    ns, name = pod.namespace, refs.jobset
    obj = catalog.controllers.get(("JobSet", ns, name))
    if refs.jobset_exclusive and refs.replicated_job and refs.job_index:
        job = f"{name}-{refs.replicated_job}-{refs.job_index}"  # the child Job's name, as JobSet makes it
        what = f"Job {shown(job)} of JobSet {shown(name)}"
        group = _group(f"jobset:{ns}/{name}/{refs.replicated_job}/{refs.job_index}", GroupKind.JOBSET, ns, job)
        size, problem, note = _counted(obj, what, joins, max_size, only=refs.replicated_job)
        child = catalog.jobs.get((ns, job))
        if size is None and problem is None and child is not None and child.parallelism:
            return Candidate(group, what, child.parallelism, "job.parallelism")
        return Candidate(group, what, size, "jobSet.parallelism", problem, note)
    what = f"JobSet {shown(name)}"
    size, problem, note = _counted(obj, what, joins, max_size)
    return Candidate(_group(f"jobset:{ns}/{name}", GroupKind.JOBSET, ns, name), what, size, "jobSet.replicas",
                     problem, note)


def lws(pod: Pod, refs: WorkloadRefs, catalog: Catalog, joins: Member, max_size: int) -> Candidate | None:
    """The LeaderWorkerSet group (one leader and its workers) of the pod."""
    if not refs.lws or not refs.lws_group_key:
        return None  # a worker with neither its group's key nor its leader's name: nothing to group by
    leader = refs.lws_leader or refs.lws
    what = f"LeaderWorkerSet {shown(refs.lws)} group {shown(leader)}"
    size, problem = _count(refs.lws_size, f"annotation {keys.LWS_SIZE_ANNOTATION}", max_size)
    return Candidate(_group(f"lws:{pod.namespace}/{refs.lws_group_key}", GroupKind.LEADER_WORKER_SET, pod.namespace,
                            leader),
                     what, size, "lws.size", problem)


def training(pod: Pod, refs: WorkloadRefs, catalog: Catalog, joins: Member, max_size: int) -> Candidate | None:
    """The Kubeflow training job of the pod."""
    if not refs.training_job:
        return None
    ns, kind = pod.namespace, refs.training_kind or "TrainingJob"
    what = f"{kind} {shown(refs.training_job)}"
    size, problem, note = _counted(catalog.controllers.get((kind, ns, refs.training_job)), what, joins, max_size)
    group = _group(f"kubeflow:{ns}/{kind.lower()}.{refs.training_job}", GroupKind.TRAINING_JOB, ns,
                   refs.training_job)
    return Candidate(group, what, size, "trainingJob.replicas", problem, note)


def kueue(pod: Pod, refs: WorkloadRefs, catalog: Catalog, joins: Member, max_size: int) -> Candidate | None:
    """The Kueue pod group of the pod."""
    if not refs.kueue_group:
        return None
    what = f"Kueue pod group {shown(refs.kueue_group)}"
    size, problem = _count(refs.kueue_total, f"annotation {keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION}", max_size)
    return Candidate(_group(f"kueue:{pod.namespace}/{refs.kueue_group}", GroupKind.KUEUE, pod.namespace,
                            refs.kueue_group), what, size, "kueue.totalCount", problem)


def describe(group: Group) -> str:
    """How a person names a group of imex-webhook's own sources, for a message."""
    if group.kind is GroupKind.ANNOTATION:
        return f"group {shown(group.name)} (annotation {keys.GROUP_ANNOTATION})"
    if group.kind is GroupKind.COMPUTE_DOMAIN:
        return f"ComputeDomain {shown(group.name)}"
    return f"ResourceClaim {shown(group.name)}"


def _sized(size: int | None) -> str:
    return f"{size} pods" if size is not None else "size unknown"


def disagreements(what: str, name: str, size: int | None, others: Sequence[Candidate]) -> list[str]:
    """A warning for each lower source that puts the pod in another group: another name, and another or
    an unknown size (the same size under another name is taken for the same pods)."""
    return [f"pod is in {what} ({_sized(size)}) and in {c.what} ({_sized(c.size)}); imex-webhook keeps it with "
            f"{what}, which comes first (docs/GROUPS.md)"
            for c in others
            if c.waiting is None and c.group.name != name and (size is None or c.size != size)]
