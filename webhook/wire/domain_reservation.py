"""The DomainReservation custom resource (manifests/crd-domainreservations.yaml) and its codec.

``imex-webhook.io/v1alpha1``, kind ``DomainReservation``, cluster-scoped, in two shapes told apart by name:

- a group's **reservation**, ``r-`` + the first 32 hex digits of sha256(group id) (a group id is any
  string, an object name is not): ``spec`` holds the group, its domain, size, GPUs per pod and times;
- a domain's **ledger**, ``d-`` + the first 32 hex digits of sha256(domain): ``spec.domain`` and
  ``spec.promises``, one entry per group promised capacity in the domain (a reservation's fields but
  the domain).

A hold (``webhook.domain.jobs.holds``) is a reservation or promise with ``expectedStart``: when the held
domain's room is expected. The field is additive; what a replica of an earlier release does with a hold is
in docs/SCHEDULER.md ("Holds and backfill", "Upgrading"). Times are RFC 3339 to the microsecond. Parsing raises
``WireError`` naming the field; what the adapter does with the parsed records is
``webhook.adapters.kube.reservations``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, NotRequired, Protocol, TypedDict, TypeVar

from webhook.errors import WireError
from webhook.wire import PREFIX
from webhook.wire.fields import map_, str_at
from webhook.wire.text import shown
from webhook.wire.timestamps import parse_rfc3339, rfc3339

# Segments of one job (webhook.domain.groups.segments.MAX_SEGMENTS), as the CRD's schema bounds spec.segment.count.
MAX_SEGMENTS = 20_000
# Spare nodes a reservation may hold (webhook.domain.groups.spares), as the CRD's schema bounds spec.spareNodes:
# enough for a few failed trays of any rack, too few for one group to hold a whole cluster.
MAX_SPARE_NODES = 64
# How far ahead of its making a hold may expect its room: the longest walltime a group may state (366 days,
# webhook.domain.groups.walltime), which is as far as running groups' stated ends ever reach.
MAX_HOLD_AHEAD = 8784 * 3600.0

GROUP = PREFIX
VERSION = "v1alpha1"
KIND = "DomainReservation"
PLURAL = "domainreservations"
RESERVATION_PREFIX, LEDGER_PREFIX = "r-", "d-"
R = TypeVar("R")  # what the caller builds a parsed reservation or promise as


class Promise(TypedDict):
    """One entry of a ledger's ``spec.promises``."""

    groupId: str
    groupName: str
    namespace: str
    size: int
    gpusPerPod: int
    onePodPerNode: bool
    holder: str
    createdAt: str
    placedAt: NotRequired[str]
    spareNodes: NotRequired[int]
    expectedStart: NotRequired[str]


class SegmentSpec(TypedDict):
    """``spec.segment`` of a segment's reservation: where it stands in its job (docs/SCHEDULER.md)."""

    jobId: str
    jobName: str
    index: int
    count: int
    size: int
    jobSize: int
    preferred: NotRequired[bool]


class DomainReservationSpec(TypedDict, total=False):
    """A reservation has every field but ``promises``; a ledger only ``domain`` and ``promises``."""

    groupId: str
    groupName: str
    namespace: str
    domain: str
    size: int
    gpusPerPod: int
    onePodPerNode: bool
    spareNodes: int
    segment: SegmentSpec
    holder: str
    createdAt: str
    placedAt: str
    expectedStart: str
    promises: list[Promise]


class DomainReservation(TypedDict):
    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    spec: DomainReservationSpec


class ReservationFields(Protocol):
    """What a reservation or promise is written from (``webhook.domain.model.Reservation`` has it)."""

    @property
    def group_id(self) -> str: ...
    @property
    def group_name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def domain(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def gpus_per_pod(self) -> int: ...
    @property
    def one_pod_per_node(self) -> bool: ...
    @property
    def created_at(self) -> float: ...
    @property
    def placed_at(self) -> float | None: ...
    @property
    def holder(self) -> str: ...
    @property
    def spares(self) -> int: ...
    @property
    def segment(self) -> SegmentFields | None: ...
    @property
    def expected_start(self) -> float | None: ...


class SegmentFields(Protocol):
    """What ``spec.segment`` is written from (``webhook.domain.model.Segment`` has it)."""

    @property
    def job_id(self) -> str: ...
    @property
    def job_name(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def job_size(self) -> int: ...
    @property
    def preferred(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class LedgerRecord(Generic[R]):
    domain: str
    promises: Mapping[str, R]  # by group id
    version: str


def reservation_name(group_id: str) -> str:
    return RESERVATION_PREFIX + hashlib.sha256(group_id.encode()).hexdigest()[:32]


def ledger_name(domain: str) -> str:
    return LEDGER_PREFIX + hashlib.sha256(domain.encode()).hexdigest()[:32]


# -- encoding ------------------------------------------------------------------------------------------


def _spec(res: ReservationFields, holder: str) -> DomainReservationSpec:
    spec: DomainReservationSpec = {
        "groupId": res.group_id, "groupName": res.group_name, "namespace": res.namespace, "domain": res.domain,
        "size": res.size, "gpusPerPod": res.gpus_per_pod, "onePodPerNode": res.one_pod_per_node,
        "holder": holder, "createdAt": rfc3339(res.created_at, "us"),
    }
    if res.placed_at is not None:
        spec["placedAt"] = rfc3339(res.placed_at, "us")
    if res.spares:
        spec["spareNodes"] = res.spares
    if res.expected_start is not None:
        spec["expectedStart"] = rfc3339(res.expected_start, "us")
    return spec


def reservation_object(res: ReservationFields, holder: str) -> DomainReservation:
    spec = _spec(res, holder)
    seg = res.segment
    if seg is not None:
        spec["segment"] = {"jobId": seg.job_id, "jobName": seg.job_name, "index": seg.index, "count": seg.count,
                           "size": seg.size, "jobSize": seg.job_size}
        if seg.preferred:
            spec["segment"]["preferred"] = True
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": reservation_name(res.group_id)}, "spec": spec}


def with_placed_at(obj: Mapping[str, Any], when: float) -> dict[str, Any]:
    """A copy of reservation ``obj`` (as read, for a guarded replace) with ``spec.placedAt`` set."""
    body = copy.deepcopy(dict(obj))
    body["spec"]["placedAt"] = rfc3339(when, "us")
    return body


def ledger_object(domain: str, promises: Iterable[ReservationFields],
                  base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ledger with these promises; ``base`` (the object as read) keeps its metadata for a guarded replace."""
    body = copy.deepcopy(dict(base)) if base is not None else {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": ledger_name(domain)}}
    entries = []
    for promise in sorted(promises, key=lambda p: p.group_id):
        entry = dict(_spec(promise, promise.holder))
        del entry["domain"]
        entries.append(entry)
    body["spec"] = {"domain": domain, "promises": entries}
    return body


# -- parsing -------------------------------------------------------------------------------------------


def _required(spec: Mapping[str, Any], key: str, path: str, kind: type) -> Any:
    value = spec.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WireError(f"{path}.{key}", f"expected {kind.__name__}, got {shown(value)}")
    return value


def _time(fields: Mapping[str, Any], key: str, path: str) -> float | None:
    value = fields.get(key)
    return None if value in (None, "") else parse_rfc3339(value, f"{path}.{key}")


def _record(spec: Mapping[str, Any], meta: Mapping[str, Any], path: str, make: Callable[..., R],
            **extra: Any) -> R:
    one_pod = spec.get("onePodPerNode", False)
    if not isinstance(one_pod, bool):
        raise WireError(f"{path}.onePodPerNode", f"expected bool, got {shown(one_pod)}")
    created = _time(spec, "createdAt", path) or _time(meta, "creationTimestamp", "metadata")
    expected = _expected_start(spec, created, path)
    return make(
        group_id=_required(spec, "groupId", path, str), group_name=str_at(spec, "groupName", path),
        namespace=str_at(spec, "namespace", path), domain=_required(spec, "domain", path, str),
        size=_required(spec, "size", path, int), gpus_per_pod=_required(spec, "gpusPerPod", path, int),
        one_pod_per_node=one_pod, created_at=created or 0.0, placed_at=_time(spec, "placedAt", path),
        holder=str_at(spec, "holder", path), version=str_at(meta, "resourceVersion", "metadata"),
        spares=_spares(spec, path), expected_start=expected, **extra)


def _expected_start(spec: Mapping[str, Any], created: float | None, path: str) -> float | None:
    """A hold's ``expectedStart``: planned when the hold was made, so never before it, and never past the
    longest walltime a group may state (``webhook.domain.groups.walltime.MAX_SECONDS``) after it."""
    expected = _time(spec, "expectedStart", path)
    if expected is None or created is None:
        return expected
    if not created <= expected <= created + MAX_HOLD_AHEAD:
        raise WireError(f"{path}.expectedStart", f"{rfc3339(expected, 'us')} is not between createdAt "
                        f"{rfc3339(created, 'us')} and {MAX_HOLD_AHEAD / 3600:g} hours after it")
    return expected


def _spares(spec: Mapping[str, Any], path: str) -> int:
    value = spec.get("spareNodes", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SPARE_NODES:
        raise WireError(f"{path}.spareNodes",
                        f"expected a whole number from 0 to {MAX_SPARE_NODES}, got {shown(value)}")
    return value


def _parts(obj: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    obj = map_(obj, "")
    if obj.get("spec") is None:
        raise WireError("spec", "missing")
    return map_(obj.get("spec"), "spec"), map_(obj.get("metadata"), "metadata")


def parse_reservation(obj: Any, make: Callable[..., R], make_segment: Callable[..., Any] | None = None) -> R:
    """A group's reservation as the API server returns it, built by ``make`` from keyword arguments named
    as the fields of ``webhook.domain.model.Reservation`` (times in unix seconds; ``version`` is
    ``metadata.resourceVersion``; ``segment`` built by ``make_segment`` from those of ``Segment``, when the
    reservation is a segment's and ``make_segment`` is given); a malformed one raises ``WireError``."""
    spec, meta = _parts(obj)
    if make_segment is None or spec.get("segment") is None:
        return _record(spec, meta, "spec", make)
    segment = _segment(spec["segment"], _required(spec, "groupId", "spec", str), make_segment)
    return _record(spec, meta, "spec", make, segment=segment)


def _segment(raw: Any, group_id: str, make: Callable[..., Any]) -> Any:
    path = "spec.segment"
    fields = map_(raw, path)
    ints = {key: _required(fields, key, path, int) for key in ("index", "count", "size", "jobSize")}
    job_id = _required(fields, "jobId", path, str)
    if not 1 <= ints["count"] <= MAX_SEGMENTS:
        raise WireError(f"{path}.count", f"expected 1 to {MAX_SEGMENTS} segments, got {ints['count']}")
    if not 0 <= ints["index"] < ints["count"]:
        raise WireError(f"{path}.index", f"expected 0 to {ints['count'] - 1}, got {ints['index']}")
    if ints["size"] < 1 or -(-ints["jobSize"] // ints["size"]) != ints["count"]:
        raise WireError(path, f"{ints['jobSize']} pods in segments of {ints['size']} are not {ints['count']} segments")
    if group_id != f"{job_id}#s{ints['index']}":
        raise WireError(f"{path}.jobId", f"segment {ints['index']} of job {shown(job_id)} is not group "
                                         f"{shown(group_id)}")
    preferred = fields.get("preferred", False)
    if not isinstance(preferred, bool):
        raise WireError(f"{path}.preferred", f"expected bool, got {shown(preferred)}")
    return make(job_id=job_id, job_name=str_at(fields, "jobName", path), index=ints["index"], count=ints["count"],
                size=ints["size"], job_size=ints["jobSize"], preferred=preferred)


def parse_ledger(obj: Any, make: Callable[..., R]) -> LedgerRecord[R]:
    """A domain's ledger as the API server returns it, each promise built by ``make`` (as for
    ``parse_reservation``, with the ledger's domain and an empty version: a promise is not an object); a
    malformed one raises ``WireError``."""
    spec, meta = _parts(obj)
    domain, entries = spec.get("domain"), spec.get("promises")
    if not isinstance(domain, str) or not domain:
        raise WireError("spec.domain", f"expected a non-empty string, got {shown(domain)}")
    if not isinstance(entries, list):
        raise WireError("spec.promises", f"expected a list, got {shown(entries)}")
    name = meta.get("name")
    if name and name != ledger_name(domain):
        raise WireError("metadata.name", f"the ledger of domain {shown(domain)} must be named {ledger_name(domain)}")
    promises: dict[str, R] = {}
    for i, entry in enumerate(entries):
        path = f"spec.promises[{i}]"
        fields = {**map_(entry, path), "domain": domain}
        promises[fields["groupId"]] = _record(fields, {}, path, make)  # the value first: it checks the key
    return LedgerRecord(domain, MappingProxyType(promises), str_at(meta, "resourceVersion", "metadata"))


def is_ledger(obj: Any) -> bool:
    """Which shape ``obj`` claims to be, by its name."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return isinstance(name, str) and name.startswith(LEDGER_PREFIX)
