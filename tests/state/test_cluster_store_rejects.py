"""One object the store cannot parse or derive is skipped, alone, whatever it raises.

Covered: odd objects seen in the field (a group size in superscript digits, fabric slots of "1e309", a
100,000-deep inventory annotation, a wrong-typed field) and any exception a parser might raise
(RecursionError, OverflowError, TypeError, ValueError) skip only that object; the skipped objects are
counted by kind until a good version arrives or they are deleted; each is logged once per
resourceVersion, not on every relist; a pod that stops deriving when a claim or Job of its namespace
arrives is skipped without losing the other pods.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.groups import grouping
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state import workload_tables
from webhook.state.cluster import ClusterStore

A = "cluster-a.1"


def _odd_objects() -> list[tuple[str, dict[str, Any]]]:
    superscript = builders.pod("superscript", gpus=1, annotations={keys.GROUP_SIZE_ANNOTATION: "²"})
    huge_slots = builders.node("huge-slots", zone="z")
    huge_slots["metadata"]["annotations"][keys.FABRIC_SLOTS_ANNOTATION] = "1e309"
    deep = builders.node("deep", domain=A)
    deep["metadata"]["annotations"][keys.INVENTORY_ANNOTATION] = "[" * 100_000 + "]" * 100_000
    typed = builders.pod("typed", gpus=1)
    typed["spec"]["nodeName"] = 5
    return [("Pod", superscript), ("Node", huge_slots), ("Node", deep), ("Pod", typed)]


def _metadata(obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = version
    return obj


def test_the_odd_objects_skip_themselves_only_and_are_counted_by_kind() -> None:
    store = ClusterStore(Policy())
    for kind, obj in _odd_objects():
        store.apply(kind, "ADDED", obj)
    store.apply("Node", "ADDED", builders.node("good", domain=A))
    store.apply("Pod", "ADDED", builders.pod("later", gpus=4, node="good"))

    snapshot = store.snapshot()
    assert set(snapshot.nodes) == {"deep", "good"}  # an unreadable inventory withholds nothing
    assert store.pod("ml", "superscript") is not None  # not a group size: an ungrouped pod
    assert store.pod("ml", "typed") is None
    assert snapshot.used_gpus == {"good": 4}
    assert store.rejected_counts() == {"Node": 1, "Pod": 1, "ResourceClaim": 0, "ResourceClaimTemplate": 0,
                                       "ComputeDomain": 0, "Job": 0, "ResourceSlice": 0, "ResourceQuota": 0,
                                       **{kind: 0 for kind in workload_tables.KINDS}}
    assert store.rejected == 2


@pytest.mark.parametrize("error", [RecursionError("maximum recursion depth exceeded"),
                                   OverflowError("cannot convert float infinity to integer"),
                                   TypeError("'int' object is not subscriptable"), ValueError("bad digit")],
                         ids=lambda e: type(e).__name__)
def test_any_exception_from_a_parser_skips_that_object_only(monkeypatch: pytest.MonkeyPatch,
                                                            error: Exception) -> None:
    real_node, real_pod = parsing.node, parsing.pod

    def node(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj["metadata"]["name"] == "odd":
            raise error
        return real_node(obj, *args, **kwargs)

    def pod(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj["metadata"]["name"] == "odd":
            raise error
        return real_pod(obj, *args, **kwargs)

    monkeypatch.setattr(parsing, "node", node)
    monkeypatch.setattr(parsing, "pod", pod)
    store = ClusterStore(Policy())
    store.replace("Node", [builders.node("odd"), builders.node("a-00", domain=A)])
    store.replace("Pod", [builders.pod("odd"), builders.pod("p", gpus=2, node="a-00")])
    store.apply("Pod", "ADDED", builders.pod("q", gpus=1, node="a-00"))

    assert set(store.snapshot().nodes) == {"a-00"}
    assert store.snapshot().used_gpus == {"a-00": 3}
    assert store.rejected_counts()["Node"] == 1 and store.rejected_counts()["Pod"] == 1


def test_a_rejected_object_is_logged_once_per_resource_version_and_forgotten_when_fixed_or_gone(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="webhook.state.cluster")
    store = ClusterStore(Policy())
    bad = builders.node("bad", zone="z")
    bad["metadata"]["annotations"][keys.FABRIC_SLOTS_ANNOTATION] = "1e309"

    for _ in range(3):  # three relists of the same object
        store.replace("Node", [_metadata(bad, "7"), builders.node("good")])
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1
    assert "Node bad" in logged[0] and "resourceVersion 7" in logged[0]
    assert f"annotations[{keys.FABRIC_SLOTS_ANNOTATION}]" in logged[0]  # the field at fault

    store.apply("Node", "MODIFIED", _metadata(bad, "8"))  # a new version, still bad: logged again
    assert len(caplog.records) == 2 and store.rejected_counts()["Node"] == 1

    fixed = _metadata(builders.node("bad", zone="z", slots=4), "9")
    store.apply("Node", "MODIFIED", fixed)
    assert store.rejected_counts()["Node"] == 0 and "bad" in store.snapshot().nodes

    store.apply("Node", "MODIFIED", _metadata(bad, "10"))
    assert store.rejected_counts()["Node"] == 1
    store.apply("Node", "DELETED", bad)
    assert store.rejected_counts()["Node"] == 0

    store.replace("Node", [_metadata(bad, "11")])
    store.replace("Node", [])  # gone from the relist: no longer counted
    assert store.rejected_counts()["Node"] == 0


def test_an_object_that_is_not_a_mapping_or_has_no_name_is_skipped() -> None:
    store = ClusterStore(Policy())
    store.replace("Node", [{"metadata": "nope"}, builders.node("good")])
    store.apply("Pod", "ADDED", {"metadata": {"name": ["x"]}, "spec": 3})
    assert set(store.snapshot().nodes) == {"good"}
    assert store.rejected_counts()["Node"] == 1 and store.rejected_counts()["Pod"] == 1


def test_a_pod_that_fails_to_derive_when_its_namespace_changes_is_skipped_not_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = ClusterStore(Policy())
    store.apply("Node", "ADDED", builders.node("a-00", gpus=8, domain=A))
    store.apply("Pod", "ADDED", builders.pod("fragile", gpus=2, node="a-00"))
    store.apply("Pod", "ADDED", builders.pod("sturdy", gpus=3, node="a-00"))
    real = grouping.resolve

    def resolve(pod: Any, *args: Any, **kwargs: Any) -> Any:
        if pod.name == "fragile":
            raise RecursionError("maximum recursion depth exceeded")
        return real(pod, *args, **kwargs)

    monkeypatch.setattr(grouping, "resolve", resolve)
    store.apply("Job", "ADDED", {"metadata": {"name": "trainer", "namespace": "ml"}, "spec": {"parallelism": 2}})

    assert store.pod("ml", "fragile") is None and store.pod("ml", "sturdy") is not None
    assert store.snapshot().used_gpus == {"a-00": 3}  # the skipped pod's GPUs are not double-counted
    assert store.rejected_counts()["Pod"] == 1 and store.raw_counts()["Job"] == 1
