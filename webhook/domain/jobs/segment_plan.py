"""Where the segments of a job go: the whole job's capacity checked before any segment is reserved
(docs/SCHEDULER.md, "Jobs larger than one NVLink domain").

Every domain is offered the job's pods as one group (``placement.offer``: the same constraints, holds of
other groups and segments already reserved taken out); the segments still to place are then packed into
as few domains as possible, larger segments first: while the rest fits in one domain, the best fit takes
it; otherwise the domain with the most room takes as many as fit. With ``Policy.block_labels`` (the
network above the domains, lowest level first) all segments of the job, those already reserved included,
land under one value of the lowest level that holds them, else the next; with none configured, anywhere.
Healthy domains first, as for a single domain (``--fabric-health-policy``); exclusive ComputeDomains'
domains are left out. Pure: the same cluster gives every replica the same plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass

from webhook.domain.groups import segments
from webhook.domain.health import domain_health
from webhook.domain.model import Demand, Group, Reservation, Segment, Snapshot
from webhook.domain.placement import exclusive, placement, repair
from webhook.domain.policy import Policy


@dataclass(frozen=True, slots=True)
class Plan:
    domains: Mapping[int, str] | None  # segment index -> domain, every segment of the job; None: no plan
    reason: str  # the shape chosen, or why there is none
    resolvable_later: bool = False


@dataclass(frozen=True, slots=True)
class _Packing:
    domains: dict[int, str]
    used: int  # distinct domains the job spans
    left: int  # pods of room left in those domains


def plan(group: Group, need: Demand, snapshot: Snapshot, others: Mapping[str, Reservation],
         allowed: Set[str] | None, policy: Policy, rooms: Mapping[str, int] | None = None) -> Plan:
    """``rooms``: each domain's room for the job (``job_rooms``), when the caller tries several shapes."""
    seg = group.segment
    assert seg is not None
    fixed = _fixed(group, seg, snapshot, others)
    todo = sorted(((i, seg.pods(i)) for i in range(seg.count) if i not in fixed), key=lambda s: (-s[1], s[0]))
    what = (f"job {group.namespace}/{seg.job_name} ({seg.job_size} pods in {seg.count} segments of "
            f"{seg.size}, {need.gpus} GPUs per pod)")
    if not todo:
        return Plan(dict(fixed), f"{what}: every segment has its domain")
    if rooms is None:
        rooms = job_rooms(group, need, snapshot, others, allowed, policy, sum(p for _, p in todo))
    pools = [rooms]
    if policy.fabric_health != "allow":
        healthy = {d: r for d, r in rooms.items() if _healthy(d, snapshot)}
        pools = [healthy] if policy.fabric_health == "refuse" else [healthy, rooms]
    for pool in pools:
        found = _in_blocks(pool, todo, fixed, snapshot, policy)
        if found is not None:
            packing, where = found
            domains = {**fixed, **packing.domains}
            shape = ", ".join(f"{d}: {n}" for d, n in sorted(_counts(domains).items()))
            return Plan(domains, f"{what}: {len(_counts(domains))} domains{where} ({shape} segments)")
    largest = max(rooms.values(), default=0)
    needed = sum(p for _, p in todo)
    levels = " or ".join(policy.block_labels)
    reason = (f"no plan holds {what}: {len(todo)} segments still to place need {needed} pods; the domains "
              f"{'under any one value of ' + levels + ' ' if levels else ''}have room for fewer (largest free "
              f"room in one domain: {largest} pods, {sum(rooms.values())} in all)")
    return Plan(None, reason, resolvable_later=True)


def _fixed(group: Group, seg: Segment, snapshot: Snapshot, others: Mapping[str, Reservation]) -> dict[int, str]:
    """Segments that already have a domain: a live reservation, or members running somewhere."""
    out = {}
    for i in range(seg.count):
        res = others.get(segments.segment_id(seg.job_id, i)) if i != seg.index else None
        if res is not None:
            out[i] = res.domain
            continue
        running = repair.running_domain(segments.sibling(group, seg, i), snapshot)
        if running is not None:
            out[i] = running[0]
    return out


def job_rooms(group: Group, need: Demand, snapshot: Snapshot, others: Mapping[str, Reservation],
              allowed: Set[str] | None, policy: Policy, wanted: int) -> dict[str, int]:
    """Pods of the job each domain can take now, beside every other promise (sibling segments' included)."""
    held = placement.holds(snapshot, others, group.id)
    out = {}
    for domain in sorted(snapshot.domains):
        if not domain or exclusive.conflict(domain, group, snapshot, others, policy) is not None:
            continue
        pods = placement.offer(domain, group, need, wanted, snapshot, held, allowed).pods
        if pods:
            out[domain] = pods
    return out


def _healthy(domain: str, snapshot: Snapshot) -> bool:
    nodes = (snapshot.nodes[n] for n in snapshot.domains.get(domain, ()) if n in snapshot.nodes)
    return domain_health(nodes).health == "healthy"


def _block(domain: str, level: int, snapshot: Snapshot) -> str:
    """The domain's value of block label ``level``; "" when its nodes lack it or disagree."""
    values = {snapshot.nodes[n].blocks[level] if len(snapshot.nodes[n].blocks) > level else ""
              for n in snapshot.domains.get(domain, ()) if n in snapshot.nodes}
    return values.pop() if len(values) == 1 else ""


def _in_blocks(rooms: Mapping[str, int], todo: list[tuple[int, int]], fixed: Mapping[int, str],
               snapshot: Snapshot, policy: Policy) -> tuple[_Packing, str] | None:
    if not policy.block_labels:
        packing = _pack(rooms, todo, fixed)
        return (packing, "") if packing is not None else None
    for level, label in enumerate(policy.block_labels):
        blocks: dict[str, dict[str, int]] = {}
        for domain, room in rooms.items():
            value = _block(domain, level, snapshot)
            if value:
                blocks.setdefault(value, {})[domain] = room
        held = {_block(d, level, snapshot) for d in fixed.values()}
        if len(held) > 1 or "" in held:
            continue  # the segments placed already span blocks at this level
        best: tuple[tuple[int, int, str], _Packing] | None = None
        for value, pool in sorted(blocks.items()):
            if held and value not in held:
                continue
            packing = _pack(pool, todo, fixed)
            if packing is not None and (best is None or (packing.used, packing.left, value) < best[0]):
                best = ((packing.used, packing.left, value), packing)
        if best is not None:
            return best[1], f" under {label}={best[0][2]}"
    return None


def _pack(rooms: Mapping[str, int], todo: list[tuple[int, int]], fixed: Mapping[int, str]) -> _Packing | None:
    """Segments (index, pods) into as few domains as possible; None when they do not all fit."""
    room = dict(rooms)
    used = set(fixed.values())
    out: dict[int, str] = {}
    rest = list(todo)
    while rest:
        total = sum(p for _, p in rest)
        # The rest fits in one domain: in one already used first, else the new one that fits best.
        whole = [d for d in room if room[d] >= total]
        if whole:
            target = min(whole, key=lambda d: (d not in used, room[d], d))
            for index, _ in rest:
                out[index] = target
            room[target] -= total
            used.add(target)
            break
        # Otherwise fill what is used, then the domain with the most room, with as many segments as fit.
        if not room:
            return None
        target = max(room, key=lambda d: (d in used, room[d]))  # ties: the first by name
        placed = []
        for index, pods in rest:
            if pods <= room[target]:
                out[index] = target
                room[target] -= pods
                placed.append(index)
        if not placed:
            if target in used:
                del room[target]  # full for the rest: look at the next domain
                continue
            return None
        used.add(target)
        rest = [s for s in rest if s[0] not in placed]
    return _Packing(out, len(used), sum(room[d] for d in used if d in room))


def _counts(domains: Mapping[int, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for domain in domains.values():
        out[domain] = out.get(domain, 0) + 1
    return out


def preferred_split(group: Group, size: int, need: Demand, snapshot: Snapshot, others: Mapping[str, Reservation],
                    allowed: Set[str] | None, policy: Policy, at: Callable[[int], Group | str],
                    largest: int | None = None) -> tuple[Group, Plan] | str:
    """A preferred job no domain holds whole: the largest segment size (at most ``largest``, the job's
    segment-size when it asks one) whose segments fit now, never one that leaves a member alone (a last
    segment of one pod); ``at(n)`` is the pod's segment group at size ``n`` (or why it has none). Why not,
    when no size fits."""
    rooms = job_rooms(group, need, snapshot, others, allowed, policy, size)
    top = min(largest or size - 1, size - 1, max(rooms.values(), default=0))
    for per in range(top, 1, -1):
        if size % per == 1:
            continue
        member = at(per)
        if isinstance(member, str):
            return member
        found = plan(member, need, snapshot, others, allowed, policy, rooms)
        if found.domains is not None:
            return member, found
    return (f"no split holds it either: segments of 2 or more pods, none alone in a domain, need more room than "
            f"the domains have (largest free room in one domain: {max(rooms.values(), default=0)} pods, "
            f"{sum(rooms.values())} in all)")
