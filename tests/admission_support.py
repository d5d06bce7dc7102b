"""Shared checks of the admission tests: fixture reviews, the demo snapshot, and what a mutated pod must be.

A patched pod is judged the way the cluster would see it: the patch is applied with the independent
``jsonpatch`` library and the result is loaded into the official client's ``V1Pod`` model, so a patch
that builds a shape Kubernetes would not decode fails here.
"""

from __future__ import annotations

import functools
import json
import uuid
from pathlib import Path
from typing import Any

import jsonpatch
from kubernetes.client import ApiClient, V1Pod

from tests import builders
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.model import Snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "admission"
TOPOLOGY_KEY = keys.DOMAIN_LABEL  # Policy.affinity_topology_key, for every group kind
SCHEDULER = "imex-scheduler"


def review(name: str) -> dict[str, Any]:
    """An AdmissionReview exactly as kube-apiserver sends it (a fresh copy on every call)."""
    loaded: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return loaded


def review_of(pod: dict[str, Any], namespace: str, username: str) -> dict[str, Any]:
    """A pod CREATE review as kube-apiserver sends it, for a pod built in the test."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace, "operation": "CREATE", "userInfo": {"username": username},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}


def fixture_names(prefix: str) -> list[str]:
    return sorted(p.name for p in FIXTURES.glob(f"{prefix}*.json"))


@functools.cache
def demo_snapshot() -> Snapshot:
    """The built-in demo cluster: ComputeDomains and their templates in namespace ml, racks, HGX nodes."""
    return builders.store(demo.objects()).snapshot()


def apply(obj: dict[str, Any], patch: list[Any]) -> dict[str, Any]:
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, patch, in_place=False)
    return patched


def v1pod(obj: dict[str, Any]) -> V1Pod:
    """The pod as the official Python client decodes it (raises on shapes the model rejects)."""
    pod: V1Pod = ApiClient()._ApiClient__deserialize(obj, "V1Pod")  # type: ignore[attr-defined]
    return pod


def expressions(term: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(e.key, e.operator, tuple(e.values or ())) for e in (term.match_expressions or [])]


def assert_kept_in_domain(obj: dict[str, Any], label: str, scheduler: str = SCHEDULER) -> V1Pod:
    """The pod carries the group label, the required pod affinity on it, the domain node requirement in
    every non-empty node selector term, and is scheduled by ``scheduler``."""
    pod = v1pod(obj)
    assert pod.metadata.labels[keys.GROUP_LABEL] == label
    terms = pod.spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution
    assert any(t.topology_key == TOPOLOGY_KEY and t.label_selector.match_labels == {keys.GROUP_LABEL: label}
               for t in terms)
    node_terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution \
        .node_selector_terms
    assert node_terms
    for term in node_terms:
        if term.match_expressions or term.match_fields:
            assert (TOPOLOGY_KEY, "Exists", ()) in expressions(term)
    assert pod.spec.scheduler_name == scheduler
    assert pod.metadata.annotations[keys.MUTATED_ANNOTATION]
    return pod
