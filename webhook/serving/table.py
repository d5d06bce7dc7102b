"""The connections the worker's poller drives (:class:`ConnTable`): which of them it reads, which bodies
wait for room among the buffered request bytes, how many bytes are buffered, what the selector watches on
each socket, and in which idle tier of its listener's pool (:mod:`webhook.serving.conn_limits`) each one is.

The reader (:mod:`webhook.serving.reading`) and the closer (:mod:`webhook.serving.closing`) share this one
table; only the poller's thread touches it. A connection's step, the callback the selector and the method
queue call for it, is handed in by the worker (it is the reader's).
"""

from __future__ import annotations

import selectors
from collections import deque
from collections.abc import Callable
from functools import partial

from webhook.serving.conn_limits import FRESH, SERVED, Pool
from webhook.serving.conns import CLOSING, IDLE_PHASES, Conn

Step = Callable[..., None]  # (conn, fileobj=None): what the poller does next for a connection


class ConnTable:
    """The poller's view of its connections; see the module's docstring."""

    def __init__(self, selector: selectors.BaseSelector, defer: Callable[..., None], step: Step,
                 pools: dict[bool, Pool], buffered_cap: int) -> None:
        """``selector``: gunicorn's poller; ``defer(callback, *args)``: runs a callback on the poller's thread
        (gunicorn's method queue); ``pools``: by whether a connection came on the probe listener;
        ``buffered_cap``: request bytes held across all connections before bodies wait
        (:attr:`~webhook.serving.conns.Limits.buffered`)."""
        self.selector = selector
        self.defer = defer
        self.step = step
        self.pools = pools
        self.buffered_cap = buffered_cap
        self.reading: dict[Conn, None] = {}  # connections the poller drives (an ordered set)
        self.paused: deque[Conn] = deque()  # bodies waiting for room among the buffered bytes
        self.buffered = 0  # request bytes held across all connections

    def read(self, conn: Conn) -> None:
        """The poller drives ``conn`` from now on."""
        self.reading[conn] = None

    def stop_reading(self, conn: Conn) -> None:
        self.reading.pop(conn, None)

    def later(self, conn: Conn) -> None:
        """Take the next step for ``conn`` on the poller's next turn, not now."""
        self.defer(self.step, conn)

    def pause(self, conn: Conn) -> None:
        """``conn``'s body waits until dispatched requests free room among the buffered bytes."""
        self.watch(conn, 0)
        self.paused.append(conn)

    def resume(self) -> None:
        """Let paused bodies go on reading, as long as there is room."""
        while self.paused and self.buffered < self.buffered_cap:
            conn = self.paused.popleft()
            if conn in self.reading:
                self.later(conn)

    def track(self, conn: Conn) -> None:
        """Keep the pool's list of idle connections (the ones it may evict) in step with the phase."""
        tier = None
        if conn.phase == CLOSING or (conn.phase in IDLE_PHASES and not conn.served):
            tier = FRESH
        elif conn.phase in IDLE_PHASES:
            tier = SERVED
        self.pools[conn.probe].set_idle(conn, conn.source, tier)

    def watch(self, conn: Conn, events: int) -> None:
        """What the selector waits for on ``conn``'s socket (0: nothing, it is unregistered)."""
        if events == conn.events:
            return
        if conn.events == 0:
            self.selector.register(conn.sock, events, partial(self.step, conn))
        elif events == 0:
            self.selector.unregister(conn.sock)
        else:
            self.selector.modify(conn.sock, events, partial(self.step, conn))
        conn.events = events

    def due(self, now: float) -> list[Conn]:
        """The connections whose deadline has passed."""
        return [c for c in self.reading if c.deadline <= now]
