"""The ClusterStore: incremental aggregates follow adds, updates, deletes and relists; pods that arrive
before their ComputeDomain's template are re-derived when it shows up; snapshots are cached per change;
malformed objects are skipped and counted."""

from __future__ import annotations

from typing import Any

from tests import builders
from webhook.domain.policy import Policy
from webhook.state.cluster import ClusterStore

A = "aaaa-1111.7"


def test_gpu_use_follows_pod_binding_and_completion() -> None:
    store = builders.store(builders.rack("a", A, 1))
    store.apply("Pod", "ADDED", builders.pod("p", gpus=3))
    assert store.snapshot().used_gpus == {}
    store.apply("Pod", "MODIFIED", builders.pod("p", gpus=3, node="a-00", phase="Running"))
    assert store.snapshot().used_gpus == {"a-00": 3}
    store.apply("Pod", "MODIFIED", builders.pod("p", gpus=3, node="a-00", phase="Succeeded"))
    assert store.snapshot().used_gpus == {}


def test_deleting_a_pod_releases_its_gpus_and_membership() -> None:
    store = builders.store([*builders.rack("a", A, 1), *builders.cd_objects("job", 2)])
    pod = builders.pod("job-0", cd="job", node="a-00", phase="Running")
    store.apply("Pod", "ADDED", pod)
    snap = store.snapshot()
    assert snap.used_gpus == {"a-00": 4} and len(snap.members) == 1 and snap.node_groups["a-00"]
    store.apply("Pod", "DELETED", pod)
    snap = store.snapshot()
    assert snap.used_gpus == {} and snap.members == {} and snap.node_groups == {} and snap.node_compute_domains == {}


def test_a_pod_seen_before_its_template_joins_the_group_when_the_template_arrives() -> None:
    store = builders.store(builders.rack("a", A, 1))
    store.apply("Pod", "ADDED", builders.pod("job-0", cd="job"))
    assert store.snapshot().members == {}
    for obj in builders.cd_objects("job", 2):
        store.apply(obj["kind"], "ADDED", obj)
    assert list(store.snapshot().members) == [f"cd:{builders.cd_uid('job')}"]


def test_a_relist_drops_what_is_gone() -> None:
    store = builders.store(builders.rack("a", A, 3))
    store.replace("Node", builders.rack("a", A, 1))
    assert sorted(store.snapshot().nodes) == ["a-00"]
    assert store.snapshot().domains == {A: ("a-00",)}


def test_snapshots_are_reused_until_something_changes() -> None:
    store = builders.store(builders.rack("a", A, 2))
    first = store.snapshot()
    assert store.snapshot() is first
    store.apply("Node", "MODIFIED", builders.node("a-00", 8, A))
    assert store.snapshot() is not first and store.snapshot().nodes["a-00"].gpus == 8


def test_malformed_objects_are_skipped_and_counted() -> None:
    store = ClusterStore(Policy())
    store.apply("Node", "ADDED", {"metadata": {"name": "bad"}, "status": {"allocatable": {"nvidia.com/gpu": "x"}}})
    assert store.rejected == 1 and store.snapshot().nodes == {}


def test_sync_state_is_false_until_every_expected_kind_is_listed() -> None:
    store = ClusterStore(Policy())
    store.expect(["Node", "Pod"])
    store.mark_synced("Node")
    assert not store.synced
    store.mark_synced("Pod")
    assert store.synced and store.sync_state() == {"Node": True, "Pod": True}


def test_a_dra_only_node_has_the_gpus_its_slices_publish_and_loses_them_with_the_slice() -> None:
    store = builders.store(builders.rack("a", A, 1, gpus=0))
    assert store.snapshot().nodes["a-00"].gpus == 0
    store.apply("ResourceSlice", "ADDED", builders.gpu_slice("a-00-gpus", "a-00", 4))
    store.apply("ResourceSlice", "ADDED",
                builders.gpu_slice("a-00-channels", "a-00", 1, driver="compute-domain.nvidia.com"))
    assert store.snapshot().nodes["a-00"].gpus == 4
    store.apply("ResourceSlice", "MODIFIED", builders.gpu_slice("a-00-gpus", "a-00", 2))
    assert store.snapshot().nodes["a-00"].gpus == 2
    store.apply("ResourceSlice", "DELETED", builders.gpu_slice("a-00-gpus", "a-00", 2))
    assert store.snapshot().nodes["a-00"].gpus == 0


def test_slices_add_to_device_plugin_gpus_and_survive_the_node_being_relisted() -> None:
    store = builders.store(builders.rack("a", A, 1, gpus=2))
    store.replace("ResourceSlice", [builders.gpu_slice("a-00-gpus", "a-00", 4)])
    assert store.snapshot().nodes["a-00"].gpus == 6
    store.replace("Node", builders.rack("a", A, 1, gpus=2))
    assert store.snapshot().nodes["a-00"].gpus == 6
    store.replace("ResourceSlice", [])
    assert store.snapshot().nodes["a-00"].gpus == 2


def test_a_slice_that_arrives_before_its_node_counts_once_the_node_does() -> None:
    store = builders.store([])
    store.apply("ResourceSlice", "ADDED", builders.gpu_slice("late-gpus", "late", 4))
    assert "late" not in store.snapshot().nodes
    store.apply("Node", "ADDED", builders.node("late", gpus=0, domain=A))
    assert store.snapshot().nodes["late"].gpus == 4


def test_a_malformed_slice_is_skipped_and_counted_and_the_others_still_count() -> None:
    store = builders.store(builders.rack("a", A, 2, gpus=0))
    bad = builders.gpu_slice("a-00-gpus", "a-00", 4)
    bad["spec"]["devices"] = "four"
    store.replace("ResourceSlice", [bad, builders.gpu_slice("a-01-gpus", "a-01", 4)])
    nodes = store.snapshot().nodes
    assert store.rejected == 1 and nodes["a-00"].gpus == 0 and nodes["a-01"].gpus == 4


def test_a_node_whose_inventory_annotation_nests_too_deep_still_counts_its_gpus() -> None:
    store = builders.store(builders.rack("a", A, 1))
    odd = builders.node("odd", domain=A)
    odd["metadata"]["annotations"]["imex-webhook.io/gpus"] = "[" * 100_000 + "]" * 100_000
    store.apply("Node", "ADDED", odd)
    assert store.snapshot().nodes["odd"].gpus == 4 and store.rejected == 0


def test_a_claim_change_derives_again_only_the_pods_that_name_it(monkeypatch: Any) -> None:
    # A template's claims change several times per pod (allocation, reservedFor): deriving the namespace
    # again each time would cost the square of its pods.
    from webhook.domain import keys
    from webhook.state import cluster

    store = builders.store([*builders.rack("a", A, 2), *builders.cd_objects("job", 50)])
    for i in range(50):
        store.apply("Pod", "ADDED", builders.pod(f"job-{i}", cd="job"))
    shared = builders.pod("user", gpus=0)
    shared["spec"]["resourceClaims"] = [{"name": "ch", "resourceClaimName": "shared-channel"}]
    store.apply("Pod", "ADDED", shared)
    derived: list[str] = []
    real = cluster.derive
    monkeypatch.setattr(cluster, "derive", lambda pod, *a: derived.append(pod.name) or real(pod, *a))
    claim = {"kind": "ResourceClaim", "metadata": {"name": "shared-channel", "namespace": "ml", "uid": "c-1"},
             "spec": {"devices": {"requests": [{"name": "ch", "exactly": {
                 "deviceClassName": keys.DEFAULT_CHANNEL_DEVICE_CLASSES[0]}}]}}}
    store.apply("ResourceClaim", "ADDED", claim)
    for i in range(5):
        store.apply("ResourceClaim", "ADDED", builders.allocated_claim(f"job-{i}-ch", f"a-0{i % 2}", None))
    assert derived == ["user"]  # the claims of the template's pods derive nothing again
    assert "claim:c-1" in store.snapshot().members
