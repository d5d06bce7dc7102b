"""Keys remembered only while they keep being named: the ones not named again for ``ttl`` seconds expire.

The embedded cluster learns pods from the scheduler's requests, with no watch to say when they are gone;
this is what bounds them. Oldest-named first, so finding the expired keys never scans the live ones.
Not thread-safe: the owner holds its own lock.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Forgetting(Generic[K]):
    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0:
            raise ValueError(f"ttl {ttl!r}: expected seconds > 0")
        self.ttl = ttl
        self._clock = clock
        self._named: OrderedDict[K, float] = OrderedDict()  # key -> when last named, oldest first

    def __len__(self) -> int:
        return len(self._named)

    def __contains__(self, key: object) -> bool:
        return key in self._named

    def named(self, key: K) -> None:
        """``key`` was named now: it lives another ``ttl`` seconds."""
        self._named[key] = self._clock()
        self._named.move_to_end(key)

    def drop(self, key: K) -> None:
        """Stop tracking ``key`` (it is kept for another reason, or already gone)."""
        self._named.pop(key, None)

    def expired(self, limit: int | None = None) -> list[K]:
        """Remove and return the keys not named for ``ttl`` seconds, oldest first, at most ``limit`` of them."""
        deadline = self._clock() - self.ttl
        out: list[K] = []
        while self._named and (limit is None or len(out) < limit):
            key, when = next(iter(self._named.items()))
            if when > deadline:
                break
            del self._named[key]
            out.append(key)
        return out
