"""The nodes as filters see them: each ``Node`` with the whole GPUs of its DRA ResourceSlices added
(``webhook.domain.reading.slices``), so DRA-only nodes have capacity too, and the domains they form.

The nodes mapping handed to snapshots is rebuilt only after a node changed: its identity marks the node
generation that memoized node sets (``webhook.state.node_sets``) are keyed by.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from webhook.domain.model import Node, ObjectKey
from webhook.domain.reading.slices import SliceGpus

NodeView = tuple[dict[str, Node], dict[str, tuple[str, ...]]]  # nodes by name, node names by domain


class NodeIndex:
    """Not thread-safe on its own: the store calls it under its lock."""

    def __init__(self, parsed: Mapping[ObjectKey, Node]) -> None:
        self._parsed = parsed  # the store's table of Nodes as parsed from the Node alone, by ("", name)
        self.nodes: dict[str, Node] = {}
        self._dra_gpus: dict[str, int] = defaultdict(int)
        self._channels: dict[str, int] = defaultdict(int)  # IMEX channels the compute-domain plugin publishes
        self._view: NodeView | None = None
        self._channel_nodes: frozenset[str] | None = None  # memo of channel_nodes(), dropped when a slice changes

    def refresh(self, name: str) -> None:
        self._view = None
        parsed = self._parsed.get(("", name))
        if parsed is None:
            self.nodes.pop(name, None)
            return
        dra = self._dra_gpus.get(name, 0)
        self.nodes[name] = replace(parsed, gpus=parsed.gpus + dra, dra_gpus=dra) if dra else parsed

    def slice_changed(self, old: SliceGpus | None, new: SliceGpus | None) -> None:
        touched = {s.node for s in (old, new) if s is not None and s.node}
        self._channel_nodes = None
        for s in (old, new):
            if s is not None and s.node:
                sign = 1 if s is new else -1
                self._dra_gpus[s.node] += sign * s.gpus
                self._channels[s.node] += sign * s.channels
        for node in touched:
            if self._dra_gpus[node] <= 0:
                del self._dra_gpus[node]
            if self._channels[node] <= 0:
                del self._channels[node]
            self.refresh(node)

    def channel_nodes(self) -> frozenset[str] | None:
        """The nodes whose compute-domain plugin publishes an IMEX channel; None while it publishes none
        anywhere (no DRA driver, or host-managed IMEX without slices): then channels are not checked."""
        if not self._channels:
            return None
        if self._channel_nodes is None:
            self._channel_nodes = frozenset(self._channels)
        return self._channel_nodes

    def view(self) -> NodeView:
        if self._view is None:
            domains: dict[str, list[str]] = defaultdict(list)
            for node in self.nodes.values():
                if node.domain:
                    domains[node.domain].append(node.name)
            self._view = dict(self.nodes), {d: tuple(sorted(ns)) for d, ns in domains.items()}
        return self._view
