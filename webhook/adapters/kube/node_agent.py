"""The node agent's API calls: its own Node, the device-plugin pod on its node, and the FabricAttachments
for its node (watched with the label selector ``imex-webhook.io/node=<node>``).

Least privilege (see docs/AGENT.md): get/patch ``nodes`` (its own), list/delete ``pods`` (only the
device-plugin pod on its node: every pod is checked for the node name and the labels before it is
deleted, whatever the API server's selectors did), get/list/watch ``fabricattachments`` and update
``fabricattachments/status``.

Node changes are RFC 7386 merge patches (``application/merge-patch+json``). Attachment status goes to the
``/status`` subresource with the resourceVersion we read (409 on a stale one); when the API server does
not serve that subresource (a CRD without ``subresources.status``), the whole object is merge-patched.

Every failed call reaches the agent as the port's ``NodeApiError`` with the HTTP status (0: no answer),
never as this adapter's ``ApiError``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient

from webhook.adapters.kube.api import (
    MERGE_PATCH,
    Api,
    ApiError,
    KubeConfigError,
    Timeout,
    load_configuration,
)
from webhook.adapters.kube.cache import WatchedCache
from webhook.adapters.kube.resources import DEFAULT_DEVICE_PLUGIN_SELECTORS
from webhook.adapters.kube.watch import Watcher
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.errors import NodeApiError
from webhook.wire import fabric_attachment as fa
from webhook.wire.kinds import FABRIC_ATTACHMENTS, NODES, PODS

log = logging.getLogger(__name__)

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


@contextmanager
def _port_errors() -> Iterator[None]:
    """This adapter's ``ApiError`` as the port's ``NodeApiError``: the agent knows only the port."""
    try:
        yield
    except ApiError as exc:
        raise NodeApiError(exc.status, str(exc)) from exc


class KubeNodeApi:
    """``webhook.agent.ports.NodeApi`` on the API server."""

    def __init__(self, api: Api, node: str, *, device_plugin_selectors: Sequence[str] = DEFAULT_DEVICE_PLUGIN_SELECTORS,
                 device_plugin_namespace: str | None = None, watch: WatchSettings | None = None) -> None:
        self.api = api
        self.node = node
        self.selectors = tuple(device_plugin_selectors)
        self.namespace = device_plugin_namespace
        # An attachment the agent cannot read is not acted on: it leaves the cache until it reads again.
        self._cache: WatchedCache[fa.Attachment] = WatchedCache(fa.KIND, self._mine, forget_unreadable=True)
        self._changed: Callable[[], None] = lambda: None
        self._cache.subscribe(lambda _: self._changed())
        self._stopping = threading.Event()
        self._watcher = Watcher(api, FABRIC_ATTACHMENTS, self._cache, self._stopping, optional=True, settings=watch,
                                label_selector=self._selector)
        self._started = False

    @property
    def _selector(self) -> str:
        return f"{fa.NODE_LABEL}={self.node}"

    def _mine(self, obj: Mapping[str, Any]) -> fa.Attachment | None:
        att = fa.parse(obj)
        return att if att.node == self.node else None  # the selector, checked again

    # -- attachments -------------------------------------------------------------------------------

    def start(self, changed: Callable[[], None]) -> None:
        self._changed = changed
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
        return sorted(self._cache.items().values(), key=lambda a: a.name)

    def _list_attachments(self) -> list[dict[str, Any]]:
        try:
            with _port_errors():
                doc = self.api.call("GET", FABRIC_ATTACHMENTS.path(), query=[("labelSelector", self._selector)])
        except NodeApiError as exc:
            if exc.status == 404:
                log.warning("the FabricAttachment CRD is not installed; no attachments to handle")
                return []
            raise
        return [i for i in doc.get("items") or () if isinstance(i, dict)]

    def read_attachment(self, name: str) -> fa.Attachment | None:
        try:
            with _port_errors():
                return fa.parse(self.api.call("GET", FABRIC_ATTACHMENTS.path(name=name)))
        except NodeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def write_status(self, att: fa.Attachment) -> fa.Attachment:
        body = {"apiVersion": f"{fa.GROUP}/{fa.VERSION}", "kind": fa.KIND,
                "metadata": {"name": att.name, "resourceVersion": att.version}, "status": fa.status_body(att)}
        try:
            stored = self._merge_patch(FABRIC_ATTACHMENTS.path(name=att.name, sub="status"), body)
        except NodeApiError as exc:
            if exc.status != 404 or self.read_attachment(att.name) is None:
                raise
            log.debug("no status subresource for %s; patching the whole object", fa.PLURAL)
            stored = self._merge_patch(FABRIC_ATTACHMENTS.path(name=att.name), body)
        return fa.parse(stored)

    # -- node and device plugin --------------------------------------------------------------------

    def read_node(self) -> dict[str, Any]:
        with _port_errors():
            return self.api.call("GET", NODES.path(name=self.node))

    def patch_node(self, patch: dict[str, Any]) -> dict[str, Any]:
        return self._merge_patch(NODES.path(name=self.node), patch)

    def refresh_device_plugin(self) -> list[str]:
        with _port_errors():
            return self._refresh_device_plugin()

    def _refresh_device_plugin(self) -> list[str]:
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
        with _port_errors():
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
