"""FabricAttachment objects in the API server, and the Lease that elects the fabric reconciler.

``KubeAttachmentStore`` is the ``AttachmentStore`` of Kubernetes mode: a watch-fed cache (reads never
call the API) that also mirrors every attachment into the ClusterStore for the decisions; writes are
guarded by resourceVersion (409 -> StoreConflict). Status goes through the ``/status`` subresource the
CRD declares, so the agent's RBAC can be limited to it.

``LeaseLeader`` holds a coordination.k8s.io/v1 Lease: the reconciler runs on one replica at a time, and
another takes over when the holder stops renewing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from webhook.adapters.kube.api import MERGE_PATCH, Api, ApiError, Resource
from webhook.adapters.kube.watch import SyncFlag
from webhook.domain import attachments as fa
from webhook.domain.attachments import Attachment
from webhook.errors import StoreConflict, WireError
from webhook.state.cluster import ClusterStore

log = logging.getLogger(__name__)

FABRIC_ATTACHMENTS = Resource(fa.KIND, fa.GROUP, fa.VERSION, fa.PLURAL, False)
LEASES = Resource("Lease", "coordination.k8s.io", "v1", "leases", True)


class KubeAttachmentStore(SyncFlag):
    """``AttachmentStore`` on FabricAttachment objects; also the ``Sink`` of their watcher."""

    def __init__(self, api: Api, cluster: ClusterStore) -> None:
        super().__init__()
        self._api = api
        self._cluster = cluster
        self._lock = threading.Lock()
        self._items: dict[str, Attachment] = {}

    # -- fed by the watcher ---------------------------------------------------------------------------

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        parsed = [a for a in map(self._parse, objects) if a is not None]
        with self._lock:
            self._items = {a.name: a for a in parsed}
        self._cluster.replace_attachments(parsed)

    def apply(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        att = self._parse(obj)
        if att is None:
            return
        if event == "DELETED":
            self._forget(att)
        else:
            self._keep(att)

    # -- AttachmentStore ------------------------------------------------------------------------------

    def all(self) -> list[Attachment]:
        with self._lock:
            return list(self._items.values())

    def get(self, name: str) -> Attachment | None:
        with self._lock:
            return self._items.get(name)

    def create(self, att: Attachment) -> Attachment:
        body = fa.to_object(att)
        body["metadata"].pop("resourceVersion", None)
        try:
            created = self._remember(self._api.call("POST", FABRIC_ATTACHMENTS.path(), body=body))
        except ApiError as exc:
            if exc.status == 409:
                raise StoreConflict(f"attachment {att.name} exists") from exc
            raise StoreConflict(exc.explain(f"create attachment {att.name}", "create",
                                            FABRIC_ATTACHMENTS.qualified)) from exc
        # The main resource ignores status on create when the status subresource is on: write it after.
        if created.phase is not att.phase or created.blocks != att.blocks or created.message != att.message:
            return self.update(Attachment(**{**_fields(att), "version": created.version}))
        return created

    def update(self, att: Attachment) -> Attachment:
        body = fa.to_object(att)
        try:
            return self._remember(self._api.call("PUT", FABRIC_ATTACHMENTS.path(name=att.name, sub="status"),
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
        self._forget(att)

    # -- internals ------------------------------------------------------------------------------------

    def _parse(self, obj: Mapping[str, Any]) -> Attachment | None:
        try:
            return fa.parse(obj)
        except WireError as exc:
            log.warning("skipping malformed FabricAttachment %s: %s", (obj.get("metadata") or {}).get("name"), exc)
            return None

    def _keep(self, att: Attachment) -> None:
        with self._lock:
            current = self._items.get(att.name)
            if current is not None and _older(att.version, current.version):
                return  # a late watch event must not roll back what our own write returned
            self._items[att.name] = att
        self._cluster.put_attachment(att)

    def _forget(self, att: Attachment) -> None:
        with self._lock:
            self._items.pop(att.name, None)
        self._cluster.drop_attachment(att.pod_uid)

    def _remember(self, obj: Mapping[str, Any]) -> Attachment:
        att = fa.parse(obj)
        self._keep(att)
        return att


def _fields(att: Attachment) -> dict[str, Any]:
    return {name: getattr(att, name) for name in att.__dataclass_fields__}


def _older(new: str, old: str) -> bool:
    return new.isdigit() and old.isdigit() and int(new) < int(old)


def _rfc3339_micro(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class LeaseLeader:
    """Leader election on a Lease: ``is_leader()`` is what the reconciler asks before each round."""

    def __init__(self, api: Api, namespace: str, name: str, holder: str, duration: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._api = api
        self._namespace = namespace
        self._name = name
        self._holder = holder
        self._duration = duration
        self._clock = clock
        self._held_until = 0.0

    def is_leader(self) -> bool:
        now = self._clock()
        # Renew at a third of the duration; until then the last successful renewal is good enough.
        if self._held_until - now > self._duration * 2 / 3:
            return True
        try:
            self._held_until = now + self._duration if self._acquire(now) else 0.0
        except ApiError as exc:
            log.warning("lease %s/%s: %s", self._namespace, self._name, exc)
            self._held_until = 0.0 if self._held_until <= now else self._held_until
        return self._held_until > now

    def _acquire(self, now: float) -> bool:
        path = LEASES.path(namespace=self._namespace, name=self._name)
        spec = {"holderIdentity": self._holder, "leaseDurationSeconds": int(self._duration),
                "renewTime": _rfc3339_micro(now)}
        try:
            lease = self._api.call("GET", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "spec": {**spec, "acquireTime": spec["renewTime"]}}
            try:
                self._api.call("POST", LEASES.path(namespace=self._namespace), body=body)
            except ApiError as create_exc:
                if create_exc.status == 409:
                    return False  # someone else created it first
                raise
            return True
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity")
        renewed = current.get("renewTime")
        expired = True
        if renewed:
            renewed_at = datetime.fromisoformat(str(renewed).replace("Z", "+00:00")).timestamp()
            expired = renewed_at + float(current.get("leaseDurationSeconds") or self._duration) < now
        if holder not in (None, "", self._holder) and not expired:
            return False
        new_spec = {**current, **spec}
        if holder != self._holder:
            new_spec["acquireTime"] = spec["renewTime"]
            new_spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            self._api.call("PUT", path, body=lease)  # guarded by the resourceVersion we read
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True
