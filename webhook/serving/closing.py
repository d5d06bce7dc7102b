"""The worker's deadlines and closes (:class:`Closer`): every connection that misses its phase's deadline
is closed (with a 408 answer when part of a request arrived) and counted as dropped; a graceful close
half-closes and lets the client's last bytes drain in the poller."""

from __future__ import annotations

import selectors
import socket
import ssl
import time
from collections.abc import Callable

from gunicorn import util

from webhook.serving.conn_limits import Drops
from webhook.serving.conns import BODY, CLOSING, HANDSHAKE, HEAD, IDLE, WRITING, Conn, Limits
from webhook.serving.table import ConnTable
from webhook.serving.thread_side import error_response

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


class Closer:
    """Closes the connections of a :class:`~webhook.serving.table.ConnTable`, on a deadline or when told."""

    def __init__(self, table: ConnTable, limits: Limits, drops: Drops, refused: Callable[[bytes, int], None],
                 closed: Callable[[], None], alive: Callable[[], bool]) -> None:
        """``refused(request bytes, status)``: counts a reply the server wrote itself; ``closed()``: one
        connection fewer (the gunicorn worker's count, which decides whether it accepts more);
        ``alive()``: whether the worker is still serving, not stopping."""
        self.table = table
        self.limits = limits
        self.drops = drops
        self.refused = refused
        self.closed = closed
        self.alive = alive
        self._next_sweep = 0.0
        self._stopping_since: float | None = None

    def sweep(self) -> None:
        """Close the connections past their deadline; every SWEEP_INTERVAL at most (gunicorn calls this on
        each turn of its loop)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_INTERVAL
        if not self.alive() and self._stopping_since is None:
            self._stopping_since = now
            for conn in self.table.reading:
                if conn.phase == IDLE:
                    conn.deadline = min(conn.deadline, now + STOP_LINGER)
        for conn in self.table.due(now):
            reason = _TIMEOUTS.get(conn.phase)
            if reason is not None and self.alive():
                self.drops.drop(reason, conn.client)
            if conn.phase in (HEAD, BODY) and conn.buf:
                what = "request head" if conn.phase == HEAD else "request body"
                self.refuse(conn, 408, f"{what} not received in time")
            else:
                self.close(conn)

    def refuse(self, conn: Conn, status: int, message: str) -> None:
        """Best effort: an error answer that fits in the socket buffer, then close (no thread involved)."""
        send_quietly(conn.sock, error_response(status, message))
        # Counted with the app's own replies in imex_webhook_requests_total.
        self.refused(bytes(conn.buf[:4096]), status)
        self.close(conn, graceful=True)

    def close(self, conn: Conn, graceful: bool = False) -> None:
        if conn.closed:
            return
        table = self.table
        table.watch(conn, 0)
        table.stop_reading(conn)
        table.buffered -= len(conn.buf)
        conn.buf = bytearray()
        table.resume()
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
                table.track(conn)
                table.read(conn)
                table.watch(conn, selectors.EVENT_READ)
                return
        conn.closed = True
        conn.output.fail()  # a thread waiting for the client to read gives up
        table.pools[conn.probe].remove(conn, conn.source)
        self.closed()
        util.close(conn.sock)

    def drain(self, conn: Conn) -> None:
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
                self.close(conn)
                return
        if isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
            self.table.later(conn)


def send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except (OSError, ssl.SSLError):
        pass
