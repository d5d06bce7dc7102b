"""Domain reservations kept in the API server, so that every replica and every restart sees them.

One cluster-scoped ``DomainReservation`` (imex-webhook.io/v1alpha1) per group, named ``r-`` + the
first 32 hex digits of sha256(group id): a group id is any string, an object name is not. Everything
lives in ``spec`` (timestamps as RFC 3339), ``metadata.resourceVersion`` is ``Reservation.version``.

Reads come from a watch-fed cache (``all()`` never calls the API); writes are guarded:
- ``ensure`` creates; two replicas racing for one group both end up with the object that won
  (409 AlreadyExists -> read it), so they agree on one domain;
- ``placed`` replaces with the resourceVersion it read, re-reading and retrying on 409 Conflict;
- ``release`` deletes with a resourceVersion precondition, so a reservation that another replica has
  just used is not lost; already gone counts as done.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from webhook.adapters.kube_api import Api, ApiError, Resource
from webhook.adapters.kube_watch import SyncFlag
from webhook.domain.errors import DecisionError, StoreConflict
from webhook.domain.model import Reservation

log = logging.getLogger(__name__)

DOMAIN_RESERVATIONS = Resource("DomainReservation", "imex-webhook.io", "v1alpha1", "domainreservations", False)
CRD_MISSING = "the DomainReservation CRD is not installed: kubectl apply -k manifests/"
PLACED_RETRIES = 3


def object_name(group_id: str) -> str:
    return "r-" + hashlib.sha256(group_id.encode()).hexdigest()[:32]


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _unix(text: Any, field: str) -> float | None:
    if text in (None, ""):
        return None
    if not isinstance(text, str):
        raise ValueError(f"{field}: expected an RFC 3339 string, got {text!r}")
    return datetime.fromisoformat(text).timestamp()


def to_object(res: Reservation, holder: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "groupId": res.group_id, "groupName": res.group_name, "namespace": res.namespace, "domain": res.domain,
        "size": res.size, "gpusPerPod": res.gpus_per_pod, "onePodPerNode": res.one_pod_per_node,
        "holder": holder, "createdAt": _rfc3339(res.created_at),
    }
    if res.placed_at is not None:
        spec["placedAt"] = _rfc3339(res.placed_at)
    return {"apiVersion": "imex-webhook.io/v1alpha1", "kind": "DomainReservation",
            "metadata": {"name": object_name(res.group_id)}, "spec": spec}


def from_object(obj: Mapping[str, Any]) -> Reservation:
    """Raises ValueError (or KeyError/TypeError) for an object that is not a well-formed reservation."""
    spec, meta = obj["spec"], obj.get("metadata") or {}
    for field, kind in (("groupId", str), ("domain", str), ("size", int), ("gpusPerPod", int)):
        if not isinstance(spec.get(field), kind) or isinstance(spec.get(field), bool):
            raise ValueError(f"spec.{field}: expected {kind.__name__}, got {spec.get(field)!r}")
    created = _unix(spec.get("createdAt"), "spec.createdAt") or _unix(meta.get("creationTimestamp"), "created")
    return Reservation(
        group_id=spec["groupId"], group_name=str(spec.get("groupName") or ""),
        namespace=str(spec.get("namespace") or ""), domain=spec["domain"], size=spec["size"],
        gpus_per_pod=spec["gpusPerPod"], one_pod_per_node=bool(spec.get("onePodPerNode", False)),
        created_at=created or 0.0, placed_at=_unix(spec.get("placedAt"), "spec.placedAt"),
        holder=str(spec.get("holder") or ""), version=str(meta.get("resourceVersion") or ""),
    )


def _newer_or_same(new: str, old: str) -> bool:
    # resourceVersions are opaque, but etcd's are increasing integers; a watch event that arrives after
    # our own write's answer must not roll the cache back. Anything else: trust the newest arrival.
    if new.isdigit() and old.isdigit():
        return int(new) >= int(old)
    return True


@dataclass(frozen=True, slots=True)
class _Entry:
    reservation: Reservation
    obj: dict[str, Any]  # as the server returned it, for a replace that keeps fields others added


class KubeReservationStore(SyncFlag):
    """``ReservationStore`` on DomainReservation objects; also the ``Sink`` of their watcher."""

    def __init__(self, api: Api, holder: str) -> None:
        super().__init__()
        self._api = api
        self._holder = holder
        self._lock = threading.Lock()
        self._items: dict[str, _Entry] = {}
        # What all() hands out, rebuilt on each change: every filter request reads it, writes are rare.
        self._view: Mapping[str, Reservation] = MappingProxyType({})

    # -- fed by the watcher ---------------------------------------------------------------------------

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        entries = [e for e in map(self._parse, objects) if e is not None]
        with self._lock:
            self._items = {e.reservation.group_id: e for e in entries}
            self._publish()

    def apply(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        entry = self._parse(obj)
        if entry is None:
            return
        if event == "DELETED":
            self._forget(entry.reservation.group_id)
        else:
            self._keep(entry)

    # -- ReservationStore -----------------------------------------------------------------------------

    def all(self) -> Mapping[str, Reservation]:
        with self._lock:
            return self._view

    def ensure(self, proposal: Reservation) -> Reservation:
        with self._lock:
            cached = self._items.get(proposal.group_id)
        if cached is not None:
            return cached.reservation
        group = f"{proposal.namespace}/{proposal.group_name}"
        name = object_name(proposal.group_id)
        body = to_object(proposal, self._holder or proposal.holder)
        for _ in range(3):
            try:
                return self._remember(self._api.call("POST", DOMAIN_RESERVATIONS.path(), body=body))
            except ApiError as exc:
                if exc.status == 404:
                    raise DecisionError(CRD_MISSING) from exc
                if exc.status != 409:
                    raise DecisionError(exc.explain(f"store the domain reservation of group {group}", "create",
                                                    DOMAIN_RESERVATIONS.qualified)) from exc
            # 409 AlreadyExists: another replica (or an earlier bind of ours) won; its choice holds.
            try:
                winner = self._remember(self._api.call("GET", DOMAIN_RESERVATIONS.path(name=name)))
            except ApiError as exc:
                if exc.status == 404:
                    continue  # released between its create and our read: try to create again
                raise DecisionError(exc.explain(f"read the domain reservation of group {group}", "get",
                                                DOMAIN_RESERVATIONS.qualified)) from exc
            if winner.group_id != proposal.group_id:
                raise DecisionError(f"reservation object {name} belongs to group {winner.group_id}, not "
                                    f"{proposal.group_id} (a name collision); delete it to proceed")
            return winner
        raise DecisionError(f"the reservation of group {group} was deleted repeatedly while we stored it; "
                            "the scheduler retries")

    def placed(self, group_id: str, when: float) -> None:
        with self._lock:
            entry = self._items.get(group_id)
        name = object_name(group_id)
        for attempt in range(1 + PLACED_RETRIES):
            try:
                if entry is None or attempt:
                    entry = self._parse(self._api.call("GET", DOMAIN_RESERVATIONS.path(name=name)))
                if entry is None:
                    raise StoreConflict(f"reservation object {name} of group {group_id} is malformed")
                body = copy.deepcopy(entry.obj)
                placed_at = max(when, entry.reservation.placed_at or when)
                body["spec"]["placedAt"] = _rfc3339(placed_at)
                self._remember(self._api.call("PUT", DOMAIN_RESERVATIONS.path(name=name), body=body))
                return
            except ApiError as exc:
                if exc.status == 404:
                    self._forget(group_id)
                    raise StoreConflict(f"the reservation of group {group_id} is gone") from exc
                if exc.status != 409:
                    # The engine treats StoreConflict as "not recorded, the next bind refreshes it".
                    raise StoreConflict(exc.explain(f"record a placement in reservation {name}", "update",
                                                    DOMAIN_RESERVATIONS.qualified)) from exc
                log.debug("reservation %s changed under us (attempt %d): %s", name, attempt + 1, exc)
        raise StoreConflict(f"reservation {name} of group {group_id} kept changing: {PLACED_RETRIES} retries "
                            "after a conflict failed")

    def release(self, group_id: str) -> None:
        with self._lock:
            entry = self._items.get(group_id)
        name = object_name(group_id)
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if entry is not None and entry.reservation.version:
            options["preconditions"] = {"resourceVersion": entry.reservation.version}
        try:
            self._api.call("DELETE", DOMAIN_RESERVATIONS.path(name=name), body=options)
        except ApiError as exc:
            if exc.status != 404:
                raise StoreConflict(exc.explain(f"release reservation {name}", "delete",
                                                DOMAIN_RESERVATIONS.qualified)) from exc
        self._forget(group_id)

    # -- internals ------------------------------------------------------------------------------------

    def _parse(self, obj: Mapping[str, Any]) -> _Entry | None:
        try:
            return _Entry(from_object(obj), copy.deepcopy(dict(obj)))
        except (KeyError, TypeError, ValueError) as exc:
            name = (obj.get("metadata") or {}).get("name") if isinstance(obj, Mapping) else None
            log.warning("skipping malformed DomainReservation %s: %s", name, exc)
            return None

    def _keep(self, entry: _Entry) -> None:
        with self._lock:
            current = self._items.get(entry.reservation.group_id)
            if current is None or _newer_or_same(entry.reservation.version, current.reservation.version):
                self._items[entry.reservation.group_id] = entry
                self._publish()

    def _remember(self, obj: Mapping[str, Any]) -> Reservation:
        entry = self._parse(obj)
        if entry is None:
            raise DecisionError(f"the API server returned a malformed DomainReservation: {dict(obj)!r:.200}")
        self._keep(entry)
        return entry.reservation

    def _forget(self, group_id: str) -> None:
        with self._lock:
            if self._items.pop(group_id, None) is not None:
                self._publish()

    def _publish(self) -> None:
        self._view = MappingProxyType({g: e.reservation for g, e in self._items.items()})
