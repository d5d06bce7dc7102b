"""Frozen copies of the store's mutable tables for snapshots, rebuilt only where a key changed.

A snapshot is taken after every change the filter or bind may need to see, and the cache changes several
times per pod while a scheduler binds (the pod, its claims). Freezing every node's groups, every node's
ComputeDomains, every group's members and every node's IMEX holders anew each time cost a third of the
service's CPU at 5,000 nodes (docs/BENCHMARKS.md, "The real kube-scheduler at 5,000 nodes"); a change
touches one node or one group, so only those entries are frozen again and the rest is a shallow copy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
F = TypeVar("F")


class FrozenView(Generic[K, V, F]):
    """``freeze`` applied to every entry of a source table, kept across snapshots. The owner calls ``touch``
    with every key whose entry it changed (added, changed or deleted); ``view`` then freezes those entries
    again. A dict handed out by ``view`` is never changed afterwards: snapshots may keep it.

    Not thread-safe on its own: the store calls it under its lock."""

    def __init__(self, freeze: Callable[[V], F]) -> None:
        self._freeze = freeze
        self._frozen: dict[K, F] = {}
        self._dirty: set[K] = set()
        self._view: dict[K, F] | None = {}

    def touch(self, key: K) -> None:
        self._dirty.add(key)
        self._view = None

    def view(self, source: Mapping[K, V]) -> dict[K, F]:
        if self._view is None:
            for key in self._dirty:
                value = source.get(key)
                if value:
                    self._frozen[key] = self._freeze(value)
                else:
                    self._frozen.pop(key, None)
            self._dirty.clear()
            self._view = dict(self._frozen)
        return self._view
