"""The ClusterStore keeps the gang API's and the controllers' objects (docs/GROUPS.md): pods seen before
their JobSet or PodGroup are derived again when it arrives or goes; a status-only update derives nothing;
the two PodGroup versions never empty each other; malformed objects are skipped and counted, another API
group's objects of the same kind are ignored; concurrent feeding ends in the same state as serial feeding."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests import builders
from tests import controller_objects as co
from webhook.adapters import embedded
from webhook.domain.groups import grouping
from webhook.domain.policy import Policy
from webhook.state import workload_tables
from webhook.state.cluster import ClusterStore

GPU = co.pod_spec(claim_template=co.GPU_TEMPLATE)
A = "aaaa-1111.7"


def _store() -> ClusterStore:
    return builders.store([*builders.rack("a", A, 4), co.gpu_claim_template()])


def _group_of(store: ClusterStore, name: str) -> tuple[str | None, int | None]:
    snap = store.snapshot()
    pod = store.pod(co.NS, name)
    assert pod is not None
    res = grouping.resolve(pod, snap.catalog, store.policy)
    return (res.group.id if res.group else None), res.size


def _jobset() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    js = co.jobset("train", [("workers", 2, 3, GPU)])
    return js, [o for o in co.jobset_children(js) if o["kind"] == "Pod"]


def test_pods_seen_before_their_jobset_are_sized_when_it_arrives_and_unsized_when_it_goes() -> None:
    store = _store()
    js, pods = _jobset()
    for pod in pods:
        store.apply("Pod", "ADDED", pod)
    first = pods[0]["metadata"]["name"]
    assert _group_of(store, first) == ("jobset:ml/train", None)
    assert len(store.snapshot().members["jobset:ml/train"]) == 6
    store.apply("JobSet", "ADDED", js)
    assert _group_of(store, first) == ("jobset:ml/train", 6)
    store.apply("JobSet", "DELETED", js)
    assert _group_of(store, first) == ("jobset:ml/train", None)


def test_a_pod_joins_its_gang_when_the_pod_group_arrives_and_leaves_when_it_goes() -> None:
    store = _store()
    store.apply("Pod", "ADDED", co.pod_in_group("p", "pg", GPU))
    assert store.snapshot().members == {}
    pg = co.pod_group_object("pg", {"gang": {"minCount": 2}})
    store.apply("PodGroup", "ADDED", pg)
    assert set(store.snapshot().members) == {"podgroup:ml/pg"}
    store.apply("PodGroup", "DELETED", pg)
    assert store.snapshot().members == {}


def test_a_status_only_update_derives_no_pod_again(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store()
    js, pods = _jobset()
    store.apply("JobSet", "ADDED", js)
    for pod in pods:
        store.apply("Pod", "ADDED", pod)
    calls = 0
    real = grouping.resolve

    def counting(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args)
    monkeypatch.setattr(grouping, "resolve", counting)
    js["status"] = {"restarts": 0, "replicatedJobsStatus": [{"name": "workers", "active": 2, "ready": 1}]}
    store.apply("JobSet", "MODIFIED", js)
    assert calls == 0
    js["spec"]["replicatedJobs"][0]["replicas"] = 3
    store.apply("JobSet", "MODIFIED", js)
    assert calls == len(pods)


def test_the_beta_pod_group_wins_and_a_relist_of_one_version_keeps_the_other() -> None:
    store = _store()
    store.apply("Pod", "ADDED", co.pod_in_group("p", "pg", GPU))
    store.replace("PodGroup.v1alpha2", [co.pod_group_object("pg", {"gang": {"minCount": 7}}, version="v1alpha2")])
    assert _group_of(store, "p") == ("podgroup:ml/pg", 7)
    store.replace("PodGroup", [co.pod_group_object("pg", {"gang": {"minCount": 3}})])
    assert _group_of(store, "p") == ("podgroup:ml/pg", 3)
    store.replace("PodGroup", [])  # the beta API switched off: the alpha's object is still there
    assert _group_of(store, "p") == ("podgroup:ml/pg", 7)
    store.replace("PodGroup.v1alpha2", [])
    assert _group_of(store, "p") == (None, None)


def test_malformed_objects_are_skipped_and_counted_and_a_later_good_version_is_read() -> None:
    store = _store()
    js, pods = _jobset()
    store.apply("Pod", "ADDED", pods[0])
    bad = {**js, "spec": {"replicatedJobs": "everything"}}
    store.apply("JobSet", "ADDED", bad)
    store.apply("PodGroup", "ADDED", {"metadata": {"name": "pg", "namespace": "ml"}, "spec": {"schedulingPolicy": 4}})
    store.apply("PyTorchJob", "ADDED", ["not", "an", "object"])  # type: ignore[arg-type]
    counts = store.rejected_counts()
    assert (counts["JobSet"], counts["PodGroup"], counts["PyTorchJob"]) == (1, 1, 1)
    store.apply("JobSet", "MODIFIED", js)
    assert store.rejected_counts()["JobSet"] == 0 and _group_of(store, pods[0]["metadata"]["name"])[1] == 6


def test_another_api_groups_object_of_the_same_kind_is_ignored_not_counted() -> None:
    store = _store()
    volcano = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
               "metadata": {"name": "pg", "namespace": "ml"}, "spec": {"minMember": 4}}
    store.apply("PodGroup", "ADDED", volcano)
    assert store.raw_counts()["PodGroup"] == 0 and store.rejected == 0


def test_every_workload_kind_is_counted_and_relisted() -> None:
    store = _store()
    js, _ = _jobset()
    objects = {"PodGroup": co.pod_group_object("pg", {"gang": {"minCount": 2}}),
               "PodGroup.v1alpha2": co.pod_group_object("pg2", {"basic": {}}, version="v1alpha2"),
               "Workload": co.workload_1_35("wl", [("w", 2)]), "JobSet": js,
               "PyTorchJob": co.pytorchjob("pt", 1, 1, GPU), "MPIJob": co.mpijob("m", 1, GPU, GPU)}
    assert set(objects) == set(workload_tables.KINDS)
    for kind, obj in objects.items():
        store.replace(kind, [obj])
    assert all(store.raw_counts()[kind] == 1 for kind in objects)
    for kind in objects:
        store.replace(kind, [])
    assert all(store.raw_counts()[kind] == 0 for kind in objects)
    catalog = store.snapshot().catalog
    assert (catalog.pod_groups, catalog.gang_workloads, catalog.controllers) == ({}, {}, {})


def test_concurrent_feeding_ends_where_serial_feeding_does() -> None:
    jobsets = [co.jobset(f"js-{i}", [("workers", 1 + i % 3, 2, GPU)]) for i in range(12)]
    pods = [p for js in jobsets for p in co.jobset_children(js) if p["kind"] == "Pod"]

    def feed(store: ClusterStore, items: list[tuple[str, dict[str, Any]]]) -> None:
        for kind, obj in items:
            store.apply(kind, "ADDED", obj)

    serial = _store()
    feed(serial, [("JobSet", js) for js in jobsets] + [("Pod", p) for p in pods])
    concurrent = _store()
    streams = [[("JobSet", js) for js in jobsets[i::4]] + [("Pod", p) for p in pods[i::4]] for i in range(4)]
    threads = [threading.Thread(target=feed, args=(concurrent, s)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    names = [p["metadata"]["name"] for p in pods]
    assert [_group_of(concurrent, n) for n in names] == [_group_of(serial, n) for n in names]
    assert {g: len(m) for g, m in concurrent.snapshot().members.items()} == \
        {g: len(m) for g, m in serial.snapshot().members.items()}


def test_the_embedded_loader_takes_every_workload_kind_from_a_file() -> None:
    js, pods = _jobset()
    volcano = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
               "metadata": {"name": "v", "namespace": "ml"}, "spec": {"minMember": 4}}
    objects = [*builders.rack("a", A, 2), co.gpu_claim_template(), js, volcano, *pods]
    backend = embedded.EmbeddedBackend(ClusterStore(Policy()), objects, "test")
    backend.start()
    assert backend.ready()[0]
    assert _group_of(backend.store, pods[0]["metadata"]["name"]) == ("jobset:ml/train", 6)
    assert backend.store.raw_counts()["PodGroup"] == 0
