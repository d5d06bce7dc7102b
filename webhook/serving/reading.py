"""What the worker's poller does for one connection (:class:`Reader`): the TLS handshake, reading the request
head and body without blocking until the framing (:mod:`webhook.serving.framing`) says the request is
whole, handing it to a thread, and writing the response the thread left in the connection's output buffer.

Each phase runs under its own deadline (the closer's, :mod:`webhook.serving.closing`). A caller the path
does not answer is refused as soon as its head is read (:mod:`webhook.serving.callers`). Bytes the client
sent ahead of an answer (pipelining) are read the same way, at most :attr:`Limits.pipelined` requests in a
row. Past :attr:`Limits.buffered` request bytes across all connections, bodies still arriving wait (their
deadline still running) until dispatched requests free room.
"""

from __future__ import annotations

import selectors
import ssl
import time
from collections.abc import Callable
from typing import Any

from webhook.serving import callers, framing
from webhook.serving.callers import Allowed
from webhook.serving.closing import READS_PER_TURN, RECV_SIZE, STOP_LINGER, Closer, send_quietly
from webhook.serving.conn_limits import Drops
from webhook.serving.conns import BODY, CLOSING, HANDSHAKE, HEAD, IDLE, SERVING, WRITING, Conn, Limits
from webhook.serving.stalls import Stalls
from webhook.serving.table import ConnTable
from webhook.wire.text import clip

SEND_SIZE = 16 * 1024  # one TLS record: a write OpenSSL could not finish is retried with the same bytes


class Reader:
    """Drives the connections of a :class:`~webhook.serving.table.ConnTable` from their handshake to the
    last byte of each response, on the poller's thread."""

    def __init__(self, table: ConnTable, closer: Closer, limits: Limits, *, line_limits: framing.LineLimits,
                 body_limit: Callable[[str], int], stalls: Stalls, drops: Drops, allowed: Allowed | None,
                 submit: Callable[[Conn], None], release_memory: Callable[[int], None],
                 alive: Callable[[], bool]) -> None:
        """``body_limit(path)``: the largest body the route accepts; ``allowed``: who may call which path,
        ``None`` for anyone; ``submit(conn)``: hands a whole request to a thread; ``release_memory(size)``:
        after each response written out; ``alive()``: whether the worker is still serving."""
        self.table = table
        self.closer = closer
        self.limits = limits
        self.line_limits = line_limits
        self.body_limit = body_limit
        self.stalls = stalls
        self.drops = drops
        self.allowed = allowed
        self.submit = submit
        self.release_memory = release_memory
        self.alive = alive

    def advance(self, conn: Conn) -> None:
        """The next step for ``conn``, whatever woke the poller for it."""
        if conn.closed:  # a deferred call for a connection closed meanwhile
            return
        try:
            if conn.phase in (WRITING, SERVING):
                self._flush(conn)  # SERVING: a thread waits for room in the output buffer
            elif conn not in self.table.reading:
                return
            elif conn.phase == CLOSING:
                self.closer.drain(conn)
            elif conn.phase == HANDSHAKE:
                self._handshake(conn)
            else:
                self.read(conn)
        except framing.FramingError as exc:
            self.closer.refuse(conn, exc.status, str(exc))
        except ssl.SSLError:
            # A refused handshake leaves its alert in the socket: half-close so that it arrives instead of
            # a reset (the client's first request may already be waiting unread).
            self.closer.close(conn, graceful=True)
        except (OSError, ValueError):
            self.closer.close(conn)

    def finish(self, conn: Conn, fs: Any) -> None:
        """On the poller after a thread served a request (``fs``, its future): write its response out."""
        self.stalls.end(conn)
        try:
            keep = bool(fs.result()) if not fs.cancelled() else False
        except Exception:
            keep = False
        if conn.closed:
            return
        leftover = conn.parser.unreader.take_buffered() if keep and conn.parser is not None else b""
        if leftover and conn.buf:
            keep = False  # the parser read past the request we framed: where the next one starts is unclear
        if leftover:
            conn.buf[:0] = leftover
            self.table.buffered += len(leftover)
        conn.keep = keep
        if conn.output.failed:
            self.drops.drop("write-timeout", conn.client, "the client did not read the response")
            self.closer.close(conn)
            return
        conn.phase, conn.deadline = WRITING, conn.output.start()
        self.table.read(conn)
        self.advance(conn)

    def _responded(self, conn: Conn) -> None:
        """The whole response reached the socket: read the next request, or close."""
        self.release_memory(conn.output.reset())  # a large reply's memory goes back, as a large request's does
        if not conn.keep or conn.sock.fileno() < 0:
            self.closer.close(conn, graceful=True)
            return
        if conn.buf:
            conn.pipelined += 1
            if conn.pipelined >= self.limits.pipelined:
                self.drops.drop("pipelined", conn.client, f"{conn.pipelined} requests sent ahead of their answers")
                self.closer.close(conn, graceful=True)
                return
            conn.begin(HEAD, self.limits.header)
        else:
            conn.pipelined = 0
            conn.begin(IDLE, self.limits.keepalive if self.alive() else STOP_LINGER)
        self.table.track(conn)
        self.read(conn)

    def _dispatch(self, conn: Conn, end: int) -> None:
        if conn.chunked is not None and conn.head is not None:
            conn.ready = framing.unchunked(bytes(conn.buf[:conn.head.end]), conn.chunked.data)
        else:
            conn.ready = bytes(conn.buf[:end])
        conn.received = conn.ready[:4096]
        if not conn.probe:
            self.stalls.begin(conn, conn.head.path if conn.head is not None else "")
        conn.served += 1
        del conn.buf[:end]
        table = self.table
        table.buffered -= end
        conn.phase = SERVING
        table.track(conn)
        table.watch(conn, 0)
        table.stop_reading(conn)
        self.submit(conn)
        table.resume()

    # -- reading and writing ------------------------------------------------------------------------------

    def _flush(self, conn: Conn) -> None:
        out = conn.output
        while chunk := out.peek(SEND_SIZE):
            try:
                sent = conn.sock.send(chunk)
            except (ssl.SSLWantWriteError, BlockingIOError):
                self.table.watch(conn, selectors.EVENT_WRITE)
                return
            except ssl.SSLWantReadError:
                self.table.watch(conn, selectors.EVENT_READ)
                return
            out.consumed(sent)
        if conn.phase == WRITING:
            self._responded(conn)
        else:
            self.table.watch(conn, 0)

    def _handshake(self, conn: Conn) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self.table.watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self.table.watch(conn, selectors.EVENT_WRITE)
            return
        conn.begin(HEAD, self.limits.header)
        self.read(conn)

    def read(self, conn: Conn) -> None:
        """Read what ``conn``'s client sent, a turn at a time, until a whole request is there to dispatch."""
        table = self.table
        for _ in range(READS_PER_TURN):
            end = self._request_end(conn) if conn.buf else None
            if end is not None:
                self._dispatch(conn, end)
                return
            if conn.phase == BODY and table.buffered >= self.limits.buffered:
                table.pause(conn)
                return
            try:
                data = conn.sock.recv(RECV_SIZE)
            except (ssl.SSLWantReadError, BlockingIOError):
                table.watch(conn, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                table.watch(conn, selectors.EVENT_WRITE)
                return
            if not data:
                self.closer.close(conn)
                return
            if conn.phase == IDLE:
                conn.begin(HEAD, self.limits.header)
            conn.buf += data
            table.buffered += len(data)
        end = self._request_end(conn)
        if end is not None:
            self._dispatch(conn, end)
        else:
            # Decrypted bytes OpenSSL still holds do not make the socket readable: come back for them.
            table.watch(conn, selectors.EVENT_READ)
            if isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
                table.later(conn)

    def _request_end(self, conn: Conn) -> int | None:
        limits = self.limits
        if conn.head is None:
            head = framing.find_head(conn.buf, limits.max_head, conn.scanned, self.line_limits)
            if head is None:
                conn.scanned = max(0, len(conn.buf) - len(framing.HEAD_END) + 1)
                return None
            conn.head = head
            conn.phase, conn.deadline = BODY, time.monotonic() + limits.body
            self.table.track(conn)
            self._check_caller(conn, head)
            if head.chunked:
                conn.chunked = framing.ChunkedBody(head.end, self.body_limit(head.path))
            if head.expect_continue and len(conn.buf) == head.end:
                send_quietly(conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        if conn.chunked is not None:
            return conn.chunked.end(conn.buf)
        end = framing.content_end(conn.head, self.body_limit(conn.head.path))
        return end if len(conn.buf) >= end else None

    def _check_caller(self, conn: Conn, head: framing.Head) -> None:
        """Refuse a caller the path does not answer as soon as its head is read: its body is never read, so
        a stranger costs the server no more than the refusal (the app checks again, for servers without a
        poller). The refusal closes the connection; what the client still sends is discarded unread."""
        if conn.probe or self.allowed is None or not callers.needs_certificate(head.path):
            return
        why = callers.refusal(head.path, callers.peer_identity(conn.sock), self.allowed, conn.source)
        if why is not None:
            self.drops.drop("refused-caller", conn.client, clip(f"{head.path}: {why}", 240))
            raise framing.FramingError(403, why)
