"""The node domain labeller: keeps ``imex-webhook.io/domain`` on every Node equal to the node's domain.

Why: the admission webhook's required pod affinity uses that key as ``topologyKey`` (and requires it on
the node), and kube-scheduler's InterPodAffinity rejects every node that lacks it. What the label must
say is the pure ``webhook.domain.reading.node_labels``; this module only writes it.

Fed by the Node watch the caches already run: ``tee`` sits beside the ``ClusterStore`` as the Node
watcher's sink, so a watch event costs a parse of the node's labels and a dict update on the watch
thread; the PATCHes happen on the labeller's own thread, at most ``batch`` per pass, so neither a slow
API server nor 5,000 nodes labelled at once ever hold up the watch.

Leader-free and idempotent: every replica (and every gunicorn worker) runs one. Each write is a merge
patch of that one label, guarded by the resourceVersion it was decided on: a labeller whose view is
behind gets 409 instead of writing an old answer, then reads the node again and writes only if the
label is still wrong. Every labeller computes the same value from the same node, so two of them
converge: one writes, the other finds nothing left to do, and nothing flaps.

Failures: 5xx, 429 and no answer (timeout, unreachable) are retried with exponential, jittered back-off;
409 re-reads the node (after a short, growing pause) and decides again; 404 (the node is gone) drops it;
any other 4xx (403: the ClusterRole lacks ``patch`` on nodes) is logged and dropped until the node
changes again. A node whose labels are malformed is skipped. Every outcome is counted in
``imex_webhook_node_domain_labels_total{outcome}``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import Counter

from webhook.adapters.kube.api import MERGE_PATCH, Api, ApiError
from webhook.adapters.kube.watch import Sink
from webhook.domain.policy import Policy
from webhook.domain.reading import node_labels
from webhook.domain.reading.node_labels import LabelState
from webhook.errors import WireError
from webhook.wire.kinds import NODES, Kind, object_key

log = logging.getLogger(__name__)

OUTCOMES = ("set", "removed", "unchanged", "conflict", "retry", "failed", "gone", "malformed", "error")


@dataclass(frozen=True, slots=True)
class LabellerSettings:
    batch: int = 50  # PATCHes (and re-reads) per pass at most
    pause: float = 0.05  # seconds between two full passes: the API server is not flooded at start-up
    backoff_first: float = 0.5  # seconds before the first retry of a failed write
    backoff_max: float = 30.0
    conflict_first: float = 0.05  # seconds before a node that answered 409 is read again


@dataclass(frozen=True, slots=True)
class _Job:
    state: LabelState  # the view the write is decided on
    due: float  # monotonic time it may run
    attempts: int = 0  # failed tries so far (back-off)
    refresh: bool = False  # read the node again before deciding (after a 409)


def _retryable(exc: ApiError) -> bool:
    return exc.status == 0 or exc.status == 429 or exc.status >= 500


class _Tee:
    """A ``Sink`` that hands every Node event to the cache first, then to the labeller."""

    def __init__(self, cache: Sink, labeller: NodeDomainLabeller) -> None:
        self._cache = cache
        self._labeller = labeller

    def replace(self, kind: Kind, objects: Iterable[Mapping[str, Any]]) -> None:
        items = list(objects)
        self._cache.replace(kind, items)
        self._labeller.replace(kind, items)

    def apply(self, kind: Kind, event: str, obj: Mapping[str, Any]) -> None:
        self._cache.apply(kind, event, obj)
        self._labeller.apply(kind, event, obj)

    def mark_synced(self, kind: Kind, synced: bool = True) -> None:
        self._cache.mark_synced(kind, synced)


class NodeDomainLabeller:
    """Watch events in (``replace``/``apply``, or ``tee``), guarded merge PATCHes of one label out."""

    def __init__(self, api: Api, policy: Policy, settings: LabellerSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._policy = policy
        self._settings = settings or LabellerSettings()
        self._clock = clock
        self._cond = threading.Condition()
        self._jobs: dict[str, _Job] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-domain-labels", daemon=True)
        self._warned: set[int] = set()
        # Unregistered: the app registers it in its own registry (one registry per app, see http.metrics).
        self.counter = Counter("imex_webhook_node_domain_labels_total",
                               "Node domain label (imex-webhook.io/domain) writes by outcome", ["outcome"],
                               registry=None)
        for outcome in OUTCOMES:
            self.counter.labels(outcome)

    def tee(self, cache: Sink) -> Sink:
        """The sink for the Node watcher: ``cache`` sees every event first, as before."""
        return _Tee(cache, self)

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stopping.is_set():
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def pending(self) -> dict[str, LabelState]:
        """Nodes waiting for a write (for tests and logs)."""
        with self._cond:
            return {name: job.state for name, job in self._jobs.items()}

    # -- fed by the Node watcher (never raises: the watch must go on) ----------------------------------

    def replace(self, kind: Kind | str, objects: Iterable[Mapping[str, Any]]) -> None:
        present: set[str] = set()
        for obj in objects:
            name = self._offer(obj)
            if name:
                present.add(name)
        with self._cond:
            for name in [n for n in self._jobs if n not in present]:
                del self._jobs[name]

    def apply(self, kind: Kind | str, event: str, obj: Mapping[str, Any]) -> None:
        if event == "DELETED":
            name = object_key(obj)[1]
            with self._cond:
                self._jobs.pop(name, None)
            return
        self._offer(obj)

    def mark_synced(self, kind: Kind | str, synced: bool = True) -> None:
        """Nothing to track: the labeller acts on each node as it is seen."""

    def _offer(self, obj: Mapping[str, Any]) -> str:
        name = object_key(obj)[1]
        try:
            state = node_labels.state_of(obj, self._policy)
        except WireError as exc:
            self._count("malformed")
            log.warning("node domain label: skipping malformed Node %r: %s", name, exc)
            with self._cond:
                self._jobs.pop(name, None)
            return name
        except Exception:  # a bug of ours must not break the watch that feeds the caches
            self._count("error")
            log.exception("node domain label: cannot read Node %r", name)
            return name
        with self._cond:
            old = self._jobs.get(state.node)
            if not state.needed:
                self._jobs.pop(state.node, None)
            elif old is None or old.state != state:
                # A newer view: decide on it at once, unless writes are backing off (the API server fails).
                backing_off = old is not None and old.attempts > 0 and not old.refresh
                due = old.due if old is not None and backing_off else self._clock()
                self._jobs[state.node] = _Job(state, due, old.attempts if old is not None and backing_off else 0)
                self._cond.notify()
        return state.node

    # -- the writer thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        settings = self._settings
        while not self._stopping.is_set():
            batch = self._take()
            for name, job in batch:
                if self._stopping.is_set():
                    return
                try:
                    self._process(name, job)
                except Exception:  # keep the labeller alive; the node is tried again later
                    self._count("error")
                    log.exception("node domain label: writing node %s failed", name)
                    self._requeue(name, replace(job, attempts=job.attempts + 1), self._backoff(job.attempts))
            if len(batch) >= settings.batch:
                self._stopping.wait(settings.pause)

    def _take(self) -> list[tuple[str, _Job]]:
        """Up to ``batch`` due jobs (removed from the queue); waits until one is due or stop()."""
        with self._cond:
            while not self._stopping.is_set():
                now = self._clock()
                due = sorted((job.due, name) for name, job in self._jobs.items() if job.due <= now)
                if due:
                    taken = [(name, self._jobs.pop(name)) for _, name in due[: self._settings.batch]]
                    return taken
                later = min((job.due for job in self._jobs.values()), default=None)
                self._cond.wait(None if later is None else max(0.001, later - now))
            return []

    def _requeue(self, name: str, job: _Job, delay: float) -> None:
        with self._cond:
            if name in self._jobs:
                return  # a newer view of the node arrived meanwhile: that one decides
            self._jobs[name] = replace(job, due=self._clock() + delay)
            self._cond.notify()

    def _backoff(self, attempts: int, first: float | None = None) -> float:
        base = self._settings.backoff_first if first is None else first
        return min(self._settings.backoff_max, base * 2.0 ** min(attempts, 16)) * random.uniform(0.8, 1.2)

    def _process(self, name: str, job: _Job) -> None:
        state = job.state
        if job.refresh:
            try:
                obj = self._api.call("GET", NODES.path(name=name))
            except ApiError as exc:
                self._failed(name, job, exc, "read")
                return
            try:
                state = node_labels.state_of(obj, self._policy)
            except WireError as exc:
                self._count("malformed")
                log.warning("node domain label: skipping malformed Node %r: %s", name, exc)
                return
            if not state.needed:
                self._count("unchanged")  # another labeller (replica) wrote it first
                return
        try:
            self._api.call("PATCH", NODES.path(name=name), body=state.body(), content_type=MERGE_PATCH)
        except ApiError as exc:
            self._failed(name, replace(job, state=state), exc, "patch")
            return
        self._count("removed" if state.value is None else "set")
        log.info("node %s: label %s %s (was %r)", name, node_labels.DOMAIN_LABEL,
                 "removed" if state.value is None else f"= {state.value!r}", state.current)

    def _failed(self, name: str, job: _Job, exc: ApiError, what: str) -> None:
        if exc.status == 404:
            self._count("gone")
            return
        if exc.status == 409:
            # Our view was behind: read the node again and decide on what it says now.
            self._count("conflict")
            self._requeue(name, replace(job, attempts=job.attempts + 1, refresh=True),
                          self._backoff(job.attempts, self._settings.conflict_first))
            return
        if _retryable(exc):
            self._count("retry")
            log.info("node domain label: %s of node %s failed (%s); retrying", what, name, exc)
            self._requeue(name, replace(job, attempts=job.attempts + 1), self._backoff(job.attempts))
            return
        self._count("failed")
        level = logging.DEBUG if exc.status in self._warned else logging.WARNING
        self._warned.add(exc.status)
        verb = "get" if what == "read" else "patch"
        log.log(level, "node domain label: %s", exc.explain(f"{what} node {name}", verb, "nodes"))

    def _count(self, outcome: str) -> None:
        self.counter.labels(outcome).inc()
