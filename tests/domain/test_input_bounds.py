"""Bounds on what a request may carry and on what we keep and show of it: Kubernetes' own string limits for
validated objects (never for an admission review's object, which is not validated yet), only our own
labels and annotations kept, long group names cut to a bounded identity, hostile values quoted short,
and no URL's credentials anywhere."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.groups import grouping
from webhook.domain.model import Catalog
from webhook.domain.policy import Policy
from webhook.domain.reading import claim_parsing, parsing
from webhook.errors import WireError
from webhook.service.settings import FabricSettings, Settings
from webhook.wire.fields import LABEL_VALUE_MAX, NAME_MAX
from webhook.wire.redaction import redact_url, redact_urls
from webhook.wire.text import clip, shown


def _pod(**meta: Any) -> dict[str, Any]:
    obj = builders.pod("p-0")
    obj["metadata"].update(meta)
    return obj


@pytest.mark.parametrize(("meta", "field"), [
    ({"name": "n" * (NAME_MAX + 1)}, "Pod.metadata.name"),
    ({"namespace": "n" * (NAME_MAX + 1)}, "Pod.metadata.namespace"),
    ({"uid": "u" * 10_000}, "Pod.metadata.uid"),
    ({"labels": {"app": "v" * 64}}, "Pod.metadata.labels.app"),
    ({"labels": {"k" * 318: "v"}}, "Pod.metadata.labels." + "k" * 317 + "..."),
    ({"annotations": {"a": "x" * (256 * 1024)}}, "Pod.metadata.annotations"),
])
def test_a_validated_pod_beyond_kubernetes_limits_is_malformed(meta: dict[str, Any], field: str) -> None:
    with pytest.raises(WireError) as err:
        parsing.pod(_pod(**meta))
    assert err.value.path == field
    assert len(str(err.value)) < 600


@pytest.mark.parametrize("meta", [
    {"name": "n" * 100_000}, {"labels": {"app": "v" * 100_000}}, {"annotations": {"a": "x" * 300_000}},
])
def test_an_admission_object_is_not_held_to_limits_the_api_server_checks_after_admission(
        meta: dict[str, Any]) -> None:
    assert parsing.pod(_pod(**meta), "request.object", validated=False).namespace == "ml"


def test_only_our_own_labels_and_annotations_are_kept() -> None:
    pod = parsing.pod(_pod(labels={"app": "a", keys.GROUP_LABEL: "g"},
                           annotations={"team.example.com/x": "y" * 1000, keys.GROUP_ANNOTATION: "run-1"}))
    assert dict(pod.labels) == {keys.GROUP_LABEL: "g"}
    assert dict(pod.annotations) == {keys.GROUP_ANNOTATION: "run-1"}


def test_a_wrong_type_in_an_annotation_we_do_not_keep_is_still_malformed() -> None:
    with pytest.raises(WireError, match="expected a string"):
        parsing.pod(_pod(annotations={"team.example.com/x": {"nested": True}}))


@pytest.mark.parametrize(("labels", "field"), [
    ({keys.CLIQUE_LABEL: "d" * 64}, f"node.metadata.labels.{keys.CLIQUE_LABEL}"),
    ({"x": "y" * 100_000}, "node.metadata.labels.x"),
])
def test_a_node_label_beyond_kubernetes_limits_is_malformed(labels: dict[str, str], field: str) -> None:
    # A domain label value is repeated in every other node's reason: 5,000 nodes x 100,000 characters.
    obj = builders.node("n-0", domain="d")
    obj["metadata"]["labels"] = labels
    with pytest.raises(WireError) as err:
        parsing.node(obj, Policy().domain_labels)
    assert err.value.path == field


@pytest.mark.parametrize("inventory", ["[" * 100_000 + "]" * 100_000, '{"gpus": ' * 5000 + "1" + "}" * 5000,
                                       "not json", '{"gpus": "all"}'])
def test_an_unreadable_inventory_annotation_withholds_nothing(inventory: str) -> None:
    assert parsing.releasing_gpus(inventory) == 0


def test_gpu_counts_that_add_up_beyond_64_bits_are_malformed() -> None:
    spec = {"containers": [{"resources": {"limits": {keys.GPU_RESOURCE: "8Ei"}}}] * 3}
    with pytest.raises(WireError, match="adds up to"):
        parsing.effective_gpus(spec, "Pod.spec")


def test_a_compute_domain_id_that_is_no_string_is_malformed() -> None:
    claim = {"metadata": {"name": "c"}, "spec": {"devices": {"config": [{"opaque": {"parameters": {
        "kind": keys.COMPUTE_DOMAIN_CHANNEL_CONFIG_KIND, "domainID": [[["deep"]]]}}}]}}}
    with pytest.raises(WireError, match="expected a string"):
        claim_parsing.claim_spec(claim, template=False)


def _resolved(annotation: str, namespace: str = "ml") -> Any:
    pod = parsing.pod(_pod(namespace=namespace, annotations={keys.GROUP_ANNOTATION: annotation}))
    return grouping.resolve(pod, Catalog(), Policy())


@pytest.mark.parametrize("name", ["run-7", "r" * LABEL_VALUE_MAX, "a", "A.b_c-9"])
def test_a_group_name_a_label_value_may_hold_names_the_group_as_it_is(name: str) -> None:
    group = _resolved(name).group
    assert group is not None and (group.name, group.id) == (name, f"ann:ml/{name}")


@pytest.mark.parametrize("name", ["g" * 100_000, "r" * (LABEL_VALUE_MAX + 1), "evil\u202egpj", "nul\x00byte",
                                  "-leading", "trailing.", "ml/train", "caf\u00e9"],
                         ids=["100000-chars", "64-chars", "rtl-override", "nul", "leading-dash", "trailing-dot",
                              "slash", "non-ascii"])
def test_a_group_name_no_label_value_may_hold_is_refused_without_echoing_it_whole(name: str) -> None:
    resolution = _resolved(name)
    assert resolution.group is None
    (problem,) = resolution.problems
    assert "is not a group name" in problem and len(problem) < 400
    assert "\u202e" not in problem and "\x00" not in problem  # escaped, never written raw


@pytest.mark.parametrize(("value", "expected"), [
    ("short", "'short'"),
    ("x" * 100, "'" + "x" * 40 + "'... (100 characters)"),
    ([[[[[]]]]] * 3, "a list of 3 items"),
    ({"a": 1}, "an object with 1 keys"),
    (2**64, "an integer of 65 bits"),
    (1.5, "1.5"), (None, "None"), (True, "True"),
])
def test_values_are_quoted_short_and_never_deep(value: Any, expected: str) -> None:
    assert shown(value) == expected


def test_a_nested_value_is_described_without_recursing() -> None:
    deep: list[Any] = []
    for _ in range(100_000):  # repr() of this would exhaust the recursion limit
        deep = [deep]
    assert shown(deep) == "a list of 1 items"


@pytest.mark.parametrize(("url", "expected"), [
    ("https://user:PW@fabric.example:8443/redfish/v1", "https://***@fabric.example:8443/redfish/v1"),
    ("https://user@fabric.example", "https://***@fabric.example"),
    ("https://user:p@ss/w@rd@fabric.example/x", "https://***@fabric.example/x"),  # unescaped "@" and "/"
    ("https://fabric.example/x@y", "https://***@y"),  # an "@" in the path: cut too far, never too short
    ("https://fabric.example/redfish", "https://fabric.example/redfish"),
    ("embedded", "embedded"), ("none", "none"),
])
def test_a_url_is_shown_without_its_userinfo(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_every_url_in_a_text_loses_its_userinfo() -> None:
    text = "not read yet from https://admin:S3cret@10.0.0.5:8443: refused; see http://u:p@x/y, mail a@b"
    assert redact_urls(text) == "not read yet from https://***@10.0.0.5:8443: refused; see http://***@x/y, mail a@b"


def test_the_start_up_settings_never_show_the_fabric_password() -> None:
    shown_settings = Settings(fabric=FabricSettings(manager="https://ops:S3cretPW@fabric.example:8443")).redacted()
    assert shown_settings["fabric"]["manager"] == "https://***@fabric.example:8443"
    assert "S3cretPW" not in repr(shown_settings)


def test_text_is_cut_visibly() -> None:
    assert clip("x" * 10, 5) == "xx..." and clip("abc", 5) == "abc"
