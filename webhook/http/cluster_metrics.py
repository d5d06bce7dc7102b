"""The operator's view in /metrics (docs/OPERATING.md): the cluster's state, read at scrape time.

``webhook.http.metrics.Metrics`` counts what happens as it happens; this collector reads what is, from the
engine's read methods, once per scrape. It does no arithmetic of its own over reservations: the engine says
what counts as reserved, proposed or expired.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from webhook.domain.health import HEALTHS
from webhook.domain.views.figures import FIT_SIZES, WAITING_REASONS, domain_healths, largest_group_fits
from webhook.engine.engine import Engine
from webhook.engine.occurrences import DROP_REASONS
from webhook.wire.fabric_attachment import Phase

log = logging.getLogger(__name__)

# Per-domain GPU states (label values of imex_webhook_domain_gpus).
DOMAIN_STATES = ("free", "used", "reserved", "attachable")


class ClusterMetrics(Collector):
    """What /metrics reads from the cluster at scrape time, never on a request: the caches' sync state,
    reservations by state, domains, waiting groups, expired reservations, attachments, free slots, the
    watches' health, composed blocks no attachment accounts for, and the Events not delivered.

    Built once the engine exists (``webhook.http.app.create_app``). ``watch_health``: per watched kind, seconds
    since its last progress and whether it is stalled (empty where nothing is watched); ``unaccounted``: the
    fabric reconciler's count of leaked blocks (None without a fabric: the family has no samples)."""

    def __init__(self, engine: Engine, watch_health: Callable[[], Mapping[str, tuple[float, bool]]] = dict,
                 unaccounted: Callable[[], int] | None = None) -> None:
        self.engine = engine
        self.watch_health = watch_health
        self.unaccounted = unaccounted

    def collect(self) -> Iterator[Metric]:
        yield from self._state()
        yield self._dropped_events()
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
        held = GaugeMetricFamily("imex_webhook_held_gpus", "GPUs of the domain held for a group that has waited "
                                 "longest, kept from new groups as they free (docs/SCHEDULER.md, \"Holds and "
                                 "backfill\")", labels=["domain"])
        _guarded("cluster state", self._cluster, domains, waiting, expired, phases, health, spares)
        _guarded("holds", self._holds, held)
        _guarded("watch health", self._watches, age, stalled)
        _guarded("unaccounted fabric blocks", self._fabric, leaked)
        _guarded("free slots", self._fits, fits, largest)
        yield from (domains, waiting, expired, phases, health, spares, held, stalled, age, leaked, fits, largest)

    def _state(self) -> Iterator[GaugeMetricFamily]:
        engine = self.engine
        synced = GaugeMetricFamily("imex_webhook_cache_synced", "1 when the cache of this kind finished its "
                                   "initial list", labels=["kind"])
        for kind, ok in sorted(engine.store.sync_state().items()):
            synced.add_metric([kind], 1.0 if ok else 0.0)
        yield synced
        res = GaugeMetricFamily("imex_webhook_reservations", "Domain reservations by state", labels=["state"])
        for state, n in sorted(engine.reservation_counts(engine.clock()).items()):
            res.add_metric([state], float(n))
        yield res

    def _dropped_events(self) -> CounterMetricFamily:
        family = CounterMetricFamily("imex_webhook_events_dropped", "Kubernetes Events not written, by why: "
                                     "queue-full, rate-limited, rejected (4xx), unavailable (API server failing "
                                     "after retries)", labels=["reason"])
        counts = self.engine.events.dropped()
        for reason in DROP_REASONS:
            family.add_metric([reason], float(counts.get(reason, 0)))
        return family

    def _cluster(self, domains: GaugeMetricFamily, waiting: GaugeMetricFamily, expired: GaugeMetricFamily,
                 phases: GaugeMetricFamily, health: GaugeMetricFamily, spares: GaugeMetricFamily) -> None:
        engine = self.engine
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

    def _holds(self, held: GaugeMetricFamily) -> None:
        for domain, gpus in sorted(self.engine.held_gpus(self.engine.clock()).items()):
            held.add_metric([domain], float(gpus))

    def _fits(self, fits: GaugeMetricFamily, largest: GaugeMetricFamily) -> None:
        engine = self.engine
        by_domain = engine.fit_pods(engine.clock())  # once per scrape, every size at once
        for domain, by_size in sorted(by_domain.items()):
            for gpus in FIT_SIZES:
                fits.add_metric([domain, str(gpus)], float(by_size[gpus]))
        for gpus, pods in largest_group_fits(by_domain).items():
            largest.add_metric([str(gpus)], float(pods))

    def _watches(self, age: GaugeMetricFamily, stalled: GaugeMetricFamily) -> None:
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
