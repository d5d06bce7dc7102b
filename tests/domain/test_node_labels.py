"""``node_labels``: what ``imex-webhook.io/domain`` must say on a node, and the merge patch that says it.

Covered: the value is the node's domain exactly as the extender computes it (first present, non-empty
``--domain-label``: clique before fabric zone), for the default and a custom label list; nothing to do
when the label is right or absent on a node in no domain; a stale or empty label is replaced or removed
(``null``); the guarded body carries the resourceVersion; a Node whose labels are malformed raises
``WireError`` naming the field, while unrelated malformed fields do not matter; the label is never an
input of the domain, so a node parses to the same ``Node`` with the label missing, right or stale (what
the embedded cluster, which has no labeller, relies on).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.admission.patches import merge_patch
from webhook.domain.policy import Policy
from webhook.domain.reading import node_labels, parsing
from webhook.errors import WireError

DOMAIN = keys.DOMAIN_LABEL
CLIQUE = "3183419e-5b1e-4e5a-9d4c-0e6d2a1c7f01.32766"
POLICY = Policy()


def _node(labels: dict[str, Any], version: str = "42") -> dict[str, Any]:
    return {"metadata": {"name": "n1", "resourceVersion": version, "labels": labels},
            "status": {"allocatable": {keys.GPU_RESOURCE: "4"}}}


@pytest.mark.parametrize(("case", "labels", "value", "patch"), [
    ("clique node, no label yet", {keys.CLIQUE_LABEL: CLIQUE}, CLIQUE, {DOMAIN: CLIQUE}),
    ("fabric-zone node, no label yet", {keys.FABRIC_ZONE_LABEL: "pcie-pool-1"}, "pcie-pool-1",
     {DOMAIN: "pcie-pool-1"}),
    ("both: the clique comes first", {keys.CLIQUE_LABEL: CLIQUE, keys.FABRIC_ZONE_LABEL: "z"}, CLIQUE,
     {DOMAIN: CLIQUE}),
    ("an empty clique label is absent", {keys.CLIQUE_LABEL: "", keys.FABRIC_ZONE_LABEL: "z"}, "z", {DOMAIN: "z"}),
    ("already right", {keys.CLIQUE_LABEL: CLIQUE, DOMAIN: CLIQUE}, CLIQUE, None),
    ("stale: the node moved to another clique", {keys.CLIQUE_LABEL: "other.1", DOMAIN: CLIQUE}, "other.1",
     {DOMAIN: "other.1"}),
    ("stale: the node left every domain", {DOMAIN: CLIQUE}, None, {DOMAIN: None}),
    ("an empty label on a node in no domain", {DOMAIN: ""}, None, {DOMAIN: None}),
    ("no domain, no label", {"kubernetes.io/hostname": "n1"}, None, None),
    ("a clique value that is not <uuid>.<id> is copied as it is (domains are opaque)",
     {keys.CLIQUE_LABEL: "not-a-clique"}, "not-a-clique", {DOMAIN: "not-a-clique"}),
])
def test_the_label_says_the_domain_and_the_patch_is_only_what_is_missing(
        case: str, labels: dict[str, str], value: str | None, patch: dict[str, Any] | None) -> None:
    node = parsing.node(_node(labels), POLICY.domain_labels)
    assert node.domain == value, case
    expected = None if patch is None else {"metadata": {"labels": patch}}
    assert node_labels.for_node(node, labels) == expected, case
    assert node_labels.merge_patch(value, labels) == expected, case
    state = node_labels.state_of(_node(labels), POLICY)
    assert (state.node, state.resource_version, state.value, state.needed) == ("n1", "42", value, patch is not None)
    if patch is not None:
        body = state.body()
        assert body == {"metadata": {"labels": patch, "resourceVersion": "42"}}, case
        assert state.body(guarded=False) == expected
        after = merge_patch(_node(labels), body)["metadata"]["labels"]
        assert after.get(DOMAIN) == value and (value is not None or DOMAIN not in after), case
        assert not node_labels.state_of(_node(after), POLICY).needed, case


def test_a_custom_domain_label_list_decides_the_value() -> None:
    policy = Policy(domain_labels=("example.com/rack", keys.FABRIC_ZONE_LABEL))
    labels = {keys.CLIQUE_LABEL: CLIQUE, "example.com/rack": "r7"}
    assert node_labels.state_of(_node(labels), policy).value == "r7"
    assert node_labels.state_of(_node({keys.CLIQUE_LABEL: CLIQUE}), policy).value is None


@pytest.mark.parametrize(("obj", "field"), [
    ({"metadata": {"name": "n1", "labels": {keys.CLIQUE_LABEL: 5}}}, f"node.metadata.labels.{keys.CLIQUE_LABEL}"),
    ({"metadata": {"name": "n1", "labels": ["a"]}}, "node.metadata.labels"),
    ({"metadata": {"labels": {}}}, "node.metadata.name"),
    ({"metadata": {"name": "n1", "resourceVersion": 7}}, "node.metadata.resourceVersion"),
    ("a node", "node"),
])
def test_a_node_with_malformed_labels_is_a_wire_error_naming_the_field(obj: Any, field: str) -> None:
    with pytest.raises(WireError) as err:
        node_labels.state_of(obj, POLICY)
    assert err.value.path == field


def test_an_unrelated_malformed_field_does_not_stop_the_label() -> None:
    obj = _node({keys.FABRIC_ZONE_LABEL: "z"})
    obj["status"]["allocatable"][keys.GPU_RESOURCE] = "lots"
    with pytest.raises(WireError):
        parsing.node(obj, POLICY.domain_labels)
    assert node_labels.state_of(obj, POLICY).value == "z"


@pytest.mark.parametrize("label", [None, CLIQUE, "stale.9", ""])
def test_the_label_is_never_an_input_of_the_domain(label: str | None) -> None:
    # The embedded cluster has no labeller: its nodes parse the same with the label missing, right or stale.
    obj = builders.node("n1", gpus=4, domain=CLIQUE)
    if label is not None:
        obj["metadata"]["labels"][DOMAIN] = label
    assert parsing.node(obj, POLICY.domain_labels) == parsing.node(builders.node("n1", gpus=4, domain=CLIQUE),
                                                                   POLICY.domain_labels)
    plain = builders.node("n2", gpus=8)
    plain["metadata"]["labels"][DOMAIN] = CLIQUE
    assert parsing.node(plain, POLICY.domain_labels).domain is None
