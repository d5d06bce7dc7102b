"""The one word for a Kubernetes kind (``webhook.wire.kinds``): its names, its URL paths, its label and the
lookup by label, and the key of an API object."""

from __future__ import annotations

import re
from typing import Any

import pytest

from webhook.errors import ImexWebhookError
from webhook.wire import kinds
from webhook.wire.kinds import JOBS, NODES, PODS, Kind, KindError

POD_GROUP_ALPHA = Kind("scheduling.k8s.io", "v1alpha2", "PodGroup", "podgroups", label="PodGroup.v1alpha2")


@pytest.mark.parametrize(("kind", "api_version", "qualified"), [
    (PODS, "v1", "pods"),
    (NODES, "v1", "nodes"),
    (JOBS, "batch/v1", "jobs.batch"),
    (POD_GROUP_ALPHA, "scheduling.k8s.io/v1alpha2", "podgroups.scheduling.k8s.io"),
])
def test_a_kind_is_named_by_its_api_version_and_by_its_resource_qualified_with_its_group(
        kind: Kind, api_version: str, qualified: str) -> None:
    assert kind.api_version == api_version
    assert kind.qualified == qualified


@pytest.mark.parametrize(("kind", "args", "path"), [
    (PODS, (), "/api/v1/pods"),  # a namespaced kind without a namespace: across all namespaces
    (PODS, ("ml",), "/api/v1/namespaces/ml/pods"),
    (PODS, ("ml", "p-0"), "/api/v1/namespaces/ml/pods/p-0"),
    (PODS, ("ml", "p-0", "binding"), "/api/v1/namespaces/ml/pods/p-0/binding"),
    (JOBS, ("ml", "train"), "/apis/batch/v1/namespaces/ml/jobs/train"),
    (NODES, (None, "a-01"), "/api/v1/nodes/a-01"),
    (NODES, ("ml", "a-01"), "/api/v1/nodes/a-01"),  # a cluster-scoped kind has no namespace in its path
    (kinds.FABRIC_ATTACHMENTS, (None, "att", "status"), "/apis/imex-webhook.io/v1alpha1/fabricattachments/att/status"),
    (POD_GROUP_ALPHA, ("ml",), "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups"),
    (PODS, ("odd ns", "a/b?c#d%"), "/api/v1/namespaces/odd%20ns/pods/a%2Fb%3Fc%23d%25"),  # names are quoted
])
def test_a_path_names_the_group_version_namespace_resource_name_and_subresource(
        kind: Kind, args: tuple[Any, ...], path: str) -> None:
    assert kind.path(*args) == path


@pytest.mark.parametrize(("kind", "label"), [
    (PODS, "Pod"),
    (Kind("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"), "PyTorchJob"),
    (POD_GROUP_ALPHA, "PodGroup.v1alpha2"),
])
def test_a_label_is_the_kind_unless_one_is_given(kind: Kind, label: str) -> None:
    assert kind.label == label


def test_a_kind_reads_as_its_api_version_and_kind() -> None:
    assert str(POD_GROUP_ALPHA) == "scheduling.k8s.io/v1alpha2 PodGroup"


def test_a_kind_is_found_by_its_label() -> None:
    table = kinds.by_label([PODS, NODES, POD_GROUP_ALPHA])
    assert kinds.lookup("PodGroup.v1alpha2", table) is POD_GROUP_ALPHA
    assert kinds.lookup("Pod", table) is PODS


@pytest.mark.parametrize("label", ["Secret", "pod", "PodGroup", ""])
def test_an_unknown_label_is_an_error_naming_it(label: str) -> None:
    table = kinds.by_label([PODS, NODES, POD_GROUP_ALPHA])
    with pytest.raises(KindError, match="^" + re.escape(f"unknown kind {label};")) as caught:
        kinds.lookup(label, table)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ImexWebhookError)


def test_two_kinds_under_one_label_are_an_error_naming_both() -> None:
    beta = Kind("scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups", label="PodGroup.v1alpha2")
    with pytest.raises(KindError, match=re.escape("two kinds under the label PodGroup.v1alpha2")):
        kinds.by_label([POD_GROUP_ALPHA, beta])


@pytest.mark.parametrize(("obj", "key", "version"), [
    ({"metadata": {"namespace": "ml", "name": "p", "resourceVersion": "7"}}, ("ml", "p"), "7"),
    ({"metadata": {"name": "a-01"}}, ("", "a-01"), ""),
    ({"metadata": {"namespace": 5, "name": ["p"], "resourceVersion": 12}}, ("", ""), "12"),
    ({"metadata": "p"}, ("", ""), ""),
    ({}, ("", ""), ""),
    ("not an object", ("", ""), ""),
])
def test_an_object_is_keyed_by_namespace_and_name_whatever_its_metadata_holds(
        obj: Any, key: tuple[str, str], version: str) -> None:
    assert kinds.object_key(obj) == key
    assert kinds.resource_version(obj) == version
