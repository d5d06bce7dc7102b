"""The gang API's and the controllers' objects through watches of the fake API server (docs/GROUPS.md):
JobSets, PodGroups and training jobs fill the catalog and size the groups of pods already cached; an API
that is not served, or that our role may not list (403), leaves the backend ready and is picked up once
served; a 403 on a resource the service needs still keeps it unready. Every table of the group sources
is watched, optionally, and the webhook's role grants it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests import controller_objects as co
from tests.adapters.kube.conftest import Connect
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube import backend as kube_backend
from webhook.adapters.kube.backend import KubeBackend
from webhook.adapters.kube.resources import CLUSTER_KINDS
from webhook.domain.groups import grouping
from webhook.domain.groups.group_sources import TABLES

GPU = co.pod_spec(claim_template=co.GPU_TEMPLATE)


def _group(backend: KubeBackend, name: str) -> tuple[str | None, int | None]:
    pod = backend.store.pod(co.NS, name)
    if pod is None:
        return None, None
    res = grouping.resolve(pod, backend.store.snapshot().catalog, backend.store.policy)
    return (res.group.id if res.group else None), res.size


def _create_all(fake: KubeFake, objects: list[dict[str, Any]]) -> None:
    plural = {"Pod": "pods", "Job": "jobs", "JobSet": "jobsets", "PodGroup": "podgroups", "MPIJob": "mpijobs",
              "PyTorchJob": "pytorchjobs", "ResourceClaimTemplate": "resourceclaimtemplates"}
    for obj in objects:
        fake.create(plural[obj["kind"]], obj, keep_uid=True)


def test_a_jobset_listed_and_watched_sizes_its_pods_group(fake: KubeFake, connect_backend: Connect) -> None:
    js = co.jobset("train", [("driver", 1, 1, co.pod_spec()), ("workers", 2, 3, GPU)])
    children = co.jobset_children(js)
    _create_all(fake, [co.gpu_claim_template(), js, *children])
    backend = connect_backend()
    worker = next(o["metadata"]["name"] for o in children if o["kind"] == "Pod" and "workers" in o["metadata"]["name"])
    assert _group(backend, worker) == ("jobset:ml/train", 6)
    js["spec"]["replicatedJobs"][1]["replicas"] = 4
    fake.replace("jobsets", js)
    eventually(lambda: _group(backend, worker) == ("jobset:ml/train", 12), what="JobSet MODIFIED resizes the group")


def test_a_pod_waits_for_its_pod_group_and_joins_the_gang_when_it_is_created(fake: KubeFake,
                                                                             backend: KubeBackend) -> None:
    _create_all(fake, [co.gpu_claim_template(), co.pod_in_group("p", "pg", GPU)])
    eventually(lambda: backend.store.pod(co.NS, "p"), what="pod cached")
    assert _group(backend, "p") == (None, None)
    _create_all(fake, [co.pod_group_object("pg", {"gang": {"minCount": 3}})])
    eventually(lambda: _group(backend, "p") == ("podgroup:ml/pg", 3), what="PodGroup ADDED")
    fake.delete("podgroups", co.NS, "pg")
    eventually(lambda: _group(backend, "p") == (None, None), what="PodGroup DELETED")


def test_training_jobs_of_both_operators_size_their_groups(fake: KubeFake, backend: KubeBackend) -> None:
    pt = co.pytorchjob("pt", 1, 2, GPU)
    mpi = co.mpijob("nvb", 3, GPU, co.pod_spec())
    _create_all(fake, [co.gpu_claim_template(), pt, mpi, *co.pytorchjob_pods(pt), *co.mpijob_pods(mpi)])
    eventually(lambda: _group(backend, "pt-worker-1") == ("kubeflow:ml/pytorchjob.pt", 3), what="PyTorchJob")
    eventually(lambda: _group(backend, "nvb-worker-2") == ("kubeflow:ml/mpijob.nvb", 3), what="MPIJob v2beta1")


def test_apis_that_are_not_served_leave_the_backend_ready_and_are_picked_up_later(
        fake: KubeFake, connect_backend: Connect) -> None:
    for plural in ("jobsets", "podgroups", "workloads", "pytorchjobs", "mpijobs"):
        fake.uninstall(plural)
    js = co.jobset("train", [("workers", 1, 2, GPU)])
    pods = [o for o in co.jobset_children(js) if o["kind"] == "Pod"]
    _create_all(fake, [co.gpu_claim_template(), *pods])
    backend = connect_backend()  # waits until ready
    name = pods[0]["metadata"]["name"]
    assert _group(backend, name) == ("jobset:ml/train", None)
    fake.install("jobsets")
    _create_all(fake, [js])
    eventually(lambda: _group(backend, name) == ("jobset:ml/train", 2), what="JobSet CRD installed later")


def test_a_forbidden_workload_api_leaves_the_backend_ready_but_a_needed_one_does_not(
        fake: KubeFake, connect_backend: Connect) -> None:
    for plural in ("podgroups", "jobsets"):
        fake.fail("get", plural, 403, "Forbidden",
                  f'{plural} is forbidden: User "system:serviceaccount:imex-system:imex-webhook" cannot list')
    backend = connect_backend()
    assert backend.ready()[0] and backend.store.raw_counts()["JobSet"] == 0

    fake.fail("get", "computedomains", 403, "Forbidden", "computedomains is forbidden")
    other = connect_backend("replica-b", sync=False)
    eventually(lambda: all(synced for kind, synced in other.store.sync_state().items() if kind != "ComputeDomain"),
               what="every other kind listed")
    ready, why = other.ready()
    assert not ready and "ComputeDomain" in why


def test_every_table_of_the_group_sources_is_watched_under_its_label_and_may_be_absent() -> None:
    watched = {k.label: (k.group, k.version, k.plural) for k in CLUSTER_KINDS}
    for table in TABLES:
        assert watched[table.kind.label] == (table.kind.group, table.kind.version, table.kind.plural)
        assert table.kind in kube_backend.OPTIONAL_KINDS & kube_backend.FORBIDDEN_OK_KINDS


def test_the_webhooks_role_may_list_and_watch_every_table_of_the_group_sources() -> None:
    manifest = Path(__file__).parents[3] / "manifests" / "rbac-webhook.yaml"
    (role,) = [d for d in yaml.safe_load_all(manifest.read_text())
               if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "imex-webhook"]
    for table in TABLES:
        assert any(table.kind.group in r["apiGroups"] and table.kind.plural in r["resources"]
                   and {"get", "list", "watch"} <= set(r["verbs"]) for r in role["rules"]), str(table.kind)
