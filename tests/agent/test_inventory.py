"""Pure publishing (``webhook.agent.inventory``): the inventory annotation and the Node merge patch.

Covered: the annotation is compact JSON with UUID, PCI address, clique, health and flags per GPU, the
owning attachment and the releasing mark, and is identical for identical input; placeholders carry
their error; the patch is None when nothing changed; the health label is always ours, the clique label
only with ``own_clique_label`` (then set, and removed when there is no clique); an attachment's blocks
mark their GPUs by UUID or PCI address.
"""

from __future__ import annotations

import json
from typing import Any

from tests.agent.conftest import Make
from webhook.agent import inventory
from webhook.agent.model import Gpu
from webhook.domain import keys
from webhook.wire import gpu_inventory
from webhook.wire.fabric_attachment import Attachment, Block, Phase

CLUSTER = "9277d399-7d0a-4d4a-9b0e-d85bb19ce2b0"


def _attachment(name: str, phase: Phase, *blocks: Block) -> Attachment:
    return Attachment(name=name, node="n", pod_namespace="ml", pod_name="p", pod_uid="u", zone="z", gpus=len(blocks),
                      system="/redfish/v1/Systems/n", phase=phase, blocks=blocks)


def test_the_annotation_lists_every_gpu_compactly(simulate: Make) -> None:
    gpus = simulate("nvl72-tray").nvml.gpus()

    text = inventory.annotation(gpus, inventory.Ownership())

    doc = json.loads(text)
    assert text == json.dumps(doc, separators=(",", ":"), sort_keys=True)  # no whitespace, keys sorted
    assert doc["clique"] == f"{CLUSTER}.32766" and doc["health"] == "healthy"
    assert doc["gpus"][0] == {"uuid": "GPU-1d9f3c1e-0000-4000-8000-000000000001", "pci": "0000:01:00.0",
                              "clique": f"{CLUSTER}.32766", "health": "healthy"}
    assert text == inventory.annotation(list(reversed(gpus)), inventory.Ownership())  # stable


def test_owned_and_releasing_gpus_are_marked(simulate: Make) -> None:
    gpus = simulate("composable-attached").nvml.gpus()
    own = inventory.ownership([
        _attachment("fa-ready", Phase.READY, Block("/b/1", uuid="GPU-9b000000-0000-4000-8000-0000000000c1")),
        _attachment("fa-going", Phase.RELEASING, Block("/b/2", pci_address="0000:C2:00.0")),
        _attachment("fa-old", Phase.DETACHED, Block("/b/3", uuid="GPU-9b000000-0000-4000-8000-000000000001")),
    ])

    doc = json.loads(inventory.annotation(gpus, own))

    by_pci = {g["pci"]: g for g in doc["gpus"]}
    assert by_pci["0000:c1:00.0"]["owner"] == "fa-ready" and "releasing" not in by_pci["0000:c1:00.0"]
    assert by_pci["0000:c2:00.0"]["owner"] == "fa-going" and by_pci["0000:c2:00.0"]["releasing"] is True
    assert "owner" not in by_pci["0000:18:00.0"]  # a detached attachment owns nothing
    assert by_pci["0000:18:00.0"]["health"] == "none"


def test_a_placeholder_carries_its_error() -> None:
    doc = json.loads(inventory.annotation([Gpu(index=3, error="nvmlDeviceGetUUID: GPU is lost")],
                                          inventory.Ownership()))

    assert doc["gpus"] == [{"health": "unknown", "error": "nvmlDeviceGetUUID: GPU is lost"}]


def test_the_patch_sets_what_differs_and_is_none_when_nothing_does(simulate: Make) -> None:
    gpus = simulate("nvl72-tray").nvml.gpus()
    want = inventory.desired(gpus, inventory.Ownership(), own_clique_label=True)
    node: dict[str, Any] = {"metadata": {"name": "n", "labels": {"kubernetes.io/hostname": "n"}}}

    patch = inventory.node_patch(node, want)

    assert patch == {"metadata": {
        "labels": {inventory.HEALTH_LABEL: "healthy", keys.CLIQUE_LABEL: f"{CLUSTER}.32766"},
        "annotations": {inventory.INVENTORY_ANNOTATION: want.annotations[inventory.INVENTORY_ANNOTATION]}}}
    node["metadata"]["labels"].update(patch["metadata"]["labels"])
    node["metadata"]["annotations"] = patch["metadata"]["annotations"]
    assert inventory.node_patch(node, want) is None


def test_an_owned_clique_label_is_removed_when_the_clique_goes(simulate: Make) -> None:
    gpus = simulate("clique-disagree").nvml.gpus()
    node = {"metadata": {"labels": {keys.CLIQUE_LABEL: "stale.1", inventory.HEALTH_LABEL: "healthy"}}}

    patch = inventory.node_patch(node, inventory.desired(gpus, inventory.Ownership(), own_clique_label=True))

    assert patch is not None and patch["metadata"]["labels"] == {keys.CLIQUE_LABEL: None}


def test_the_clique_label_is_left_alone_unless_owned(simulate: Make) -> None:
    gpus = simulate("clique-disagree").nvml.gpus()
    node = {"metadata": {"labels": {keys.CLIQUE_LABEL: "written-by-gfd.1", inventory.HEALTH_LABEL: "healthy"}}}

    patch = inventory.node_patch(node, inventory.desired(gpus, inventory.Ownership(), own_clique_label=False))

    assert patch is not None and "labels" not in patch["metadata"]


def test_without_nvml_the_labels_stay_and_the_annotation_says_why() -> None:
    node = {"metadata": {"labels": {keys.CLIQUE_LABEL: "c.1", inventory.HEALTH_LABEL: "healthy"}}}

    patch = inventory.node_patch(node, inventory.unavailable("NVML is not available: nvmlInit: x"))

    assert patch is not None and set(patch["metadata"]) == {"annotations"}
    doc = gpu_inventory.of_node({"metadata": patch["metadata"]})
    assert doc == {"clique": None, "reason": "NVML is not available: nvmlInit: x", "health": "unknown", "gpus": []}
