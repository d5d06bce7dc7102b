"""The node label ``imex-webhook.io/domain``: what it must say on a node, and the merge patch that makes it so.

The admission webhook keeps a group together with a required pod affinity whose ``topologyKey`` is
``keys.DOMAIN_LABEL``, and requires that key on the node. kube-scheduler's InterPodAffinity filter
rejects every node that lacks a required term's ``topologyKey`` (even for a group's first pod), so the
key must be on every node of every domain, whatever its kind (``webhook.domain.domain_kinds``: cliques
and fabric zones alike), with the domain as its value. The extender's node domain labeller
(``webhook.adapters.kube.node_labels``) writes it from these functions; they are pure.

The value is the node's domain exactly as the extender compares it (``domain_kinds.node_domain``: the
value of the first ``--domain-label`` present), so the scheduler's notion of "same domain" and ours agree. A
node in no domain must not carry the label: it is removed (``null`` in the merge patch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.domain import domain_kinds, keys
from webhook.domain.model import Node
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing

DOMAIN_LABEL = keys.DOMAIN_LABEL


def merge_patch(domain: str | None, labels: Mapping[str, str]) -> dict[str, Any] | None:
    """The RFC 7386 merge patch that makes ``DOMAIN_LABEL`` say ``domain`` (``None``: remove it), or
    ``None`` when the labels already say it."""
    if labels.get(DOMAIN_LABEL) == domain:  # absent reads as None: nothing to remove
        return None
    return {"metadata": {"labels": {DOMAIN_LABEL: domain}}}


def for_node(node: Node, labels: Mapping[str, str]) -> dict[str, Any] | None:
    """``merge_patch`` for a parsed node, given the labels it carries now."""
    return merge_patch(node.domain, labels)


@dataclass(frozen=True, slots=True)
class LabelState:
    """What ``DOMAIN_LABEL`` says on one node at ``resource_version``, and what it must say."""

    node: str
    resource_version: str
    value: str | None  # what the label must say; None: absent
    current: str | None  # what it says now; None: absent

    @property
    def needed(self) -> bool:
        """Whether the node must be patched (label values are strings, so "" is not "absent")."""
        return self.current != self.value

    def body(self, guarded: bool = True) -> dict[str, Any]:
        """The merge patch; ``guarded`` adds the resourceVersion, so a write decided on a view of the node
        that is no longer current fails with 409 instead of undoing a newer change."""
        meta: dict[str, Any] = {"labels": {DOMAIN_LABEL: self.value}}
        if guarded and self.resource_version:
            meta["resourceVersion"] = self.resource_version
        return {"metadata": meta}


def state_of(obj: Any, policy: Policy, path: str = "node") -> LabelState:
    """The label state of a raw Node object (a watch event, a GET).

    Reads only the name, resourceVersion and labels, so a node with an unrelated malformed field (a bad
    quantity, say) still gets its label; a Node whose labels themselves are malformed raises ``WireError``."""
    name, version, labels = parsing.node_labels(obj, path)
    domain, _ = domain_kinds.node_domain(labels, policy.domain_labels)
    return LabelState(name, version, domain, labels.get(DOMAIN_LABEL))
