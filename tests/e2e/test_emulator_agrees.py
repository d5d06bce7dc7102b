"""The scheduling-cycle emulator (webhook/sim/cycle) and the real kube-scheduler decide the same pods alike.

Each case is decided twice against the same cluster and the same running extender: first by the emulator
(the pod as admission returns it from a server-side dry run; the cluster as the API server lists it; our
extender reached over TLS), then by the real scheduler (the pod created for real). They must agree on the
outcome: the same FailedScheduling message for a pod that fits nowhere, and for a placed pod a node the
emulator found feasible, out of as many feasible nodes as the scheduler reports. The emulator runs only
the scheduling cycle, so it never binds anything itself.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.conftest import RealCluster
from tests.e2e.kubeapi import eventually
from webhook.domain import keys
from webhook.service import deploy
from webhook.sim import cycle
from webhook.sim.extender_http import HttpExtender

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]

NS = "differential"


class ScheduleOnly(HttpExtender):
    """Our running service over TLS; the differential check runs scheduling cycles only, never a bind."""

    def bind(self, args: dict[str, Any]) -> Any:
        raise AssertionError("the differential check runs scheduling cycles only")


def _pod(name: str, *, gpus: int = 0, selector: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None, claim: str | None = None) -> dict[str, Any]:
    pod = objects.pod(NS, name, gpus=gpus, annotations=annotations,
                      claims=[{"name": "gpus", "resourceClaimName": claim}] if claim else None)
    pod["spec"]["schedulerName"] = deploy.SCHEDULER_NAME
    if selector:
        pod["spec"]["nodeSelector"] = selector
    return pod


H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
CASES = {
    "a pod for H100 nodes fits only the two HGX nodes": _pod("hgx", gpus=4, selector=H100),
    "a pod for 9 GPUs fits nowhere": _pod("nine", gpus=9),
    "a pod for a product no node has matches no node": _pod("b300", gpus=1,
                                                            selector={"nvidia.com/gpu.product": "NVIDIA-B300"}),
    "a group bigger than every domain gets our reason": _pod(
        "giant", gpus=4, annotations={keys.GROUP_ANNOTATION: "giant", keys.GROUP_SIZE_ANNOTATION: "9"}),
    "a pod whose claim wants 8 DRA GPUs fits no node": _pod("dra-eight", claim="eight-gpus"),
    "a pod with one DRA claim of 4 GPUs fits a DRA node": _pod("dra-four", claim="four-gpus"),
}


def _cluster(api: Any) -> cycle.ClusterState:
    return cycle.parse_cluster(
        api.list("Node"), api.list("Pod"), claims=api.list("ResourceClaim"), slices=api.list("ResourceSlice"),
        device_classes=api.list("DeviceClass"), namespaces=api.list("Namespace"))


def _claim(name: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": objects.GPU_CLASS, "allocationMode": "ExactCount", "count": gpus}}]}}}


def _real_outcome(cluster: RealCluster, name: str) -> tuple[str | None, str]:
    def decided() -> tuple[str | None, str] | None:
        pod = cluster.api.get("Pod", NS, name)
        if pod["spec"].get("nodeName"):
            return pod["spec"]["nodeName"], ""
        events = cluster.events_for(NS, name, "FailedScheduling")
        return (None, events[0]["note"]) if events else None
    return eventually(decided, 60, what=f"the real scheduler's decision on {name}")


def _feasible_count(cluster: RealCluster, name: str) -> int | None:
    found = re.findall(rf'"Successfully bound pod to node" pod="{NS}/{name}" .*? feasibleNodes=(\d+)',
                       cluster.plane.log_tail("kube-scheduler", 4000))
    return int(found[-1]) if found else None


@pytest.mark.parametrize("case", list(CASES))
def test_the_emulator_and_the_real_scheduler_decide_alike(real_cluster: RealCluster, case: str) -> None:
    api = real_cluster.api
    real_cluster.namespace(NS)
    api.create(_claim("eight-gpus", 8), exist_ok=True)
    api.create(_claim("four-gpus", 4), exist_ok=True)
    pod = CASES[case]
    name = pod["metadata"]["name"]
    try:
        admitted = api.call("POST", api.path("Pod", NS), pod, params={"dryRun": "All"})
        config = cycle.parse_config(real_cluster.scheduler_config())
        extender = ScheduleOnly(real_cluster.url, str(real_cluster.tls_dir / "ca.crt"), config.extenders[0],
                                session=real_cluster.scheduler_session())
        attempt = cycle.schedule(config, _cluster(api), admitted, extender)
        api.create(pod)
        node, message = _real_outcome(real_cluster, name)
        if node is None:
            assert attempt.node is None, (attempt.node, message)
            assert attempt.event == message
        else:
            assert attempt.node is not None, attempt.message
            assert node in attempt.feasible, (node, attempt.feasible)
            assert _feasible_count(real_cluster, name) == len(attempt.feasible)
    finally:
        real_cluster.cleanup(NS)
