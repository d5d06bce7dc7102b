"""Bindings this replica has sent that the watch has not shown yet.

kube-scheduler counts a pod on its node from the moment it chooses the node (its own "assumed" pods), but
in fabric mode the dedicated profile leaves ``nvidia.com/gpu`` to the extender (``ignoredResources``), and
the extender's cache learns of a binding only through its pod watch. Without this, a pod the extender binds
holds no GPUs in the cache until that event arrives, and the filter of the next pod may send it to the same
node's last free GPU (the kubelet then refuses it). So the bind verb records the binding here just before it
asks the API server, and takes it back if the API server refuses.

The store shows an assumed pod on its node (``merge``) until:
- a watch event or relist shows the pod with a node: confirmed (or bound elsewhere by someone else, which the
  API server's ``spec.nodeName`` then tells truly);
- the pod is gone, or a pod of another UID holds its name: nothing is left behind;
- the bind failed: ``withdraw``.
A watch event that still shows the pod without a node (one written before the binding, delivered after it)
does not undo the assumption: ``spec.nodeName`` is never cleared once set, so the binding is the newer fact.

Per replica: another replica's cache learns of this binding through its watch only (docs/SCHEDULER.md).
"""

from __future__ import annotations

from dataclasses import replace

from webhook.domain.model import ObjectKey, Pod


class AssumedBindings:
    def __init__(self) -> None:
        self._held: dict[ObjectKey, tuple[str, str]] = {}  # pod key -> (its UID, the node)

    def __len__(self) -> int:
        return len(self._held)

    def add(self, pod: Pod, node: str) -> None:
        self._held[pod.key] = (pod.uid, node)

    def withdraw(self, pod: Pod, node: str) -> bool:
        """Forget the assumption when it is still this one; whether it was (the caller then unbinds the cached
        pod: nothing but the assumption put it on the node)."""
        if self._held.get(pod.key) != (pod.uid, node):
            return False
        del self._held[pod.key]
        return True

    def merge(self, key: ObjectKey, new: Pod | None) -> Pod | None:
        """What the store holds for ``key`` when ``new`` arrives: ``new`` on the assumed node while the
        assumption stands; the assumption ends when ``new`` is gone, another pod, or on a node of its own."""
        held = self._held.get(key)
        if held is None:
            return new
        uid, node = held
        if new is None or new.uid != uid or new.node_name:
            del self._held[key]
            return new
        return replace(new, node_name=node)
