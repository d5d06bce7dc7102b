"""Fabric health through the real kube-scheduler (docs/SCHEDULER.md, "Fabric health"): a group avoids a domain
whose NVLink fabric a node agent reports degraded while a healthy one fits, even when the degraded one is
the better fit; a node reported unhealthy takes no member, and a group that needs it waits and binds once
the label is gone; a running group whose domain degrades stays, and its ComputeDomain gets a Warning Event.

The node agent's label (imex-webhook.io/fabric-health) is set by hand here, as the agent writes it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import scenario
from tests.e2e.conftest import GPUS_PER_NODE, RACKS, RealCluster
from tests.e2e.kubeapi import eventually
from webhook.domain import keys

pytestmark = pytest.mark.realcluster


def _label(cluster: RealCluster, node: str, health: str | None) -> None:
    cluster.api.merge_patch("Node", None, node, {"metadata": {"labels": {keys.HEALTH_LABEL: health}}})


def _cd_job(cluster: RealCluster, ns: str, name: str, pods: int, **pod_args: Any) -> list[str]:
    scenario.computedomain(cluster, ns, name, pods)
    return scenario.members(cluster, ns, name, pods, gpus=GPUS_PER_NODE, claims=[scenario.channel(name)],
                            **pod_args)


def _nodes(rack: str) -> list[str]:
    return [f"gb200-{rack}-{i:02d}" for i in range(RACKS[rack][1])]


def test_a_group_avoids_the_better_fitting_domain_whose_fabric_is_degraded(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("avoid-degraded")
    # Rack b (3 nodes) is the best fit for 3 pods; one of its nodes reports a degraded fabric.
    _label(real_cluster, _nodes("b")[0], "degraded")
    try:
        names = _cd_job(real_cluster, ns, "careful", 3)
        placed = real_cluster.wait_bound(ns, names)
        assert scenario.domains_of(placed) == {"a"}, placed
    finally:
        _label(real_cluster, _nodes("b")[0], None)
        real_cluster.cleanup(ns)


def test_an_unhealthy_node_takes_no_member_and_the_group_binds_once_it_recovers(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("unhealthy-node")
    sick = _nodes("a")[1]
    _label(real_cluster, sick, "unhealthy")
    try:
        names = _cd_job(real_cluster, ns, "whole-rack", len(_nodes("a")))
        eventually(lambda: real_cluster.events_for(ns, names[0], "FailedScheduling"), 60,
                   what=f"a FailedScheduling event for {names[0]}")
        assert not any(real_cluster.api.get("Pod", ns, n)["spec"].get("nodeName") for n in names)
        _label(real_cluster, sick, "healthy")  # the Node update requeues the pods
        placed = real_cluster.wait_bound(ns, names)
        assert scenario.domains_of(placed) == {"a"} and sick in placed.values(), placed
    finally:
        _label(real_cluster, sick, None)
        real_cluster.cleanup(ns)


def test_a_running_groups_domain_degrading_warns_on_its_compute_domain(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("degrades-while-running")
    names = _cd_job(real_cluster, ns, "long-run", 2)
    try:
        placed = real_cluster.wait_bound(ns, names)
        (rack,) = scenario.domains_of(placed)
        node = _nodes(rack)[-1]
        _label(real_cluster, node, "degraded")

        def warned() -> list[dict[str, Any]]:
            return [e for e in real_cluster.api.list("Event", ns)
                    if e.get("reason") == "DomainDegraded" and e.get("regarding", {}).get("kind") == "ComputeDomain"]

        (event,) = eventually(warned, 60, what="a DomainDegraded Event on the ComputeDomain")
        assert event["type"] == "Warning" and node in event["note"], event
        assert real_cluster.wait_bound(ns, names) == placed  # nothing moved
    finally:
        for rack in RACKS:
            for node in _nodes(rack):
                _label(real_cluster, node, None)
        real_cluster.cleanup(ns)
