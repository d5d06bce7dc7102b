"""Groups placed by the real kube-scheduler, admitted by the real kube-apiserver through our webhook.

Each scenario creates objects as the controllers of a real cluster would (ComputeDomain and its channel
template, Job, pods, claims made from templates by the real ResourceClaim controller) and asserts what the
API server then holds: where every pod was bound, the DomainReservation, the claims' allocations, and
the scheduler's own FailedScheduling events.
"""

from __future__ import annotations

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import RACKS, RealCluster
from tests.e2e.kubeapi import ApiCallError, eventually
from webhook.domain import keys

# The first test also waits for the session fixture, which may build the control plane from source.
pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]


def test_a_compute_domain_job_with_device_plugin_gpus_lands_whole_in_the_best_fitting_clique(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("cd-device-plugin")
    try:
        scenario.computedomain(real_cluster, ns, "train-3", 3)
        names = scenario.members(real_cluster, ns, "train-3", 3, gpus=4, claims=[scenario.channel("train-3")])
        pod = real_cluster.api.get("Pod", ns, names[0])
        assert pod["spec"]["schedulerName"] == "imex-scheduler", "admission sends the pod to the dedicated profile"
        placed = real_cluster.wait_bound(ns, names)
        assert scenario.domains_of(placed) == {"b"}, f"3 pods x 4 GPUs fit rack B (3 nodes) exactly: {placed}"
        assert len(set(placed.values())) == 3, "one ComputeDomain pod per node (one channel-0 per node)"
        for claim in real_cluster.api.list("ResourceClaim", ns):
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["pool"] in placed.values() and result["device"] == "channel-0"
    finally:
        real_cluster.cleanup(ns)


def test_a_compute_domain_job_whose_gpus_come_only_from_dra_claims_still_goes_through_the_extender(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("cd-dra")
    try:
        scenario.computedomain(real_cluster, ns, "train-2", 2)
        real_cluster.api.create(objects.gpu_template(ns, "four-gpus", 4))
        gpus = {"name": "gpus", "resourceClaimTemplateName": "four-gpus"}
        names = scenario.members(real_cluster, ns, "train-2", 2, claims=[scenario.channel("train-2"), gpus])
        placed = real_cluster.wait_bound(ns, names)
        assert scenario.domains_of(placed) == {"d"}, f"2 DRA nodes of rack D are the best fit: {placed}"
        assert real_cluster.reservations(ns), "the extender, not the default binder, placed the group"
    finally:
        real_cluster.cleanup(ns)


def test_a_group_no_domain_can_host_gets_our_reason_in_the_real_failed_scheduling_event(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("too-big")
    try:
        size = max(count for _, count, _ in RACKS.values()) + 2
        annotations = {keys.GROUP_ANNOTATION: "giant", keys.GROUP_SIZE_ANNOTATION: str(size)}
        real_cluster.api.create(objects.pod(ns, "giant-0", gpus=4, annotations=annotations))
        events = eventually(lambda: real_cluster.events_for(ns, "giant-0", "FailedScheduling"), 60,
                            what="a FailedScheduling event for giant-0")
        note = events[-1]["note"]
        assert "no domain can host" in note and f"{size} pods" in note, note
        assert real_cluster.api.get("Pod", ns, "giant-0")["spec"].get("nodeName") is None
    finally:
        real_cluster.cleanup(ns)


def test_a_pod_created_before_its_claim_template_waits_then_joins_its_group_in_one_domain(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("template-late")
    try:
        cd = scenario.computedomain(real_cluster, ns, "late-2", 2, template=False)
        names = scenario.members(real_cluster, ns, "late-2", 2, gpus=4, claims=[scenario.channel("late-2")])
        pod = real_cluster.api.get("Pod", ns, names[0])
        assert pod["spec"]["schedulerName"] == "imex-scheduler", (
            "a pod whose template is not there yet must still reach the dedicated scheduler")
        assert pod["spec"].get("nodeName") is None
        real_cluster.api.create(objects.channel_template(ns, "late-2", cd["metadata"]["uid"]))
        placed = real_cluster.wait_bound(ns, names, timeout=90)
        assert len(scenario.domains_of(placed)) == 1, placed
    finally:
        real_cluster.cleanup(ns)


def test_without_the_webhook_the_api_server_refuses_group_pods_and_admits_the_others(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("webhook-down")
    real_cluster.stop_extender()
    try:
        with pytest.raises(ApiCallError) as refused:
            grouped = {keys.GROUP_ANNOTATION: "g", keys.GROUP_SIZE_ANNOTATION: "1"}
            real_cluster.api.create(objects.pod(ns, "grouped", gpus=4, annotations=grouped))
        assert refused.value.status == 500 and "pods.imex-webhook.io" in refused.value.body
        plain = real_cluster.api.create(objects.pod(ns, "plain", gpus=1))
        assert plain["spec"]["schedulerName"] == "default-scheduler"
    finally:
        real_cluster.cleanup(ns)
        real_cluster.start_extender("imex-webhook")


def test_two_replicas_behind_one_service_place_one_group_in_one_domain(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("replicas")
    real_cluster.start_extender("imex-webhook-2")
    annotations = {keys.GROUP_ANNOTATION: "pair", keys.GROUP_SIZE_ANNOTATION: "3"}
    try:
        real_cluster.api.create(objects.pod(ns, "pair-0", gpus=4, annotations=annotations))
        first = real_cluster.wait_bound(ns, ["pair-0"])
        # The next connections go to the other replica: it must find the group's domain in the API server.
        real_cluster.proxy.drop_connections()
        for name in ("pair-1", "pair-2"):
            real_cluster.api.create(objects.pod(ns, name, gpus=4, annotations=annotations))
            real_cluster.wait_bound(ns, [name])
            real_cluster.proxy.drop_connections()
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in real_cluster.api.list("Pod", ns)}
        assert scenario.domains_of(placed) == scenario.domains_of(first), placed
        assert all(real_cluster.proxy.connections[s.port] for s in real_cluster.extenders.values()), (
            "both replicas served the scheduler or the API server", real_cluster.proxy.connections)
        decided = [name for name, s in real_cluster.extenders.items() if f"pod={ns}/pair-" in s.output()]
        assert len(decided) == 2, f"both replicas decided for the group: {decided}"
        (reservation,) = real_cluster.reservations(ns)
        assert reservation["spec"]["size"] == 3
    finally:
        real_cluster.cleanup(ns)
        real_cluster.stop_extender("imex-webhook-2")


def test_a_higher_priority_group_preempts_inside_one_domain_only(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("preempt")
    for name, value in (("batch-low", 100), ("train-high", 100000)):
        real_cluster.api.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                 "metadata": {"name": name}, "value": value}, exist_ok=True)
    try:
        fillers = real_cluster.fill(ns, "a", "batch-low") + real_cluster.fill(ns, "b", "batch-low")
        annotations = {keys.GROUP_ANNOTATION: "urgent", keys.GROUP_SIZE_ANNOTATION: "3"}
        names = [f"urgent-{i}" for i in range(3)]
        for name in names:
            real_cluster.api.create(objects.pod(ns, name, gpus=4, annotations=annotations,
                                                priority_class="train-high"))
        placed = real_cluster.wait_bound(ns, names, timeout=120)
        assert scenario.domains_of(placed) == {"b"}, f"rack B (3 nodes) is the best fit once emptied: {placed}"
        left = {p["metadata"]["name"] for p in real_cluster.api.list("Pod", ns)}
        evicted = sorted(set(fillers) - left)
        assert evicted == ["filler-b-0", "filler-b-1", "filler-b-2"], (
            f"only pods inside the group's domain are evicted: {evicted}")
    finally:
        real_cluster.cleanup(ns)
