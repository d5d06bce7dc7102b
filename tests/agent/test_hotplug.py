"""Hot-add (``webhook.agent.hotplug``) on a simulated composable node, with the Node in memory.

Covered: a GPU that appears after the PCI rescan is found by UUID after a full NVML re-init and the
attachment goes Ready with the UUIDs and PCI addresses NVML reported; the device plugin is refreshed
once, and not at all when the Node already advertises the GPUs; a GPU that never appears fails the
attachment at step "enumerate" naming its PCI address (after rescanning again); a GPU bound to
vfio-pci fails at step "driver"; a GPU whose UUID is not the one the fabric named fails at step "nvml";
blocks without identity fail at once; persistence mode is set on the new GPUs only; an allocatable that
never grows fails at step "allocatable" and says no device-plugin pod was found.
"""

from __future__ import annotations

import dataclasses

from tests.agent.conftest import Make, Simulated
from webhook.agent import hotplug
from webhook.domain import keys
from webhook.sim.agents import MemoryNodeApi
from webhook.wire.fabric_attachment import READY_CONDITION, Attachment, Block, Phase

C1 = ("GPU-8a000000-0000-4000-8000-0000000000c1", "0000:c1:00.0")
C2 = ("GPU-8a000000-0000-4000-8000-0000000000c2", "0000:c2:00.0")


def _node(gpus: int) -> dict[str, object]:
    return {"metadata": {"name": "cdi-node-01"}, "status": {"allocatable": {keys.GPU_RESOURCE: str(gpus)}}}


def _attached(*blocks: tuple[str, str]) -> Attachment:
    return Attachment(name="fa-1", node="cdi-node-01", pod_namespace="ml", pod_name="trainer-0", pod_uid="uid-1",
                      zone="pool-a", gpus=len(blocks), system="/redfish/v1/Systems/cdi-node-01", phase=Phase.ATTACHED,
                      blocks=tuple(Block(f"/redfish/v1/CompositionService/ResourceBlocks/gpu-{i}", uuid=u,
                                         pci_address=p) for i, (u, p) in enumerate(blocks)), version="7")


def _hot_add(node: Simulated, api: MemoryNodeApi, **options: object) -> hotplug.HotAdd:
    opts = dataclasses.replace(hotplug.Options(deadlines=node.fast(), rescan_every=0.2), **options)  # type: ignore[arg-type]
    return hotplug.HotAdd(node.nvml, node.host, api, opts)


def test_a_gpu_that_appears_after_the_rescan_makes_the_attachment_ready(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    node.nvml.gpus()
    api = MemoryNodeApi(_node(2), node.sim)

    result = _hot_add(node, api).run(_attached(C1, C2))

    assert result.phase is Phase.READY, result.message
    assert [(b.uuid, b.pci_address) for b in result.blocks] == [C1, C2]
    assert result.message.startswith("2 GPUs ready in ")
    ready = result.condition(READY_CONDITION)
    assert ready is not None and ready.status == "True" and ready.reason == "GpusReady"
    assert api.device_plugin_restarts == 1
    assert api.read_node()["status"]["allocatable"][keys.GPU_RESOURCE] == "4"
    assert node.kernel.rescans >= 1
    assert len(node.nvml.gpus()) == 4


def test_the_device_plugin_is_left_alone_when_the_node_already_advertises_the_gpus(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    api = MemoryNodeApi(_node(4), node.sim)  # a rescan enumerates every attached GPU: c1 and c2

    result = _hot_add(node, api).run(_attached(C1))

    assert result.phase is Phase.READY
    assert api.device_plugin_restarts == 0


def test_a_gpu_that_never_appears_fails_the_attachment_naming_the_address_and_the_step(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    api = MemoryNodeApi(_node(2), node.sim)

    result = _hot_add(node, api).run(_attached(C1, ("GPU-8a000000-0000-4000-8000-0000000000e1", "0000:e1:00.0")))

    assert result.phase is Phase.FAILED
    assert result.message.startswith("hot-add failed at step enumerate after ")
    assert "PCI device 0000:e1:00.0 did not appear under " in result.message
    assert "(waited 0.6s)" in result.message
    cond = result.condition(READY_CONDITION)
    assert cond is not None and (cond.status, cond.reason) == ("False", "EnumerateFailed")
    assert node.kernel.rescans >= 2  # rescanned again while waiting
    assert api.device_plugin_restarts == 0


def test_a_gpu_bound_to_vfio_fails_at_the_driver_step(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    api = MemoryNodeApi(_node(2), node.sim)

    result = _hot_add(node, api).run(_attached(("GPU-8a000000-0000-4000-8000-0000000000e2", "0000:e2:00.0")))

    assert result.phase is Phase.FAILED
    assert "at step driver" in result.message and "0000:e2:00.0 is bound to vfio-pci, not nvidia" in result.message


def test_a_gpu_other_than_the_one_the_fabric_named_fails_at_the_nvml_step(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    api = MemoryNodeApi(_node(2), node.sim)

    result = _hot_add(node, api).run(_attached(("GPU-not-this-one", "0000:c1:00.0")))

    assert result.phase is Phase.FAILED
    assert "at step nvml" in result.message
    assert "0000:c1:00.0 holds GPU-8a000000-0000-4000-8000-0000000000c1, but the fabric attached GPU-not-this-one" \
        in result.message


def test_blocks_without_uuid_or_address_fail_at_once(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    att = dataclasses.replace(_attached(C1), blocks=(Block("/b/x"),))

    result = _hot_add(node, MemoryNodeApi(_node(2), node.sim)).run(att)

    assert result.phase is Phase.FAILED
    assert result.message.startswith("hot-add failed at step blocks after ")
    assert "block /b/x names neither a GPU UUID nor a PCI address" in result.message
    assert node.kernel.rescans == 0


def test_persistence_mode_is_set_on_the_new_gpus_only(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    api = MemoryNodeApi(_node(2), node.sim)

    result = _hot_add(node, api, persistence_mode=True).run(_attached(C1))

    assert result.phase is Phase.READY
    assert node.fake.calls == [("nvmlDeviceSetPersistenceMode", C1[0])]
    assert node.sim.gpu(C1[1]).persistence is True


class _NoDevicePlugin(MemoryNodeApi):
    def refresh_device_plugin(self) -> list[str]:
        return []


def test_an_allocatable_that_never_grows_fails_and_says_no_device_plugin_pod_was_found(simulate: Make) -> None:
    node = simulate("composable-hot-add")
    api = _NoDevicePlugin(_node(2), node.sim)
    opts = hotplug.Options(deadlines=node.fast(allocatable=0.3), rescan_every=0.2)

    result = hotplug.HotAdd(node.nvml, node.host, api, opts).run(_attached(C1))

    assert result.phase is Phase.FAILED
    assert "at step allocatable" in result.message
    assert ("node cdi-node-01 advertises 2 nvidia.com/gpu, expected 4 (no device-plugin pod was found on this node "
            "to refresh)") in result.message
