"""How many connections one worker holds, and what happens to the ones it drops.

Two pools: the service port (--bind) and the probe port (--probe-bind), each with its own cap in total and
per source address, so that no client of one can take the other's room. A new connection past a cap
takes the place of the oldest *idle* connection of the pool (or of its source, past the per-source cap):
one that is still in its TLS handshake, has not sent a whole request head, or waits between requests.
Connections reading a body, being served or being written to are never evicted; when none is idle, the
new connection is closed at once. Either way the worker keeps accepting, so a flood of idle connections
never leaves a new client waiting in the kernel's listen queue.

Every connection the server drops (a missed deadline, an eviction, a refusal) is one log line, at most
:data:`LOG_BURST` lines at once and :data:`LOG_RATE` a second after that, and one increment of
``imex_webhook_connections_dropped_total{reason}`` (its reasons: ``webhook.http.metrics.CONNECTION_DROP_REASONS``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

log = logging.getLogger("imex_webhook.connections")

FRESH, SERVED = 0, 1  # idle tiers of a Pool
LOG_BURST = 20
LOG_RATE = 2.0  # lines a second once the burst is spent


@dataclass
class Pool:
    """The connections of one listener: how many, from where, and which may be evicted, oldest first.

    Two tiers of idle connections: ``fresh`` ones have not completed a request (a TLS handshake or a head
    still to come, or closing) and go first; ``served`` ones wait between requests on a kept-alive
    connection (kube-scheduler's, kube-apiserver's) and go only when no fresh one is left."""

    name: str
    cap: int
    per_source: int
    count: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    tiers: tuple[dict[Hashable, None], dict[Hashable, None]] = field(default_factory=lambda: ({}, {}))
    by_source_tier: dict[tuple[str, int], dict[Hashable, None]] = field(default_factory=dict)
    tier_of: dict[Hashable, int] = field(default_factory=dict)

    def admit(self, source: str) -> tuple[bool, Hashable | None, str]:
        """For a connection just accepted from ``source``: (keep it?, the idle one to evict first or None,
        the drop reason). Call :meth:`add` once it is kept."""
        if self.per_source and self.by_source[source] >= self.per_source:
            for tier in (FRESH, SERVED):
                mine = self.by_source_tier.get((source, tier))
                if mine:
                    return True, next(iter(mine)), "evicted-idle-source"
            return False, None, "refused-source-full"
        if self.count >= self.cap:
            for tier in (FRESH, SERVED):
                if self.tiers[tier]:
                    return True, next(iter(self.tiers[tier])), "evicted-idle"
            return False, None, "refused-full"
        return True, None, ""

    def add(self, source: str) -> None:
        self.count += 1
        self.by_source[source] += 1

    def remove(self, conn: Hashable, source: str) -> None:
        self.set_idle(conn, source, None)
        self.count -= 1
        self.by_source[source] -= 1
        if self.by_source[source] <= 0:
            del self.by_source[source]

    def set_idle(self, conn: Hashable, source: str, tier: int | None) -> None:
        """``tier``: :data:`FRESH`, :data:`SERVED`, or ``None`` for a connection that may not be evicted."""
        old = self.tier_of.get(conn)
        if old == tier:
            return
        if old is not None:
            del self.tiers[old][conn]
            mine = self.by_source_tier[(source, old)]
            del mine[conn]
            if not mine:
                del self.by_source_tier[(source, old)]
            del self.tier_of[conn]
        if tier is not None:
            self.tiers[tier][conn] = None
            self.by_source_tier.setdefault((source, tier), {})[conn] = None
            self.tier_of[conn] = tier


class Drops:
    """One log line (rate-limited) and one count per connection the server drops."""

    def __init__(self, count: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.count = count
        self.clock = clock
        self.tokens = float(LOG_BURST)
        self.last = clock()
        self.suppressed = 0
        self.lock = threading.Lock()

    def drop(self, reason: str, peer: object, detail: str = "") -> None:
        if self.count is not None:
            self.count(reason)
        with self.lock:
            now = self.clock()
            self.tokens = min(float(LOG_BURST), self.tokens + (now - self.last) * LOG_RATE)
            self.last = now
            if self.tokens < 1:
                self.suppressed += 1
                return
            self.tokens -= 1
            suppressed, self.suppressed = self.suppressed, 0
        more = f" ({suppressed} more dropped connections not logged)" if suppressed else ""
        log.warning("dropped a connection from %s: %s%s%s", _peer(peer), reason,
                    f" ({detail})" if detail else "", more)


def _peer(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
