"""Our admission next to Kubernetes 1.37's topology-aware workload scheduling (KEP-5732, docs/GROUPS.md,
"Kubernetes 1.37 gang and topology-aware scheduling"), through the real kube-apiserver and kube-scheduler
with the TopologyAwareWorkloadScheduling gate on: a gang PodGroup whose topology constraint names the clique
label gets no pod affinity of ours (the pods say why) and still lands whole in one clique, with the
scheduler's placements per clique and our extender's reserved domain agreeing; a gang PodGroup with no
topology constraint gets our pod affinity as before and lands in one clique too."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, RealCluster
from tests.e2e.kubeapi import eventually
from webhook.domain import keys

pytestmark = pytest.mark.realcluster

MEMBERS = 3


def _member(ns: str, name: str, group: str) -> dict[str, Any]:
    pod = objects.pod(ns, name, gpus=GPUS_PER_NODE, claims=[scenario.channel(group)])
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def _admitted(cluster: RealCluster, ns: str, group: str, ready: str) -> dict[str, Any]:
    """A member as admission would patch it once the webhook's caches hold the PodGroup and the claim template
    (a dry run, so nothing is created): ``ready`` is the annotation that shows they do."""
    def probe() -> dict[str, Any] | None:
        pod: dict[str, Any] = cluster.api.call("POST", cluster.api.path("Pod", ns), _member(ns, "probe", group),
                                               params={"dryRun": "All"})
        return pod if ready in pod["metadata"].get("annotations", {}) else None
    return eventually(probe, 20, what=f"the webhook's caches holding PodGroup {ns}/{group}")


def _group_affinity(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms = pod["spec"].get("affinity", {}).get("podAffinity", {}) \
        .get("requiredDuringSchedulingIgnoredDuringExecution", [])
    return [t for t in terms if keys.GROUP_LABEL in t.get("labelSelector", {}).get("matchLabels", {})]


def _run_gang(cluster: RealCluster, ns: str, group: str, topology_key: str | None) -> tuple[list[dict[str, Any]],
                                                                                              dict[str, str]]:
    scenario.computedomain(cluster, ns, group, MEMBERS)
    stored = cluster.api.create(objects.pod_group(ns, group, MEMBERS, topology_key))
    # The API server keeps the constraint only with the gate on: what the scheduler and our cache read.
    expected = {"topology": [{"key": topology_key}]} if topology_key else None
    assert stored["spec"].get("schedulingConstraints") == expected, stored["spec"]
    ready = keys.UPSTREAM_TOPOLOGY_ANNOTATION if topology_key else keys.GROUP_ID_ANNOTATION
    _admitted(cluster, ns, group, ready)
    names = [f"{group}-{i}" for i in range(MEMBERS)]
    created = [cluster.api.create(_member(ns, name, group)) for name in names]
    return created, cluster.wait_bound(ns, names, timeout=45)


def test_a_pod_group_constrained_on_the_clique_gets_no_pod_affinity_of_ours_and_lands_in_one_clique(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("upstream-topology")
    started = time.monotonic()
    try:
        created, placed = _run_gang(real_cluster, ns, "tas", keys.CLIQUE_LABEL)
        for pod in created:
            annotations = pod["metadata"]["annotations"]
            assert _group_affinity(pod) == [], pod["spec"].get("affinity")
            assert annotations[keys.UPSTREAM_TOPOLOGY_ANNOTATION] == \
                f"PodGroup tas constrains topology to {keys.CLIQUE_LABEL}; imex-webhook's pod affinity left out"
            assert pod["metadata"]["labels"][keys.GROUP_LABEL] and annotations[keys.GROUP_ID_ANNOTATION]
            assert pod["spec"]["schedulerName"] == "imex-scheduler"
        assert len(scenario.domains_of(placed)) == 1 and len(set(placed.values())) == MEMBERS, placed
        (reservation,) = real_cluster.reservations(ns)
        cliques = {real_cluster.api.get("Node", None, n)["metadata"]["labels"][keys.CLIQUE_LABEL]
                   for n in placed.values()}
        assert cliques == {reservation["spec"]["domain"]}, (cliques, reservation["spec"])
    finally:
        real_cluster.cleanup(ns)
    assert time.monotonic() - started < 60


def test_a_pod_group_with_no_topology_constraint_gets_our_pod_affinity_and_lands_in_one_clique(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("no-upstream-topology")
    try:
        created, placed = _run_gang(real_cluster, ns, "plain", None)
        for pod in created:
            (term,) = _group_affinity(pod)
            assert term["topologyKey"] == keys.DOMAIN_LABEL
            assert keys.UPSTREAM_TOPOLOGY_ANNOTATION not in pod["metadata"]["annotations"]
        assert len(scenario.domains_of(placed)) == 1 and len(set(placed.values())) == MEMBERS, placed
    finally:
        real_cluster.cleanup(ns)
