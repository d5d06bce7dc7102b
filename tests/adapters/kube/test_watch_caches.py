"""Watch-backed caches through the official client, against the fake API server over real HTTP.

Covered: the caches fill from the initial lists (paged) and follow ADDED/MODIFIED/DELETED events;
``ready()`` is false until every first list arrived and names what it waits for; a missing ComputeDomain
CRD still lets the backend become ready, and the CRD is picked up once installed; 410 Gone (as an ERROR
event or as the HTTP status) relists and the cache ends up equal to the server, including changes whose
events were lost; a watch the server ends is resumed without a relist; the caches recover after the API
server restarts; ``stop()`` ends every thread promptly; ``connect`` without usable credentials says where it
looked.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from tests import builders
from tests.adapters.kube.conftest import Connect
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend, KubeConfigError, connect
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.state import workload_tables
from webhook.state.cluster import ClusterStore

CLIQUE = demo.clique_value("gb200-a")


def _pods(backend: KubeBackend) -> int:
    return backend.store.raw_counts()["Pod"]


def test_caches_fill_from_the_initial_lists(fake: KubeFake, connect_backend: Connect) -> None:
    fake.seed(demo.objects())
    fake.create("jobs", {"metadata": {"name": "trainer", "namespace": "ml"}, "spec": {"parallelism": 4}})
    fake.create("resourcequotas", {"metadata": {"name": "gpu", "namespace": "ml"},
                                   "spec": {"hard": {"requests.nvidia.com/gpu": "16"}},
                                   "status": {"used": {"requests.nvidia.com/gpu": "4"}}})
    fake.create("resourceslices", {"metadata": {"name": "hgx-00-gpus"}, "spec": {
        "driver": "gpu.nvidia.com", "nodeName": "hgx-00", "pool": {"name": "hgx-00", "generation": 1,
                                                                  "resourceSliceCount": 1},
        "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(2)]}})

    backend = connect_backend(watch=WatchSettings(page_size=7))  # several pages per kind

    counts = backend.store.raw_counts()
    assert counts == {"Node": len(demo.nodes()), "Pod": 4, "ResourceClaim": 0,
                      "ResourceClaimTemplate": len(demo.COMPUTE_DOMAINS), "ComputeDomain": len(demo.COMPUTE_DOMAINS),
                      "Job": 1, "ResourceSlice": 1, "ResourceQuota": 1, **{kind: 0 for kind in workload_tables.KINDS}}
    snapshot = backend.store.snapshot()
    assert snapshot.nodes["gb200-a-00"].domain == CLIQUE
    assert snapshot.nodes["hgx-00"].gpus == 8 + 2, "device-plugin GPUs plus the DRA slice's"
    assert len(snapshot.domains[CLIQUE]) == 18
    assert [q.lines for q in snapshot.gpu_quotas["ml"]] == [(("requests.nvidia.com/gpu", 16, 4),)]
    assert fake.requests("list", "nodes") > 1  # the nodes came in pages


def test_caches_follow_added_modified_and_deleted_events(fake: KubeFake, backend: KubeBackend) -> None:
    fake.create("nodes", builders.node("n1", gpus=4, domain=CLIQUE))
    eventually(lambda: "n1" in backend.store.snapshot().nodes, what="node ADDED")

    fake.patch("nodes", None, "n1", {"metadata": {"labels": {keys.CLIQUE_LABEL: "other.1"}}})
    eventually(lambda: backend.store.snapshot().nodes["n1"].domain == "other.1", what="node MODIFIED")

    fake.create("pods", builders.pod("p1", gpus=4))
    eventually(lambda: backend.store.pod("ml", "p1"), what="pod ADDED")
    fake.patch("pods", "ml", "p1", {"spec": {"nodeName": "n1"}})
    eventually(lambda: backend.store.snapshot().used_gpus.get("n1") == 4, what="pod bound, GPUs in use")

    fake.delete("pods", "ml", "p1")
    fake.delete("nodes", None, "n1")
    eventually(lambda: backend.store.pod("ml", "p1") is None and not backend.store.snapshot().nodes,
               what="DELETED")
    assert fake.requests("list", "pods") == 1  # events only, no relist


def test_ready_is_false_before_the_first_lists_and_true_after(fake: KubeFake, connect_backend: Connect) -> None:
    backend = connect_backend(start=False)
    ready, why = backend.ready()
    assert not ready
    assert "Node" in why and "Pod" in why and "DomainReservation" in why

    backend.start()
    eventually(lambda: backend.ready()[0], what="ready")
    assert backend.ready() == (True, "caches synced")


def test_a_missing_compute_domain_crd_still_becomes_ready(fake: KubeFake, connect_backend: Connect) -> None:
    fake.uninstall("computedomains")
    backend = connect_backend()  # waits for ready()
    assert backend.store.raw_counts()["ComputeDomain"] == 0

    fake.install("computedomains")
    fake.create("computedomains", demo.compute_domain("train-8", 8))
    eventually(lambda: backend.store.raw_counts()["ComputeDomain"] == 1, what="CRD looked for again")
    assert backend.ready()[0]


@pytest.mark.parametrize("as_status", [False, True], ids=["error-event", "http-status"])
def test_a_410_gone_relists_and_the_cache_ends_up_correct(fake: KubeFake, backend: KubeBackend,
                                                          as_status: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="webhook.adapters.kube.watch")
    fake.create("pods", builders.pod("kept", gpus=1))
    fake.create("pods", builders.pod("lost-delete", gpus=1))
    eventually(lambda: _pods(backend) == 2, what="pods listed")
    eventually(lambda: fake.watches("pods") == 1, what="pod watch open")

    # Changes whose watch events never come: only a relist can reveal them.
    fake.delete("pods", "ml", "lost-delete", emit=False)
    fake.create("pods", builders.pod("lost-add", gpus=1), emit=False)
    fake.expire_watches("pods", as_status=as_status)

    eventually(lambda: fake.requests("list", "pods") == 2, what="relist")
    eventually(lambda: backend.store.pod("ml", "lost-add") is not None, what="relist applied")
    assert backend.store.pod("ml", "lost-delete") is None
    assert _pods(backend) == 2
    relists = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Pod: listing (watch from")]
    assert relists and "expired" in relists[0]  # relisted at once, with the reason, not after a back-off

    fake.create("pods", builders.pod("after", gpus=1))  # and the new watch works
    eventually(lambda: backend.store.pod("ml", "after") is not None, what="watch after relist")


def test_a_watch_the_server_ends_is_resumed_without_relisting(fake: KubeFake, connect_backend: Connect) -> None:
    backend = connect_backend(watch=WatchSettings(timeout=1))
    eventually(lambda: fake.requests("watch", "nodes") >= 2, what="a second watch")

    fake.create("nodes", builders.node("late", domain=CLIQUE))
    eventually(lambda: "late" in backend.store.snapshot().nodes, what="event on the resumed watch")
    assert fake.requests("list", "nodes") == 1


def test_the_caches_recover_after_the_api_server_restarts(fake: KubeFake, backend: KubeBackend) -> None:
    fake.create("nodes", builders.node("before", domain=CLIQUE))
    eventually(lambda: "before" in backend.store.snapshot().nodes, what="node seen")

    fake.stop()
    fake.create("nodes", builders.node("while-down", domain=CLIQUE), emit=False)
    time.sleep(0.2)
    fake.start()

    eventually(lambda: "while-down" in backend.store.snapshot().nodes, what="relist after restart")
    assert backend.ready()[0]


def test_stop_ends_every_watch_thread_promptly(fake: KubeFake, connect_backend: Connect) -> None:
    before = {t.name for t in threading.enumerate()}
    backend = connect_backend()
    watching = {t.name for t in threading.enumerate()} - before
    assert {"watch-nodes", "watch-pods", "watch-domainreservations"} <= watching

    started = time.monotonic()
    backend.stop()
    assert time.monotonic() - started < 1.0
    assert not watching & {t.name for t in threading.enumerate()}


def test_connect_without_usable_credentials_says_where_it_looked(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    with pytest.raises(KubeConfigError, match=f"kubeconfig {missing}"):
        connect(str(missing), False, ClusterStore(Policy()), "replica-a")
    with pytest.raises(KubeConfigError, match="in-cluster service account"):
        connect(None, True, ClusterStore(Policy()), "replica-a")
