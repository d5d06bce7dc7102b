"""gunicorn's gthread worker with one change: a thread serves a request only once all of it has arrived.

The stock worker hands every accepted connection to a thread, which then does the TLS handshake and
reads the request head and body with blocking calls and no deadline. As many slow or idle clients as
there are threads (8 by default) therefore stop the service: ``/healthz`` and ``/filter`` time out.

Here the worker's poller (its main thread, which only waits on sockets) takes each connection through
the TLS handshake and reads the request head and body with non-blocking calls, each phase under its own
deadline; a connection that misses one is closed. Only a complete request goes to the thread pool, where
gunicorn's parser reads it from the buffer without touching the socket, and the response is written
under a deadline too. Between requests a kept-alive connection waits in the poller, as before; bytes the
client sent ahead (pipelining) are taken back and read the same way.

Memory: buffered request bytes across all connections are capped (:attr:`Limits.buffered`); past it,
bodies still arriving wait (their deadline still running) until dispatched requests free room.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from gunicorn import http, util
from gunicorn import sock as gsock
from gunicorn.workers import gthread

from webhook.service import framing

log = logging.getLogger(__name__)

HANDSHAKE, IDLE, HEAD, BODY, SERVING, CLOSING = "handshake", "idle", "head", "body", "serving", "closing"
RECV_SIZE = 64 * 1024
# Reads from one connection per poller wake-up before the others get a turn (the socket stays readable).
READS_PER_TURN = 16
SWEEP_INTERVAL = 0.25  # seconds between deadline sweeps
LINGER = 5.0  # seconds a closing connection may take to send the rest of a refused body and its FIN
STOP_LINGER = 2.0  # kept-alive connections left open this long once the worker is stopping


@dataclass(frozen=True)
class Limits:
    handshake: float  # accept to the end of the TLS handshake
    header: float  # first byte (or the handshake's end) to the end of the request head
    body: float  # end of the head to the end of the body
    keepalive: float  # idle between two requests on one connection
    write: float  # each socket operation of a thread, the response included
    max_head: int
    max_body: int
    buffered: int  # request bytes held by the poller across all connections


class Conn(gthread.TConn):  # type: ignore[misc]
    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, limits: Limits) -> None:
        super().__init__(cfg, sock, client, server)
        self.limits = limits
        self.data_ready = True  # requests arrive whole: the thread never waits for data
        self.phase = HANDSHAKE
        self.deadline = time.monotonic() + limits.handshake
        self.events = 0
        self.buf = bytearray()
        self.ready = b""  # the complete request handed to the thread
        self.head: framing.Head | None = None
        self.chunked: framing.ChunkedBody | None = None
        self.scanned = 0

    def init(self) -> None:
        """In the thread, before each request: blocking with a deadline, the request in the parser."""
        self.sock.settimeout(self.limits.write)
        if self.parser is None:  # type: ignore[has-type]
            self.initialized = True
            self.parser = http.get_parser(self.cfg, self.sock, self.client)
        if self.ready:
            self.parser.unreader.unread(self.ready)
            self.ready = b""

    def begin(self, phase: str, seconds: float) -> None:
        self.phase, self.deadline = phase, time.monotonic() + seconds
        self.head, self.chunked, self.scanned = None, None, 0


class Worker(gthread.ThreadWorker):  # type: ignore[misc]
    limits: Limits

    def init_process(self) -> None:
        self.limits = self.app.limits
        cfg = self.cfg
        self.line_limits = framing.LineLimits(cfg.limit_request_line, cfg.limit_request_fields,
                                              cfg.limit_request_field_size)
        self.reading: dict[Conn, None] = {}  # connections the poller is reading (an ordered set)
        self.paused: deque[Conn] = deque()
        self.buffered = 0
        self._next_sweep = 0.0
        self._stopping_since: float | None = None
        super().init_process()

    # -- accepting and handing over ---------------------------------------------------------------------

    def accept(self, listener: Any) -> None:
        try:
            client, addr = listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                log.warning("cannot accept a connection: %s", exc.strerror)
            elif exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = Conn(self.cfg, client, addr, listener.getsockname(), self.limits)
        try:
            conn.sock = gsock.ssl_context(self.cfg).wrap_socket(
                conn.sock, server_side=True, do_handshake_on_connect=False, suppress_ragged_eofs=True)
        except (OSError, ssl.SSLError) as exc:
            log.warning("TLS unavailable for a new connection: %s", exc)
            self._close(conn)
            return
        self.reading[conn] = None
        self._advance(conn)

    def finish_request(self, conn: Conn, fs: Any) -> None:
        """On the poller after a thread served a request: read the next one, or close."""
        try:
            keep = bool(fs.result()) if not fs.cancelled() else False
        except Exception:
            keep = False
        leftover = conn.parser.unreader.take_buffered() if keep and conn.parser is not None else b""
        if leftover and conn.buf:
            keep = False  # the parser read past the request we framed: where the next one starts is unclear
        if not keep or conn.sock.fileno() < 0:
            self._close(conn, graceful=True)
            return
        if leftover:
            conn.buf[:0] = leftover
            self.buffered += len(leftover)
        try:
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        if conn.buf:
            conn.begin(HEAD, self.limits.header)
        else:
            conn.begin(IDLE, self.limits.keepalive if self.alive else STOP_LINGER)
        self.reading[conn] = None
        self._advance(conn)

    def _dispatch(self, conn: Conn, end: int) -> None:
        conn.ready = bytes(conn.buf[:end])
        del conn.buf[:end]
        self.buffered -= end
        conn.phase = SERVING
        self._watch(conn, 0)
        self.reading.pop(conn, None)
        self.enqueue_req(conn)
        self._resume()

    # -- reading ------------------------------------------------------------------------------------------

    def _advance(self, conn: Conn, _fileobj: object = None) -> None:
        if conn not in self.reading:  # a deferred call for a connection closed or handed over meanwhile
            return
        try:
            if conn.phase == CLOSING:
                self._drain(conn)
            elif conn.phase == HANDSHAKE:
                self._handshake(conn)
            else:
                self._read(conn)
        except framing.FramingError as exc:
            self._refuse(conn, exc.status, str(exc))
        except ssl.SSLError:
            # A refused handshake leaves its alert in the socket: half-close so that it arrives instead of
            # a reset (the client's first request may already be waiting unread).
            self._close(conn, graceful=True)
        except (OSError, ValueError):
            self._close(conn)

    def _handshake(self, conn: Conn) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        conn.begin(HEAD, self.limits.header)
        self._read(conn)

    def _read(self, conn: Conn) -> None:
        for _ in range(READS_PER_TURN):
            end = self._request_end(conn) if conn.buf else None
            if end is not None:
                self._dispatch(conn, end)
                return
            if conn.phase == BODY and self.buffered >= self.limits.buffered:
                self._watch(conn, 0)
                self.paused.append(conn)
                return
            try:
                data = conn.sock.recv(RECV_SIZE)
            except (ssl.SSLWantReadError, BlockingIOError):
                self._watch(conn, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._watch(conn, selectors.EVENT_WRITE)
                return
            if not data:
                self._close(conn)
                return
            if conn.phase == IDLE:
                conn.begin(HEAD, self.limits.header)
            conn.buf += data
            self.buffered += len(data)
        end = self._request_end(conn)
        if end is not None:
            self._dispatch(conn, end)
        else:
            # Decrypted bytes OpenSSL still holds do not make the socket readable: come back for them.
            self._watch(conn, selectors.EVENT_READ)
            if conn.sock.pending():
                self.method_queue.defer(self._advance, conn)

    def _request_end(self, conn: Conn) -> int | None:
        limits = self.limits
        if conn.head is None:
            head = framing.find_head(conn.buf, limits.max_head, conn.scanned, self.line_limits)
            if head is None:
                conn.scanned = max(0, len(conn.buf) - len(framing.HEAD_END) + 1)
                return None
            conn.head = head
            conn.phase, conn.deadline = BODY, time.monotonic() + limits.body
            if head.chunked:
                conn.chunked = framing.ChunkedBody(head.end, limits.max_body)
            if head.expect_continue and len(conn.buf) == head.end:
                _send_quietly(conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        if conn.chunked is not None:
            return conn.chunked.end(conn.buf)
        end = framing.content_end(conn.head, limits.max_body)
        return end if len(conn.buf) >= end else None

    def _resume(self) -> None:
        while self.paused and self.buffered < self.limits.buffered:
            conn = self.paused.popleft()
            if conn in self.reading:
                self.method_queue.defer(self._advance, conn)

    # -- deadlines and closing ----------------------------------------------------------------------------

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        # gunicorn wakes up once a second; deadlines are checked every SWEEP_INTERVAL while any are running.
        super().wait_for_and_dispatch_events(min(timeout, SWEEP_INTERVAL) if self.reading else timeout)

    def murder_pending(self) -> None:
        super().murder_pending()
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
            if conn.phase in (HEAD, BODY) and conn.buf:
                what = "request head" if conn.phase == HEAD else "request body"
                self._refuse(conn, 408, f"{what} not received in time")
            else:
                self._close(conn)

    def _refuse(self, conn: Conn, status: int, message: str) -> None:
        """Best effort: an error answer that fits in the socket buffer, then close (no thread involved)."""
        _send_quietly(conn.sock, _error_response(status, message))
        imex = getattr(getattr(self, "wsgi", None), "extensions", {}).get("imex")
        if imex is not None:  # counted with the app's own replies in imex_webhook_requests_total
            imex.metrics.count_refused(bytes(conn.buf[:4096]), status)
        self._close(conn, graceful=True)

    def _close(self, conn: Conn, graceful: bool = False) -> None:
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
                self.reading[conn] = None
                self._watch(conn, selectors.EVENT_READ)
                return
        self.nr_conns -= 1
        util.close(conn.sock)

    def _drain(self, conn: Conn) -> None:
        for _ in range(READS_PER_TURN):
            try:
                data = conn.sock.recv(RECV_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            if not data:
                break
        self._close(conn)

    def _watch(self, conn: Conn, events: int) -> None:
        if events == conn.events:
            return
        callback: Callable[..., None] = partial(self._advance, conn)
        if conn.events == 0:
            self.poller.register(conn.sock, events, callback)
        elif events == 0:
            self.poller.unregister(conn.sock)
        else:
            self.poller.modify(conn.sock, events, callback)
        conn.events = events


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except (OSError, ssl.SSLError):
        pass


def _error_response(status: int, message: str) -> bytes:
    import orjson

    body = orjson.dumps({"error": message, "status": status})
    reason = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large", 414: "URI Too Long",
              431: "Request Header Fields Too Large"}.get(status, "Error")
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode() + body
