"""The groups the filter refused, remembered for the retry once capacity returns (``webhook.engine.requeue``
explains the retry and why it cannot loop)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

MAX_WAITING = 1024  # refused groups remembered; past it the oldest refusal is forgotten


@dataclass(frozen=True, slots=True)
class Refusal:
    seq: int  # order of refusals and retries (a clock may stand still in tests and simulations)
    candidates: Sequence[str] | None  # the nodes the scheduler offered; None: unknown (seeded at start)
    inputs: tuple[object, ...] | None  # the filter's inputs, by identity, when it refused
    retried: int = 0  # seq of the last retry; due again once seq > retried


class Refusals:
    """The groups the filter refused, thread-safe: request threads record, one worker reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Refusal] = {}
        self._seq = 0
        self.seeded = False

    def refused(self, group_id: str, candidates: Sequence[str] | None, inputs: tuple[object, ...] | None) -> None:
        with self._lock:
            self._seq += 1
            old = self._items.pop(group_id, None)  # re-inserted last: dict order is refusal order
            self._items[group_id] = Refusal(self._seq, candidates, inputs, old.retried if old else 0)
            while len(self._items) > MAX_WAITING:
                del self._items[next(iter(self._items))]

    def due(self) -> list[tuple[str, Refusal]]:
        """Refusals newer than the group's last retry, oldest first."""
        with self._lock:
            return [(g, r) for g, r in self._items.items() if r.seq > r.retried]

    def retried(self, group_id: str) -> None:
        with self._lock:
            current = self._items.get(group_id)
            if current is not None:
                self._seq += 1
                self._items[group_id] = replace(current, retried=self._seq)

    def checked(self, group_id: str, refusal: Refusal, inputs: tuple[object, ...]) -> None:
        """The refusal still holds against ``inputs``: remember them instead of the older ones (no
        second check until they change, and no old snapshot kept alive)."""
        with self._lock:
            if self._items.get(group_id) is refusal:
                self._items[group_id] = replace(refusal, inputs=inputs)

    def drop(self, group_id: str) -> None:
        with self._lock:
            self._items.pop(group_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
