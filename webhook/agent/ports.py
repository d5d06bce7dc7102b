"""The node agent's port to the API server: ``NodeApi``, the Protocol of what the agent reads and writes
(its Node, this node's FabricAttachments, the device-plugin pods), and what goes with it.

``webhook.adapters.kube.node_agent.KubeNodeApi`` implements the port over HTTP; ``webhook.sim.agents``'s
``MemoryNodeApi`` holds one Node in memory (the embedded ``serve`` mode, and ``agent --nvml-sim`` without an
API server, handed over by ``webhook.composition``); ``DryRunNodeApi`` here wraps either and prints every
change instead of making it (``agent --dry-run``). ``allocatable_gpus`` reads a Node as the port returns it.

A failed call raises ``NodeApiError`` (``status`` 0: no answer; 404: gone; 409: a stale resourceVersion),
re-exported here and defined in ``webhook.errors`` because the adapter that raises it may not import the
agent; each adapter translates its own errors into it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from webhook.domain import keys
from webhook.errors import NodeApiError
from webhook.wire import fabric_attachment as fa

__all__ = ["DryRunNodeApi", "NodeApi", "NodeApiError", "allocatable_gpus"]


class NodeApi(Protocol):
    node: str

    def start(self, changed: Callable[[], None]) -> None:
        """Begin watching this node's FabricAttachments; ``changed`` is called after each event."""

    def stop(self) -> None: ...

    def synced(self) -> bool:
        """Whether the attachment cache has had its first list."""

    def read_node(self) -> dict[str, Any]: ...

    def patch_node(self, patch: dict[str, Any]) -> dict[str, Any]:
        """An RFC 7386 merge patch of this Node."""

    def refresh_device_plugin(self) -> list[str]:
        """Delete the device-plugin pod(s) on this node (their DaemonSet starts new ones, which enumerate
        the GPUs again); returns ``namespace/name`` of each pod deleted."""

    def attachments(self) -> list[fa.Attachment]:
        """This node's FabricAttachments as last seen."""

    def read_attachment(self, name: str) -> fa.Attachment | None: ...

    def write_status(self, att: fa.Attachment) -> fa.Attachment:
        """Store ``att``'s status, guarded by ``att.version``; returns the stored attachment."""


def allocatable_gpus(node: dict[str, Any]) -> int:
    """``status.allocatable["nvidia.com/gpu"]`` as an integer, 0 when absent or unreadable."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(keys.GPU_RESOURCE)
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


class DryRunNodeApi:
    """Reads pass through; every change is printed as JSON on ``out`` and not made."""

    def __init__(self, inner: NodeApi, out: TextIO | None = None) -> None:
        self.inner = inner
        self.node = inner.node
        self.out = out or sys.stdout

    def _print(self, action: str, body: Any) -> None:
        print(json.dumps({"dryRun": action, "node": self.node, "body": body}, sort_keys=True), file=self.out,
              flush=True)

    def start(self, changed: Callable[[], None]) -> None:
        self.inner.start(changed)

    def stop(self) -> None:
        self.inner.stop()

    def synced(self) -> bool:
        return self.inner.synced()

    def read_node(self) -> dict[str, Any]:
        return self.inner.read_node()

    def patch_node(self, patch: dict[str, Any]) -> dict[str, Any]:
        self._print("patch node", patch)
        return self.inner.read_node()

    def refresh_device_plugin(self) -> list[str]:
        self._print("delete device-plugin pods", {})
        return []

    def attachments(self) -> list[fa.Attachment]:
        return self.inner.attachments()

    def read_attachment(self, name: str) -> fa.Attachment | None:
        return self.inner.read_attachment(name)

    def write_status(self, att: fa.Attachment) -> fa.Attachment:
        self._print(f"update fabricattachment {att.name} status", fa.status_body(att))
        return att
