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
from tests.e2e.kubeapi import eventually
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


def test_in_fabric_mode_plain_gpu_pods_created_at_once_never_share_a_nodes_gpus(real_cluster: RealCluster) -> None:
    """The fabric-mode profile leaves nvidia.com/gpu to the extender, so its cache alone keeps pods off full
    nodes; six 4-GPU pods at once for rack b's three free nodes (rack a and the HGX nodes full): three bind,
    one per node, and three wait with the extender's reason (webhook/state/assumed.py, the bind verb's check)."""
    ns = real_cluster.namespace("plain-fabric")
    api = real_cluster.api
    real_cluster.stop_extender()
    try:
        real_cluster.start_extender("imex-webhook", "--pack-plain-gpu-pods")
        real_cluster.register_webhook(_component_conditions())
        real_cluster.restart_scheduler(fabric=True)
        real_cluster.fill(ns, "a")
        for i in range(2):
            full = objects.pod(ns, f"filler-hgx-{i}", gpus=8)
            full["spec"]["nodeName"] = f"hgx-x-{i:02d}"
            api.create(full)
        names = [f"p{i}" for i in range(6)]
        for name in names:
            _plain(real_cluster, ns, name, GPUS_PER_NODE)

        def waiting() -> list[str] | None:
            pods = {p["metadata"]["name"]: p for p in api.list("Pod", ns) if p["metadata"]["name"] in names}
            unbound = [n for n, p in pods.items() if not p["spec"].get("nodeName")]
            told = [n for n in unbound if any("nvidia.com/gpu" in (e.get("note") or "")
                                              for e in real_cluster.events_for(ns, n, "FailedScheduling"))]
            return unbound if len(pods) == 6 and len(unbound) == 3 and told == unbound else None

        try:
            eventually(waiting, 90, what="three pods bound and three told why they wait")
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{real_cluster.explain(ns)}") from None
        used: dict[str, int] = {}
        for pod in api.list("Pod", ns):
            node = pod["spec"].get("nodeName")
            limit = pod["spec"]["containers"][0]["resources"].get("limits", {}).get(keys.GPU_RESOURCE, "0")
            if node:
                used[node] = used.get(node, 0) + int(limit)
        rack_b = {n: g for n, g in used.items() if n.startswith("gb200-b-")}
        assert rack_b == {f"gb200-b-{i:02d}": GPUS_PER_NODE for i in range(3)}, used
        assert all(g <= (8 if n.startswith("hgx") else GPUS_PER_NODE) for n, g in used.items()), used
    finally:
        real_cluster.restart_scheduler(fabric=False)
        real_cluster.cleanup(ns)
        real_cluster.stop_extender()
        real_cluster.start_extender()
        real_cluster.register_webhook()
