"""Domain reservations and domain ledgers kept in the API server, so every replica and restart sees them.

Two shapes of the cluster-scoped ``DomainReservation`` (imex-webhook.io/v1alpha1), told apart by name:
- a group's **reservation**, ``r-`` + the first 32 hex digits of sha256(group id) (a group id is any
  string, an object name is not): ``spec`` holds the group, its domain, size, GPUs per pod and
  timestamps (RFC 3339);
- a domain's **ledger**, ``d-`` + the first 32 hex digits of sha256(domain): ``spec.domain`` and
  ``spec.promises``, one entry per group promised capacity in the domain (the reservation's fields but
  the domain). Why two writes and how a killed replica's promise is repaired: ``webhook.state.reservations``.

``metadata.resourceVersion`` is ``Reservation.version`` (empty for a promise). Reads come from a
watch-fed cache (``all()`` and ``promises()`` never call the API); writes are guarded:
- ``reserve`` read-modify-writes the domain's ledger with its resourceVersion (409 Conflict: re-read,
  ask the arbiter again), then creates the group's reservation (409 AlreadyExists: another replica won;
  read it and adopt it, and withdraw our promise when its domain differs);
- ``placed`` replaces with the resourceVersion it read, re-reading and retrying on 409 Conflict;
- ``release`` deletes with a resourceVersion precondition, so a reservation that another replica has just
  used is not lost; already gone counts as done; then the promise is withdrawn;
- ``prune`` rewrites (or deletes, when empty) ledgers holding dead promises, guarded the same way.
A ``reserve`` spends at most the sum of one call's connect and read timeouts (below kube-scheduler's
extender timeout), retrying 429, 5xx and timeouts while that lasts; what it cannot finish is a
``DecisionError`` that names the step, and the filter reports it in ``Error``.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from webhook.adapters.kube.api import Api, ApiError, Resource, Timeout
from webhook.adapters.kube.watch import SyncFlag
from webhook.domain.model import Reservation
from webhook.errors import DecisionError, StoreConflict
from webhook.state.reservations import Arbiter, DomainFull

log = logging.getLogger(__name__)

DOMAIN_RESERVATIONS = Resource("DomainReservation", "imex-webhook.io", "v1alpha1", "domainreservations", False)
CRD_MISSING = "the DomainReservation CRD is not installed: kubectl apply -k manifests/"
PLACED_RETRIES = 3
WRITE_ATTEMPTS = 4  # writes of one ledger or reservation per reserve: conflicts and transient faults
BACKOFF = 0.05  # seconds before the first retry after a transient fault; doubles
RESERVATION_PREFIX, LEDGER_PREFIX = "r-", "d-"


def object_name(group_id: str) -> str:
    return RESERVATION_PREFIX + hashlib.sha256(group_id.encode()).hexdigest()[:32]


def ledger_name(domain: str) -> str:
    return LEDGER_PREFIX + hashlib.sha256(domain.encode()).hexdigest()[:32]


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _unix(text: Any, field: str) -> float | None:
    if text in (None, ""):
        return None
    if not isinstance(text, str):
        raise ValueError(f"{field}: expected an RFC 3339 string, got {text!r}")
    return datetime.fromisoformat(text).timestamp()


def _spec(res: Reservation, holder: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "groupId": res.group_id, "groupName": res.group_name, "namespace": res.namespace, "domain": res.domain,
        "size": res.size, "gpusPerPod": res.gpus_per_pod, "onePodPerNode": res.one_pod_per_node,
        "holder": holder, "createdAt": _rfc3339(res.created_at),
    }
    if res.placed_at is not None:
        spec["placedAt"] = _rfc3339(res.placed_at)
    return spec


def to_object(res: Reservation, holder: str) -> dict[str, Any]:
    return {"apiVersion": "imex-webhook.io/v1alpha1", "kind": "DomainReservation",
            "metadata": {"name": object_name(res.group_id)}, "spec": _spec(res, holder)}


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


@dataclass(frozen=True, slots=True)
class Ledger:
    domain: str
    promises: Mapping[str, Reservation]  # by group id; version "" (a promise is not an object)
    version: str
    obj: dict[str, Any]  # as the server returned it, for a replace that keeps fields others added


def ledger_object(domain: str, promises: Iterable[Reservation],
                  base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ledger with these promises; ``base`` (the object as read) keeps its metadata for a guarded replace."""
    body = copy.deepcopy(dict(base)) if base is not None else {
        "apiVersion": "imex-webhook.io/v1alpha1", "kind": "DomainReservation",
        "metadata": {"name": ledger_name(domain)}}
    entries = []
    for promise in sorted(promises, key=lambda p: p.group_id):
        entry = _spec(promise, promise.holder)
        del entry["domain"]
        entries.append(entry)
    body["spec"] = {"domain": domain, "promises": entries}
    return body


def ledger_from_object(obj: Mapping[str, Any]) -> Ledger:
    """Raises ValueError (or KeyError/TypeError) for an object that is not a well-formed ledger."""
    spec, meta = obj["spec"], obj.get("metadata") or {}
    domain, entries = spec.get("domain"), spec.get("promises")
    if not isinstance(domain, str) or not domain:
        raise ValueError(f"spec.domain: expected a string, got {domain!r}")
    if not isinstance(entries, list):
        raise ValueError(f"spec.promises: expected a list, got {entries!r}")
    if meta.get("name") and meta["name"] != ledger_name(domain):
        raise ValueError(f"the ledger of domain {domain} must be named {ledger_name(domain)}")
    promises: dict[str, Reservation] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"spec.promises[{i}]: expected an object")
        promise = from_object({"spec": {**entry, "domain": domain}})
        promises[promise.group_id] = promise
    return Ledger(domain, MappingProxyType(promises), str(meta.get("resourceVersion") or ""), copy.deepcopy(dict(obj)))


def _newer_or_same(new: str, old: str) -> bool:
    # resourceVersions are opaque, but etcd's are increasing integers; a watch event that arrives after
    # our own write's answer must not roll the cache back. Anything else: trust the newest arrival.
    if new.isdigit() and old.isdigit():
        return int(new) >= int(old)
    return True


def _transient(exc: ApiError) -> bool:
    """Worth another try inside the same request: no answer, rate-limited, or the server's own trouble."""
    return exc.status in (0, 429) or exc.status >= 500


@dataclass(frozen=True, slots=True)
class _Entry:
    reservation: Reservation
    obj: dict[str, Any]  # as the server returned it, for a replace that keeps fields others added


class _Budget:
    """The time one ``reserve`` may spend, and each call's timeout within it."""

    def __init__(self, api_timeout: Timeout) -> None:
        self._timeout = api_timeout
        self._deadline = time.monotonic() + sum(api_timeout)

    def left(self) -> float:
        return self._deadline - time.monotonic()

    def timeout(self, action: str) -> Timeout:
        left = self.left()
        if left <= 0.05:
            raise DecisionError(f"could not {action}: out of time (the API server answered slowly or not at all); "
                                "the scheduler retries")
        return (min(self._timeout[0], left), min(self._timeout[1], left))

    def pause(self, attempt: int) -> bool:
        """Sleep before retry ``attempt`` (1, 2...); False when there is no time left for it."""
        wait = BACKOFF * 2 ** (attempt - 1)
        if self.left() - wait < 0.1:
            return False
        time.sleep(wait)
        return True


class KubeReservationStore(SyncFlag):
    """``ReservationStore`` on DomainReservation objects; also the ``Sink`` of their watcher."""

    def __init__(self, api: Api, holder: str) -> None:
        super().__init__()
        self._api = api
        self._holder = holder
        self._lock = threading.Lock()
        self._items: dict[str, _Entry] = {}
        self._ledgers: dict[str, Ledger] = {}
        # What all() and promises() hand out, rebuilt on each change: every filter request reads them.
        self._view: Mapping[str, Reservation] = MappingProxyType({})
        self._promises: Mapping[str, Mapping[str, Reservation]] = MappingProxyType({})

    # -- fed by the watcher ---------------------------------------------------------------------------

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        entries, ledgers = [], []
        for obj in objects:
            parsed = self._parse(obj)
            if isinstance(parsed, Ledger):
                ledgers.append(parsed)
            elif parsed is not None:
                entries.append(parsed)
        with self._lock:
            self._items = {e.reservation.group_id: e for e in entries}
            self._ledgers = {led.domain: led for led in ledgers}
            self._publish()

    def apply(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        parsed = self._parse(obj)
        if isinstance(parsed, Ledger):
            if event == "DELETED":
                self._drop_ledger(parsed.domain)
            else:
                self._keep_ledger(parsed)
        elif parsed is not None:
            if event == "DELETED":
                self._forget(parsed.reservation.group_id)
            else:
                self._keep(parsed)

    # -- ReservationStore -----------------------------------------------------------------------------

    def all(self) -> Mapping[str, Reservation]:
        return self._view

    def promises(self) -> Mapping[str, Mapping[str, Reservation]]:
        return self._promises

    def reserve(self, proposal: Reservation, arbiter: Arbiter | None = None) -> Reservation:
        with self._lock:
            cached = self._items.get(proposal.group_id)
        if cached is not None:
            return cached.reservation
        budget = _Budget(self._api.timeout)
        self._promise(proposal, arbiter, budget)
        return self._create(proposal, budget)

    def placed(self, group_id: str, when: float) -> None:
        with self._lock:
            entry = self._items.get(group_id)
        name = object_name(group_id)
        for attempt in range(1 + PLACED_RETRIES):
            try:
                if entry is None or attempt:
                    parsed = self._parse(self._api.call("GET", DOMAIN_RESERVATIONS.path(name=name)))
                    entry = parsed if isinstance(parsed, _Entry) else None
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
        if entry is not None:
            self._withdraw(group_id, entry.reservation.domain)

    def prune(self, live: Callable[[Reservation], bool]) -> int:
        with self._lock:
            ledgers = list(self._ledgers.values())
        dropped = 0
        for ledger in ledgers:
            keep = [p for p in ledger.promises.values() if live(p)]
            if len(keep) == len(ledger.promises):
                continue
            try:
                self._rewrite(ledger, keep)
            except ApiError as exc:
                log.info("ledger of domain %s not pruned this round: %s", ledger.domain, exc)
                continue
            dropped += len(ledger.promises) - len(keep)
        return dropped

    # -- the two writes of reserve ----------------------------------------------------------------------

    def _promise(self, proposal: Reservation, arbiter: Arbiter | None, budget: _Budget) -> None:
        """Record the group in its domain's ledger (compare-and-swap on the ledger's resourceVersion)."""
        domain, group = proposal.domain, f"{proposal.namespace}/{proposal.group_name}"
        action = f"promise domain {domain} to group {group}"
        with self._lock:
            ledger: Ledger | None = self._ledgers.get(domain)
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            body = self._promised(proposal, arbiter, ledger)
            if body is None:
                return  # already promised to this group
            try:
                if ledger is None:
                    answer = self._api.call("POST", DOMAIN_RESERVATIONS.path(), body=body,
                                            timeout=budget.timeout(action))
                else:
                    answer = self._api.call("PUT", DOMAIN_RESERVATIONS.path(name=ledger_name(domain)), body=body,
                                            timeout=budget.timeout(action))
                self._keep_ledger(self._ledger(answer))
                return
            except ApiError as exc:
                if exc.status == 404 and ledger is None:
                    raise DecisionError(CRD_MISSING) from exc
                retry = _transient(exc) and attempt < WRITE_ATTEMPTS and budget.pause(attempt)
                if exc.status not in (404, 409) and not retry:
                    raise DecisionError(exc.explain(action, "update", DOMAIN_RESERVATIONS.qualified)
                                        + "; the scheduler retries") from exc
                # Someone else wrote the ledger (409), deleted it (404), or our write may or may not have
                # happened (no answer): read it again and decide again.
                log.debug("ledger of %s: attempt %d: %s", domain, attempt, exc)
                ledger = self._read_ledger(domain, budget, action)
        raise DecisionError(f"could not {action}: the domain's ledger kept changing ({WRITE_ATTEMPTS} attempts); "
                            "the scheduler retries")

    def _promised(self, proposal: Reservation, arbiter: Arbiter | None, ledger: Ledger | None) -> dict[str, Any] | None:
        """The ledger with the group's promise in it, or None when it is there already."""
        current = ledger.promises if ledger is not None else {}
        own = current.get(proposal.group_id)
        # Dead promises are dropped on the way (the repair rule), live ones of other groups kept.
        others = [p for g, p in current.items() if g != proposal.group_id and (arbiter is None or arbiter.live(p))]
        if own is not None and (arbiter is None or arbiter.live(own)):
            if own.created_at >= proposal.created_at:
                return None
            # A renewal of the group's own live promise: no new capacity, nothing to check.
        elif arbiter is not None and not arbiter.fits({p.group_id: p for p in others}):
            raise DomainFull(proposal.domain, f"{proposal.namespace}/{proposal.group_name}")
        promise = replace(proposal, version="", placed_at=None, holder=self._holder or proposal.holder)
        return ledger_object(proposal.domain, [*others, promise], ledger.obj if ledger is not None else None)

    def _create(self, proposal: Reservation, budget: _Budget) -> Reservation:
        """Create the group's reservation; on AlreadyExists adopt the one that is there."""
        group = f"{proposal.namespace}/{proposal.group_name}"
        name = object_name(proposal.group_id)
        action = f"store the domain reservation of group {group}"
        body = to_object(proposal, self._holder or proposal.holder)
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                return self._remember(self._api.call("POST", DOMAIN_RESERVATIONS.path(), body=body,
                                                     timeout=budget.timeout(action)))
            except ApiError as exc:
                if exc.status == 404:
                    raise DecisionError(CRD_MISSING) from exc
                if exc.status != 409:
                    if _transient(exc) and attempt < WRITE_ATTEMPTS and budget.pause(attempt):
                        continue  # after no answer the create may have happened: the retry's 409 tells
                    raise DecisionError(exc.explain(action, "create", DOMAIN_RESERVATIONS.qualified)
                                        + f"; domain {proposal.domain} stays promised to the group and the "
                                        "scheduler retries") from exc
            # 409 AlreadyExists: another replica (or our own earlier attempt) won; its choice holds.
            try:
                winner = self._remember(self._api.call("GET", DOMAIN_RESERVATIONS.path(name=name),
                                                       timeout=budget.timeout(action)))
            except ApiError as exc:
                if exc.status == 404:
                    continue  # released between its create and our read: try to create again
                raise DecisionError(exc.explain(f"read the domain reservation of group {group}", "get",
                                                DOMAIN_RESERVATIONS.qualified) + "; the scheduler retries") from exc
            if winner.group_id != proposal.group_id:
                raise DecisionError(f"reservation object {name} belongs to group {winner.group_id}, not "
                                    f"{proposal.group_id} (a name collision); delete it to proceed")
            if winner.domain != proposal.domain:
                self._withdraw(proposal.group_id, proposal.domain, budget)
            return winner
        raise DecisionError(f"could not {action}: it was deleted repeatedly while we stored it; the scheduler retries")

    def _read_ledger(self, domain: str, budget: _Budget, action: str) -> Ledger | None:
        try:
            answer = self._api.call("GET", DOMAIN_RESERVATIONS.path(name=ledger_name(domain)),
                                    timeout=budget.timeout(action))
        except ApiError as exc:
            if exc.status == 404:
                self._drop_ledger(domain)
                return None
            raise DecisionError(exc.explain(action, "get", DOMAIN_RESERVATIONS.qualified)
                                + "; the scheduler retries") from exc
        ledger = self._ledger(answer)
        self._keep_ledger(ledger)
        return ledger

    def _withdraw(self, group_id: str, domain: str, budget: _Budget | None = None) -> None:
        """Take the group's promise out of the domain's ledger, re-reading it after a conflict. Best effort:
        a promise left behind when its group adopted another domain is dead at once; one left by a release
        counts until it is older than the proposal TTL (then the next write or housekeeping drops it)."""
        action = f"withdraw the promise of group {group_id} from the ledger of {domain}"
        with self._lock:
            ledger = self._ledgers.get(domain)
        try:
            for _ in range(WRITE_ATTEMPTS):
                if ledger is None or group_id not in ledger.promises:
                    return
                try:
                    keep = [p for g, p in ledger.promises.items() if g != group_id]
                    self._rewrite(ledger, keep, budget.timeout(action) if budget is not None else None)
                    return
                except ApiError as exc:
                    if exc.status not in (404, 409):
                        raise
                ledger = self._read_ledger(domain, budget or _Budget(self._api.timeout), action)
        except (ApiError, DecisionError) as exc:
            log.info("promise of group %s left in the ledger of %s: %s", group_id, domain, exc)

    def _rewrite(self, ledger: Ledger, keep: list[Reservation], timeout: Timeout | None = None) -> None:
        """Replace the ledger's promises with ``keep`` (delete it when empty), guarded by its resourceVersion."""
        path = DOMAIN_RESERVATIONS.path(name=ledger_name(ledger.domain))
        if keep:
            body = ledger_object(ledger.domain, keep, ledger.obj)
            self._keep_ledger(self._ledger(self._api.call("PUT", path, body=body, timeout=timeout)))
            return
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": ledger.version}}
        try:
            self._api.call("DELETE", path, body=options, timeout=timeout)
        except ApiError as exc:
            if exc.status != 404:
                raise
        self._drop_ledger(ledger.domain)

    # -- internals ------------------------------------------------------------------------------------

    def _parse(self, obj: Mapping[str, Any]) -> _Entry | Ledger | None:
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj, Mapping) else None
        try:
            if isinstance(name, str) and name.startswith(LEDGER_PREFIX):
                return ledger_from_object(obj)
            return _Entry(from_object(obj), copy.deepcopy(dict(obj)))
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("skipping malformed DomainReservation %s: %s", name, exc)
            return None

    def _ledger(self, obj: Mapping[str, Any]) -> Ledger:
        parsed = self._parse(obj)
        if not isinstance(parsed, Ledger):
            raise DecisionError(f"the API server returned a malformed domain ledger: {dict(obj)!r:.200}")
        return parsed

    def _keep(self, entry: _Entry) -> None:
        with self._lock:
            current = self._items.get(entry.reservation.group_id)
            if current is None or _newer_or_same(entry.reservation.version, current.reservation.version):
                self._items[entry.reservation.group_id] = entry
                self._publish()

    def _keep_ledger(self, ledger: Ledger) -> None:
        with self._lock:
            current = self._ledgers.get(ledger.domain)
            if current is None or _newer_or_same(ledger.version, current.version):
                self._ledgers[ledger.domain] = ledger
                self._publish()

    def _remember(self, obj: Mapping[str, Any]) -> Reservation:
        entry = self._parse(obj)
        if not isinstance(entry, _Entry):
            raise DecisionError(f"the API server returned a malformed DomainReservation: {dict(obj)!r:.200}")
        self._keep(entry)
        return entry.reservation

    def _forget(self, group_id: str) -> None:
        with self._lock:
            if self._items.pop(group_id, None) is not None:
                self._publish()

    def _drop_ledger(self, domain: str) -> None:
        with self._lock:
            if self._ledgers.pop(domain, None) is not None:
                self._publish()

    def _publish(self) -> None:
        self._view = MappingProxyType({g: e.reservation for g, e in self._items.items()})
        self._promises = MappingProxyType({d: led.promises for d, led in self._ledgers.items()})
