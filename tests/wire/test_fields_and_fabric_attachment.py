"""``webhook.wire.fields`` (the one set of field readers) and the FabricAttachment codec built on them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.errors import WireError
from webhook.wire import fabric_attachment as fa
from webhook.wire.fabric_attachment import Attachment, Block, Condition, Phase
from webhook.wire.fields import NAME_MAX, int_, str_at

ATT = Attachment(name=fa.name_for("uid-1"), node="n-0", pod_namespace="ml", pod_name="p-0", pod_uid="uid-1",
                 zone="z", gpus=2, system="/redfish/v1/Systems/n-0", phase=Phase.READY,
                 blocks=(Block("/b/1", "GPU-1", "0000:41:00.0"),), message="ok", phase_since="2025-01-02T03:04:05Z",
                 conditions=(Condition("Ready", "True", "Found", "2 GPUs", "2025-01-02T03:04:05Z"),), version="42")


@pytest.mark.parametrize(("obj", "required", "limit", "want"), [
    ({"k": "v"}, False, None, "v"),
    ({}, False, None, ""),
    ({"k": None}, False, None, ""),
    ({"k": ""}, False, None, ""),
    ({"k": "x" * NAME_MAX}, True, NAME_MAX, "x" * NAME_MAX),
])
def test_str_at_reads_a_string_or_empty(obj: dict[str, Any], required: bool, limit: int | None, want: str) -> None:
    assert str_at(obj, "k", "spec", required, limit) == want


@pytest.mark.parametrize(("obj", "required", "limit", "problem"), [
    ({}, True, None, "missing"),
    ({"k": ""}, True, None, "missing"),
    ({"k": 7}, False, None, "expected a string, got int"),
    ({"k": ["v"]}, True, None, "expected a string, got list"),
    ({"k": "x" * (NAME_MAX + 1)}, False, NAME_MAX, "longer than 253 characters"),
])
def test_str_at_names_the_field_it_refuses(obj: dict[str, Any], required: bool, limit: int | None,
                                           problem: str) -> None:
    with pytest.raises(WireError, match=problem) as err:
        str_at(obj, "k", "spec", required, limit)
    assert err.value.path == "spec.k"


@pytest.mark.parametrize("value", [-1, True, 1.5, "2", [2]])
def test_int_takes_only_non_negative_json_integers(value: Any) -> None:
    with pytest.raises(WireError) as err:
        int_(value, "spec.gpus")
    assert err.value.path == "spec.gpus"


def test_an_attachment_round_trips_through_its_object() -> None:
    obj = fa.to_object(ATT)
    assert obj["metadata"]["labels"] == {fa.NODE_LABEL: "n-0", fa.POD_UID_LABEL: "uid-1"}
    assert obj["metadata"]["finalizers"] == [fa.FINALIZER]
    assert fa.parse(obj) == ATT


def test_a_minimal_object_parses_with_the_defaults() -> None:
    att = fa.parse({"metadata": {"name": "fa-1"}, "spec": {"node": "n"}})
    assert (att.phase, att.gpus, att.blocks, att.conditions, att.deleting) == (Phase.PENDING, 0, (), (), False)


def _broken(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    obj: Any = copy.deepcopy(fa.to_object(ATT))
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return dict(obj)


@pytest.mark.parametrize(("path", "value", "field"), [
    (("metadata",), [], "metadata"),
    (("metadata", "name"), "", "metadata.name"),
    (("spec", "node"), None, "spec.node"),
    (("spec", "pod"), "p-0", "spec.pod"),
    (("spec", "gpus"), -2, "spec.gpus"),
    (("spec", "gpus"), "2", "spec.gpus"),
    (("status", "phase"), "Exploded", "status.phase"),
    (("status", "blocks"), {"id": "/b/1"}, "status.blocks"),
    (("status", "blocks", 0), "/b/1", "status.blocks[0]"),
    (("status", "blocks", 0, "id"), "", "status.blocks[0].id"),
    (("status", "blocks", 0, "uuid"), 7, "status.blocks[0].uuid"),
    (("status", "conditions", 0, "status"), None, "status.conditions[0].status"),
    (("status", "conditions", 0, "type"), {"x": 1}, "status.conditions[0].type"),
])
def test_a_malformed_attachment_is_a_wire_error_with_the_field_path(path: tuple[Any, ...], value: Any,
                                                                     field: str) -> None:
    with pytest.raises(WireError) as err:
        fa.parse(_broken(path, value))
    assert err.value.path == field


@pytest.mark.parametrize("obj", [None, [], "fa-1", 7])
def test_something_that_is_not_an_object_is_a_wire_error(obj: Any) -> None:
    with pytest.raises(WireError):
        fa.parse(obj)
