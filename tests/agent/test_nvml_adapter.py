"""The NVML adapter (``webhook.agent.nvml``) over the fake pynvml, one scenario per simulated node.

Covered: identity, memory, persistence, minor number and processes of each GPU; PCI addresses in sysfs
form; fabric info through ``nvmlDeviceGetGpuFabricInfoV`` with the v3 struct (state, status, cluster
UUID, clique, health summary, healthMask decoded into named fields), the v2 fallback, and a driver that
answers NOT_SUPPORTED; NVML missing; a GPU lost mid-run becomes a placeholder while the others keep
coming; a field NVML does not support is None; a hot-added GPU is seen only after a full re-init; GPUs
are found by UUID or PCI address; the real pynvml module has the names the adapter uses.
"""

from __future__ import annotations

import ctypes

import pytest

from tests.agent.conftest import Make
from webhook.agent.model import FabricState, HealthSummary
from webhook.agent.nvml import Nvml
from webhook.sim.nvml import FakePynvml

CLUSTER = "9277d399-7d0a-4d4a-9b0e-d85bb19ce2b0"


def test_an_nvl72_tray_reports_four_gpus_in_one_clique_with_decoded_health(simulate: Make) -> None:
    node = simulate("nvl72-tray")

    gpus = node.nvml.gpus()

    assert [g.uuid[-1] for g in gpus] == ["1", "2", "3", "4"]
    assert [g.pci_address for g in gpus] == ["0000:01:00.0", "0001:01:00.0", "0002:01:00.0", "0003:01:00.0"]
    first = gpus[0]
    assert first.name == "NVIDIA GB200" and first.memory_total == 189471 * 1024 * 1024
    assert first.persistence is True and first.minor == 0
    assert [(p.pid, p.kind) for p in first.processes or ()] == [(4242, "compute")]
    fabric = first.fabric
    assert fabric.state is FabricState.COMPLETED and fabric.status_ok and fabric.status == "Success"
    assert fabric.cluster_uuid == CLUSTER and fabric.clique_id == 32766
    assert fabric.clique == f"{CLUSTER}.32766"
    assert fabric.health_summary is HealthSummary.HEALTHY
    assert fabric.health == {"degradedBandwidth": "false", "routeRecovery": "false", "routeUnhealthy": "false",
                             "accessTimeoutRecovery": "false", "incorrectConfiguration": "none",
                             "partitionAssigned": "true", "gfmState": "connected"}
    assert node.nvml.driver == "570.133.20"


def test_a_non_success_fabric_status_is_reported_with_nvmls_words(simulate: Make) -> None:
    gpus = simulate("completed-not-success").nvml.gpus()

    broken = gpus[2].fabric
    assert broken.state is FabricState.COMPLETED
    assert not broken.status_ok and broken.status == "Insufficient Resources"
    assert broken.health_summary is HealthSummary.UNHEALTHY


def test_a_driver_without_fabric_support_means_no_fabric_not_a_broken_gpu(simulate: Make) -> None:
    gpus = simulate("driver-without-fabric").nvml.gpus()

    assert all(g.valid for g in gpus)
    assert all(not g.fabric.supported for g in gpus)
    assert gpus[0].fabric.note == "nvmlDeviceGetGpuFabricInfoV: Not Supported"


def test_a_driver_that_only_knows_struct_v2_is_asked_again_with_v2(simulate: Make) -> None:
    gpus = simulate("fabric-struct-v2").nvml.gpus()

    assert [g.fabric.clique for g in gpus] == [f"{CLUSTER}.4026"] * 2
    assert gpus[0].fabric.health_summary is HealthSummary.UNSUPPORTED
    assert gpus[0].fabric.health == {"degradedBandwidth": "true"}


def test_nvml_missing_is_reported_and_lists_no_gpu(simulate: Make) -> None:
    node = simulate("nvml-missing")

    assert node.nvml.gpus() == []
    assert not node.nvml.initialised
    assert node.nvml.error == "nvmlInit: NVML Shared Library Not Found"


def test_a_gpu_lost_mid_run_becomes_a_placeholder_and_the_others_keep_coming(simulate: Make) -> None:
    node = simulate("gpu-lost")
    before = node.nvml.gpus()
    assert all(g.valid for g in before)

    after = node.nvml.gpus()

    assert [g.valid for g in after] == [True, True, False, True]
    lost = after[2]
    assert lost.index == 2 and lost.error == "nvmlDeviceGetUUID: GPU is lost"
    assert after[3].uuid.endswith("4") and after[3].fabric.clique_id == 32766


def test_a_field_nvml_does_not_support_is_none_not_a_placeholder(simulate: Make) -> None:
    gpus = simulate("gpu-lost").nvml.gpus()

    assert gpus[3].valid and gpus[3].memory_total is None


def test_a_failing_identity_call_makes_a_placeholder_with_what_was_read(simulate: Make) -> None:
    node = simulate("nvl72-tray")
    node.sim.gpus[1].failures["nvmlDeviceGetGpuFabricInfoV"] = 999

    gpus = node.nvml.gpus()

    assert gpus[1].error == "nvmlDeviceGetGpuFabricInfoV: Unknown Error"
    assert gpus[1].uuid.endswith("2") and gpus[1].pci_address == "0001:01:00.0"
    assert [g.valid for g in gpus] == [True, False, True, True]


def test_a_hot_added_gpu_is_seen_only_after_a_full_reinit(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    assert len(node.nvml.gpus()) == 2
    gpu = node.sim.gpu("0000:c1:00.0")
    with node.sim.lock:
        gpu.enumerated, gpu.bound, gpu.presence = True, "nvidia", "present"

    assert len(node.nvml.gpus()) == 2
    assert node.nvml.find(pci_address="0000:c1:00.0") is None
    assert node.nvml.reinit()
    assert node.fake.refcount == 1  # one reference held, so shutdown + init re-enumerates
    assert len(node.nvml.gpus()) == 3


def test_gpus_are_found_by_uuid_or_by_pci_address_in_either_form(simulate: Make) -> None:
    node = simulate("nvl72-tray")

    by_uuid = node.nvml.find(uuid="GPU-1d9f3c1e-0000-4000-8000-000000000003")
    by_pci = node.nvml.find(pci_address="00000002:01:00.0")

    assert by_uuid is not None and by_pci is not None
    assert by_uuid.uuid == by_pci.uuid and by_uuid.index == 2
    assert node.nvml.find(uuid="GPU-not-there") is None


def test_the_real_pynvml_offers_every_name_the_adapter_uses() -> None:
    pynvml = pytest.importorskip("pynvml")
    fake = FakePynvml.__dict__
    for name in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
                 "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetUUID",
                 "nvmlDeviceGetIndex", "nvmlDeviceGetName", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMemoryInfo",
                 "nvmlDeviceGetMinorNumber", "nvmlDeviceGetPersistenceMode", "nvmlDeviceSetPersistenceMode",
                 "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                 "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceModifyDrainState", "c_nvmlGpuFabricInfo_v3_t",
                 "c_nvmlGpuFabricInfo_v2_t", "NVML_FEATURE_ENABLED", "NVML_DETACH_GPU_REMOVE", "NVML_PCIE_LINK_KEEP",
                 "NVMLError"):
        assert hasattr(pynvml, name) and name in fake, name
    for name in ("NVMLError_LibraryNotFound", "NVMLError_NotSupported", "NVMLError_GpuIsLost",
                 "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_IN_USE",
                 "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE"):
        assert hasattr(pynvml, name), name
    real, ours = pynvml.c_nvmlGpuFabricInfo_v3_t(), FakePynvml.c_nvmlGpuFabricInfo_v3_t()
    assert real.version == ours.version == pynvml.nvmlGpuFabricInfo_v3
    assert ctypes.sizeof(real) == ctypes.sizeof(ours)
    assert [f[0] for f in real._fields_] == [f[0] for f in ours._fields_]


def test_the_real_pynvml_without_a_driver_reports_nvml_missing() -> None:
    pynvml = pytest.importorskip("pynvml")
    nvml = Nvml(pynvml)
    try:
        if nvml.init():
            pytest.skip("this machine has an NVIDIA driver")
        assert not nvml.initialised and nvml.error.startswith("nvmlInit: ")
        assert nvml.gpus() == []
    finally:
        nvml.shutdown()
