"""The embedded cluster: Kubernetes objects from files (or the built-in demo) held in memory.

Loads what ``kubectl get nodes,pods,resourceclaims,resourceclaimtemplates,computedomains,jobs -A -o yaml``
prints, as is: multi-document YAML, or a JSON/YAML ``List`` whose items carry apiVersion and kind.
Bindings are recorded in memory as the API server would record them (spec.nodeName), and pods the
scheduler asks about are remembered, because no watch will tell us about them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from webhook.adapters import demo
from webhook.domain.errors import DecisionError
from webhook.domain.model import Pod
from webhook.state.cluster import KINDS, ClusterStore
from webhook.state.fabric import MemoryAttachmentStore
from webhook.state.reservations import MemoryReservationStore

log = logging.getLogger(__name__)


class ClusterFileError(Exception):
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


def load_objects(paths: Iterable[Path]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ClusterFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        try:
            docs = list(yaml.safe_load_all(text))  # JSON is YAML, so one parser reads both
        except yaml.YAMLError as exc:
            raise ClusterFileError(f"{path}: not valid YAML or JSON: {exc}") from exc
        for i, doc in enumerate(docs):
            objects.extend(_flatten(doc, f"{path} document {i + 1}"))
    return objects


class EmbeddedBinder:
    def __init__(self, store: ClusterStore) -> None:
        self.store = store

    def read_pod(self, namespace: str, name: str) -> Pod | None:
        return self.store.pod(namespace, name)

    def bind(self, pod: Pod, node: str) -> None:
        current = self.store.pod(pod.namespace, pod.name)
        if current is None:
            raise DecisionError(f"pod {pod.ref} not found: it was deleted before it could be bound")
        if current.node_name and current.node_name != node:
            raise DecisionError(f'pod {pod.name} is already assigned to node "{current.node_name}"')
        self.store.bind_locally(pod.namespace, pod.name, node)


class EmbeddedBackend:
    embedded = True

    def __init__(self, store: ClusterStore, objects: list[dict[str, Any]], source: str) -> None:
        self.store = store
        self.reservations = MemoryReservationStore()
        self.binder = EmbeddedBinder(store)
        self.attachments = MemoryAttachmentStore(store)
        self.source = source
        by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        skipped: Counter[str] = Counter()
        for obj in objects:
            kind = obj["kind"]
            if kind in by_kind:
                by_kind[kind].append(obj)
            else:
                skipped[kind] += 1
        if skipped:
            log.info("embedded cluster: ignoring kinds imex-webhook does not use: %s", dict(skipped))
        self._by_kind = by_kind
        self.counts = {k: len(v) for k, v in by_kind.items()}

    def start(self) -> None:
        self.store.expect(KINDS)
        # Catalog objects first, so pods resolve their groups without a second pass.
        for kind in ("Node", "ResourceSlice", "ComputeDomain", "ResourceClaimTemplate", "ResourceClaim", "Job",
                     "Pod"):
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

    def note_pod(self, pod: Pod) -> None:
        self.store.put_pod(pod)

    def is_leader(self) -> bool:
        return True  # one process holds the whole embedded cluster


def from_files(store: ClusterStore, paths: list[Path]) -> EmbeddedBackend:
    return EmbeddedBackend(store, load_objects(paths), ", ".join(str(p) for p in paths))


def from_demo(store: ClusterStore) -> EmbeddedBackend:
    return EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
