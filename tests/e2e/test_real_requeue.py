"""A freed domain is offered at once, in the real kube-scheduler (docs/SCHEDULER.md, "Retrying the groups we
refused").

Every scenario leaves one rack that fits a four-pod group (rack A) and fills or withholds the rest, then
frees rack A the way a cluster does (a job deleted, a job finished, a node uncordoned) and measures how long
the waiting group takes to bind. kube-scheduler's own fallback for a pod nothing requeues is its five-minute
flush of the unschedulable queue, so a bound well below that (``BOUND``) tells the two apart even on a busy
machine; the figures themselves are printed in the run's summary, not asserted.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, RACKS, RETRY_SECONDS, RealCluster
from tests.e2e.kubeapi import ApiCallError, eventually
from webhook.domain import requeue
from webhook.domain.model import Reservation
from webhook.wire.domain_reservation import reservation_name, reservation_object

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]

BOUND = 60.0  # seconds; kube-scheduler alone would wait up to 300


def _cd_job(cluster: RealCluster, ns: str, name: str, pods: int = 4, **pod_args: Any) -> list[str]:
    scenario.computedomain(cluster, ns, name, pods)
    return scenario.members(cluster, ns, name, pods, gpus=GPUS_PER_NODE, claims=[scenario.channel(name)],
                            **pod_args)


def _refused(cluster: RealCluster, ns: str, pod: str) -> None:
    """Wait until the scheduler has tried ``pod`` and found no node: it now sits in the unschedulable queue."""
    eventually(lambda: cluster.events_for(ns, pod, "FailedScheduling"), 60, what=f"a FailedScheduling event for {pod}")


def _bound_after(cluster: RealCluster, ns: str, names: list[str], since: float, scenario_name: str) -> dict[str, str]:
    placed = cluster.wait_bound(ns, names, timeout=BOUND)
    RETRY_SECONDS[scenario_name] = time.monotonic() - since
    return placed


def _delete_job(cluster: RealCluster, ns: str, name: str, pods: list[str]) -> None:
    """As ``kubectl delete`` of the Job and its ComputeDomain does: the pods go, then the rest."""
    for pod in pods:
        cluster.api.delete("Pod", ns, pod)
    cluster.api.delete("Job", ns, name)
    cluster.api.delete("ComputeDomain", ns, name)


def _job_holding_rack_a(cluster: RealCluster, ns: str, name: str) -> list[str]:
    """Rack B full, then a 4-pod job bound in rack A: no other rack can take a second one."""
    cluster.fill(ns, "b")
    names = _cd_job(cluster, ns, name)
    assert scenario.domains_of(cluster.wait_bound(ns, names)) == {"a"}
    return names


def test_a_job_resubmitted_right_after_its_deletion_binds_in_the_domain_it_freed(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("resubmit")
    try:
        run1 = _job_holding_rack_a(real_cluster, ns, "run1")
        deleted = time.monotonic()
        _delete_job(real_cluster, ns, "run1", run1)
        run2 = _cd_job(real_cluster, ns, "run2")
        placed = _bound_after(real_cluster, ns, run2, deleted, "resubmitted job")
        assert scenario.domains_of(placed) == {"a"}, placed
        eventually(lambda: [r for r in real_cluster.reservations(ns) if r["spec"]["groupName"] == "run1"] == [],
                   10, what="run1's reservation released")
    finally:
        real_cluster.cleanup(ns)


def test_a_waiting_group_starts_when_the_group_holding_its_domain_finishes(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("finish")
    try:
        first = _job_holding_rack_a(real_cluster, ns, "first")
        second = _cd_job(real_cluster, ns, "second")
        _refused(real_cluster, ns, second[0])
        finished = time.monotonic()
        for pod in first:  # the containers exited: the kubelet reports the pods Succeeded, they stay
            real_cluster.set_phase(ns, pod, "Succeeded")
        placed = _bound_after(real_cluster, ns, second, finished, "group finished")
        assert scenario.domains_of(placed) == {"a"}, placed
    finally:
        real_cluster.cleanup(ns)


def test_a_group_refused_for_a_reservation_that_is_then_deleted_is_retried_by_our_condition(
        real_cluster: RealCluster) -> None:
    """Rack A is held by a reservation left by a replica that died (a group none of whose pods exist). When
    the operator deletes it, nothing kube-scheduler watches changes: only our retry can wake the group."""
    ns = real_cluster.namespace("orphan-hold")
    orphan = Reservation(group_id=f"ann:{ns}/orphan", group_name="orphan", namespace=ns, domain=RACKS["a"][0],
                         size=RACKS["a"][1], gpus_per_pod=GPUS_PER_NODE, one_pod_per_node=False,
                         created_at=time.time())
    try:
        real_cluster.fill(ns, "b")
        real_cluster.api.create(reservation_object(orphan, "a-replica-that-died"))
        waiting = _cd_job(real_cluster, ns, "waiting")
        _refused(real_cluster, ns, waiting[0])
        released = time.monotonic()
        real_cluster.api.delete("DomainReservation", None, reservation_name(orphan.group_id))
        placed = _bound_after(real_cluster, ns, waiting, released, "reservation deleted")
        assert scenario.domains_of(placed) == {"a"}, placed
        conditions = [c for p in waiting for c in real_cluster.api.get("Pod", ns, p)["status"].get("conditions", [])
                      if c["type"] == requeue.CONDITION]
        assert conditions, "kube-scheduler saw no other event: our condition must have woken the group"
        assert all(c["reason"] == requeue.REASON and "can host group" in c["message"]
                   for c in conditions), conditions
        group = "cd:" + real_cluster.api.get("ComputeDomain", ns, "waiting")["metadata"]["uid"]
        retries = [line for line in real_cluster.extenders["imex-webhook"].output().splitlines()
                   if "verb=retry" in line and f"pod={group}" in line]
        assert retries, "the extender logged the retry it made"
    finally:
        with contextlib.suppress(ApiCallError):
            real_cluster.api.delete("DomainReservation", None, reservation_name(orphan.group_id))
        real_cluster.cleanup(ns)


def test_a_group_waiting_for_a_cordoned_rack_starts_when_it_is_uncordoned(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("uncordon")
    real_cluster.cordon("a")
    try:
        real_cluster.fill(ns, "b")
        names = _cd_job(real_cluster, ns, "after-maintenance")
        _refused(real_cluster, ns, names[0])
        uncordoned = time.monotonic()
        real_cluster.cordon("a", False)
        placed = _bound_after(real_cluster, ns, names, uncordoned, "rack uncordoned")
        assert scenario.domains_of(placed) == {"a"}, placed
    finally:
        real_cluster.cordon("a", False)
        real_cluster.cleanup(ns)


def test_a_kubernetes_gang_whose_pods_use_a_claim_template_gets_its_claims_and_one_domain(
        real_cluster: RealCluster) -> None:
    """A PodGroup (scheduling.k8s.io/v1beta1, gang of 3) whose pods take their IMEX channel from a
    ComputeDomain's claim template: the ResourceClaim controller makes the claims only with the
    GenericWorkload feature on, as the API server and scheduler have it."""
    ns = real_cluster.namespace("gang-claims")
    try:
        scenario.computedomain(real_cluster, ns, "gang-3", 3)
        real_cluster.api.create({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                                 "metadata": {"name": "gang-3", "namespace": ns},
                                 "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}})
        names = [f"gang-3-{i}" for i in range(3)]
        for name in names:
            pod = objects.pod(ns, name, gpus=GPUS_PER_NODE, claims=[scenario.channel("gang-3")])
            pod["spec"]["schedulingGroup"] = {"podGroupName": "gang-3"}
            real_cluster.api.create(pod)
        placed = real_cluster.wait_bound(ns, names, timeout=90)
        assert len(scenario.domains_of(placed)) == 1 and len(set(placed.values())) == 3, placed
        claims = real_cluster.api.list("ResourceClaim", ns)
        assert len(claims) == 3, [c["metadata"]["name"] for c in claims]
        for claim in claims:
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["pool"] in placed.values() and result["device"] == "channel-0"
    finally:
        real_cluster.cleanup(ns)
