"""The node agent's API calls: its own Node, the device-plugin pod on its node, and the FabricAttachments
for its node (watched with the label selector ``imex-webhook.io/node=<node>``).

Least privilege (see docs/AGENT.md): get/patch ``nodes`` (its own), list/delete ``pods`` (only the
device-plugin pod on its node: every pod is checked for the node name and the labels before it is
deleted, whatever the API server's selectors did), get/list/watch ``fabricattachments`` and update
``fabricattachments/status``.

Node changes are RFC 7386 merge patches (``application/merge-patch+json``). Attachment status goes to the
``/status`` subresource with the resourceVersion we read (409 on a stale one); when the API server does
not serve that subresource (a CRD without ``subresources.status``), the whole object is merge-patched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes.client import ApiClient

from webhook.adapters.kube.api import (
    JSON,
    MERGE_PATCH,
    Api,
    ApiError,
    KubeConfigError,
    Resource,
    Timeout,
    load_configuration,
)
from webhook.adapters.kube.watch import Watcher, WatchSettings
from webhook.domain import attachments as fa
from webhook.errors import WireError

log = logging.getLogger(__name__)

NODES = Resource("Node", "", "v1", "nodes", False)
PODS = Resource("Pod", "", "v1", "pods", True)
FABRIC_ATTACHMENTS = Resource(fa.KIND, fa.GROUP, fa.VERSION, fa.PLURAL, False)
# NVIDIA's device plugin: the Helm chart of NVIDIA/k8s-device-plugin labels its pods
# app.kubernetes.io/name=nvidia-device-plugin; the GPU Operator's DaemonSet app=nvidia-device-plugin-daemonset.
DEFAULT_DEVICE_PLUGIN_SELECTORS = ("app.kubernetes.io/name=nvidia-device-plugin", "app=nvidia-device-plugin-daemonset")
AGENT_TIMEOUT: Timeout = (5.0, 15.0)  # nobody waits on the agent's calls but its own steps


def _matches(labels: Mapping[str, Any], selector: str) -> bool:
    """Equality-based label selector (``a=b,c!=d,e``): all we need to double-check a pod."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.strip().rstrip("=")) != value.strip().lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class _Selecting(Api):
    """``Api`` whose GETs of one collection carry a label selector: the watcher lists and watches only
    this node's attachments."""

    def __init__(self, api: Api, path: str, selector: str) -> None:
        super().__init__(api.client, api.timeout)
        self._path = path
        self._selector = selector

    def open(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), body: Any = None,
             timeout: Timeout | None = None, content_type: str = JSON) -> urllib3.BaseHTTPResponse:
        if method == "GET" and path == self._path:
            query = [*query, ("labelSelector", self._selector)]
        return super().open(method, path, query=query, body=body, timeout=timeout, content_type=content_type)


class _AttachmentCache:
    """The watcher's sink: this node's attachments, parsed; calls ``changed`` after each change."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.changed: Callable[[], None] = lambda: None
        self._lock = threading.Lock()
        self._items: dict[str, fa.Attachment] = {}
        self.synced = False

    def _parse(self, obj: Mapping[str, Any]) -> fa.Attachment | None:
        try:
            att = fa.parse(obj)
        except WireError as exc:
            log.warning("ignoring a malformed FabricAttachment %s: %s", (obj.get("metadata") or {}).get("name"), exc)
            return None
        return att if att.node == self.node else None  # the selector, checked again

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        items = {a.name: a for a in map(self._parse, objects) if a is not None}
        with self._lock:
            self._items = items
        self.changed()

    def apply(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        att = None if event == "DELETED" else self._parse(obj)
        with self._lock:
            if att is None:
                self._items.pop(name, None)
            else:
                self._items[name] = att
        self.changed()

    def mark_synced(self, kind: str, synced: bool = True) -> None:
        self.synced = synced

    def items(self) -> list[fa.Attachment]:
        with self._lock:
            return sorted(self._items.values(), key=lambda a: a.name)


class KubeNodeApi:
    """``webhook.agent.ports.NodeApi`` on the API server."""

    def __init__(self, api: Api, node: str, *, device_plugin_selectors: Sequence[str] = DEFAULT_DEVICE_PLUGIN_SELECTORS,
                 device_plugin_namespace: str | None = None, watch: WatchSettings | None = None) -> None:
        self.api = api
        self.node = node
        self.selectors = tuple(device_plugin_selectors)
        self.namespace = device_plugin_namespace
        self._cache = _AttachmentCache(node)
        self._stopping = threading.Event()
        selector = f"{fa.NODE_LABEL}={node}"
        self._watcher = Watcher(_Selecting(api, FABRIC_ATTACHMENTS.path(), selector), FABRIC_ATTACHMENTS,
                                self._cache, self._stopping, optional=True, settings=watch)
        self._started = False

    # -- attachments -------------------------------------------------------------------------------

    def start(self, changed: Callable[[], None]) -> None:
        self._cache.changed = changed
        if not self._started:
            self._started = True
            self._watcher.start()

    def stop(self) -> None:
        self._stopping.set()
        self._watcher.interrupt()
        self._watcher.join(5.0)
        self.api.close()

    def synced(self) -> bool:
        return self._cache.synced

    def attachments(self) -> list[fa.Attachment]:
        if not self._started:  # --once: one list instead of a watch
            self._cache.replace(fa.KIND, self._list_attachments())
            self._cache.mark_synced(fa.KIND)
        return self._cache.items()

    def _list_attachments(self) -> list[dict[str, Any]]:
        try:
            doc = self.api.call("GET", FABRIC_ATTACHMENTS.path(),
                                query=[("labelSelector", f"{fa.NODE_LABEL}={self.node}")])
        except ApiError as exc:
            if exc.status == 404:
                log.warning("the FabricAttachment CRD is not installed; no attachments to handle")
                return []
            raise
        return [i for i in doc.get("items") or () if isinstance(i, dict)]

    def read_attachment(self, name: str) -> fa.Attachment | None:
        try:
            return fa.parse(self.api.call("GET", FABRIC_ATTACHMENTS.path(name=name)))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def write_status(self, att: fa.Attachment) -> fa.Attachment:
        body = {"apiVersion": f"{fa.GROUP}/{fa.VERSION}", "kind": fa.KIND,
                "metadata": {"name": att.name, "resourceVersion": att.version}, "status": fa.status_body(att)}
        try:
            stored = self._merge_patch(FABRIC_ATTACHMENTS.path(name=att.name, sub="status"), body)
        except ApiError as exc:
            if exc.status != 404 or self.read_attachment(att.name) is None:
                raise
            log.debug("no status subresource for %s; patching the whole object", fa.PLURAL)
            stored = self._merge_patch(FABRIC_ATTACHMENTS.path(name=att.name), body)
        return fa.parse(stored)

    # -- node and device plugin --------------------------------------------------------------------

    def read_node(self) -> dict[str, Any]:
        return self.api.call("GET", NODES.path(name=self.node))

    def patch_node(self, patch: dict[str, Any]) -> dict[str, Any]:
        return self._merge_patch(NODES.path(name=self.node), patch)

    def refresh_device_plugin(self) -> list[str]:
        deleted: list[str] = []
        for selector in self.selectors:
            query = [("labelSelector", selector), ("fieldSelector", f"spec.nodeName={self.node}")]
            doc = self.api.call("GET", PODS.path(self.namespace), query=query)
            for pod in doc.get("items") or ():
                meta = pod.get("metadata") or {}
                # The API server filtered already; a pod of another node or app is never ours to delete.
                if (pod.get("spec") or {}).get("nodeName") != self.node or not _matches(meta.get("labels") or {},
                                                                                     selector):
                    continue
                ref = f"{meta.get('namespace')}/{meta.get('name')}"
                if ref in deleted:
                    continue
                body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta.get("uid")}}
                try:
                    self.api.call("DELETE", PODS.path(meta.get("namespace"), meta.get("name")), body=body)
                except ApiError as exc:
                    if exc.status not in (404, 409):  # already gone, or replaced meanwhile: fine either way
                        raise
                deleted.append(ref)
        return deleted

    # -- RFC 7386 merge patches (kube-apiserver wants the patch format in the content type) ----------

    def _merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.api.call("PATCH", path, body=body, content_type=MERGE_PATCH)


# The agent's name for it; the same error as the extender's.
AgentConfigError = KubeConfigError


def connect(node: str, kubeconfig: str | None, in_cluster: bool, *,
            device_plugin_selectors: Sequence[str] = DEFAULT_DEVICE_PLUGIN_SELECTORS,
            device_plugin_namespace: str | None = None, watch: WatchSettings | None = None) -> KubeNodeApi:
    """The agent's API for ``node``; raises ``AgentConfigError`` when no credentials load."""
    client = ApiClient(load_configuration(kubeconfig, in_cluster))
    client.user_agent = f"imex-webhook-agent/{quote(node, safe='')}"
    log.info("Kubernetes API server %s (node %s)", client.configuration.host, node)
    return KubeNodeApi(Api(client, AGENT_TIMEOUT), node, device_plugin_selectors=device_plugin_selectors,
                       device_plugin_namespace=device_plugin_namespace, watch=watch)
