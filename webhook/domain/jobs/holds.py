"""Holding domains for the groups that wait longest, so that a large job is not starved by the small ones
that keep taking the room it waits for (docs/SCHEDULER.md, "Holds and backfill").

Slurm's backfill scheduler is the model: every waiting job gets a reservation at its earliest start, computed
from the time limits of the running jobs, and a lower job starts now only if it cannot delay a reservation.
Here:

- A group that no domain can host waits in an order: pod priority first, then age (its first member's
  creation). The first ``Policy.max_holds`` groups of that order that have waited ``Policy.hold_after``
  seconds get a hold.
- A hold is the group's reservation made before its room exists, with the time its room is expected
  (``Reservation.expected_start``): the earliest moment at which the running groups of a domain, ending by
  their walltimes (``webhook.domain.groups.walltime``), leave room for it. A group without a walltime never
  ends for planning. A job in segments holds one domain per segment and starts when the last does.
- Which domains: those whose held room would sit idle least until the start (GPU-time: what is free now and
  what frees before then, at most what the hold keeps), so idle ones stay usable (Slurm's ``bf_busy_nodes``;
  between domains with the same start the busier one is held). The start is the earliest one (the last of the
  segments' earliest starts), unless a later one spares more idle GPU-time than the job loses by waiting
  (its GPUs times the delay): a job in three segments waits five more minutes rather than hold an idle rack
  for an hour (``plan``).
- A held reservation takes the domain's capacity as it frees, as any reservation does: nothing new starts
  there, except a group that fits beside what the hold needs, or a backfill group whose walltime ends before
  the hold's expected start (``visible``). A group with no walltime never backfills.
- Every round plans the held groups again: a group whose room comes earlier elsewhere (by ``RESOLUTION``;
  running groups ended before their walltimes) moves there, and one whose room is there now is let go.
- A hold lives ``Policy.hold_timeout`` seconds unless its group starts; a hold whose expected start passed
  by ``LATE`` without room (a walltime proved wrong, a node failed) is given up, and its group planned again.
  A running group past its advisory walltime is planned around as one that states none (never ended by us);
  one past an enforced bound ends any moment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from webhook.domain.groups import grouping, segments, walltime
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Demand, Group, Pod, Reservation, Snapshot
from webhook.domain.placement import capacity, placement, vacated
from webhook.domain.policy import Policy

RESOLUTION = 60.0  # seconds: starts closer than this are taken as equal (Slurm's bf_resolution)
LATE = 120.0  # seconds past its expected start after which a hold with no room is planned again


@dataclass(frozen=True, slots=True)
class Waiting:
    """A group no domain hosts now, as the hold order sees it."""

    group: Group
    size: int
    need: Demand
    priority: int
    since: float  # its first member's creation
    pod: Pod  # a waiting member, to resolve the group by


@dataclass(frozen=True, slots=True)
class Plan:
    """Where and when a waiting group starts: one domain per segment (one for a group in one domain)."""

    domains: tuple[str, ...]
    start: float


def is_hold(res: Reservation) -> bool:
    return res.expected_start is not None and res.placed_at is None


def visible(live: Mapping[str, Reservation], group: Group, now: float,
            enforced_only: bool = False) -> Mapping[str, Reservation]:
    """The promises ``group`` must keep off: every one but the holds it may backfill under, those whose
    expected start comes after the group's walltime ends. ``enforced_only`` (``Policy.backfill_enforced_only``):
    only a walltime Kubernetes enforces counts, not one its owner merely states."""
    bound = group.walltime
    if bound is None or (enforced_only and not bound.enforced):
        return live
    ends = now + bound.seconds
    skipped = [g for g, r in live.items() if is_hold(r) and r.expected_start is not None and ends <= r.expected_start
               and segments.job_of(g) != segments.job_of(group.id)]
    if not skipped:
        return live
    return {g: r for g, r in live.items() if g not in skipped}


def waiting(snapshot: Snapshot, live: Mapping[str, Reservation], policy: Policy) -> list[Waiting]:
    """Groups with a member waiting for a node and no live reservation (nor any segment of their job with
    one), in hold order."""
    held_jobs = {segments.job_of(g) for g in live}
    found: dict[str, Waiting] = {}
    for group_id, members in snapshot.members.items():
        pending = [m for m in members if not m.pod.node_name and not m.pod.terminated and not m.pod.deleting
                   and m.pod.scheduler_name == policy.scheduler_name]
        if not pending or segments.job_of(group_id) in held_jobs:
            continue
        if any(m.pod.node_name and not m.pod.terminated for m in members):
            continue  # a running group waits for replacements, in its own domain (repair)
        first = min(pending, key=lambda m: (m.pod.created_at or 0.0, m.pod.name))
        resolution = grouping.resolve(first.pod, snapshot.catalog, policy)
        group = resolution.group
        if group is None or resolution.problems or resolution.size is None:
            continue
        job = segments.job_of(group.id)
        since = min((m.pod.created_at for m in pending if m.pod.created_at is not None), default=None)
        if since is None:
            continue
        entry = Waiting(group, resolution.size, first.demand, max(m.pod.priority for m in pending), since, first.pod)
        held = found.get(job)
        if held is None or (entry.since, entry.group.id) < (held.since, held.group.id):
            found[job] = entry  # a job in segments waits once, as its earliest segment
    return sorted(found.values(), key=lambda w: (-w.priority, w.since, w.group.id))


def unheld(live: Mapping[str, Reservation]) -> dict[str, Reservation]:
    """``live`` with every hold set aside: the wait order over it sees each held job as it waits (another
    job's hold never hides it; only its own did)."""
    return {g: r for g, r in live.items() if not is_hold(r)}


def held_waiting(snapshot: Snapshot, live: Mapping[str, Reservation], policy: Policy,
                 order: Sequence[Waiting] | None = None) -> list[tuple[Waiting, list[Reservation]]]:
    """The jobs with holds whose members all still wait, each as the wait order sees it and with its holds:
    what is planned again on every round, as Slurm plans its reservations again on every backfill cycle.
    ``order``: ``waiting`` over ``unheld(live)``, when the caller has it already (one pass per round)."""
    by_job: dict[str, list[Reservation]] = {}
    for group_id, res in sorted(live.items()):
        if is_hold(res):
            by_job.setdefault(segments.job_of(group_id), []).append(res)
    if not by_job:
        return []
    if order is None:
        order = waiting(snapshot, unheld(live), policy)
    entries = {segments.job_of(w.group.id): w for w in order}
    return [(entries[job], held) for job, held in sorted(by_job.items()) if job in entries]


def due(order: Iterable[Waiting], held: int, now: float, policy: Policy) -> list[Waiting]:
    """The groups of ``order`` to plan a hold for now: those among the first ``max_holds`` (less the holds
    already made) that have waited ``hold_after``."""
    room = max(policy.max_holds - held, 0)
    return [w for w in list(order)[:room] if now - w.since >= policy.hold_after]


@dataclass(frozen=True, slots=True)
class Ending:
    """A running group that states a walltime: when it ends, its pods, the domains they run in."""

    end: float
    pods: tuple[Pod, ...]
    domains: frozenset[str]
    group_id: str = ""


def endings(snapshot: Snapshot, policy: Policy, now: float) -> list[Ending]:
    """Every running group that states a walltime, by when it ends: each group resolved once, whatever the
    domains asked about."""
    out: list[Ending] = []
    for group_id, members in snapshot.members.items():
        running = [m for m in members if m.pod.node_name and not m.pod.terminated]
        if not running:
            continue
        group = grouping.resolve(running[0].pod, snapshot.catalog, policy).group
        bound = group.walltime if group else None
        end = walltime.expected_end(bound, running)
        if end is None or bound is None:
            continue
        if end < now and not bound.enforced:
            continue  # ran past what its owner stated: planned around, as a group that states nothing
        domains = frozenset(d for m in running if (n := snapshot.nodes.get(m.pod.node_name or "")) and (d := n.domain))
        # Past an enforced bound it ends any moment.
        out.append(Ending(max(end, now), tuple(m.pod for m in running), domains, group_id))
    return sorted(out, key=lambda e: e.end)


def earliest_start(domain: str, group: Group, need: Demand, pods: int, snapshot: Snapshot,
                   others: Mapping[str, Reservation], policy: Policy, now: float,
                   ends: list[Ending] | None = None) -> float | None:
    """When ``domain`` can host ``pods`` members of ``group``: now, or the end of the running group after
    which it can, or None when the walltimes stated never leave room. ``ends``: ``endings`` of the snapshot,
    when the caller asks about several domains."""
    here = [e for e in (ends if ends is not None else endings(snapshot, policy, now)) if domain in e.domains]
    gone: dict[str, Pod] = {}
    ended: set[str] = set()
    for when, ending in [(now, None), *((e.end, e) for e in here)]:
        if ending is not None:
            gone.update((p.uid, p) for p in ending.pods)
            ended.add(ending.group_id)
        by_node: dict[str, list[str]] = {}
        for pod in gone.values():
            by_node.setdefault(pod.node_name or "", []).append(pod.uid)
        after = vacated.without_victims(snapshot, by_node, gone, policy) if gone else snapshot
        # An ended group's reservation goes with it (housekeeping releases it): its room is not kept for it.
        left = {g: r for g, r in others.items() if g not in ended} if ended else others
        if placement.offer(domain, group, need, pods, after, placement.holds(after, left, group.id)).pods >= pods:
            return when
    return None


def plan(entry: Waiting, snapshot: Snapshot, others: Mapping[str, Reservation], policy: Policy,
         now: float) -> Plan | None:
    """The domains to hold for ``entry`` and when it starts there; None when no walltime stated makes room.

    The earliest start ``first`` is when the ``count``-th domain (one per segment) can host its part. A
    start ``later`` is taken instead only where the room its holds keep idle meanwhile (``idle``) shrinks by
    more than the GPU-time the job loses by waiting: ``idle(later) + gpus x (later - first) < idle(first)``.
    At every start, the domains whose held room sits idle least are held (then the later to free, the
    busier, the name)."""
    group, need = entry.group, entry.need
    seg = group.segment
    count, per = (seg.count, seg.size) if seg is not None else (1, entry.size)
    held_domains = {r.domain for r in others.values() if is_hold(r)}  # one hold per domain
    ends = endings(snapshot, policy, now)
    starts: dict[str, float] = {}
    for domain in sorted(snapshot.domains):
        if domain in held_domains:
            continue
        start = earliest_start(domain, group, need, per, snapshot, others, policy, now, ends)
        if start is not None:
            starts[domain] = start
    if len(starts) < count:
        return None
    ordered = sorted(starts.values())
    first = ordered[count - 1]
    wanted = per * need.gpus  # the GPUs a hold keeps in each domain (a shorter last segment: fewer)
    best: tuple[float, float, tuple[str, ...]] | None = None
    for later in dict.fromkeys(ordered[count - 1:]):  # the earliest start, then each later one
        delay = max(later - first, 0.0) * wanted * count
        if best is not None and delay >= best[0]:
            break  # waiting longer costs more than any idle room it could spare
        until = max(later, now)
        ready = [d for d, s in starts.items() if round(s / RESOLUTION) <= round(later / RESOLUTION)]
        idle = {d: _idle(d, snapshot, ends, policy, wanted, now, until) for d in ready}
        busy = {d: sum(snapshot.used_gpus.get(n, 0) for n in snapshot.domains[d]) for d in ready}
        chosen = tuple(sorted(ready, key=lambda d: (idle[d], -starts[d], -busy[d], d))[:count])
        cost = sum(idle[d] for d in chosen) + delay
        if best is None or cost < best[0]:
            best = (cost, max(starts[d] for d in chosen), chosen)
    assert best is not None
    _, start, chosen = best
    return Plan(chosen, start)


def _idle(domain: str, snapshot: Snapshot, ends: list[Ending], policy: Policy, wanted: int, now: float,
          until: float) -> float:
    """GPU-seconds of the room a hold of ``wanted`` GPUs keeps in ``domain`` that sit idle from ``now`` until
    ``until``: the GPUs free now, then those the running groups free by their walltimes, at most ``wanted``.
    An estimate: a backfill group may use some of it."""
    nodes = {n: snapshot.nodes[n] for n in snapshot.domains[domain] if n in snapshot.nodes}
    free = sum(max(node.gpus - snapshot.used_gpus.get(name, 0), 0) for name, node in nodes.items())
    total, since = 0.0, now
    for ending in ends:
        if ending.end >= until:
            break
        if domain not in ending.domains:
            continue
        total += min(free, wanted) * (ending.end - since)
        since = ending.end
        free += sum(capacity.demand(pod, snapshot.catalog, policy).gpus for pod in ending.pods
                    if pod.node_name in nodes)
    return total + min(free, wanted) * max(until - since, 0.0)


def holds_for(entry: Waiting, planned: Plan, now: float, holder: str) -> list[Reservation]:
    """The reservations that record ``planned``: one per segment of a job in segments, in segment order."""
    group, need = entry.group, entry.need
    seg = group.segment
    members = [segments.sibling(group, seg, i) for i in range(seg.count)] if seg is not None else [group]
    out = []
    for member, domain in zip(members, planned.domains, strict=True):
        size = member.segment.pods() if member.segment is not None else entry.size
        out.append(Reservation(group_id=member.id, group_name=member.name, namespace=member.namespace,
                               domain=domain, size=size, gpus_per_pod=need.gpus,
                               one_pod_per_node=member.one_pod_per_node, created_at=now, holder=holder,
                               spares=0, segment=member.segment, expected_start=planned.start))
    return out


def not_ready(res: Reservation, group: Group, need: Demand, snapshot: Snapshot,
              live: Mapping[str, Reservation]) -> str | None:
    """Why the pods of a held group wait (None: the room of every hold of its job is there). A hold admits
    its pods only all at once: members that start where their room is, one at a time, would hold nodes
    while the rest wait (and a job in segments would run in some domains only)."""
    job = segments.job_of(res.group_id)
    for group_id, held in sorted(live.items()):
        if not is_hold(held) or segments.job_of(group_id) != job:
            continue
        member = group
        if group_id != group.id:
            if group.segment is None or held.segment is None:
                continue
            member = segments.sibling(group, group.segment, held.segment.index)
        _, placed, _ = placement.members_summary(snapshot.members.get(group_id, ()))
        remaining = held.size - placed
        others = {g: r for g, r in live.items() if g != group_id}
        if remaining > 0 and not placement.still_fits(held.domain, member, need, remaining, snapshot, others):
            return (f"domain {held.domain} is held for group {held.namespace}/{held.group_name}, expected to have "
                    f"room for its {held.size} pods at {held.expected_start:.0f}; its pods start together once "
                    "every held domain has room")
    return None


def kept_from(pod: Pod, inputs: DecisionInputs) -> dict[str, str]:
    """The held domains a pod outside any group stays out of (domain -> why): all of them, but those whose
    hold starts after the pod's walltime ends. Only pods the extender filters see it (plain GPU pods are sent
    to it with ``--pack-plain-gpu-pods``); kube-scheduler's default profile never asks."""
    found = [r for r in inputs.live.values() if is_hold(r) and r.expected_start is not None]
    if not found:
        return {}
    bound, _ = walltime.requested(pod, inputs.snapshot.catalog, None)
    if bound is not None and inputs.policy.backfill_enforced_only and not bound.enforced:
        bound = None
    ends = inputs.now + bound.seconds if bound is not None else None
    return {r.domain: (f"domain {r.domain} is held for group {r.namespace}/{r.group_name} from now until about "
                       f"{r.expected_start:.0f}; a pod outside any group goes there only if it states a walltime "
                       "that ends before then (imex-webhook.io/max-runtime)")
            for r in found if ends is None or ends > (r.expected_start or 0.0)}


def overdue(res: Reservation, now: float) -> bool:
    """A hold whose expected start passed by ``LATE`` without its group starting: planned again."""
    return is_hold(res) and res.expected_start is not None and now - res.expected_start > LATE
