"""The worker's deadlines and closes (a part of :class:`webhook.service.worker.Worker`): every connection
that misses its phase's deadline is closed (with a 408 answer when part of a request arrived) and counted
as dropped; a graceful close half-closes and lets the client's last bytes drain in the poller."""

from __future__ import annotations

import selectors
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from gunicorn import util

from webhook.service.conn_limits import FRESH, SERVED, Drops, Pool
from webhook.service.conns import BODY, CLOSING, HANDSHAKE, HEAD, IDLE, IDLE_PHASES, WRITING, Conn, Limits
from webhook.service.thread_side import error_response

RECV_SIZE = 64 * 1024
# Reads from one connection per poller wake-up before the others get a turn (the socket stays readable).
READS_PER_TURN = 16
SWEEP_INTERVAL = 0.25  # seconds between deadline sweeps
LINGER = 5.0  # seconds a closing connection may take to send the rest of a refused body and its FIN
# Bytes a closing connection may send meanwhile, at least: discarding them costs their decryption only, and
# a client whose body is over a small route's limit (/bind's 64 KiB) still reads its 413 instead of a reset.
DRAIN_FLOOR = 16 * 1024 * 1024
STOP_LINGER = 2.0  # kept-alive connections left open this long once the worker is stopping
_TIMEOUTS = {HANDSHAKE: "handshake-timeout", HEAD: "header-timeout", BODY: "body-timeout",
             WRITING: "write-timeout"}


class Closing:
    """Mixed into the worker, whose attributes these methods use."""

    reading: dict[Conn, None]
    limits: Limits
    method_queue: Any
    paused: deque[Conn]
    buffered: int
    pools: dict[bool, Pool]
    drops: Drops
    poller: Any
    nr_conns: int
    alive: bool
    _next_sweep: float
    _stopping_since: float | None

    # The worker's own (a stub here would shadow them in the method resolution order).
    _advance: Callable[..., None]
    _resume: Callable[[], None]
    _metrics: Callable[[], Any]

    # -- deadlines and closing ----------------------------------------------------------------------------

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        # gunicorn wakes up once a second; deadlines are checked every SWEEP_INTERVAL while any are running.
        super().wait_for_and_dispatch_events(  # type: ignore[misc]
            min(timeout, SWEEP_INTERVAL) if self.reading else timeout)

    def murder_pending(self) -> None:
        super().murder_pending()  # type: ignore[misc]
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_INTERVAL
        if not self.alive and self._stopping_since is None:
            self._stopping_since = now
            for conn in self.reading:
                if conn.phase == IDLE:
                    conn.deadline = min(conn.deadline, now + STOP_LINGER)
        for conn in [c for c in self.reading if c.deadline <= now]:
            reason = _TIMEOUTS.get(conn.phase)
            if reason is not None and self.alive:
                self.drops.drop(reason, conn.client)
            if conn.phase in (HEAD, BODY) and conn.buf:
                what = "request head" if conn.phase == HEAD else "request body"
                self._refuse(conn, 408, f"{what} not received in time")
            else:
                self._close(conn)

    def _refuse(self, conn: Conn, status: int, message: str) -> None:
        """Best effort: an error answer that fits in the socket buffer, then close (no thread involved)."""
        send_quietly(conn.sock, error_response(status, message))
        metrics = self._metrics()
        if metrics is not None:  # counted with the app's own replies in imex_webhook_requests_total
            metrics.count_refused(bytes(conn.buf[:4096]), status)
        self._close(conn, graceful=True)

    def _close(self, conn: Conn, graceful: bool = False) -> None:
        if conn.closed:
            return
        self._watch(conn, 0)
        self.reading.pop(conn, None)
        self.buffered -= len(conn.buf)
        conn.buf = bytearray()
        self._resume()
        if graceful and conn.phase != CLOSING and conn.sock.fileno() >= 0:
            # Half-close and let the client's remaining bytes drain in the poller, so its last response is
            # not cut off by a reset; never a blocking linger on this thread.
            try:
                conn.sock.setblocking(False)
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            else:
                conn.phase, conn.deadline = CLOSING, time.monotonic() + LINGER
                conn.drain_left = max(self.limits.max_body, DRAIN_FLOOR) + RECV_SIZE
                self._track(conn)
                self.reading[conn] = None
                self._watch(conn, selectors.EVENT_READ)
                return
        conn.closed = True
        conn.output.fail()  # a thread waiting for the client to read gives up
        self.pools[conn.probe].remove(conn, conn.source)
        self.nr_conns -= 1
        util.close(conn.sock)

    def _drain(self, conn: Conn) -> None:
        """Discard what a closing connection still sends, a turn at a time, until its end of stream, its
        linger deadline or :attr:`Conn.drain_left` bytes: a client refused before its body was read (403,
        413) then finds the answer waiting instead of a reset, and the discarding costs linear time."""
        for _ in range(READS_PER_TURN):
            try:
                data = conn.sock.recv(RECV_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            conn.drain_left -= len(data)
            if not data or conn.drain_left < 0:
                self._close(conn)
                return
        if isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
            self.method_queue.defer(self._advance, conn)

    def _track(self, conn: Conn) -> None:
        """Keep the pool's list of idle connections (the ones it may evict) in step with the phase."""
        tier = None
        if conn.phase == CLOSING or (conn.phase in IDLE_PHASES and not conn.served):
            tier = FRESH
        elif conn.phase in IDLE_PHASES:
            tier = SERVED
        self.pools[conn.probe].set_idle(conn, conn.source, tier)

    def _watch(self, conn: Conn, events: int) -> None:
        if events == conn.events:
            return
        if conn.events == 0:
            self.poller.register(conn.sock, events, partial(self._advance, conn))
        elif events == 0:
            self.poller.unregister(conn.sock)
        else:
            self.poller.modify(conn.sock, events, partial(self._advance, conn))
        conn.events = events



def send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except (OSError, ssl.SSLError):
        pass
