"""How long a group waited before it ran whole (``imex_webhook_group_wait_seconds``, docs/OPERATING.md): from
its earliest member's creation to the bind that placed its last member, by size class.

The simulator reports its waits in these same classes (``webhook.tools.simulate.workload``), so that what a
cluster measures and what the simulator predicts read side by side: single pods, small groups (2-4), up to a half
rack (5-8), up to 16 trays, whole racks (17+), and a class of its own for a job in segments over several
domains, whatever its pods ("17+" holds only jobs in one domain). Holds exist for the large classes: their
waits are what this shows (docs/SCHEDULER.md, "Holds and backfill").

The wait is the whole job's: a job in segments ran when its last segment's last member was bound. A group
with a member whose creation time is unknown has no wait: that member may be the earliest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from webhook.domain.groups import segments
from webhook.domain.model import Group, Member, Pod

# (label, fewest pods, most pods or None); the simulator's reports cut jobs the same way.
SIZE_CLASSES: tuple[tuple[str, int, int | None], ...] = (
    ("1", 1, 1), ("2-4", 2, 4), ("5-8", 5, 8), ("9-16", 9, 16), ("17+", 17, None))
MULTI_DOMAIN = "multi-domain"
CLASSES = (*(label for label, _, _ in SIZE_CLASSES), MULTI_DOMAIN)

MembersByGroup = Mapping[str, tuple[Member, ...]]  # a snapshot's members: group id -> its known pods


def size_class(pods: int, multi_domain: bool = False) -> str:
    """The class of a job of ``pods`` pods; ``multi_domain``: a job in segments over several domains."""
    if multi_domain:
        return MULTI_DOMAIN
    return next(label for label, low, high in SIZE_CLASSES if pods >= low and (high is None or pods <= high))


@dataclass(frozen=True, slots=True)
class Wait:
    """A job that runs whole: which one (``key``: once per job and start, see ``whole``), its class, and how
    long it waited."""

    key: tuple[str, float]
    size_class: str
    seconds: float


def _bound(members: tuple[Member, ...]) -> list[Pod]:
    return [m.pod for m in members if m.pod.node_name and not m.pod.terminated]


def whole(group: Group, size: int, members: MembersByGroup, now: float) -> Wait | None:
    """The wait of ``group``'s job if every one of its members is bound at ``now`` (``size``: the group's
    pods; a segment's job counts every segment's), else None. ``key`` is the job and its earliest member's
    creation: the same job whole again after a replacement is the same key, a job of the same name
    created again is another."""
    seg = group.segment
    if seg is not None:
        parts = [(members.get(segments.sibling(group, seg, i).id, ()), seg.pods(i)) for i in range(seg.count)]
        pods, job = seg.job_size, seg.job_id
    else:
        parts = [(members.get(group.id, ()), size)]
        pods, job = size, group.id
    if pods < 1 or any(len(_bound(found)) < wanted for found, wanted in parts):
        return None
    alive = [m.pod for found, _ in parts for m in found if not m.pod.terminated]
    if any(p.created_at is None for p in alive):
        return None
    since = min(p.created_at for p in alive if p.created_at is not None)
    return Wait((job, since), size_class(pods, seg is not None and seg.count > 1), max(now - since, 0.0))


def single(pod: Pod, now: float) -> Wait | None:
    """The wait of a GPU pod outside any group, bound at ``now`` (class "1"); None without a creation time."""
    if pod.created_at is None:
        return None
    return Wait((f"pod:{pod.uid or pod.ref}", pod.created_at), size_class(1), max(now - pod.created_at, 0.0))
