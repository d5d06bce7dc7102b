"""The seam for the embedded ``serve`` mode (``webhook.sim.agents.SimulatedNodeAgents``): the real
hot-add and release code on simulated nodes made from the embedded cluster's Node objects.

Covered: an attachment to a composable demo node goes Ready with the blocks' UUIDs and PCI addresses,
the Node's allocatable grows and every new Node version reaches ``on_node_change``; blocks without a
UUID or address get made-up ones; a release removes the GPUs and the allocatable shrinks back; after
the fabric detach the GPUs are gone for good; a tray of an NVL72 rack publishes its clique and a
healthy fabric; an unknown node is a KeyError; the nodes' GPUs never clash with the fabric's addresses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from webhook.agent import inventory
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.sim.agents import SimulatedNodeAgents
from webhook.wire import gpu_inventory
from webhook.wire.fabric_attachment import Attachment, Block, Phase


@pytest.fixture
def changes() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def agents(changes: list[dict[str, Any]]) -> Iterator[SimulatedNodeAgents]:
    made = SimulatedNodeAgents(demo.nodes(), on_node_change=changes.append)
    yield made
    made.close()


def _attached(node: str, *blocks: Block) -> Attachment:
    return Attachment(name="fa-demo", node=node, pod_namespace="ml", pod_name="p-0", pod_uid="u-0",
                      zone=demo.FABRIC_ZONE, gpus=len(blocks), system=f"/redfish/v1/Systems/{node}",
                      phase=Phase.ATTACHED, blocks=blocks)


def _allocatable(node: dict[str, Any]) -> str:
    return str(node["status"]["allocatable"][keys.GPU_RESOURCE])


def test_an_attachment_to_a_composable_node_goes_ready_and_the_node_advertises_the_gpus(
        agents: SimulatedNodeAgents, changes: list[dict[str, Any]]) -> None:
    att = _attached("fab-00", Block("/redfish/v1/CompositionService/ResourceBlocks/gpu-7",
                                    uuid="GPU-00000000-0000-4000-8000-0000000000f7", pci_address="0000:47:00.0"))

    ready = agents.on_attached(att)

    assert ready.phase is Phase.READY, ready.message
    assert [(b.uuid, b.pci_address) for b in ready.blocks] == [("GPU-00000000-0000-4000-8000-0000000000f7",
                                                                 "0000:47:00.0")]
    node = agents.node("fab-00")
    assert _allocatable(node) == str(demo.FABRIC_LOCAL_GPUS + 1)
    assert changes and changes[-1] == node
    doc = gpu_inventory.of_node(node)
    assert doc is not None and {g["pci"]: g.get("owner") for g in doc["gpus"]}["0000:47:00.0"] == "fa-demo"


def test_blocks_without_identity_get_made_up_ones(agents: SimulatedNodeAgents) -> None:
    ready = agents.on_attached(_attached("fab-01", Block("/b/1"), Block("/b/2")))

    assert ready.phase is Phase.READY, ready.message
    assert all(b.uuid.startswith("GPU-") and b.pci_address for b in ready.blocks)
    assert len({b.pci_address for b in ready.blocks}) == 2


def test_a_release_removes_the_gpus_and_the_node_stops_advertising_them(agents: SimulatedNodeAgents) -> None:
    ready = agents.on_attached(_attached("fab-02", Block("/b/1", pci_address="0000:41:00.0"),
                                         Block("/b/2", pci_address="0000:42:00.0")))
    assert _allocatable(agents.node("fab-02")) == str(demo.FABRIC_LOCAL_GPUS + 2)

    released = agents.on_releasing(dataclasses.replace(ready, phase=Phase.RELEASING))

    assert released.released, released.conditions
    assert _allocatable(agents.node("fab-02")) == str(demo.FABRIC_LOCAL_GPUS)
    agents.on_detached(released)
    again = agents.on_attached(_attached("fab-02", Block("/b/3", pci_address="0000:43:00.0")))
    assert again.phase is Phase.READY  # the detached GPUs did not come back with the next rescan
    assert _allocatable(agents.node("fab-02")) == str(demo.FABRIC_LOCAL_GPUS + 1)


def test_a_tray_of_an_nvl72_rack_publishes_its_clique_and_fabric_health(agents: SimulatedNodeAgents) -> None:
    sim = agents.agent("gb200-a-03")
    sim.publish()

    doc = agents.inventory("gb200-a-03")

    assert doc is not None and doc["clique"] == demo.clique_value("gb200-a") and doc["health"] == "healthy"
    assert len(doc["gpus"]) == demo.GPUS_PER_TRAY
    assert agents.node("gb200-a-03")["metadata"]["labels"][inventory.HEALTH_LABEL] == "healthy"


def test_an_unknown_node_is_a_key_error(agents: SimulatedNodeAgents) -> None:
    with pytest.raises(KeyError, match="no Node 'nope' in the embedded cluster"):
        agents.on_attached(_attached("nope", Block("/b/1")))
