"""GPU pods outside any group, packed, through the real kube-apiserver and kube-scheduler (docs/SCHEDULER.md,
"GPU pods outside any group"): with ``--pack-plain-gpu-pods`` and the matchConditions of the kustomize
component manifests/components/pack-plain-gpu-pods (compiled by the real API server against the Pod schema),
admission sends a plain GPU pod to the dedicated profile and the extender puts it beside a running group,
so the whole free rack stays whole for the next ComputeDomain; a pod without GPUs is not even sent."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.e2e import install, objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, RealCluster
from webhook.domain import keys
from webhook.domain.policy import Policy

pytestmark = pytest.mark.realcluster

COMPONENT = install.MANIFESTS / "components" / "pack-plain-gpu-pods"


def _component_conditions() -> list[dict[str, str]]:
    (op,) = yaml.safe_load((COMPONENT / "match-gpu-pods.yaml").read_text())
    assert op["path"] == "/webhooks/0/matchConditions/0"
    condition: dict[str, str] = op["value"]
    return [condition]


def _job(cluster: RealCluster, ns: str, name: str, pods: int) -> list[str]:
    body = objects.computedomain(ns, name, pods)
    cd = cluster.api.create(body)
    cluster.api.create(objects.channel_template(ns, name, cd["metadata"]["uid"]))
    return scenario.members(cluster, ns, name, pods, gpus=GPUS_PER_NODE, claims=[scenario.channel(name)])


def _plain(cluster: RealCluster, ns: str, name: str, gpus: int) -> dict[str, Any]:
    created: dict[str, Any] = cluster.api.create(objects.pod(ns, name, gpus=gpus))
    return created


def test_plain_gpu_pods_fill_the_used_rack_and_leave_the_free_one_whole(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("plain-pods")
    real_cluster.stop_extender()
    try:
        real_cluster.start_extender("imex-webhook", "--pack-plain-gpu-pods")
        real_cluster.register_webhook(_component_conditions())
        first = real_cluster.wait_bound(ns, _job(real_cluster, ns, "running", 2))
        assert scenario.domains_of(first) == {"b"}, first  # 3 nodes: the best fit for 2 pods, one node left
        small = _plain(real_cluster, ns, "notebook", 1)
        assert small["spec"]["schedulerName"] == Policy().scheduler_name
        assert keys.MUTATED_ANNOTATION in small["metadata"]["annotations"]
        cpu_only = _plain(real_cluster, ns, "cpu-only", 0)
        assert cpu_only["spec"]["schedulerName"] == "default-scheduler"  # not sent to the webhook at all
        assert keys.MUTATED_ANNOTATION not in cpu_only["metadata"].get("annotations", {})
        placed = real_cluster.wait_bound(ns, ["notebook"])
        assert scenario.domains_of(placed) == {"b"}, placed  # beside the running group, not in whole rack a
        _plain(real_cluster, ns, "inference", 2)
        placed.update(real_cluster.wait_bound(ns, ["inference"]))
        assert placed["inference"] == placed["notebook"], placed  # the same tray: best fit
        # Rack a stayed whole: a 4-pod ComputeDomain, which needs all of it, starts at once.
        whole = real_cluster.wait_bound(ns, _job(real_cluster, ns, "rack", 4))
        assert scenario.domains_of(whole) == {"a"}, whole
    finally:
        real_cluster.cleanup(ns)
        real_cluster.stop_extender()
        real_cluster.start_extender()
        real_cluster.register_webhook()
