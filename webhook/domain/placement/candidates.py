"""The candidates of a group pod, split into those inside the group's domain and those outside it.

At 5,000 nodes nearly every candidate is outside the domain, so what each of them costs decides what a
filter costs. The split therefore runs as a few passes in C (a set, a subset test, a dict copy or
``dict.fromkeys``, a ``filter``), not as a Python loop with a lookup per node, and works from two things
derived from the cache's nodes alone (``NodeSets``): the nodes that have a domain, and the reason for
every node outside a domain. They change only when a node does, so the engine computes them once per
node generation (``webhook.state.node_sets``); ``Derived`` computes them on every call, and both give the
same result (tests check it).

Most candidates fail for the same reason, so one of them (the first) gets the whole explanation, naming
the domain and the group once in kube-scheduler's FailedScheduling message, and the others a short shared
text: the filter reply for 5,000 nodes stays under 300 KiB with a reason for every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from webhook.domain.inputs import NodeSets
from webhook.domain.model import Group, Node
from webhook.domain.policy import Policy

OUTSIDE_DOMAIN = "node is outside domain of the pod's group"
NO_DOMAIN = "node has no NVLink or fabric domain label"
MISSING = "node is not in imex-webhook's cache yet; it is retried on the next cluster event"


def labelled_nodes(nodes: Mapping[str, Node]) -> frozenset[str]:
    return frozenset(_packed(name for name, node in nodes.items() if node.domain))


def outside_reasons(nodes: Mapping[str, Node], domain: str) -> dict[str, str]:
    return dict.fromkeys(_packed(name for name, node in nodes.items() if node.domain and node.domain != domain),
                         OUTSIDE_DOMAIN)


def _packed(names: Iterable[str]) -> list[str]:
    """Copies of ``names`` made one after the other, so they sit next to each other in memory. The names of
    the cache's nodes were allocated among everything else parsed with their nodes; a request compares 5,000
    of them with its own, and that many scattered reads, not the comparisons, would be most of its cost."""
    return ["".join((name, "")) for name in names]


class Derived:
    """``NodeSets`` computed on every call."""

    def labelled(self, nodes: Mapping[str, Node]) -> frozenset[str]:
        return labelled_nodes(nodes)

    def outside(self, nodes: Mapping[str, Node], domain: str) -> Mapping[str, str]:
        return outside_reasons(nodes, domain)


DERIVED = Derived()


class CheckedNames(list[str]):
    """Candidate names the request parser found, as ``names``, all inside ``within`` (a ``labelled`` set):
    ``split`` neither tests them again nor hashes them into a set again when it splits against that set."""

    __slots__ = ("names", "within")

    def __init__(self, candidates: Iterable[str], names: Set[str], within: frozenset[str]) -> None:
        super().__init__(candidates)
        self.names = names
        self.within = within


@dataclass(frozen=True, slots=True)
class Reasons:
    """Why candidates outside the group's domain are refused: the whole text for the first of a kind, the
    short one for the others."""

    other_domain: str
    no_domain: str
    missing: str = MISSING

    @classmethod
    def of(cls, domain: str, group: Group, policy: Policy) -> Reasons:
        return cls(f"node is outside domain {domain}, which holds the whole group {group.namespace}/{group.name}",
                   f"node has no NVLink or fabric domain label ({', '.join(policy.domain_labels)}); group pods run "
                   "only inside one domain")


def split(candidates: Sequence[str], nodes: Mapping[str, Node], domain: str, members: Iterable[str],
          sets: NodeSets, why: Reasons) -> tuple[list[str], dict[str, str]]:
    """(the candidates in ``domain``, in their order; the reason for each other candidate, in their order
    unless every labelled node is a candidate, then in ``nodes``' order). ``members``: the nodes of
    ``domain`` in ``nodes``."""
    labelled = sets.labelled(nodes)
    if isinstance(candidates, CheckedNames) and candidates.within is labelled:
        names: Set[str] = candidates.names
    else:
        names = set(candidates)
        if not (labelled <= names if len(names) == len(labelled) else names <= labelled):
            return split_each(candidates, nodes, domain, why)
    hits = frozenset(name for name in members if name in names)
    if len(names) == len(labelled) == len(candidates):
        # Every labelled node, once each (what the scheduler sends when its own filters pass every node):
        # the reasons are a copy of the ones kept for this node generation, not a dict built per call.
        reasons = dict(sets.outside(nodes, domain))
    else:
        reasons = dict.fromkeys(candidates, OUTSIDE_DOMAIN)
        for name in hits:
            del reasons[name]
    if reasons:
        reasons[next(iter(reasons))] = why.other_domain
    return (list(filter(hits.__contains__, candidates)) if hits else []), reasons


def split_each(candidates: Sequence[str], nodes: Mapping[str, Node], domain: str, why: Reasons,
               attaching: str | None = None, elsewhere: str = "") -> tuple[list[str], dict[str, str]]:
    """``split`` one candidate at a time: some candidate is unknown or in no domain, or the pod's fabric GPUs
    are being attached to node ``attaching`` (every other candidate is refused with ``elsewhere``)."""
    inside: list[str] = []
    reasons: dict[str, str] = {}
    first_other = first_none = True
    for name in candidates:
        node = nodes.get(name)
        if attaching is not None and name != attaching:
            reasons[name] = elsewhere
        elif node is None:
            reasons[name] = why.missing
        elif node.domain is None:
            if name not in reasons:
                reasons[name] = why.no_domain if first_none else NO_DOMAIN
                first_none = False
        elif node.domain != domain:
            if name not in reasons:
                reasons[name] = why.other_domain if first_other else OUTSIDE_DOMAIN
                first_other = False
        else:
            inside.append(name)
    return inside, reasons
