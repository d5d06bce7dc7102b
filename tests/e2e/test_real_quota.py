"""What a tenant can hold is bounded by what it may run, on the real control plane (issue 38; docs/SCHEDULER.md,
"What a tenant can hold").

A group's reservation holds a domain's room for members that do not exist yet, and the group's size and
segment size are written by the tenant. Before the fix, one 4-GPU pod in namespace ``evil`` annotated with a
group of 7 pods in segments of 4 reserved both device-plugin racks (a: 4 nodes, b: 3) for itself. Here
``evil`` has a ResourceQuota of 8 GPUs: the pod is refused on every node, with a FailedScheduling event
naming the quota and the figures, and no DomainReservation is written; a legitimate ComputeDomain job in
namespace ``ml`` is meanwhile placed whole in rack b. A group-size annotation above the owning Job's
parallelism is denied at admission, naming the Job.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, RACKS, RealCluster
from tests.e2e.kubeapi import ApiCallError, eventually
from webhook.domain import keys

# The first test also waits for the session fixture, which may build the control plane from source.
pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]

QUOTA = "gpu"
QUOTA_GPUS = 8  # two 4-GPU pods
QUOTA_KEY = f"requests.{keys.GPU_RESOURCE}"
HOG_SIZE, HOG_SEGMENT = RACKS["a"][1] + RACKS["b"][1], RACKS["a"][1]  # 7 pods in segments of 4: racks a and b
RACK = "b"
SIZE = RACKS[RACK][1]
JOB = "legit"


def _quota_path(ns: str, *parts: str) -> str:
    # The suite's KubeApi knows no ResourceQuota kind: the core API's path, written out.
    return "/".join((f"/api/v1/namespaces/{ns}/resourcequotas", *parts))


def _requested_gpus(cluster: RealCluster, ns: str) -> int:
    """What the namespace's pods that still count (not Succeeded or Failed) request: the quota's status.used."""
    total = 0
    for pod in cluster.api.list("Pod", ns):
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            resources = container.get("resources", {})
            total += int((resources.get("requests") or resources.get("limits") or {}).get(keys.GPU_RESOURCE, 0))
    return total


def _gpu_quota(cluster: RealCluster, ns: str, gpus: int) -> dict[str, Any]:
    """A ResourceQuota bounding the namespace's GPUs, with the status the quota controller would write.

    No kube-controller-manager runs here, so nothing fills the status: kube-apiserver's quota admission
    enforces a quota by its status (hard and used) only, and leaves one without a status alone, which would
    also show the extender ``used 0`` for ever. Written once through the /status subresource as the quota
    controller would (status.hard = spec.hard, status.used = what the namespace's pods request), from then
    on quota admission keeps status.used up to date as pods are created (nothing lowers it when they go:
    that is the controller's part, and the quota is deleted with the scenario)."""
    hard = {QUOTA_KEY: str(gpus)}
    cluster.api.call("POST", _quota_path(ns), {"apiVersion": "v1", "kind": "ResourceQuota",
                                               "metadata": {"name": QUOTA, "namespace": ns}, "spec": {"hard": hard}})
    status = {"hard": hard, "used": {QUOTA_KEY: str(_requested_gpus(cluster, ns))}}
    patched: dict[str, Any] = cluster.api.call("PATCH", _quota_path(ns, QUOTA, "status"), {"status": status},
                                               content_type="application/merge-patch+json")
    return patched


def _delete_quota(cluster: RealCluster, ns: str) -> None:
    try:
        cluster.api.call("DELETE", _quota_path(ns, QUOTA))
    except ApiCallError as err:
        if err.status != 404:
            raise


def _hog(ns: str) -> dict[str, Any]:
    """One 4-GPU pod saying its group has 7 pods in segments of 4 (rank 0): both device-plugin racks for it."""
    return objects.pod(ns, "hog-0", gpus=GPUS_PER_NODE, annotations={
        keys.GROUP_ANNOTATION: "hog", keys.GROUP_SIZE_ANNOTATION: str(HOG_SIZE),
        keys.SEGMENT_SIZE_ANNOTATION: str(HOG_SEGMENT), keys.COMPLETION_INDEX: "0"})


def _names_quota(text: str, ns: str) -> bool:
    # used is 4 once the extender has seen quota admission count the hog, 0 before; the group is segment 0.
    # It would hold the 3 other members of its segment and the 3 of segment 1: 24 GPUs.
    return (f"namespace {ns} may hold at most" in text and f"(ResourceQuota {ns}/{QUOTA}: {QUOTA_KEY} hard "
            f"{QUOTA_GPUS}, used" in text and f"group hog would hold {(HOG_SIZE - 1) * GPUS_PER_NODE} " in text)


def test_a_namespaces_gpu_quota_bounds_what_one_pod_may_reserve_and_others_are_placed(
        real_cluster: RealCluster) -> None:
    evil, ml = real_cluster.namespace("evil"), real_cluster.namespace("ml")
    try:
        quota = _gpu_quota(real_cluster, evil, QUOTA_GPUS)
        assert quota["status"]["hard"] == {QUOTA_KEY: str(QUOTA_GPUS)}, quota["status"]
        # Nothing shows when the extender's ResourceQuota watch has delivered the quota, and a filter before
        # that would see no quota (the default bound, half the cluster's 52 GPUs, lets the hog's 24 through).
        # A replica's /readyz waits for the first list of every kind: restarted now, it holds the quota.
        real_cluster.stop_extender()
        real_cluster.start_extender()

        hog = real_cluster.api.create(_hog(evil))
        assert hog["spec"].get("schedulerName") == "imex-scheduler", hog["spec"].get("schedulerName")
        used = real_cluster.api.call("GET", _quota_path(evil, QUOTA))["status"]["used"]
        assert used == {QUOTA_KEY: str(GPUS_PER_NODE)}, f"quota admission counts the hog's GPUs: {used}"

        def refused_by_filter() -> list[dict[str, Any]]:
            node = real_cluster.api.get("Pod", evil, "hog-0")["spec"].get("nodeName")
            assert node is None, (f"{evil}/hog-0 was placed on {node}; its reservations: "
                                  f"{real_cluster.reservations(evil)}")
            return [e for e in real_cluster.events_for(evil, "hog-0", "FailedScheduling")
                    if _names_quota(e.get("note") or "", evil)]

        try:
            events = eventually(refused_by_filter, 90, what="a FailedScheduling event naming the ResourceQuota")
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{real_cluster.explain(evil)}") from None
        note = events[-1]["note"]
        assert not real_cluster.reservations(evil), ("the hog's filter reserved nothing", note)

        # Meanwhile a legitimate job: its ComputeDomain's 3 pods, placed whole in rack b (the best fit).
        scenario.computedomain(real_cluster, ml, JOB, SIZE)
        names = scenario.members(real_cluster, ml, JOB, SIZE, gpus=GPUS_PER_NODE, claims=[scenario.channel(JOB)])
        placed = real_cluster.wait_bound(ml, names, timeout=120)
        assert scenario.domains_of(placed) == {RACK}, placed
        assert len(set(placed.values())) == SIZE, f"one ComputeDomain pod per node: {placed}"
        (reservation,) = real_cluster.reservations(ml)
        assert reservation["spec"]["size"] == SIZE, reservation["spec"]

        assert real_cluster.api.get("Pod", evil, "hog-0")["spec"].get("nodeName") is None
        assert not real_cluster.reservations(evil)
    finally:
        real_cluster.cleanup(evil)
        real_cluster.cleanup(ml)
        _delete_quota(real_cluster, evil)
        # Namespace ml is test_real_tenants' too: its objects go with the scenario.
        for kind, name in (("ComputeDomain", JOB), ("ResourceClaimTemplate", f"{JOB}-channel"), ("Job", JOB)):
            real_cluster.api.delete(kind, ml, name)


def test_a_group_size_above_the_jobs_parallelism_is_denied_at_admission(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("ml-oversize")
    try:
        job = real_cluster.api.create(objects.job(ns, "train", 2))
        # No Job controller runs here: the pod as it would make it, owned by the Job, its template annotated.
        pod = objects.pod(ns, "train-0", gpus=GPUS_PER_NODE, owner=job, annotations={
            keys.GROUP_ANNOTATION: "train", keys.GROUP_SIZE_ANNOTATION: "3"})

        def refusal() -> str | None:
            # A dry run goes through admission and stores nothing. Until the webhook's cache holds the Job,
            # the annotation is the only size it knows, and the pod is admitted: ask again.
            try:
                real_cluster.api.call("POST", real_cluster.api.path("Pod", ns), pod, params={"dryRun": "All"})
            except ApiCallError as err:
                return err.body
            return None

        body = eventually(refusal, 60, what="the admission webhook's refusal of the oversized group")
        expected = f"annotation {keys.GROUP_SIZE_ANNOTATION}=3 is larger than Job {ns}/train's parallelism (2)"
        assert expected in body and "pods.imex-webhook.io" in body, body
        with pytest.raises(ApiCallError) as refused:
            real_cluster.api.create(pod)
        assert refused.value.status == 400 and expected in refused.value.body, refused.value.body
        assert not real_cluster.api.list("Pod", ns)
    finally:
        real_cluster.cleanup(ns)
        real_cluster.api.delete("Job", ns, "train")
