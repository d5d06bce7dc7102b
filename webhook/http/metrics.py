"""Prometheus metrics, one registry per app so that tests and several apps in one process do not collide."""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.domain.health import HEALTHS
from webhook.domain.views.figures import FIT_SIZES, WAITING_REASONS, domain_healths, largest_group_fits
from webhook.engine.engine import Engine
from webhook.engine.occurrences import DROP_REASONS
from webhook.engine.ports import Backend
from webhook.wire.fabric_attachment import Phase

log = logging.getLogger(__name__)

# The verb label of each path served; anything else is "other", so that no caller can grow the label set.
VERBS = {f"/{verb}": verb for verb in
         ("filter", "prioritize", "bind", "preempt", "mutate", "healthz", "readyz", "metrics", "inspect", "ui")}
OTHER = "other"


def verb_of(path: str) -> str:
    return VERBS.get(path, OTHER)


# Extender calls sit on the scheduler's serial cycle: the interesting range is sub-millisecond to seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _StateCollector(Collector):
    """Reads cache sync state and reservation counts at scrape time instead of on every change."""

    def __init__(self, sync_state: Callable[[], dict[str, bool]], reservations: Callable[[], dict[str, int]]):
        self._sync_state = sync_state
        self.reservations = reservations

    def collect(self):  # type: ignore[no-untyped-def]
        synced = GaugeMetricFamily("imex_webhook_cache_synced", "1 when the cache of this kind finished its "
                                   "initial list", labels=["kind"])
        for kind, ok in sorted(self._sync_state().items()):
            synced.add_metric([kind], 1.0 if ok else 0.0)
        yield synced
        res = GaugeMetricFamily("imex_webhook_reservations", "Domain reservations by state", labels=["state"])
        for state, n in sorted(self.reservations().items()):
            res.add_metric([state], float(n))
        yield res


# Why the server drops a connection (webhook.serving.closing, webhook.serving.conn_limits).
CONNECTION_DROP_REASONS = ("handshake-timeout", "header-timeout", "body-timeout", "write-timeout", "pipelined",
                           "evicted-idle", "evicted-idle-source", "refused-full", "refused-source-full",
                           "refused-caller")


class Metrics:
    def __init__(self, sync_state: Callable[[], dict[str, bool]],
                 reservations: Callable[[], dict[str, int]] = dict) -> None:
        """``reservations``: the counts by state until ``watch_cluster`` gives the engine's."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("imex_webhook_requests_total", "HTTP requests by verb and status code",
                                ["verb", "code"], registry=self.registry)
        self.latency = Histogram("imex_webhook_request_duration_seconds", "Time to answer, by verb",
                                 ["verb"], buckets=_BUCKETS, registry=self.registry)
        self.decisions = Counter("imex_webhook_decisions_total", "Decisions by verb, outcome and reason class",
                                 ["verb", "outcome", "reason"], registry=self.registry)
        self.internal_errors = Counter("imex_webhook_internal_errors_total",
                                       "Requests we failed to serve because of our own fault", ["verb"],
                                       registry=self.registry)
        self.cache_rejected = Gauge("imex_webhook_cache_rejected_objects",
                                    "Objects the cache skips now because they could not be parsed, by kind",
                                    ["kind"], registry=self.registry)
        self.attach_seconds = Histogram("imex_webhook_fabric_attach_duration_seconds",
                                        "Attach before bind, from the first bind call to Ready, by outcome",
                                        ["outcome"], buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120),
                                        registry=self.registry)
        self.cleanups = Counter("imex_webhook_fabric_cleanups_total",
                                "Reconciler actions: released, rolled-back, detached, orphan-detached (a "
                                "leaked block recovered)", ["action"], registry=self.registry)
        self.connections_dropped = Counter(
            "imex_webhook_connections_dropped_total", "Connections the server dropped, by why: a missed "
            "deadline (handshake, header, body, write), too many pipelined requests, or a connection cap "
            "(docs/HARDENING.md, \"Connection limits\")", ["reason"], registry=self.registry)
        # Every series from the start: a rate over a series that appears with its first drop misses that drop.
        for reason in CONNECTION_DROP_REASONS:
            self.connections_dropped.labels(reason)
        self._state = _StateCollector(sync_state, reservations)
        self.registry.register(self._state)

    def count(self, path: str, status: int) -> None:
        """One reply, whoever produced it: the app's views and error handlers, or the server refusing a
        request before the app saw it (a body over --max-body, a malformed head)."""
        self.requests.labels(verb_of(path), str(status)).inc()

    def count_refused(self, received: bytes, status: int) -> None:
        """A reply the server wrote itself, counted under the path of the request line it had received."""
        # A request line refused for its length arrives cut short, without its HTTP version: the path
        # before the query is still whole, and it names the route.
        parts = received.split(b"\r\n", 1)[0].split(b" ")
        target = parts[1].split(b"?", 1)[0].decode("latin-1") if 2 <= len(parts) <= 3 else ""
        self.count("/" + target.lstrip("/") if target else "", status)  # "//filter" is /filter to the app

    # The fabric Observer protocol (webhook.engine.ports): the attacher and the reconciler report here.
    def attach_done(self, outcome: str, seconds: float) -> None:
        self.attach_seconds.labels(outcome).observe(seconds)

    def cleanup(self, what: str) -> None:
        self.cleanups.labels(what).inc()

    # -- The operator's view (docs/OPERATING.md): cluster state read at scrape time, never on a request -----
    _view: _ClusterView | None = None

    def watch_cluster(self, engine: Engine, backend: Backend) -> None:
        """Export reservations, domains, waiting groups, expired reservations, attachments and, where
        ``backend`` has watches (Kubernetes mode), how fresh each cache is."""
        def reservation_counts() -> dict[str, int]:
            return {"reserved": len(engine.reservations.all()), "proposed": len(engine.proposed(engine.clock()))}

        self._state.reservations = reservation_counts
        view = self._cluster_view()
        view.engine = engine
        view.watch_health = backend.watch_health
        self.watch_events(engine.events.dropped)

    def watch_fabric(self, unaccounted: Callable[[], int]) -> None:
        """Export the reconciler's count of composed blocks that no attachment accounts for."""
        self._cluster_view().unaccounted = unaccounted

    def _cluster_view(self) -> _ClusterView:
        if self._view is None:
            self._view = _ClusterView()
            self.registry.register(self._view)
        return self._view

    # -- Kubernetes Events (webhook.adapters.kube.events): what the recorder could not deliver --------------
    _events: _DroppedEvents | None = None

    def watch_events(self, dropped: Callable[[], Mapping[str, int]]) -> None:
        if self._events is None:
            self._events = _DroppedEvents()
            self.registry.register(self._events)
        self._events.dropped = dropped


class _DroppedEvents(Collector):
    def __init__(self) -> None:
        self.dropped: Callable[[], Mapping[str, int]] = dict

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("imex_webhook_events_dropped", "Kubernetes Events not written, by why: "
                                     "queue-full, rate-limited, rejected (4xx), unavailable (API server failing "
                                     "after retries)", labels=["reason"])
        counts = self.dropped()
        for reason in DROP_REASONS:
            family.add_metric([reason], float(counts.get(reason, 0)))
        yield family


# Per-domain GPU states (label values of imex_webhook_domain_gpus).
DOMAIN_STATES = ("free", "used", "reserved", "attachable")


class _ClusterView(Collector):
    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.watch_health: Callable[[], Mapping[str, tuple[float, bool]]] | None = None
        self.unaccounted: Callable[[], int] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        domains = GaugeMetricFamily(
            "imex_webhook_domain_gpus", "GPUs of each domain: free (local, not held by pods or attaches), used, "
            "reserved (promised to placed-to-be members and spare nodes of reserved groups), attachable (fabric)",
            labels=["domain", "state"])
        waiting = GaugeMetricFamily("imex_webhook_groups_waiting", "Groups with pods still to place, by why they "
                                    "wait (docs/OPERATING.md)", labels=["reason"])
        expired = GaugeMetricFamily("imex_webhook_reservations_expired", "Stored reservations past their TTL with "
                                    "no member placed since; housekeeping releases them")
        phases = GaugeMetricFamily("imex_webhook_fabric_attachments", "Fabric attachments by phase", labels=["phase"])
        stalled = GaugeMetricFamily("imex_webhook_cache_stalled", "1 while the watch of this kind makes no progress "
                                    "(readiness fails with it)", labels=["kind"])
        age = GaugeMetricFamily("imex_webhook_cache_progress_age_seconds", "Seconds since the watch of this kind "
                                "last made progress (a list, an event, a bookmark, a watch renewed)", labels=["kind"])
        leaked = GaugeMetricFamily("imex_webhook_fabric_unaccounted_blocks", "Composed fabric blocks no attachment "
                                   "accounts for (detached after a grace period; reported by the reconciler's leader)")
        fits = GaugeMetricFamily("imex_webhook_domain_fit_pods", "Pods of gpus_per_pod GPUs one new group could be "
                                 "given in the domain now, other groups' reservations taken out (the extender's own "
                                 "placement)", labels=["domain", "gpus_per_pod"])
        health = GaugeMetricFamily("imex_webhook_domain_health", "1 for the domain's health now, 0 for the others: "
                                   "healthy, degraded (a node's NVLink fabric impaired), unhealthy (no node takes a "
                                   "member)", labels=["domain", "health"])
        spares = GaugeMetricFamily("imex_webhook_spare_nodes", "Spare nodes live reservations hold in the domain for "
                                   "their groups' replacements", labels=["domain"])
        largest = GaugeMetricFamily("imex_webhook_largest_group_fits", "The most pods of gpus_per_pod GPUs one new "
                                    "group could be given in any one domain now", labels=["gpus_per_pod"])
        # One failing source must not cost the scrape the others: its families go out without samples.
        _guarded("cluster state", self._cluster, domains, waiting, expired, phases, health, spares)
        _guarded("watch health", self._watches, age, stalled)
        _guarded("unaccounted fabric blocks", self._fabric, leaked)
        _guarded("free slots", self._fits, fits, largest)
        yield from (domains, waiting, expired, phases, health, spares, stalled, age, leaked, fits, largest)

    def _cluster(self, domains: GaugeMetricFamily, waiting: GaugeMetricFamily, expired: GaugeMetricFamily,
                 phases: GaugeMetricFamily, health: GaugeMetricFamily, spares: GaugeMetricFamily) -> None:
        engine = self.engine
        if engine is None:
            return
        now = engine.clock()
        snapshot = engine.snapshot()
        for domain, gpus in sorted(engine.domain_figures(now).items()):
            by_state = {"free": gpus.free, "used": gpus.used, "reserved": gpus.reserved, "attachable": gpus.attachable}
            for state in DOMAIN_STATES:
                domains.add_metric([domain, state], float(by_state[state]))
        for domain, found in sorted(domain_healths(snapshot).items()):
            for value in HEALTHS:  # an enum: every value a series, 1 for the current one
                health.add_metric([domain, value], 1.0 if found.health == value else 0.0)
        for domain, count in sorted(engine.spare_nodes(now).items()):
            spares.add_metric([domain], float(count))
        reasons = engine.waiting_groups(now)
        for reason in WAITING_REASONS:
            waiting.add_metric([reason], float(reasons[reason]))
        expired.add_metric([], float(engine.expired_reservations(now)))
        by_phase = Tally(a.phase for a in snapshot.attachments.values())
        for phase in Phase:
            phases.add_metric([phase.value], float(by_phase[phase]))

    def _fits(self, fits: GaugeMetricFamily, largest: GaugeMetricFamily) -> None:
        engine = self.engine
        if engine is None:
            return
        by_domain = engine.fit_pods(engine.clock())  # once per scrape, every size at once
        for domain, by_size in sorted(by_domain.items()):
            for gpus in FIT_SIZES:
                fits.add_metric([domain, str(gpus)], float(by_size[gpus]))
        for gpus, pods in largest_group_fits(by_domain).items():
            largest.add_metric([str(gpus)], float(pods))

    def _watches(self, age: GaugeMetricFamily, stalled: GaugeMetricFamily) -> None:
        if self.watch_health is not None:
            for kind, (seconds, is_stalled) in sorted(self.watch_health().items()):
                age.add_metric([kind], seconds)
                stalled.add_metric([kind], 1.0 if is_stalled else 0.0)

    def _fabric(self, leaked: GaugeMetricFamily) -> None:
        if self.unaccounted is not None:
            leaked.add_metric([], float(self.unaccounted()))


def _guarded(what: str, fill: Callable[..., None], *families: GaugeMetricFamily) -> None:
    try:
        fill(*families)
    except Exception:
        log.exception("/metrics: could not read %s; its metrics are left out of this scrape", what)
        for family in families:
            family.samples.clear()
