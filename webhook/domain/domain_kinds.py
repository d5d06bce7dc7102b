"""The kinds of domain a node can be in, in one table: a multi-node NVLink clique, a composable fabric zone.

A domain is a set of nodes whose pods one group may span. A node's domain is the value of the first domain
label present on it (``--domain-label``, by default every kind's label in the order of ``KINDS``: a node
labelled with a clique and a fabric zone is in its clique), compared as an opaque string. What each kind is
called on the wire (``/inspect``'s ``domains[].kind``, which the cluster map draws by) and for a person
comes from its entry here.

Adding a kind is one ``DomainKind`` entry in ``KINDS``, plus what truly differs for it: a fabric zone's
nodes also take GPUs attached from the fabric (``Node.fabric_zone``, read by ``webhook.domain.reading.parsing``),
and the cluster map (webhook/http/ui_page.html) draws a kind it does not know as plain nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from webhook.domain.model import Node
from webhook.wire import PREFIX


@dataclass(frozen=True, slots=True)
class DomainKind:
    name: str  # on the wire: /inspect's domains[].kind
    label: str  # the node label whose value names the node's domain
    title: str  # how a person calls one domain of this kind
    # Whether a node is of this kind whatever label named its domain: a domain of an operator's own label
    # whose nodes all qualify counts as this kind.
    holds: Callable[[Node], bool] | None = None


# "<clusterUUID>.<cliqueID>", written by GPU Feature Discovery or our node agent: the trays of one rack.
NVLINK = DomainKind("nvlink", "nvidia.com/gpu.clique", "NVLink clique")
# A composable pool: nodes that take GPUs attached from the fabric (the Redfish zone's Id).
FABRIC = DomainKind("fabric", f"{PREFIX}/fabric-zone", "fabric pool", holds=lambda n: bool(n.fabric_zone))
KINDS: tuple[DomainKind, ...] = (NVLINK, FABRIC)
OTHER = "other"  # a domain label the operator configured that no kind claims; drawn as plain nodes

DEFAULT_LABELS: tuple[str, ...] = tuple(k.label for k in KINDS)


def node_domain(labels: Mapping[str, str], domain_labels: Sequence[str]) -> tuple[str | None, str | None]:
    """(domain, the label it came from): the value of the first domain label present and not empty.

    ``imex-webhook.io/domain`` (``keys.DOMAIN_LABEL``) is only a copy of this value for kube-scheduler's
    sake: it is never read here, so a node whose copy is missing or stale (not written yet, or written by
    an older configuration) is in the same domain as one whose copy is right, in every mode."""
    key = next((k for k in domain_labels if labels.get(k)), None)
    return (labels[key], key) if key else (None, None)


def kind_of(label: str | None, nodes: Sequence[Node]) -> str:
    """The kind of the domain the label ``label`` names on ``nodes``: the kind of that label, else the first
    kind that holds every node, else ``OTHER``."""
    by_label = next((k for k in KINDS if k.label == label), None)
    if by_label is not None:
        return by_label.name
    held = next((k for k in KINDS if k.holds is not None and nodes and all(k.holds(n) for n in nodes)), None)
    return held.name if held is not None else OTHER


def title_of(name: str) -> str:
    """How a person calls a domain of the kind ``name`` ("domain" for ``OTHER`` or a kind not known)."""
    return next((k.title for k in KINDS if k.name == name), "domain")
