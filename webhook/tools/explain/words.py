"""``imex-webhook explain``'s words: from the ``/inspect`` answer and a pod or group name to text for a
person. Pure: the command (``webhook.tools.explain.client``) fetches, this reads and writes.

The answer is read once into frozen dataclasses; a field of the wrong type is an ``AnswerError`` naming
it. Every string that came from the cluster is printed with control characters escaped (a pod name or a
fabric message cannot move the terminal's cursor) and cut to a readable length.
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from webhook.domain import domain_kinds
from webhook.errors import ImexWebhookError

MAX_NAME = 1024  # characters of a NAME argument: namespace/name is at most 317, a group id a little more
MAX_SHOWN = 300  # characters of one value from the cluster in the text
MAX_MEMBERS = 100  # member lines shown; the rest are counted
MAX_ROOMY = 3  # domains named for the most room


# -- the parts of /inspect this reads, as they are on the wire ------------------------------------------

class PodWire(TypedDict):
    pod: str
    node: str | None
    gpus: int


class GroupWire(TypedDict):
    group: str
    domain: str | None
    size: int | None
    pods: list[PodWire]
    placed: int
    name: NotRequired[str]
    kind: NotRequired[str | None]
    state: NotRequired[str]
    reason: NotRequired[str]
    expectedPods: NotRequired[int]
    placedDomains: NotRequired[list[str]]


class ReservationWire(TypedDict):
    group: str
    name: str
    domain: str
    size: int
    gpusPerPod: int
    onePodPerNode: bool
    createdAt: float
    placedAt: float | None
    holder: str
    state: str


class AttachmentWire(TypedDict):
    pod: str
    node: str
    gpus: int
    phase: str
    message: str


class DomainWire(TypedDict):
    domain: str
    nodes: int
    gpus: int
    freeGpus: int
    kind: NotRequired[str]
    fitPods: NotRequired[dict[str, int]]  # GPUs per pod ("1", "2", "4") -> pods one new group could get there


# -- read once ----------------------------------------------------------------------------------------

class AnswerError(ImexWebhookError, ValueError):
    """The /inspect answer is not shaped as this version reads it."""


@dataclass(frozen=True, slots=True)
class Member:
    pod: str
    node: str | None
    gpus: int


@dataclass(frozen=True, slots=True)
class Reserved:
    domain: str
    state: str  # reserved | proposed | held
    size: int
    gpus_per_pod: int
    one_pod_per_node: bool
    created_at: float
    placed_at: float | None
    holder: str
    expected_start: str | None = None  # a hold's, RFC 3339


@dataclass(frozen=True, slots=True)
class GroupView:
    id: str
    name: str
    kind: str | None
    state: str
    reason: str
    members: tuple[Member, ...]
    placed: int
    expected: int
    reservation: Reserved | None


@dataclass(frozen=True, slots=True)
class Attached:
    pod: str
    node: str
    gpus: int
    phase: str
    message: str


@dataclass(frozen=True, slots=True)
class DomainView:
    name: str
    kind: str
    nodes: int
    gpus: int
    free: int
    fits: dict[int, int]  # GPUs per pod -> pods one new group could get here now (empty from older services)


@dataclass(frozen=True, slots=True)
class View:
    groups: tuple[GroupView, ...]
    attachments: tuple[Attached, ...]
    domains: dict[str, DomainView]
    largest: dict[int, int]  # GPUs per pod -> the most pods one new group could get in any one domain now


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str, default: Any = ...) -> Any:
    if not isinstance(obj, dict):
        raise AnswerError(f"{where} is not an object")
    if key not in obj or obj[key] is None:
        if default is not ...:
            return default
        raise AnswerError(f"{where}.{key} is missing")
    value = obj[key]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise AnswerError(f"{where}.{key} is not a {_kind_name(kind)}")
    if not isinstance(value, kind):
        raise AnswerError(f"{where}.{key} is not a {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "string", int: "number", float: "number", list: "list", bool: "boolean",
                        dict: "object"}.get(k, k.__name__) for k in kinds)


def _fits(raw: Any, key: str, where: str) -> dict[int, int]:
    """GPUs per pod -> pods; a key that is no small number is from a later version and skipped."""
    counts = _get(raw, key, dict, where, {})
    return {int(k): _get(counts, k, int, f"{where}.{key}") for k in counts
            if isinstance(k, str) and k.isascii() and k.isdecimal() and len(k) <= 4}


def _reservation(raw: Any, where: str) -> Reserved:
    return Reserved(
        domain=_get(raw, "domain", str, where), state=_get(raw, "state", str, where, "reserved"),
        size=_get(raw, "size", int, where), gpus_per_pod=_get(raw, "gpusPerPod", int, where, 0),
        one_pod_per_node=_get(raw, "onePodPerNode", bool, where, False),
        created_at=float(_get(raw, "createdAt", (int, float), where, 0.0)),
        placed_at=_get(raw, "placedAt", (int, float), where, None), holder=_get(raw, "holder", str, where, ""),
        expected_start=_get(raw, "expectedStart", str, where, None))


def parse(answer: Any) -> View:
    """The /inspect answer as this command reads it; AnswerError names the first field it cannot read."""
    if not isinstance(answer, dict):
        raise AnswerError("the answer is not a JSON object")
    reservations: dict[str, tuple[str, Reserved]] = {}
    for i, raw in enumerate(_get(answer, "reservations", list, "answer", [])):
        where = f"reservations[{i}]"
        reservations[_get(raw, "group", str, where)] = (_get(raw, "name", str, where, ""), _reservation(raw, where))
    groups: list[GroupView] = []
    for i, raw in enumerate(_get(answer, "groups", list, "answer", [])):
        where = f"groups[{i}]"
        gid = _get(raw, "group", str, where)
        members = tuple(
            Member(_get(p, "pod", str, f"{where}.pods[{j}]"), _get(p, "node", str, f"{where}.pods[{j}]", None),
                   _get(p, "gpus", int, f"{where}.pods[{j}]", 0))
            for j, p in enumerate(_get(raw, "pods", list, where, [])))
        placed = _get(raw, "placed", int, where, sum(1 for m in members if m.node))
        res_name, res = reservations.pop(gid, ("", None))
        groups.append(GroupView(
            id=gid, name=_get(raw, "name", str, where, res_name or gid), kind=_get(raw, "kind", str, where, None),
            state=_get(raw, "state", str, where, "unknown"), reason=_get(raw, "reason", str, where, ""),
            members=members, placed=placed,
            expected=_get(raw, "expectedPods", int, where, max(len(members), _get(raw, "size", int, where, 0))),
            reservation=res))
    for gid, (name, res) in reservations.items():  # reserved, but no pod of the group known yet
        groups.append(GroupView(gid, name or gid, None, res.state, "no pod of the group is known yet", (), 0,
                                res.size, res))
    attachments = tuple(
        Attached(_get(a, "pod", str, f"attachments[{i}]"), _get(a, "node", str, f"attachments[{i}]", "-"),
                 _get(a, "gpus", int, f"attachments[{i}]", 0), _get(a, "phase", str, f"attachments[{i}]", "?"),
                 _get(a, "message", str, f"attachments[{i}]", ""))
        for i, a in enumerate(_get(answer, "attachments", list, "answer", [])))
    domains = {}
    for i, d in enumerate(_get(answer, "domains", list, "answer", [])):
        where = f"domains[{i}]"
        name = _get(d, "domain", str, where)
        domains[name] = DomainView(name, _get(d, "kind", str, where, "other"), _get(d, "nodes", int, where, 0),
                                   _get(d, "gpus", int, where, 0), _get(d, "freeGpus", int, where, 0),
                                   _fits(d, "fitPods", where))
    return View(tuple(groups), attachments, domains, _fits(answer, "largestGroupFits", "answer"))


# -- which group a NAME means -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Found:
    group: GroupView | None = None
    pod: str | None = None  # the pod NAME named, when it named a pod
    problem: str = ""  # why nothing (or too much) was found
    ambiguous: bool = False


def name_problem(name: str) -> str | None:
    """Why NAME cannot be a pod, group or group id at all (None: it can)."""
    if not name.strip():
        return "NAME is empty; give a pod (namespace/name or name), a group (namespace/name) or a group id"
    if len(name) > MAX_NAME:
        return f"NAME is {len(name)} characters; pod and group names and group ids are at most {MAX_NAME}"
    if any(unicodedata.category(c).startswith("C") for c in name):
        return f"NAME '{safe(name, 60)}' holds control characters; no pod or group name does"
    return None


def find(view: View, name: str) -> Found:
    name = name.strip()
    by_id = [g for g in view.groups if g.id == name]
    if by_id:
        return Found(by_id[0])

    def named(full: str) -> bool:
        return full == name if "/" in name else full.rpartition("/")[2] == name

    hits: dict[str, GroupView] = {}
    pods: list[str] = []
    for g in view.groups:
        for m in g.members:
            if named(m.pod):
                hits[g.id] = g
                pods.append(m.pod)
        if named(g.name):
            hits[g.id] = g
    if not hits:
        known = ", ".join(safe(g.name, 60) for g in view.groups[:8]) or "none"
        more = f" and {len(view.groups) - 8} more" if len(view.groups) > 8 else ""
        return Found(problem=f"no group and no pod of a group is named '{safe(name, 80)}' in the service's view "
                             f"(groups: {known}{more}); pods outside any group are not tracked")
    if len(hits) > 1 or len(set(pods)) > 1:
        listed = ", ".join(sorted({*(f"pod {p}" for p in pods), *(f"group {g.name}" for g in hits.values())}))
        return Found(problem=f"'{safe(name, 80)}' is ambiguous: {safe(listed, 400)}; give namespace/name or the "
                             "group id", ambiguous=True)
    return Found(next(iter(hits.values())), pods[0] if pods else None)


# -- the text -----------------------------------------------------------------------------------------

def safe(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` with control and format characters escaped, cut to ``limit`` characters."""
    out = "".join(c if not unicodedata.category(c).startswith("C") else ascii(c)[1:-1] for c in text[:limit * 2])
    return out if len(out) <= limit and len(text) <= limit * 2 else f"{out[:limit]}... ({len(text)} characters)"


def _when(ts: float | None, now: float | None) -> str:
    if not ts:
        return "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))
    if now is None:
        return stamp
    age = max(0, int(now - ts))
    ago = f"{age} s" if age < 120 else (f"{age // 60} min" if age < 7200 else f"{age // 3600} h")
    return f"{stamp} ({ago} ago)"


def _domain(view: View, name: str) -> str:
    d = view.domains.get(name)
    if d is None:
        return safe(name)
    what = domain_kinds.title_of(d.kind)
    return f"{safe(name)} ({what}, {d.nodes} nodes, {d.free} of {d.gpus} GPUs free)"


def explain(view: View, found: Found, now: float | None = None) -> str:
    """The text for a found group (and the pod NAME named, if it named one)."""
    g = found.group
    assert g is not None, "explain() is for a found group"
    lines: list[str] = []
    node_of = {m.pod: m.node for m in g.members}
    if found.pod is not None:
        node = node_of.get(found.pod)
        where = (f"runs on node {safe(node)}" if node else "is not placed yet: it waits with its group")
        lines.append(f"Pod {safe(found.pod)} {where}; it is a member of group {safe(g.name)}.")
    kind = f"{safe(g.kind)} group, " if g.kind else ""
    lines.append(f"Group {safe(g.name)} ({kind}id {safe(g.id, 120)})")
    lines.append(f"  State:     {safe(g.state)}: {g.placed} of {g.expected} pods placed")
    if g.reason and g.state not in ("placed",):
        lines.append(f"  Why:       {safe(g.reason, 2000)}")
    r = g.reservation
    if r is None:
        lines.append("  Reserved:  no domain reserved for the group")
    else:
        shape = f"{r.size} pods x {r.gpus_per_pod} GPUs" + (", one pod per node" if r.one_pod_per_node else "")
        expected = safe(r.expected_start or "-", 40)
        verb = {"reserved": "reserved", "held": f"held until its room comes (expected {expected})"}.get(
            r.state, "proposed (not stored yet)")
        lines.append(f"  Reserved:  {verb} in domain {_domain(view, r.domain)}")
        lines.append(f"             for {shape}; since {_when(r.created_at, now)}"
                     + (f" by {safe(r.holder, 80)}" if r.holder else "")
                     + (f"; last pod placed {_when(r.placed_at, now)}" if r.placed_at else ""))
    lines.append(f"  Members:   {g.placed} of {g.expected} placed ({len(g.members)} known)")
    width = max((len(safe(m.pod, 80)) for m in g.members[:MAX_MEMBERS]), default=0)
    for m in g.members[:MAX_MEMBERS]:
        mark = "*" if m.pod == found.pod else " "
        where = safe(m.node, 80) if m.node else "not placed"
        lines.append(f"   {mark}{safe(m.pod, 80).ljust(width)}  {where}  ({m.gpus} GPUs)")
    if len(g.members) > MAX_MEMBERS:
        lines.append(f"    ... and {len(g.members) - MAX_MEMBERS} more")
    pods = set(node_of)
    fabric = [a for a in view.attachments if a.pod in pods]
    for i, a in enumerate(fabric):
        label = "  Fabric:    " if i == 0 else "             "
        lines.append(f"{label}{safe(a.pod, 80)} on {safe(a.node, 80)}: {a.gpus} GPUs {safe(a.phase, 20)}"
                     + (f" ({safe(a.message)})" if a.message else ""))
    lines += _room(view, g)
    return "\n".join(lines) + "\n"


def _room(view: View, g: GroupView) -> list[str]:
    """The most pods one new group could get in one domain now, and the domains with the most room for
    pods of this group's size (4 GPUs when its size has no figure)."""
    if not view.largest:
        return []
    sizes = sorted(view.largest, reverse=True)
    most = ", ".join(f"{view.largest[gpus]} of {gpus} GPUs" if i == 0 else f"{view.largest[gpus]} of {gpus}"
                     for i, gpus in enumerate(sizes))
    own = g.reservation.gpus_per_pod if g.reservation else max((m.gpus for m in g.members), default=0)
    gpus = own if own in view.largest else sizes[0]
    roomy = sorted((d for d in view.domains.values() if d.fits.get(gpus, 0) > 0), key=lambda d: (-d.fits[gpus], d.name))
    named = ", ".join(f"{safe(d.name, 120)} ({d.fits[gpus]})" for d in roomy[:MAX_ROOMY])
    more = f" and {len(roomy) - MAX_ROOMY} more domains" if len(roomy) > MAX_ROOMY else ""
    return [f"  Room now:  the most pods one new group could get in one domain: {most}",
            f"             most room for {gpus}-GPU pods: {named}{more}" if roomy
            else f"             no domain has room for one {gpus}-GPU pod"]


def explain_name(answer: Any, name: str, now: float | None = None) -> tuple[int, str]:
    """(exit status, text) for NAME against an /inspect answer: 0 and the explanation; 1 and one line when
    nothing is named so; 2 and one line when NAME is no name or names more than one group."""
    problem = name_problem(name)
    if problem:
        return 2, problem
    view = parse(answer)
    found = find(view, name)
    if found.group is None:
        return (2 if found.ambiguous else 1), found.problem
    return 0, explain(view, found, now)
