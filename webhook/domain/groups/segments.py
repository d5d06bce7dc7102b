"""Jobs larger than one NVLink domain, cut into whole segments (docs/SCHEDULER.md, "Jobs larger than one
NVLink domain").

A group whose ComputeDomain (or pods) carries ``imex-webhook.io/segment-size: "N"`` is placed as
ceil(size / N) segments of N pods (the last takes the rest). Each segment is a group of its own, with its
own identity (``<job id>#s<index>``), reservation and group label, so that everything that keeps a group
in one domain keeps a segment in one: the required pod affinity added at admission, the extender's
filter, preemption, repair. What ties the segments of a job together is the plan
(``webhook.domain.jobs.segment_plan``): the whole job's capacity is checked, across as few domains as possible
and under one network block, before any segment is reserved.

A member belongs to segment floor(rank / N), where its rank comes from its controller (the Job completion
index ``batch.kubernetes.io/job-completion-index``, a JobSet's job index, a training job's replica index, a
LeaderWorkerSet's worker index), so that neighbouring ranks share NVLink. A member with no rank belongs to
the segment its ``imex-webhook.io/segment`` label names; without that label it is admitted as a member of
the whole job and given a segment with room at its first filter, which writes the label
(``webhook.domain.jobs.segment_assignment``). Without the annotation nothing changes (one domain for the group).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import replace

from webhook.domain import keys
from webhook.domain.model import Catalog, ComputeDomain, Group, Pod, Replicas, Reservation, Segment
from webhook.wire.text import shown

# Segments of one job: a job of 20,000 trays in segments of one tray. The bound keeps plans linear.
MAX_SEGMENTS = 20_000
COMPLETION_INDEX = keys.COMPLETION_INDEX
_DIGITS = re.compile(r"[0-9]{1,6}")
SEPARATOR = "#s"


def segment_id(job_id: str, index: int) -> str:
    return f"{job_id}{SEPARATOR}{index}"


def job_of(group_id: str) -> str:
    """The job's group id of a segment's id; the id itself for any other group."""
    job, sep, index = group_id.rpartition(SEPARATOR)
    return job if sep and index.isdigit() else group_id


def parse(raw: str) -> int | None:
    text = raw.strip()
    return int(text) if _DIGITS.fullmatch(text) and int(text) > 0 else None


def requested(annotations: Mapping[str, str], cd: ComputeDomain | None) -> tuple[int | None, str | None]:
    """(pods per segment the group asks for or None, why the request is unusable or None)."""
    raw, where = annotations.get(keys.SEGMENT_SIZE_ANNOTATION), "the pod's"
    if raw is None and cd is not None and cd.segment_size is not None:
        raw, where = cd.segment_size, f"ComputeDomain {cd.namespace}/{cd.name}'s"
    if raw is None:
        return None, None
    value = parse(raw)
    if value is None:
        return None, (f"{where} annotation {keys.SEGMENT_SIZE_ANNOTATION}={shown(raw)} is not a segment size: write "
                      "the pods per segment as a positive whole number in digits (e.g. '18'), or remove it")
    return value, None


def preferred(annotations: Mapping[str, str], cd: ComputeDomain | None) -> tuple[bool, str | None]:
    """(whether the job asks for preferred placement, why the request is unusable or None)."""
    raw, where = annotations.get(keys.PLACEMENT_ANNOTATION), "the pod's"
    if raw is None and cd is not None and cd.placement is not None:
        raw, where = cd.placement, f"ComputeDomain {cd.namespace}/{cd.name}'s"
    if raw is None or raw.strip() == "required":
        return False, None
    if raw.strip() == "preferred":
        return True, None
    return False, (f"{where} annotation {keys.PLACEMENT_ANNOTATION}={shown(raw)} is neither 'required' nor "
                   "'preferred'")


# Replica types whose pods take the first ranks (PyTorch's master is rank 0, MPI's launcher runs no rank).
_FIRST_REPLICAS = ("master", "chief", "launcher")


def _index(raw: str, what: str) -> tuple[int | None, str | None]:
    value = raw.strip()
    if not _DIGITS.fullmatch(value):
        return None, f"the pod's {what}={shown(raw)} is not an index"
    return int(value), None


def rank(pod: Pod, catalog: Catalog | None = None) -> tuple[int | None, str | None]:
    """(the member's rank in its job, why its rank is unusable): from its JobSet (the replicated jobs before
    its own, its child Job's index and its completion index), its training job (the replica types before its
    own, master first, and its replica index), its LeaderWorkerSet group (the worker index) or its Job (the
    completion index)."""
    refs = pod.workload
    completion, problem = _index(pod.rank, COMPLETION_INDEX) if pod.rank is not None else (None, None)
    if problem:
        return None, problem
    if refs is not None and refs.jobset and refs.job_index and catalog is not None:
        return _jobset_rank(pod, refs.jobset, refs.replicated_job, refs.job_index, completion, catalog)
    if refs is not None and refs.training_replica and catalog is not None:
        return _training_rank(pod, refs.training_kind, refs.training_job, refs.training_replica, catalog)
    if refs is not None and refs.lws_worker_index:
        return _index(refs.lws_worker_index, keys.LWS_WORKER_INDEX_LABEL)
    return completion, None


def _parts_before(parts: Sequence[Replicas], name: str) -> tuple[Replicas | None, int]:
    offset = 0
    for part in parts:
        if part.name == name:
            return part, offset
        offset += part.replicas * part.pods_each
    return None, offset


def _jobset_rank(pod: Pod, jobset: str, replicated: str, job_index: str, completion: int | None,
                 catalog: Catalog) -> tuple[int | None, str | None]:
    obj = catalog.controllers.get(("JobSet", pod.namespace, jobset))
    if obj is None:
        return None, f"JobSet {pod.namespace}/{jobset} is not known yet (ranks come from its replicated jobs)"
    part, offset = _parts_before(obj.parts, replicated)
    index, problem = _index(job_index, keys.JOBSET_JOB_INDEX_LABEL)
    if part is None or index is None:
        return None, problem or f"JobSet {pod.namespace}/{jobset} has no replicated job {shown(replicated)}"
    return offset + index * part.pods_each + (completion or 0), None


def _training_rank(pod: Pod, kind: str, job: str, replica: str, catalog: Catalog) -> tuple[int | None, str | None]:
    obj = catalog.controllers.get((kind, pod.namespace, job))
    if obj is None:
        return None, f"{kind} {pod.namespace}/{job} is not known yet (ranks come from its replica types)"
    parts = sorted(obj.parts, key=lambda p: p.name.lower() not in _FIRST_REPLICAS)  # stable: spec order otherwise
    kind_name, _, raw = replica.partition("/")
    part, offset = _parts_before(parts, next((p.name for p in parts if p.name.lower() == kind_name.lower()), ""))
    index, problem = _index(raw, keys.TRAINING_REPLICA_INDEX_LABEL)
    if part is None or index is None:
        return None, problem or f"{kind} {pod.namespace}/{job} has no replica type {shown(kind_name)}"
    return offset + index, None


def segmented(group: Group, size: int | None, pod: Pod, cd: ComputeDomain | None,
              catalog: Catalog) -> tuple[Group, int | None, list[str]]:
    """The pod's segment group and its size, or the group unchanged when it is not segmented (no annotation,
    or a job that fits one segment, or a preferred job not split); with the problems that keep the pod from
    a segment. ``catalog.split_jobs``: the segment size chosen for each preferred job split at its first filter."""
    per, problem = requested(pod.annotations, cd)
    wants_preferred, placement_problem = preferred(pod.annotations, cd)
    problems = [p for p in (problem, placement_problem) if p]
    if problems:
        return group, size, problems
    if wants_preferred:
        group = replace(group, preferred=True)
        per = catalog.split_jobs.get(group.id)  # until a split is chosen, the whole job is one group
        what = f"{keys.PLACEMENT_ANNOTATION}=preferred (split into segments of {per})"
    else:
        what = f"{keys.SEGMENT_SIZE_ANNOTATION}={per}"
    if per is None or (size is not None and size <= per):
        return group, size, []
    if size is None:
        return group, size, [f"{what} needs the job's size (ComputeDomain numNodes, {keys.GROUP_SIZE_ANNOTATION} or "
                             "the Job's parallelism): without it the segments cannot be counted"]
    count = -(-size // per)
    if count > MAX_SEGMENTS:
        return group, size, [f"{what} cuts {size} pods into {count} segments; at most {MAX_SEGMENTS} are planned"]
    return at_rank(group, size, per, pod, what, catalog)


def outnumbered(group: Group, room: Mapping[str, int]) -> str | None:
    """Why a job cut into more segments than the cluster's NVLink domains can hold is not planned, or None.
    ``room``: members of the job each domain holds when empty (``placement.ceilings``). Every segment is
    planned at the job's first filter, so their number bounds its cost (20,000 of them took a /filter 2-3 s
    at 5,000 nodes)."""
    seg = group.segment
    if seg is None or seg.preferred:
        return None
    most = sum(pods // seg.size for pods in room.values())
    if seg.count <= max(most, len(room)):  # no more than one a domain: the plan says why it fails, if it does
        return None
    return (f"{keys.SEGMENT_SIZE_ANNOTATION}={seg.size} cuts the job's {seg.job_size} pods into {seg.count} "
            f"segments; the cluster's {len(room)} NVLink domains hold at most {most} segments of {seg.size} pods "
            "even when empty")


def at_rank(group: Group, size: int, per: int, pod: Pod, what: str,
            catalog: Catalog) -> tuple[Group, int | None, list[str]]:
    """The pod's segment of ``group`` cut into segments of ``per`` pods, by its rank."""
    count = -(-size // per)
    index, problem = rank(pod, catalog)
    if problem:
        return group, size, [f"{what}: a member is put in segment floor(rank / {per}) by its rank, and {problem}"]
    if index is None:
        labelled = pod.labels.get(keys.SEGMENT_LABEL)
        if labelled is None:
            return replace(group, unassigned_per=per), size, []  # given a segment at its first filter
        given = parse_index(labelled)
        if given is None or given >= count:
            return group, size, [f"{what}: the pod's label {keys.SEGMENT_LABEL}={shown(labelled)} names no segment "
                                 f"of the job's {count} (0 to {count - 1}); remove it and imex-webhook gives the pod "
                                 "a segment with room"]
        return job_segment(group, size, per, given)
    if index >= size:
        return group, size, [f"{what}: the pod's rank {index} is beyond the job's {size} pods"]
    return job_segment(group, size, per, index // per)


def parse_index(raw: str) -> int | None:
    text = raw.strip()
    return int(text) if _DIGITS.fullmatch(text) else None


def job_segment(group: Group, size: int, per: int, index: int) -> tuple[Group, int, list[str]]:
    """Segment ``index`` of ``group`` (the whole job's group) cut into segments of ``per`` pods, and its pods."""
    seg = Segment(job_id=group.id, job_name=group.name, index=index, count=-(-size // per), size=per,
                  job_size=size, preferred=group.preferred)
    return sibling(replace(group, unassigned_per=0), seg, index), seg.pods(), []


def sibling(group: Group, seg: Segment, index: int) -> Group:
    """Segment ``index`` of the job ``seg`` belongs to, as a group (built from any segment's group)."""
    return replace(group, id=segment_id(seg.job_id, index), name=f"{seg.job_name}{SEPARATOR}{index}",
                   segment=replace(seg, index=index))


def runs_member(group: Group, groups_on_node: Set[str]) -> bool:
    """Whether a node already runs a member of the group's job (any of its segments, for a segment): one
    member of a ComputeDomain per node, as its one IMEX channel per node allows."""
    if group.id in groups_on_node:
        return True
    if group.segment is None:
        return False
    return any(job_of(g) == group.segment.job_id for g in groups_on_node)


def split_jobs(reservations: Iterable[Reservation]) -> dict[str, tuple[str, int]]:
    """The preferred jobs split into segments, from their segments' reservations: job's group id -> (its
    namespace, pods per segment). Segments of a required job are known from its annotation already."""
    return {r.segment.job_id: (r.namespace, r.segment.size) for r in reservations
            if r.segment is not None and r.segment.preferred}
