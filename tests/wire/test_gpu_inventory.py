"""``webhook.wire.gpu_inventory``: the ``imex-webhook.io/gpus`` annotation the agent writes and the
extender reads, through one codec."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.domain import keys
from webhook.errors import WireError
from webhook.wire import gpu_inventory
from webhook.wire.gpu_inventory import GpuInventory

INVENTORY: GpuInventory = {
    "clique": "c0ffee.7", "reason": "all GPUs agree", "health": "healthy",
    "gpus": [{"uuid": "GPU-1", "pci": "0000:41:00.0", "clique": "c0ffee.7", "health": "healthy"},
             {"uuid": "GPU-2", "pci": "0000:42:00.0", "owner": "fa-1", "releasing": True, "health": "healthy"}],
}


def test_the_annotation_key_is_the_one_the_extender_reads() -> None:
    assert gpu_inventory.ANNOTATION == keys.INVENTORY_ANNOTATION == "imex-webhook.io/gpus"


def test_encoding_is_compact_sorted_and_parses_back_unchanged() -> None:
    text = gpu_inventory.encode(INVENTORY)
    assert ", " not in text and ": " not in text and text.startswith('{"clique":"c0ffee.7","gpus":[')
    assert gpu_inventory.parse(text) == INVENTORY
    assert gpu_inventory.releasing(gpu_inventory.parse(text)) == 1


def test_equal_inventories_encode_to_equal_text_whatever_the_key_order() -> None:
    shuffled: GpuInventory = {"gpus": INVENTORY["gpus"], "health": "healthy", "reason": "all GPUs agree",
                              "clique": "c0ffee.7"}
    assert gpu_inventory.encode(shuffled) == gpu_inventory.encode(INVENTORY)


@pytest.mark.parametrize(("text", "path"), [
    ("not json", gpu_inventory.ANNOTATION),
    ("[]", gpu_inventory.ANNOTATION),
    ("null", gpu_inventory.ANNOTATION),
    ('{"gpus": "all"}', f"{gpu_inventory.ANNOTATION}.gpus"),
    ('{"gpus": [1]}', f"{gpu_inventory.ANNOTATION}.gpus[0]"),
    ("[" * 100_000 + "]" * 100_000, gpu_inventory.ANNOTATION),
    ('{"gpus": ' * 5000 + "1" + "}" * 5000, gpu_inventory.ANNOTATION),
    (7, gpu_inventory.ANNOTATION),
])
def test_a_malformed_or_hostile_inventory_is_a_wire_error_naming_the_field(text: Any, path: str) -> None:
    with pytest.raises(WireError) as err:
        gpu_inventory.parse(text)
    assert err.value.path == path


@pytest.mark.parametrize(("node", "want"), [
    ({"metadata": {"annotations": {gpu_inventory.ANNOTATION: '{"gpus": []}'}}}, {"gpus": []}),
    ({"metadata": {"annotations": {gpu_inventory.ANNOTATION: "{"}}}, None),
    ({"metadata": {"annotations": {}}}, None),
    ({"metadata": None}, None),
    ({}, None),
])
def test_a_node_without_a_readable_inventory_has_none(node: dict[str, Any], want: Any) -> None:
    assert gpu_inventory.of_node(node) == want
