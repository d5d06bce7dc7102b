"""``patches``: RFC 6901 escaping, adds under missing or null parents merged into one op, appends, and
parents of the wrong JSON type named in a ``WireError``. Every patch is checked with ``jsonpatch``."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from webhook.domain.admission.patches import PatchBuilder, escape, pointer
from webhook.errors import WireError


@pytest.mark.parametrize(("token", "escaped"), [
    ("plain", "plain"), ("imex-webhook.io/group", "imex-webhook.io~1group"), ("a~b", "a~0b"),
    ("~/", "~0~1"), ("a~1b", "a~01b"), (3, "3"), ("-", "-"), ("", ""),
])
def test_reference_tokens_escape_tilde_before_slash(token: str | int, escaped: str) -> None:
    assert escape(token) == escaped


def test_a_pointer_joins_escaped_tokens() -> None:
    assert pointer(("metadata", "labels", "x/y")) == "/metadata/labels/x~1y"
    assert pointer(()) == ""


def _apply(doc: dict[str, Any], builder: PatchBuilder) -> dict[str, Any]:
    before = copy.deepcopy(doc)
    out: dict[str, Any] = jsonpatch.apply_patch(doc, builder.ops, in_place=False)
    assert doc == before  # the builder never changes the document it reads
    return out


def test_adds_under_one_missing_parent_become_a_single_op() -> None:
    doc: dict[str, Any] = {"metadata": {"name": "p"}}
    b = PatchBuilder(doc)
    b.add(("metadata", "annotations", "a/1"), "x")
    b.add(("metadata", "annotations", "b~2"), "y")
    assert b.ops == [{"op": "add", "path": "/metadata/annotations", "value": {"a/1": "x", "b~2": "y"}}]
    assert _apply(doc, b)["metadata"]["annotations"] == {"a/1": "x", "b~2": "y"}


def test_a_null_parent_is_replaced_by_the_created_map() -> None:
    doc: dict[str, Any] = {"metadata": {"labels": None}}
    b = PatchBuilder(doc)
    b.add(("metadata", "labels", "k"), "v")
    assert _apply(doc, b)["metadata"]["labels"] == {"k": "v"}


def test_deep_missing_parents_and_appends_share_the_created_value() -> None:
    doc: dict[str, Any] = {"spec": {}}
    b = PatchBuilder(doc)
    b.add(("spec", "affinity", "podAffinity", "terms", "-"), {"t": 1})
    b.add(("spec", "affinity", "podAffinity", "terms", "-"), {"t": 2})
    b.add(("spec", "affinity", "nodeAffinity", "x"), 1)
    assert len(b.ops) == 1
    assert _apply(doc, b)["spec"]["affinity"] == {"podAffinity": {"terms": [{"t": 1}, {"t": 2}]},
                                                  "nodeAffinity": {"x": 1}}


def test_an_existing_list_is_appended_to_with_a_dash() -> None:
    doc: dict[str, Any] = {"spec": {"terms": [{"a": 1}]}}
    b = PatchBuilder(doc)
    b.add(("spec", "terms", "-"), {"b": 2})
    b.add(("spec", "terms", 0, "more"), [1])
    b.add(("spec", "terms", 0, "more", "-"), 2)
    assert [op["path"] for op in b.ops] == ["/spec/terms/-", "/spec/terms/0/more"]
    assert _apply(doc, b)["spec"]["terms"] == [{"a": 1, "more": [1, 2]}, {"b": 2}]


def test_a_missing_root_section_is_created() -> None:
    doc: dict[str, Any] = {}
    b = PatchBuilder(doc)
    b.add(("metadata", "labels", "k"), "v")
    b.add(("spec", "schedulerName"), "s")
    assert _apply(doc, b) == {"metadata": {"labels": {"k": "v"}}, "spec": {"schedulerName": "s"}}


def test_replace_sets_an_existing_field() -> None:
    doc: dict[str, Any] = {"spec": {"schedulerName": "default-scheduler"}}
    b = PatchBuilder(doc)
    b.replace(("spec", "schedulerName"), "imex-scheduler")
    assert _apply(doc, b)["spec"]["schedulerName"] == "imex-scheduler"


def test_get_reads_the_original_document_and_tolerates_any_shape() -> None:
    b = PatchBuilder({"spec": {"list": [{"a": 1}], "text": "x"}})
    assert b.get(("spec", "list", 0, "a")) == 1
    assert b.get(("spec", "list", 5)) is None
    assert b.get(("spec", "text", "deeper")) is None
    assert b.get(("spec", "missing", "deeper")) is None


@pytest.mark.parametrize(("doc", "path", "field"), [
    ({"spec": {"affinity": []}}, ("spec", "affinity", "podAffinity", "x"), "object.spec.affinity"),
    ({"spec": {"terms": {}}}, ("spec", "terms", "-"), "object.spec.terms"),
    ({"spec": {"terms": "no"}}, ("spec", "terms", 0, "x"), "object.spec.terms"),
    ({"spec": {"terms": []}}, ("spec", "terms", 0, "x"), "object.spec.terms[0]"),
    ({"metadata": "no"}, ("metadata", "labels", "k"), "object.metadata"),
])
def test_a_parent_of_the_wrong_type_is_a_wire_error_naming_the_field(doc: dict[str, Any], path: tuple[Any, ...],
                                                                      field: str) -> None:
    with pytest.raises(WireError) as err:
        PatchBuilder(doc).add(path, 1)
    assert err.value.path == field
