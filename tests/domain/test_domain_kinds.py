"""The kinds of domain, from one table (webhook.domain.domain_kinds): a domain is of the kind of the label
that named it, a domain of an operator's own label is a fabric pool when all its nodes are in a fabric
zone, and the default domain labels follow the order of the kinds."""

from __future__ import annotations

from webhook.domain import domain_kinds, keys
from webhook.domain.model import Node


def _node(name: str, zone: str | None = None) -> Node:
    return Node(name, "d", "example.com/rack", 4, zone, 2 if zone else 0, None)


def test_a_domain_is_of_the_kind_of_the_label_that_named_it() -> None:
    in_zones = [_node("a", "pool"), _node("b", "pool")]
    assert domain_kinds.kind_of(keys.CLIQUE_LABEL, in_zones) == "nvlink"
    assert domain_kinds.kind_of(keys.FABRIC_ZONE_LABEL, [_node("a")]) == "fabric"


def test_a_domain_of_an_operators_label_is_a_fabric_pool_only_when_all_its_nodes_are_in_a_zone() -> None:
    assert domain_kinds.kind_of("example.com/rack", [_node("a", "pool"), _node("b", "pool")]) == "fabric"
    assert domain_kinds.kind_of("example.com/rack", [_node("a", "pool"), _node("b")]) == domain_kinds.OTHER
    assert domain_kinds.kind_of(None, []) == domain_kinds.OTHER


def test_the_default_domain_labels_follow_the_order_of_the_kinds() -> None:
    assert keys.DEFAULT_DOMAIN_LABELS == ("nvidia.com/gpu.clique", "imex-webhook.io/fabric-zone")
    assert keys.DEFAULT_DOMAIN_LABELS == tuple(k.label for k in domain_kinds.KINDS)


def test_an_empty_label_names_no_domain_and_the_next_label_is_read() -> None:
    labels = {keys.CLIQUE_LABEL: "", keys.FABRIC_ZONE_LABEL: "pool"}
    assert domain_kinds.node_domain(labels, keys.DEFAULT_DOMAIN_LABELS) == ("pool", keys.FABRIC_ZONE_LABEL)
    assert domain_kinds.node_domain({}, keys.DEFAULT_DOMAIN_LABELS) == (None, None)


def test_a_person_reads_each_kind_by_its_title_and_any_other_as_a_domain() -> None:
    assert [domain_kinds.title_of(k) for k in ("nvlink", "fabric", "other", "new")] == \
        ["NVLink clique", "fabric pool", "domain", "domain"]
