"""What one ``serve`` worker serves, put together in order: the cluster source, the metrics observer, the
fabric parts, the engine, then the app with the cluster's view of /metrics, and the upkeep worker.

Each part is built complete and given what it needs at construction; nothing is added to a part after it
was built. The embedded mode's extras (a cluster that learns its pods from the scheduler's requests,
simulated node agents) come from the concrete embedded cluster built here, not from the ``Backend`` port.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from flask import Flask
from prometheus_client.registry import Collector

from webhook.adapters import embedded as embedded_backend
from webhook.adapters.embedded import EmbeddedBackend
from webhook.domain.policy import Policy
from webhook.engine.engine import Engine
from webhook.engine.ports import Backend
from webhook.engine.requeue import Requeuer
from webhook.errors import SettingsError
from webhook.http.app import always_ready, create_app
from webhook.http.common import Check
from webhook.http.metrics import Metrics
from webhook.service import fabric_wiring
from webhook.service.embedded_parts import EmbeddedParts, Stoppable
from webhook.service.settings import Settings
from webhook.service.upkeep import Upkeep
from webhook.state.cluster import ClusterStore

log = logging.getLogger("imex_webhook.serve")


def embedded_cluster(settings: Settings, store: ClusterStore, cluster_objects: list[dict[str, Any]] | None = None,
                     embedded: EmbeddedParts | None = None) -> EmbeddedBackend:
    """The cluster of ``--cluster`` files (``cluster_objects``: as the start-up checks parsed them, read
    once), or the demo topology ``embedded`` brings when there are none."""
    if cluster_objects is not None:
        return EmbeddedBackend(store, cluster_objects, ", ".join(str(p) for p in settings.cluster.files),
                               settings.cluster.pod_ttl)
    if settings.cluster.files:
        return embedded_backend.from_files(store, list(settings.cluster.files), settings.cluster.pod_ttl)
    if embedded is None:
        raise SettingsError("no --cluster files, and this command was started without the demo topology")
    return EmbeddedBackend(store, embedded.demo_cluster(), "the built-in demo topology", settings.cluster.pod_ttl)


def kube_backend(settings: Settings, store: ClusterStore) -> Backend:
    """The API server's watches, from the kubeconfig or the pod's service account."""
    from webhook.adapters.kube import backend as kube
    from webhook.adapters.kube.watch_settings import WatchSettings

    cluster = settings.cluster
    return kube.connect(str(cluster.kubeconfig) if cluster.kubeconfig else None, cluster.in_cluster, store,
                        cluster.holder, label_nodes=True,
                        watch=WatchSettings(stall_timeout=cluster.watch_stall_timeout))


def build_backend(settings: Settings, store: ClusterStore, cluster_objects: list[dict[str, Any]] | None = None,
                  embedded: EmbeddedParts | None = None) -> Backend:
    """The cluster source ``--cluster`` names: the embedded cluster, or the API server's."""
    if settings.cluster.embedded:
        return embedded_cluster(settings, store, cluster_objects, embedded)
    return kube_backend(settings, store)


class Built(NamedTuple):
    """What :func:`build` made, and what the server reports to: the app's metrics and its /healthz checks."""

    app: Flask
    engine: Engine
    backend: Backend
    metrics: Metrics
    liveness: dict[str, Check]


def build(settings: Settings, tls_ready: Check | None = None, cluster_objects: list[dict[str, Any]] | None = None,
          embedded: EmbeddedParts | None = None) -> Built:
    """Everything one worker serves: the cluster source, the fabric parts, the engine and the app (started)."""
    policy: Policy = settings.policy
    store = ClusterStore(policy)
    cluster = embedded_cluster(settings, store, cluster_objects, embedded) if settings.cluster.embedded else None
    backend: Backend = cluster if cluster is not None else kube_backend(settings, store)
    backend.start()
    metrics = Metrics()
    for collector in backend.collectors():
        metrics.registry.register(cast(Collector, collector))  # the port keeps prometheus out of the engine
    fabric = settings.fabric
    parts = fabric_wiring.start(fabric.manager, store, backend, metrics, credentials=fabric.credentials,
                                ca=fabric.ca, refresh=fabric.refresh, timeouts=fabric.timeouts, embedded=embedded,
                                node_agents=_node_agents(cluster, embedded), max_response=fabric.max_response)
    engine = Engine(store, backend.reservations, backend.binder, policy,
                    attacher=parts.attacher if parts is not None else None, events=backend.events,
                    holder=settings.cluster.holder, bind_budget=settings.limits.bind_budget, waits=metrics)
    liveness: dict[str, Check] = {}
    app = create_app(engine, backend, metrics, settings.limits.max_body, tls_ready or always_ready,
                     checks={"fabric": parts.fabric.ready} if parts is not None else None, liveness=liveness,
                     unaccounted=parts.reconciler.unaccounted_blocks if parts is not None else None,
                     embedded=cluster)
    nudger = backend.nudger
    Upkeep(engine, settings.cluster.housekeeping_interval,
           Requeuer(engine, nudger) if nudger is not None else None).start()
    _freeze_when_ready(backend)
    return Built(app, engine, backend, metrics, liveness)


def _node_agents(cluster: EmbeddedBackend | None, embedded: EmbeddedParts | None) -> Callable[[], Stoppable] | None:
    """Starts the simulated node agents of an embedded cluster (they take its attachments, held in memory,
    to Ready and Released); None where real agents run on the nodes."""
    if cluster is None or embedded is None:
        return None
    return lambda: embedded.start_node_agents(cluster.attachments, cluster.store, cluster.node_objects())


def _freeze_when_ready(backend: Backend) -> None:
    """Once the caches are loaded, move every object alive into the garbage collector's permanent
    generation: tens of thousands of long-lived cache objects are then never traversed again by the
    collections that per-request garbage triggers."""
    def wait() -> None:
        while not backend.ready()[0]:
            time.sleep(0.2)
        gc.collect()
        gc.freeze()
        log.info("caches loaded; %d objects moved out of the garbage collector's way", gc.get_freeze_count())

    threading.Thread(target=wait, name="gc-freeze", daemon=True).start()
