"""FabricAttachment objects in the API server: the ``AttachmentStore`` of Kubernetes mode.

A watch-fed cache (reads never call the API) that also mirrors every attachment into the ClusterStore for
the decisions; writes are guarded by resourceVersion (409 -> StoreConflict). Status goes through the
``/status`` subresource the CRD declares, so the agent's RBAC can be limited to it. The Lease that elects
the reconciler is ``webhook.adapters.kube.leader``.
"""

from __future__ import annotations

from dataclasses import replace

from webhook.adapters.kube.api import MERGE_PATCH, Api, ApiError
from webhook.adapters.kube.cache import WatchedCache
from webhook.errors import StoreConflict
from webhook.state.cluster import ClusterStore
from webhook.wire import fabric_attachment as fa
from webhook.wire.fabric_attachment import Attachment
from webhook.wire.kinds import FABRIC_ATTACHMENTS


class KubeAttachmentStore:
    """``AttachmentStore`` on FabricAttachment objects; ``cache`` is the ``Sink`` of their watcher."""

    def __init__(self, api: Api, cluster: ClusterStore) -> None:
        self._api = api
        self.cache: WatchedCache[Attachment] = WatchedCache(fa.KIND, fa.parse)
        self.cache.subscribe(lambda items: cluster.replace_attachments(items.values()))

    @property
    def synced(self) -> bool:
        return self.cache.synced

    # -- AttachmentStore ------------------------------------------------------------------------------

    def all(self) -> list[Attachment]:
        return list(self.cache.items().values())

    def get(self, name: str) -> Attachment | None:
        return self.cache.get(name)

    def create(self, att: Attachment) -> Attachment:
        body = fa.to_object(att)
        body["metadata"].pop("resourceVersion", None)
        try:
            created = self.cache.store(self._api.call("POST", FABRIC_ATTACHMENTS.path(), body=body))
        except ApiError as exc:
            if exc.status == 409:
                raise StoreConflict(f"attachment {att.name} exists") from exc
            raise StoreConflict(exc.explain(f"create attachment {att.name}", "create",
                                            FABRIC_ATTACHMENTS.qualified)) from exc
        # The main resource ignores status on create when the status subresource is on: write it after.
        if created.phase is not att.phase or created.blocks != att.blocks or created.message != att.message:
            return self.update(replace(att, version=created.version))
        return created

    def update(self, att: Attachment) -> Attachment:
        body = fa.to_object(att)
        try:
            return self.cache.store(self._api.call("PUT", FABRIC_ATTACHMENTS.path(name=att.name, sub="status"),
                                                 body=body))
        except ApiError as exc:
            raise StoreConflict(exc.explain(f"update attachment {att.name}", "update",
                                            FABRIC_ATTACHMENTS.qualified + "/status")) from exc

    def delete(self, att: Attachment) -> None:
        path = FABRIC_ATTACHMENTS.path(name=att.name)
        try:
            # Drop our finalizer first: it exists only so that a deletion waits for the detach.
            self._api.call("PATCH", path, body={"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)
            self._api.call("DELETE", path)
        except ApiError as exc:
            if exc.status != 404:
                raise StoreConflict(exc.explain(f"delete attachment {att.name}", "delete",
                                                FABRIC_ATTACHMENTS.qualified)) from exc
        self.cache.forget(att.name)
