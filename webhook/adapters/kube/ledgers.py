"""Domain ledgers in the API server: the compare-and-swap writes that keep two replicas from promising one
domain's capacity twice (why two writes, and how a killed replica's promise is repaired:
``webhook.engine.choices``).

Every write of a ledger is guarded by the resourceVersion it was read at: a 409 Conflict means another
replica wrote it first, so the ledger is read again and the arbiter asked again. Each write of a
``reserve`` spends time from one ``Budget`` (the sum of one call's connect and read timeouts, below
kube-scheduler's extender timeout), retrying 429, 5xx and timeouts while it lasts.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

from webhook.adapters.kube.api import Api, ApiError, Timeout
from webhook.adapters.kube.cache import WatchedCache
from webhook.domain.model import Reservation, Segment
from webhook.engine.ports import Arbiter
from webhook.errors import DecisionError, DomainFull, WireError
from webhook.wire import domain_reservation as dr
from webhook.wire.kinds import DOMAIN_RESERVATIONS

log = logging.getLogger(__name__)
S = TypeVar("S", "Entry", "Ledger")

CRD_MISSING = "the DomainReservation CRD is not installed: kubectl apply -k manifests/"
WRITE_ATTEMPTS = 4  # writes of one ledger or reservation per reserve: conflicts and transient faults
BACKOFF = 0.05  # seconds before the first retry after a transient fault; doubles


@dataclass(frozen=True, slots=True)
class Entry:
    """A group's reservation, and its object as the server returned it (a replace keeps what others added)."""

    reservation: Reservation
    obj: dict[str, Any]
    WHAT: ClassVar[str] = "DomainReservation"


@dataclass(frozen=True, slots=True)
class Ledger:
    domain: str
    promises: Mapping[str, Reservation]  # by group id; version "" (a promise is not an object)
    version: str
    obj: dict[str, Any]  # as the server returned it, for a replace that keeps fields others added
    WHAT: ClassVar[str] = "domain ledger"


def decode(obj: Mapping[str, Any]) -> Entry | Ledger:
    """Either shape of DomainReservation; raises ``WireError`` for a malformed one."""
    if dr.is_ledger(obj):
        record = dr.parse_ledger(obj, Reservation)
        return Ledger(record.domain, record.promises, record.version, copy.deepcopy(dict(obj)))
    return Entry(dr.parse_reservation(obj, Reservation, Segment), copy.deepcopy(dict(obj)))


def kept(cache: WatchedCache[Entry | Ledger], answer: Mapping[str, Any], shape: type[S]) -> S:
    """The answer to our own write, kept in the cache; one of another shape, or malformed, is a DecisionError."""
    try:
        value = cache.store(answer)
    except WireError as exc:
        raise DecisionError(f"the API server returned a malformed {shape.WHAT} ({exc}): {dict(answer)!r:.200}") \
            from exc
    if not isinstance(value, shape):
        raise DecisionError(f"the API server returned a malformed {shape.WHAT}: {dict(answer)!r:.200}")
    return value


def transient(exc: ApiError) -> bool:
    """Worth another try inside the same request: no answer, rate-limited, or the server's own trouble."""
    return exc.status in (0, 429) or exc.status >= 500


class Budget:
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


def promised(proposal: Reservation, arbiter: Arbiter | None, ledger: Ledger | None,
             holder: str) -> dict[str, Any] | None:
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
    promise = replace(proposal, version="", placed_at=None, holder=holder or proposal.holder)
    return dr.ledger_object(proposal.domain, [*others, promise], ledger.obj if ledger is not None else None)


class LedgerBook:
    """The ledgers' writes, through the cache the DomainReservation watch feeds (``KubeReservationStore``)."""

    def __init__(self, api: Api, holder: str, cache: WatchedCache[Entry | Ledger]) -> None:
        self._api = api
        self._holder = holder
        self._cache = cache

    def cached(self, domain: str) -> Ledger | None:
        ledger = self._cache.get(dr.ledger_name(domain))
        return ledger if isinstance(ledger, Ledger) else None

    def all(self) -> list[Ledger]:
        return [v for v in self._cache.items().values() if isinstance(v, Ledger)]

    def promise(self, proposal: Reservation, arbiter: Arbiter | None, budget: Budget) -> None:
        """Record the group in its domain's ledger (compare-and-swap on the ledger's resourceVersion)."""
        domain, group = proposal.domain, f"{proposal.namespace}/{proposal.group_name}"
        action = f"promise domain {domain} to group {group}"
        ledger = self.cached(domain)
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            body = promised(proposal, arbiter, ledger, self._holder)
            if body is None:
                return  # already promised to this group
            try:
                if ledger is None:
                    answer = self._api.call("POST", DOMAIN_RESERVATIONS.path(), body=body,
                                            timeout=budget.timeout(action))
                else:
                    answer = self._api.call("PUT", DOMAIN_RESERVATIONS.path(name=dr.ledger_name(domain)), body=body,
                                            timeout=budget.timeout(action))
                self._keep(answer)
                return
            except ApiError as exc:
                if exc.status == 404 and ledger is None:
                    raise DecisionError(CRD_MISSING) from exc
                retry = transient(exc) and attempt < WRITE_ATTEMPTS and budget.pause(attempt)
                if exc.status not in (404, 409) and not retry:
                    raise DecisionError(exc.explain(action, "update", DOMAIN_RESERVATIONS.qualified)
                                        + "; the scheduler retries") from exc
                # Someone else wrote the ledger (409), deleted it (404), or our write may or may not have
                # happened (no answer): read it again and decide again.
                log.debug("ledger of %s: attempt %d: %s", domain, attempt, exc)
                ledger = self._read(domain, budget, action)
        raise DecisionError(f"could not {action}: the domain's ledger kept changing ({WRITE_ATTEMPTS} attempts); "
                            "the scheduler retries")

    def withdraw(self, group_id: str, domain: str, budget: Budget | None = None) -> None:
        """Take the group's promise out of the domain's ledger, re-reading it after a conflict. Best effort:
        a promise left behind when its group adopted another domain is dead at once; one left by a release
        counts until it is older than the proposal TTL (then the next write or housekeeping drops it)."""
        action = f"withdraw the promise of group {group_id} from the ledger of {domain}"
        ledger = self.cached(domain)
        try:
            for _ in range(WRITE_ATTEMPTS):
                if ledger is None or group_id not in ledger.promises:
                    return
                try:
                    keep = [p for g, p in ledger.promises.items() if g != group_id]
                    self.rewrite(ledger, keep, budget.timeout(action) if budget is not None else None)
                    return
                except ApiError as exc:
                    if exc.status not in (404, 409):
                        raise
                ledger = self._read(domain, budget or Budget(self._api.timeout), action)
        except (ApiError, DecisionError) as exc:
            log.info("promise of group %s left in the ledger of %s: %s", group_id, domain, exc)

    def rewrite(self, ledger: Ledger, keep: list[Reservation], timeout: Timeout | None = None) -> None:
        """Replace the ledger's promises with ``keep`` (delete it when empty), guarded by its resourceVersion."""
        path = DOMAIN_RESERVATIONS.path(name=dr.ledger_name(ledger.domain))
        if keep:
            body = dr.ledger_object(ledger.domain, keep, ledger.obj)
            self._keep(self._api.call("PUT", path, body=body, timeout=timeout))
            return
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": ledger.version}}
        try:
            self._api.call("DELETE", path, body=options, timeout=timeout)
        except ApiError as exc:
            if exc.status != 404:
                raise
        self._cache.forget(dr.ledger_name(ledger.domain))

    def _read(self, domain: str, budget: Budget, action: str) -> Ledger | None:
        try:
            answer = self._api.call("GET", DOMAIN_RESERVATIONS.path(name=dr.ledger_name(domain)),
                                    timeout=budget.timeout(action))
        except ApiError as exc:
            if exc.status == 404:
                self._cache.forget(dr.ledger_name(domain))
                return None
            raise DecisionError(exc.explain(action, "get", DOMAIN_RESERVATIONS.qualified)
                                + "; the scheduler retries") from exc
        return self._keep(answer)

    def _keep(self, answer: Mapping[str, Any]) -> Ledger:
        return kept(self._cache, answer, Ledger)
