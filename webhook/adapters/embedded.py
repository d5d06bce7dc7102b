"""The embedded cluster: Kubernetes objects from files (or the built-in demo, which its caller passes) held
in memory.

Loads what ``kubectl get nodes,pods,resourceclaims,resourceclaimtemplates,computedomains,jobs -A -o yaml``
prints (plus podgroups, workloads, jobsets, pytorchjobs, mpijobs: docs/GROUPS.md), as is: multi-document
YAML, or a JSON/YAML ``List`` whose items carry apiVersion and kind.
Bindings are recorded in memory as the API server would record them (spec.nodeName), and pods the
scheduler asks about are remembered, because no watch will tell us about them. No watch tells us either
when such a pod is deleted, so a pod learnt that way and still unbound is forgotten once no request has
named it for the pod TTL (``serve --pod-ttl``, default 600 s): the scheduler names a pending
pod again at every retry (at most 5 minutes apart), so only pods it gave up on are dropped. A finished pod
(Succeeded/Failed, learnt the same way) holds nothing and is forgotten likewise. Bound running pods and the
pods of the loaded files are kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from webhook.adapters.memory import MemoryAttachmentStore, MemoryReservationStore
from webhook.domain import keys
from webhook.domain.groups import group_sources
from webhook.domain.limits import DEFAULT_POD_TTL
from webhook.domain.model import Pod
from webhook.engine.ports import EventSink, Nudger
from webhook.errors import DecisionError, ImexWebhookError
from webhook.state.cluster import KINDS, ClusterStore
from webhook.state.forgetting import Forgetting
from webhook.state.workload_tables import KINDS as WORKLOAD_KINDS

log = logging.getLogger(__name__)

# Expired pods forgotten per request at most: more than the one a request may add, so the backlog shrinks,
# and a request never pays for a long idle stretch at once.
FORGET_PER_NOTE = 4


class ClusterFileError(ImexWebhookError):
    """A --cluster file that cannot be loaded; the message names the file and the problem."""


def _flatten(doc: Any, where: str) -> Iterator[dict[str, Any]]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise ClusterFileError(f"{where}: expected a Kubernetes object or List, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        item_kind = kind[: -len("List")] if kind != "List" else None
        for i, item in enumerate(doc["items"]):
            if isinstance(item, dict) and item_kind and "kind" not in item:
                item = {**item, "kind": item_kind}  # typed lists (NodeList) may omit the items' kind
            yield from _flatten(item, f"{where} items[{i}]")
        return
    if not isinstance(kind, str) or not kind:
        raise ClusterFileError(f"{where}: object has no kind")
    yield doc


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The parser's complaint and where, on one line (its own message quotes the file over several)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def load_objects(paths: Iterable[Path]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ClusterFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:  # a binary file, or another encoding
            raise ClusterFileError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                                   f"{exc.start})") from exc
        try:
            docs = list(yaml.safe_load_all(text))  # JSON is YAML, so one parser reads both
        except yaml.YAMLError as exc:
            raise ClusterFileError(f"{path}: not valid YAML or JSON: {_yaml_problem(exc)}") from exc
        for i, doc in enumerate(docs):
            objects.extend(_flatten(doc, f"{path} document {i + 1}"))
    return objects


def put_pod(store: ClusterStore, pod: Pod) -> None:
    """Remember a pod the scheduler asked about (there is no watch to tell us)."""

    def newer(current: Pod | None) -> Pod | None:
        if current is not None and (current == pod or (current.node_name and not pod.node_name)):
            return current  # the same, or our own binding is newer than the scheduler's copy of the pod
        return pod

    store.modify("Pod", pod.key, newer)


def bind_locally(store: ClusterStore, namespace: str, name: str, node: str, started_at: float | None = None) -> Pod:
    """Record a binding as the API server would (set spec.nodeName); ``started_at``: when the pod starts
    running there (its status.startTime), which a cluster without kubelets takes to be the binding's time."""

    def bound(current: Pod | None) -> Pod:
        if current is None:
            raise KeyError(f"{namespace}/{name}")
        return replace(current, node_name=node, started_at=started_at if started_at is not None else current.started_at)

    pod = store.modify("Pod", (namespace, name), bound)
    assert pod is not None
    return pod


def label_locally(store: ClusterStore, pod: Pod, index: int) -> None:
    """Record the segment label as the API server would (webhook.engine.segment_labels), UID precondition."""

    def labelled(current: Pod | None) -> Pod:
        if current is None or current.uid != pod.uid:
            raise DecisionError(f"pod {pod.ref} not found: it was deleted before its segment could be written")
        return replace(current, labels={**current.labels, keys.SEGMENT_LABEL: str(index)})

    store.modify("Pod", (pod.namespace, pod.name), labelled)


class EmbeddedBinder:
    def __init__(self, store: ClusterStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def read_pod(self, namespace: str, name: str) -> Pod | None:
        return self.store.pod(namespace, name)

    def bind(self, pod: Pod, node: str) -> None:
        current = self.store.pod(pod.namespace, pod.name)
        if current is None:
            raise DecisionError(f"pod {pod.ref} not found: it was deleted before it could be bound")
        if current.node_name and current.node_name != node:
            raise DecisionError(f'pod {pod.name} is already assigned to node "{current.node_name}"')
        bind_locally(self.store, pod.namespace, pod.name, node, self.clock())

    def label_segment(self, pod: Pod, index: int) -> None:
        label_locally(self.store, pod, index)


class EmbeddedBackend:
    def __init__(self, store: ClusterStore, objects: list[dict[str, Any]], source: str,
                 pod_ttl: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.reservations = MemoryReservationStore()
        self.binder = EmbeddedBinder(store)
        self.attachments = MemoryAttachmentStore(store)
        # No scheduler queue to wake: whoever drives the embedded cluster asks again on its own.
        self.nudger: Nudger | None = None
        self.events: EventSink | None = None  # the decision log
        self.source = source
        by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        skipped: Counter[str] = Counter()
        for obj in objects:
            # A group source's object goes to the table of its API group (webhook.domain.groups.group_sources).
            table = group_sources.table_for(obj.get("apiVersion"), obj["kind"])
            kind = table.kind.label if table is not None else obj["kind"]
            if kind in by_kind:
                by_kind[kind].append(obj)
            else:
                skipped[kind] += 1
        if skipped:
            log.info("embedded cluster: ignoring kinds imex-webhook does not use: %s", dict(skipped))
        self._by_kind = by_kind
        self.counts = {k: len(v) for k, v in by_kind.items()}
        # Pods the files name are kept whatever happens; the ones requests taught us are forgotten unbound.
        self._loaded = {_pod_key(o) for o in by_kind["Pod"]}
        self._noted: Forgetting[tuple[str, str]] = Forgetting(pod_ttl or DEFAULT_POD_TTL, clock)
        self._noted_lock = threading.Lock()  # taken before the store's lock, never after it
        self.forgotten = 0

    def start(self) -> None:
        self.store.expect(KINDS)
        # Catalog objects first, so pods resolve their groups without a second pass.
        for kind in ("Node", "ResourceSlice", "ComputeDomain", "ResourceClaimTemplate", "ResourceClaim", "Job",
                     "ResourceQuota",
                     *WORKLOAD_KINDS, "Pod"):
            self.store.replace(kind, self._by_kind[kind])
            self.store.mark_synced(kind)
        log.info("embedded cluster loaded from %s: %s", self.source,
                 ", ".join(f"{n} {k}s" for k, n in self.counts.items() if n))

    def stop(self) -> None:
        pass

    def node_objects(self) -> list[dict[str, Any]]:
        """The Node objects as loaded (the simulated node agents start from them)."""
        return list(self._by_kind["Node"])

    def ready(self) -> tuple[bool, str]:
        return (True, f"embedded cluster from {self.source}") if self.store.synced else (False, "loading")

    @property
    def pod_ttl(self) -> float:
        return self._noted.ttl

    def note_pod(self, pod: Pod) -> None:
        with self._noted_lock:
            if pod.key not in self._loaded:
                if pod.node_name and not pod.terminated:
                    self._noted.drop(pod.key)
                else:
                    # Unbound, or finished: a finished pod holds nothing, and no watch will say it was deleted.
                    self._noted.named(pod.key)
            put_pod(self.store, pod)
            self._forget(FORGET_PER_NOTE)

    def forget_expired(self) -> int:
        """Forget every learnt pod that is unbound or finished and was not named for the pod TTL; how many were."""
        with self._noted_lock:
            return self._forget(None)

    def noted(self) -> int:
        """Learnt pods still tracked for forgetting."""
        with self._noted_lock:
            return len(self._noted)

    def _forget(self, limit: int | None) -> int:
        n = 0
        for namespace, name in self._noted.expired(limit):
            current = self.store.pod(namespace, name)
            if current is None or (current.node_name and not current.terminated):
                continue  # bound and running since (we keep it), or gone already
            self.store.apply("Pod", "DELETED", {"metadata": {"namespace": namespace, "name": name}})
            n += 1
        if n:
            self.forgotten += n
            log.debug("embedded cluster: forgot %d unbound pods not named for %gs", n, self._noted.ttl)
        return n

    def is_leader(self) -> bool:
        return True  # one process holds the whole embedded cluster

    def watch_health(self) -> dict[str, tuple[float, bool]]:
        return {}  # files, no watches

    def collectors(self) -> list[object]:
        return []


def _pod_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "default", meta.get("name") or "")  # as webhook.domain.reading.parsing reads it


def from_files(store: ClusterStore, paths: list[Path], pod_ttl: float | None = None) -> EmbeddedBackend:
    return EmbeddedBackend(store, load_objects(paths), ", ".join(str(p) for p in paths), pod_ttl)

