"""The fabric attachments the store holds (by pod UID), and what they mean for the nodes they attach to.

Attachments come from their own watch (Kubernetes mode) or the attacher (embedded mode); a snapshot reads
two figures of them besides the attachments themselves: the fabric slots each node has in use, and the
Ready GPUs each node keeps for a pod that is not bound yet. Not thread-safe: the cluster store's lock
guards it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from webhook.domain.model import Pod
from webhook.wire.fabric_attachment import Attachment, Phase


class AttachmentTable:
    def __init__(self) -> None:
        self._by_pod: dict[str, Attachment] = {}

    def replace(self, items: Iterable[Attachment]) -> None:
        self._by_pod = {a.pod_uid: a for a in items}

    def put(self, att: Attachment) -> None:
        self._by_pod[att.pod_uid] = att

    def drop(self, pod_uid: str) -> bool:
        """Forget the pod's attachment; whether there was one."""
        return self._by_pod.pop(pod_uid, None) is not None

    def view(self) -> dict[str, Attachment]:
        return dict(self._by_pod)

    def figures(self, pod_by_uid: Callable[[str], Pod | None]) -> tuple[dict[str, int], dict[str, int]]:
        """(node -> Ready GPUs kept for a pod not bound yet, node -> fabric slots in use)."""
        promised: dict[str, int] = defaultdict(int)
        slots_used: dict[str, int] = defaultdict(int)
        for uid, att in self._by_pod.items():
            if att.phase is not Phase.DETACHED:
                # Blocks composed or being composed occupy the node's slots until they are detached; a
                # Pending attachment has not picked its blocks yet but will take that many.
                pending = att.gpus if att.phase is Phase.PENDING else 0
                slots_used[att.node] += len(att.blocks) or pending
            pod = pod_by_uid(uid)
            # Ready GPUs sit in the node's allocatable before their pod binds: keep them for that pod.
            if att.phase is Phase.READY and not att.deleting and (pod is None or pod.node_name is None):
                promised[att.node] += att.gpus
        return dict(promised), dict(slots_used)
