"""What the filter derives from the cache's nodes (``webhook.domain.placement.candidates.NodeSets``), computed once
per node generation instead of once per request.

The cluster store rebuilds its nodes mapping only when a node changes (``webhook.state.cluster``): while
pods come and go, every snapshot shares the same mapping, so its identity is the node generation. Values
are kept next to the mapping they were computed from (a strong reference, so that identity cannot be
reused by another object) and served for as long as snapshots carry that mapping; a new mapping drops
them all.

Concurrent requests read and replace one immutable tuple; two threads that miss together both compute the
same value and one of them is kept, which is harmless. The values are those of the pure functions
(``candidates.labelled_nodes``, ``candidates.outside_reasons``); tests check that both agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.domain.model import Node
from webhook.domain.placement import candidates

# Domains whose outside reasons are kept per generation: groups are placed in a few domains at a time.
OUTSIDE_KEPT = 8


class NodeSets:
    def __init__(self) -> None:
        self._labelled: tuple[Mapping[str, Node], frozenset[str]] | None = None
        self._outside: tuple[Mapping[str, Node], Mapping[str, Mapping[str, str]]] | None = None
        self.computed = 0  # values built, all kinds together (tests)

    def labelled(self, nodes: Mapping[str, Node]) -> frozenset[str]:
        kept = self._labelled
        if kept is not None and kept[0] is nodes:
            return kept[1]
        value = candidates.labelled_nodes(nodes)
        self._labelled = (nodes, value)
        self.computed += 1
        return value

    def outside(self, nodes: Mapping[str, Node], domain: str) -> Mapping[str, str]:
        kept = self._outside
        by_domain: Mapping[str, Mapping[str, str]] = kept[1] if kept is not None and kept[0] is nodes else {}
        value = by_domain.get(domain)
        if value is not None:
            return value
        # A plain dict, handed out as a Mapping: the split copies it with dict(), whose fast path takes dicts.
        value = candidates.outside_reasons(nodes, domain)
        recent = [(d, v) for d, v in by_domain.items() if d != domain][-(OUTSIDE_KEPT - 1):]
        self._outside = (nodes, dict([*recent, (domain, value)]))
        self.computed += 1
        return value
