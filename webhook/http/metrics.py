"""Prometheus metrics, one registry per app so that tests and several apps in one process do not collide."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# Extender calls sit on the scheduler's serial cycle: the interesting range is sub-millisecond to seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _StateCollector(Collector):
    """Reads cache sync state and reservation counts at scrape time instead of on every change."""

    def __init__(self, sync_state: Callable[[], dict[str, bool]], reservations: Callable[[], dict[str, int]]):
        self._sync_state = sync_state
        self._reservations = reservations

    def collect(self):  # type: ignore[no-untyped-def]
        synced = GaugeMetricFamily("imex_webhook_cache_synced", "1 when the cache of this kind finished its "
                                   "initial list", labels=["kind"])
        for kind, ok in sorted(self._sync_state().items()):
            synced.add_metric([kind], 1.0 if ok else 0.0)
        yield synced
        res = GaugeMetricFamily("imex_webhook_reservations", "Domain reservations by state", labels=["state"])
        for state, n in sorted(self._reservations().items()):
            res.add_metric([state], float(n))
        yield res


class Metrics:
    def __init__(self, sync_state: Callable[[], dict[str, bool]],
                 reservations: Callable[[], dict[str, int]]) -> None:
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
        self.registry.register(_StateCollector(sync_state, reservations))

    # The fabric Observer protocol (webhook.state.fabric): the attacher and the reconciler report here.
    def attach_done(self, outcome: str, seconds: float) -> None:
        self.attach_seconds.labels(outcome).observe(seconds)

    def cleanup(self, what: str) -> None:
        self.cleanups.labels(what).inc()
