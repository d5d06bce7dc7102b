"""Prometheus metrics, one registry per app so that tests and several apps in one process do not collide.

``Metrics`` is the observer, built first: the registry and the counters every part reports to as it works
(requests, decisions, fabric attaches and clean-ups, dropped connections, groups' waits). What is read from
the cluster at scrape time is ``webhook.http.cluster_metrics.ClusterMetrics``, a collector built once the engine exists.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.domain.groups.waits import CLASSES

log = logging.getLogger(__name__)

# The verb label of each path served; anything else is "other", so that no caller can grow the label set.
VERBS = {f"/{verb}": verb for verb in
         ("filter", "prioritize", "bind", "preempt", "mutate", "healthz", "readyz", "metrics", "inspect", "ui")}
OTHER = "other"


def verb_of(path: str) -> str:
    return VERBS.get(path, OTHER)


# Extender calls sit on the scheduler's serial cycle: the interesting range is sub-millisecond to seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


# A group's wait to run whole (webhook.domain.groups.waits): seconds for a group that finds room, up to a day
# and more for a large one held behind running groups' walltimes (docs/SCHEDULER.md, "Holds and backfill").
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 16 * 3600,
                24 * 3600, 48 * 3600)


# Why the server drops a connection (webhook.serving.closing, webhook.serving.conn_limits).
CONNECTION_DROP_REASONS = ("handshake-timeout", "header-timeout", "body-timeout", "write-timeout", "pipelined",
                           "evicted-idle", "evicted-idle-source", "refused-full", "refused-source-full",
                           "refused-caller")


class Metrics:
    def __init__(self) -> None:
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
        self.group_wait = Histogram(
            "imex_webhook_group_wait_seconds", "Seconds from a group's earliest member's creation to the bind of "
            "its last member (the group runs whole), by size class in pods; a job in segments over several "
            "domains is multi-domain", ["size_class"], buckets=WAIT_BUCKETS, registry=self.registry)
        # Every series from the start: a rate over a series that appears with its first drop misses that drop.
        for reason in CONNECTION_DROP_REASONS:
            self.connections_dropped.labels(reason)
        for size_class in CLASSES:
            self.group_wait.labels(size_class)

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

    # The WaitObserver protocol (webhook.engine.ports): the bind of a group's last member reports here.
    def group_waited(self, size_class: str, seconds: float) -> None:
        self.group_wait.labels(size_class).observe(seconds)
