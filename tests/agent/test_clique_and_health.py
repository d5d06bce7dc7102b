"""Pure decisions (``webhook.agent.clique``): the node's clique and its fabric health, from what NVML
reported on each simulated node, and table-driven from single fabric readings.

Covered: an NVL72 tray gets ``<clusterUUID>.<cliqueID>``; a COMPLETED GPU with a non-success status, an
all-zero cluster UUID (HGX), GPUs that disagree, a fabric still training and a driver without fabric
support give no clique, each with a reason that says why; a lost GPU does not cost the others their
clique; health is healthy / degraded / unhealthy / none from healthSummary and healthMask, the worst GPU
deciding the node.
"""

from __future__ import annotations

import pytest

from tests.agent.conftest import Make
from webhook.agent import clique
from webhook.agent.model import ZERO_UUID, Fabric, FabricState, Gpu, Health, HealthSummary

CLUSTER = "9277d399-7d0a-4d4a-9b0e-d85bb19ce2b0"


def test_an_nvl72_tray_is_in_the_clique_all_its_gpus_report(simulate: Make) -> None:
    decision = clique.node_clique(simulate("nvl72-tray").nvml.gpus())

    assert decision.clique == f"{CLUSTER}.32766"
    assert decision.reason == f"4 GPUs in clique {CLUSTER}.32766"


def test_a_completed_gpu_with_a_failure_status_leaves_the_node_without_a_clique(simulate: Make) -> None:
    decision = clique.node_clique(simulate("completed-not-success").nvml.gpus())

    assert decision.clique is None
    assert decision.reason == ("GPU-2a000000-0000-4000-8000-000000000003 (0002:01:00.0): fabric status "
                               "'Insufficient Resources', not Success")


def test_an_hgx_node_with_an_all_zero_cluster_uuid_has_no_clique(simulate: Make) -> None:
    gpus = simulate("hgx-zero-uuid").nvml.gpus()

    decision = clique.node_clique(gpus)

    assert decision.clique is None
    assert decision.reason == "all 4 GPUs: cluster UUID is all zero (NVLink without a multi-node fabric)"
    assert clique.node_health(gpus) is Health.NONE


def test_gpus_that_disagree_on_the_clique_leave_the_node_without_one(simulate: Make) -> None:
    decision = clique.node_clique(simulate("clique-disagree").nvml.gpus())

    assert decision.clique is None
    assert decision.reason == ("GPUs disagree on the clique: 3183419e-2c1b-4f59-a7a4-6b0c7f1b9d11.17044 (2 GPUs), "
                               "bbc2edac-5d57-4c38-9d39-0b4e5e6a1f20.17044 (2 GPUs)")


def test_a_driver_without_fabric_support_gives_no_clique_and_says_so(simulate: Make) -> None:
    gpus = simulate("driver-without-fabric").nvml.gpus()

    decision = clique.node_clique(gpus)

    assert decision.clique is None
    assert decision.reason == ("no GPU reports a multi-node NVLink fabric "
                               "(nvmlDeviceGetGpuFabricInfoV: Not Supported)")
    assert clique.node_health(gpus) is Health.NONE


def test_a_lost_gpu_does_not_cost_the_others_their_clique(simulate: Make) -> None:
    node = simulate("gpu-lost")
    node.nvml.gpus()

    gpus = node.nvml.gpus()

    assert not gpus[2].valid
    assert clique.node_clique(gpus).clique == f"{CLUSTER}.32766"
    assert clique.node_clique(gpus).reason == f"3 GPUs in clique {CLUSTER}.32766"


def test_no_gpus_and_only_unreadable_gpus_give_no_clique() -> None:
    assert clique.node_clique([]) == clique.CliqueDecision(None, "no GPUs")
    lost = Gpu(index=0, error="nvmlDeviceGetUUID: GPU is lost")
    assert clique.node_clique([lost]).reason == "no GPU could be read (nvmlDeviceGetUUID: GPU is lost)"


def _gpu(**fabric: object) -> Gpu:
    base: dict[str, object] = {"state": FabricState.COMPLETED, "status_ok": True, "status": "Success",
                               "cluster_uuid": CLUSTER, "clique_id": 7, "health_summary": HealthSummary.HEALTHY}
    return Gpu(index=0, uuid="GPU-x", pci_address="0000:01:00.0", fabric=Fabric(**{**base, **fabric}))  # type: ignore[arg-type]


@pytest.mark.parametrize(("fabric", "health", "flags"), [
    ({}, Health.HEALTHY, ()),
    ({"health_summary": HealthSummary.UNSUPPORTED}, Health.HEALTHY, ()),
    ({"health": {"degradedBandwidth": "false", "gfmState": "connected"}}, Health.HEALTHY, ()),
    ({"health_summary": HealthSummary.LIMITED_CAPACITY}, Health.DEGRADED, ("summary:LimitedCapacity",)),
    ({"health": {"degradedBandwidth": "true"}}, Health.DEGRADED, ("degradedBandwidth",)),
    ({"health": {"routeRecovery": "true", "accessTimeoutRecovery": "true"}}, Health.DEGRADED,
     ("routeRecovery", "accessTimeoutRecovery")),
    ({"health": {"gfmState": "disconnected"}}, Health.DEGRADED, ("gfmState:disconnected",)),
    ({"health": {"partitionAssigned": "false"}}, Health.DEGRADED, ("partitionAssigned:false",)),
    ({"health_summary": HealthSummary.UNHEALTHY}, Health.UNHEALTHY, ("summary:Unhealthy",)),
    ({"health": {"routeUnhealthy": "true"}}, Health.UNHEALTHY, ("routeUnhealthy",)),
    ({"health": {"incorrectConfiguration": "insufficientNvlinks"}}, Health.UNHEALTHY,
     ("incorrectConfiguration:insufficientNvlinks",)),
    ({"state": FabricState.IN_PROGRESS}, Health.UNHEALTHY, ("state:InProgress",)),
    ({"status_ok": False, "status": "Insufficient Resources"}, Health.UNHEALTHY, ("status:Insufficient Resources",)),
    ({"cluster_uuid": ZERO_UUID}, Health.NONE, ()),
    ({"state": FabricState.UNSUPPORTED}, Health.NONE, ()),
], ids=lambda v: str(v) if not isinstance(v, dict) else ",".join(f"{k}={v[k]}" for k in v) or "defaults")
def test_gpu_health_follows_the_summary_and_the_mask(fabric: dict[str, object], health: Health,
                                                     flags: tuple[str, ...]) -> None:
    result = clique.gpu_health(_gpu(**fabric))

    assert result.health is health
    assert result.flags == flags


def test_the_worst_readable_gpu_decides_the_node_health() -> None:
    gpus = [_gpu(), _gpu(health={"degradedBandwidth": "true"}), Gpu(index=9, error="lost")]

    assert clique.node_health(gpus) is Health.DEGRADED
    assert clique.node_health([*gpus, _gpu(health_summary=HealthSummary.UNHEALTHY)]) is Health.UNHEALTHY
    assert clique.node_health([]) is Health.NONE
    assert Health.DEGRADED.label == "degraded"
