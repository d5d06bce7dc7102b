"""Kubernetes mode: cluster state, reservations and bindings through a real API server.

``connect`` loads credentials (kubeconfig or in-cluster) and returns a ``KubeBackend``: watch-backed
caches of Nodes, Pods, Jobs, ResourceClaims, ResourceClaimTemplates, ComputeDomains and the objects groups
come from (PodGroups, JobSets, training jobs: docs/GROUPS.md) feeding the
``ClusterStore`` (``watch``), reservations in DomainReservation objects (``reservations``),
and ``KubeBinder``, which creates the ``pods/binding`` subresource with the pod's UID as precondition.

This package is the only code that talks to the API server (import-linter enforces it). Filter and
prioritize read the caches; the only API calls on the filter path are the writes of a group's first
filter that store its reservation (a domain ledger and the reservation, ``reservations``). ``/bind``
calls it too; every call has a deadline below kube-scheduler's extender timeout (``api.call_timeout``).
"""

from __future__ import annotations

import logging
import threading
import time

from kubernetes.client import ApiClient

from webhook.adapters.kube.api import (
    EXTENDER_HTTP_TIMEOUT,
    MERGE_PATCH,
    Api,
    ApiError,
    KubeConfigError,
    call_timeout,
    load_configuration,
)
from webhook.adapters.kube.attachments import KubeAttachmentStore
from webhook.adapters.kube.events import EventRecorder
from webhook.adapters.kube.leader import LeaseLeader
from webhook.adapters.kube.node_labels import NodeDomainLabeller
from webhook.adapters.kube.nudges import PodNudger
from webhook.adapters.kube.reservations import KubeReservationStore
from webhook.adapters.kube.resources import CLUSTER_KINDS
from webhook.adapters.kube.watch import Sink, Watcher
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.domain import keys
from webhook.domain.groups.group_sources import TABLES
from webhook.domain.model import Pod
from webhook.domain.reading import parsing
from webhook.engine.ports import Binder, Nudger, ReservationStore
from webhook.errors import DecisionError, WireError
from webhook.state.cluster import ClusterStore
from webhook.wire.kinds import (
    COMPUTE_DOMAINS,
    DOMAIN_RESERVATIONS,
    FABRIC_ATTACHMENTS,
    NODES,
    PODS,
    RESOURCE_QUOTAS,
    Kind,
)

log = logging.getLogger(__name__)
__all__ = ["KubeBackend", "KubeBinder", "KubeConfigError", "connect"]

# NVIDIA's DRA driver installs the ComputeDomain CRD; a cluster without it still has annotated and
# fabric groups to schedule, so its absence is an empty list, not a failure.
OPTIONAL_KINDS = frozenset({COMPUTE_DOMAINS, DOMAIN_RESERVATIONS, FABRIC_ATTACHMENTS, RESOURCE_QUOTAS,
                            *(t.kind for t in TABLES)})
# They only refine groups: an operator who grants no access to them (403) loses that refinement, not the
# service's readiness. Without ResourceQuotas (an upgrade that kept the older RBAC), what a namespace may hold
# for pods not created is bounded by --max-reserved-gpus-per-namespace alone (webhook.domain.placement.quotas).
FORBIDDEN_OK_KINDS = frozenset({*(t.kind for t in TABLES), RESOURCE_QUOTAS})
RECONCILER_LEASE = "imex-webhook-reconciler"
STOP_TIMEOUT = 5.0  # seconds stop() waits for all watch threads together
# Fifteen long-lived watches plus the binds of every gunicorn thread at once, without urllib3 discarding
# connections ("pool is full") or opening a new one per bind.
POOL_SIZE = 40


class KubeBinder:
    """``Binder`` on the API server: a fresh read of a pod, and its binding."""

    def __init__(self, api: Api) -> None:
        self._api = api

    def read_pod(self, namespace: str, name: str) -> Pod | None:
        try:
            obj = self._api.call("GET", PODS.path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise DecisionError(exc.explain(f"read pod {namespace}/{name}", "get", "pods")) from exc
        try:
            return parsing.pod(obj)
        except WireError as exc:
            raise DecisionError(f"pod {namespace}/{name} as the API server returned it is malformed: {exc}") from exc

    def bind(self, pod: Pod, node: str) -> None:
        body = {
            "apiVersion": "v1", "kind": "Binding",
            # The UID is the precondition: a pod deleted and re-created under the same name is not bound.
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self._api.call("POST", PODS.path(pod.namespace, pod.name, "binding"), body=body)
        except ApiError as exc:
            raise DecisionError(self._explain(pod, node, exc)) from exc

    def label_segment(self, pod: Pod, index: int) -> None:
        # The UID in the patch is its precondition: a pod re-created under the same name is not labelled.
        patch = {"metadata": {"uid": pod.uid, "labels": {keys.SEGMENT_LABEL: str(index)}}}
        try:
            self._api.call("PATCH", PODS.path(pod.namespace, pod.name), body=patch, content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.status == 404:
                raise DecisionError(f"pod {pod.ref} no longer exists; it was deleted before its segment could be "
                                    f"written: {exc.message}") from exc
            raise DecisionError(exc.explain(f"write segment {index} on pod {pod.ref} (label {keys.SEGMENT_LABEL})",
                                            "patch", "pods")) from exc

    @staticmethod
    def _explain(pod: Pod, node: str, exc: ApiError) -> str:
        if exc.status == 409:
            return f"the API server refused to bind pod {pod.ref} to node {node} (409 {exc.reason}): {exc.message}"
        if exc.status == 404:
            return f"pod {pod.ref} no longer exists; it was deleted before it could be bound to {node}: {exc.message}"
        return exc.explain(f"bind pod {pod.ref} to node {node}", "create", "pods/binding")


class KubeBackend:
    """``Backend`` for a real cluster; ``start`` begins the watches, ``ready`` reports their first lists."""

    def __init__(self, api: Api, store: ClusterStore, holder: str, settings: WatchSettings | None = None,
                 namespace: str = "imex-system", label_nodes: bool = False) -> None:
        self.store = store
        self._api = api
        self._reservations = KubeReservationStore(api, holder)
        self.reservations: ReservationStore = self._reservations
        self.events = EventRecorder(api, holder)  # Events about pods and ComputeDomains (events)
        self.binder: Binder = KubeBinder(api)
        self.attachments = KubeAttachmentStore(api, store)
        self.nudger: Nudger | None = PodNudger(api)  # retries of the pods we refused (webhook.engine.requeue)
        self._lease = LeaseLeader(api, namespace, RECONCILER_LEASE, holder)
        self._stopping = threading.Event()
        self._started = False
        # label_nodes: keep imex-webhook.io/domain on every Node (node_labels), fed by the Node watch.
        self.node_labels = NodeDomainLabeller(api, store.policy) if label_nodes else None
        sinks: list[tuple[Kind, Sink]] = [
            (kind, self.node_labels.tee(store) if self.node_labels and kind == NODES else store)
            for kind in CLUSTER_KINDS]
        sinks.append((DOMAIN_RESERVATIONS, self._reservations.cache))
        sinks.append((FABRIC_ATTACHMENTS, self.attachments.cache))
        self._watchers = [Watcher(api, kind, sink, self._stopping, optional=kind in OPTIONAL_KINDS,
                                  forbidden_ok=kind in FORBIDDEN_OK_KINDS, settings=settings)
                          for kind, sink in sinks]
        # Declared now, not at start(): /readyz must say "not yet" from the first moment.
        store.expect(CLUSTER_KINDS)

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.events.start()
        if self.node_labels is not None:
            self.node_labels.start()
        for watcher in self._watchers:
            watcher.start()

    def stop(self) -> None:
        self._stopping.set()
        for watcher in self._watchers:
            watcher.interrupt()
        deadline = time.monotonic() + STOP_TIMEOUT
        for watcher in self._watchers:
            watcher.join(max(0.0, deadline - time.monotonic()))
        if self.node_labels is not None:
            self.node_labels.stop(max(0.0, deadline - time.monotonic()))
        self.events.stop(max(0.0, deadline - time.monotonic()))
        self._api.close()

    def ready(self) -> tuple[bool, str]:
        waiting = [kind for kind, synced in self.store.sync_state().items() if not synced]
        if not self._reservations.synced:
            waiting.append(DOMAIN_RESERVATIONS.label)
        if not self.attachments.synced:
            waiting.append(FABRIC_ATTACHMENTS.label)
        if waiting:
            return False, "waiting for the first list of " + ", ".join(waiting)
        # A watch that stopped making progress serves an ever older cache (watch, "Progress").
        stalled = [why for watcher in self._watchers if (why := watcher.stalled()) is not None]
        if stalled:
            return False, "; ".join(stalled)
        return True, "caches synced"

    def watch_health(self) -> dict[str, tuple[float, bool]]:
        """For /metrics: per watched kind, seconds since its last progress and whether it is stalled."""
        return {w.kind: (w.progress_age(), w.stalled() is not None) for w in self._watchers}

    def collectors(self) -> list[object]:
        return [self.node_labels.counter] if self.node_labels is not None else []

    def is_leader(self) -> bool:
        """Whether this replica holds the reconciler's Lease (renewed as a side effect)."""
        return self._lease.is_leader()


def connect(kubeconfig: str | None, in_cluster: bool, store: ClusterStore, holder: str,
            request_timeout: float = EXTENDER_HTTP_TIMEOUT, *, watch: WatchSettings | None = None,
            namespace: str = "imex-system", label_nodes: bool = False) -> KubeBackend:
    """A backend on the API server named by ``kubeconfig`` (or the in-cluster service account).

    ``request_timeout`` is how long whoever waits on our API calls waits (kube-scheduler's extender
    httpTimeout); each call gets a share of it. ``holder`` names this replica on the reservations it
    creates. ``label_nodes`` runs the node domain labeller (``node_labels``). Nothing is contacted
    until ``start()``.
    """
    client = ApiClient(load_configuration(kubeconfig, in_cluster, POOL_SIZE))
    client.user_agent = "imex-webhook"
    log.info("Kubernetes API server %s (holder %s)", client.configuration.host, holder)
    return KubeBackend(Api(client, call_timeout(request_timeout)), store, holder, watch, namespace, label_nodes)
