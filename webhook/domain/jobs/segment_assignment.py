"""A segment for a member that has no rank (docs/SCHEDULER.md, "Members without a rank").

Ranks put neighbouring members in one segment; a pod no controller numbered (bare pods, a ReplicaSet, an
operator that writes no index) has no neighbours to keep together, only a segment to fill. It is admitted
as a member of the whole job, with no pod affinity, and its first filter gives it the first segment, in
index order, with fewer members than pods: segments that already have members, and their domains, are
filled before a new one is started. The engine writes the choice on the pod as the label
``imex-webhook.io/segment`` before any node passes, so from then on the pod derives into its segment like a
ranked member (webhook.domain.groups.segments), whatever replica reads it, and a replacement of a lost member
takes the segment the lost one left.

Between the label's write and the watch that brings it back, a pod given a segment is counted from the
engine's own record (``given``), so that the next unranked member, filtered a moment later, does not take
the same place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from webhook.domain import keys
from webhook.domain.groups import segments
from webhook.domain.model import Group, Pod, Snapshot


def choose(group: Group, size: int, pod: Pod, snapshot: Snapshot,
           given: Mapping[str, str]) -> tuple[Group | None, str]:
    """(the pod's segment group, or None, and why). ``group`` is the unranked member's job group
    (``unassigned_per`` > 0); ``given``: pod uid -> segment id given by this process and not yet seen on the
    pod in the cache."""
    per = group.unassigned_per
    count = -(-size // per)
    mine = given.get(pod.uid) if pod.uid else None
    taken: dict[str, int] = {}
    for uid, seg in given.items():
        if uid != pod.uid:
            taken[seg] = taken.get(seg, 0) + 1
    for index in range(count):
        seg_id = segments.segment_id(group.id, index)
        if seg_id == mine:
            return segments.job_segment(group, size, per, index)[0], f"{keys.SEGMENT_LABEL}={index} given before"
    seen = set(given)
    for index in range(count):
        seg_id = segments.segment_id(group.id, index)
        members = sum(1 for m in snapshot.members.get(seg_id, ())
                      if not m.pod.terminated and m.pod.uid != pod.uid and m.pod.uid not in seen)
        room = min(per, size - index * per)
        if members + taken.get(seg_id, 0) < room:
            return (segments.job_segment(group, size, per, index)[0],
                    f"no rank: given segment {index} of {count} (the first with room), label {keys.SEGMENT_LABEL}")
    return None, (f"every segment of job {group.namespace}/{group.name} ({count} of {per} pods, {size} in all) has "
                  "its members already: this pod is one more than the job's size; raise the job's size or "
                  "remove a member")


def excess(group: Group, pod: Pod, snapshot: Snapshot, given: Mapping[str, str]) -> bool:
    """Whether ``pod``, in its segment by the label alone and not bound yet, is one member too many there:
    as many others are ahead of it (bound, ranked, given here, or named before it). Two replicas each give
    the last place of a segment within a watch's delay, or a user labels too many pods; the member behind
    is then given a segment with room again, so that no segment holds more than its pods and none waits for
    a member that went elsewhere."""
    seg = group.segment
    if seg is None or pod.node_name or keys.SEGMENT_LABEL not in pod.labels or given.get(pod.uid) == group.id:
        return False
    if segments.rank(pod, snapshot.catalog) != (None, None):
        return False
    ahead = 0
    seen = set()
    for m in snapshot.members.get(group.id, ()):
        other = m.pod
        seen.add(other.uid)
        if other.terminated or other.uid == pod.uid:
            continue
        if other.node_name or other.name < pod.name or segments.rank(other, snapshot.catalog)[0] is not None:
            ahead += 1
    ahead += sum(1 for uid, seg_id in given.items() if seg_id == group.id and uid != pod.uid and uid not in seen)
    return ahead >= seg.pods()


def whole_job(group: Group) -> tuple[Group, int]:
    """The job a segment's group belongs to, as a member without a rank sees it, and the job's size."""
    seg = group.segment
    assert seg is not None
    job = replace(group, id=seg.job_id, name=seg.job_name, segment=None, unassigned_per=seg.size)
    return job, seg.job_size
