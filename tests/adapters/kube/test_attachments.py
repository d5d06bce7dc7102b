"""FabricAttachments in the API server (through the fake, over HTTP, with the official client's
connection pool): the watch-fed cache mirrors them into the ClusterStore, status goes through the
/status subresource guarded by resourceVersion, delete drops the finalizer."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube import attachments as kube_attachments
from webhook.adapters.kube import backend as kube
from webhook.adapters.kube.watch import Watcher
from webhook.domain.policy import Policy
from webhook.errors import StoreConflict
from webhook.state.cluster import ClusterStore
from webhook.wire import fabric_attachment as fa
from webhook.wire.fabric_attachment import Block, Phase
from webhook.wire.kinds import FABRIC_ATTACHMENTS


def _att(uid: str = "pod-uid-1") -> fa.Attachment:
    return fa.Attachment(name=fa.name_for(uid), node="fab-00", pod_namespace="ml", pod_name="p", pod_uid=uid,
                         zone="pcie-pool-1", gpus=2, system="/redfish/v1/Systems/fab-00",
                         phase_since="2026-12-02T10:00:00Z")


def test_created_attachments_carry_their_status_and_reach_the_cluster_store(api: kube.Api, fake: KubeFake) -> None:
    cluster = ClusterStore(Policy())
    store = kube_attachments.KubeAttachmentStore(api, cluster)
    stopping = threading.Event()
    watcher = Watcher(api, FABRIC_ATTACHMENTS, store.cache, stopping)
    watcher.start()
    try:
        eventually(lambda: store.synced)
        created = store.create(replace(_att(), phase=Phase.COMPOSING, blocks=(Block("/b/1"), Block("/b/2"))))
        assert created.phase is Phase.COMPOSING and len(created.blocks) == 2 and created.version
        stored = fake.get("fabricattachments", None, created.name)
        assert stored["status"]["phase"] == "Composing"
        assert stored["metadata"]["labels"][fa.NODE_LABEL] == "fab-00"
        assert cluster.attachments()["pod-uid-1"].phase is Phase.COMPOSING
        # Someone else (the node agent) moves it on; the watch brings it back to us.
        agent_view = fa.parse(fake.get("fabricattachments", None, created.name))
        fake.replace_status("fabricattachments", fa.to_object(replace(agent_view, phase=Phase.READY)))
        eventually(lambda: store.get(created.name) is not None and store.get(created.name).phase is Phase.READY)
        with pytest.raises(StoreConflict):
            store.update(replace(created, phase=Phase.FAILED))  # stale resourceVersion
        store.delete(store.get(created.name))  # type: ignore[arg-type]
        eventually(lambda: cluster.attachments() == {})
        assert fake.get("fabricattachments", None, created.name) is None
    finally:
        stopping.set()
        watcher.interrupt()
        watcher.join(5)


def test_a_write_to_the_object_does_not_touch_its_status(api: kube.Api, fake: KubeFake) -> None:
    store = kube_attachments.KubeAttachmentStore(api, ClusterStore(Policy()))
    created = store.create(replace(_att("u2"), phase=Phase.ATTACHED))
    body = fa.to_object(replace(created, phase=Phase.DETACHED))
    body["metadata"].pop("resourceVersion")
    fake.replace("fabricattachments", body)  # the main resource, not /status
    assert fake.get("fabricattachments", None, created.name)["status"]["phase"] == "Attached"
