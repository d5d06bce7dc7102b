"""gunicorn's gthread worker, changed so that no client can hold a thread: a thread serves a request only
once all of it has arrived, and the poller, not the thread, writes the response.

The stock worker hands every accepted connection to a thread, which then does the TLS handshake, reads
the request and writes the response with blocking calls. As many slow clients as there are threads
therefore stop the service. Here the worker's poller (its main thread, which only waits on sockets) takes
each connection through the TLS handshake and reads the request head and body without blocking, each
phase under its own deadline. Only a complete request goes to the thread pool, where gunicorn's parser
reads it from memory (:mod:`webhook.service.thread_side`); the response goes to the connection's output
buffer, which the poller writes out under the write deadline (:mod:`webhook.service.conns`). Between
requests a kept-alive connection waits in the poller; bytes the client sent ahead (pipelining) are read
the same way, at most :attr:`Limits.pipelined` requests in a row.

Connections are counted per listener and per source address (:mod:`webhook.service.conn_limits`): past a
cap the oldest idle one makes room. The probe listener (``--probe-bind``, plain HTTP) has its own pool and
threads. Buffered request bytes across all connections are capped (:attr:`Limits.buffered`); past it,
bodies still arriving wait (their deadline still running) until dispatched requests free room.
"""

from __future__ import annotations

import errno
import logging
import selectors
import ssl
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from gunicorn import sock as gsock
from gunicorn import util
from gunicorn.workers import gthread

from webhook.domain.limits import body_limit
from webhook.http.common import release_memory
from webhook.service import callers, framing
from webhook.service.closing import READS_PER_TURN, RECV_SIZE, STOP_LINGER, Closing, send_quietly
from webhook.service.conn_limits import Drops, Pool
from webhook.service.conns import BODY, CLOSING, HANDSHAKE, HEAD, IDLE, SERVING, WRITING, Conn, Limits
from webhook.service.stalls import Stalls
from webhook.service.thread_side import ThreadSide
from webhook.wire.text import clip

__all__ = ["Limits", "Worker"]

log = logging.getLogger(__name__)

SEND_SIZE = 16 * 1024  # one TLS record: a write OpenSSL could not finish is retried with the same bytes
PROBE_THREADS = 2


class Worker(Closing, ThreadSide, gthread.ThreadWorker):  # type: ignore[misc]
    limits: Limits

    def init_process(self) -> None:
        app = self.app
        self.limits = app.limits
        cfg = self.cfg
        self.line_limits = framing.LineLimits(cfg.limit_request_line, cfg.limit_request_fields,
                                              cfg.limit_request_field_size)
        self.reading: dict[Conn, None] = {}  # connections the poller drives (an ordered set)
        self.paused: deque[Conn] = deque()
        self.buffered = 0
        self._next_sweep = 0.0
        self._stopping_since: float | None = None
        main, probe = app.pools
        self.pools = {False: Pool("service", *main), True: Pool("probe", *probe)}
        self.probe_fd = app.probe_listener.fileno() if app.probe_listener is not None else -1
        self.probe_tpool = ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="probe")
        self.drops = Drops(self._count_drop)
        self.callers: callers.Allowed | None = app.callers
        self.stalls = Stalls(app.stall_timeout)
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # The probe port's /healthz fails when the service port stops answering (every thread held, or
        # requests queued for one): otherwise the kubelet would keep a replica that serves no one.
        imex = getattr(self.wsgi, "extensions", {}).get("imex")
        if imex is not None:
            imex.liveness["service-port"] = self.stalls.check

    def _count_drop(self, reason: str) -> None:
        metrics = self._metrics()
        if metrics is not None:
            metrics.connections_dropped.labels(reason).inc()

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
        probe = listener.fileno() == self.probe_fd
        pool = self.pools[probe]
        source = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        keep, victim, reason = pool.admit(source)
        if victim is not None:
            assert isinstance(victim, Conn)
            self.drops.drop(reason, victim.client, f"{pool.name} port")
            self._close(victim)
        if not keep:
            self.drops.drop(reason, addr, f"{pool.name} port, no idle connection to close")
            util.close(client)
            return
        self.nr_conns += 1
        pool.add(source)
        conn = Conn(self.cfg, client, addr, listener.getsockname(), self.limits, probe)
        conn.output.wake = partial(self.method_queue.defer, self._advance, conn)
        if probe:
            conn.begin(HEAD, self.limits.header)  # plain HTTP
        else:
            try:
                conn.sock = gsock.ssl_context(self.cfg).wrap_socket(
                    conn.sock, server_side=True, do_handshake_on_connect=False, suppress_ragged_eofs=True)
            except (OSError, ssl.SSLError) as exc:
                log.warning("TLS unavailable for a new connection: %s", exc)
                self._close(conn)
                return
        self._track(conn)
        self.reading[conn] = None
        self._advance(conn)

    def enqueue_req(self, conn: Conn) -> None:
        fs = (self.probe_tpool if conn.probe else self.tpool).submit(self.handle, conn)
        fs.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def finish_request(self, conn: Conn, fs: Any) -> None:
        """On the poller after a thread served a request: write its response out."""
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
            self.buffered += len(leftover)
        conn.keep = keep
        if conn.output.failed:
            self.drops.drop("write-timeout", conn.client, "the client did not read the response")
            self._close(conn)
            return
        conn.phase, conn.deadline = WRITING, conn.output.start()
        self.reading[conn] = None
        self._advance(conn)

    def _responded(self, conn: Conn) -> None:
        """The whole response reached the socket: read the next request, or close."""
        release_memory(conn.output.reset())  # a large reply's memory goes back, as a large request's does
        if not conn.keep or conn.sock.fileno() < 0:
            self._close(conn, graceful=True)
            return
        if conn.buf:
            conn.pipelined += 1
            if conn.pipelined >= self.limits.pipelined:
                self.drops.drop("pipelined", conn.client, f"{conn.pipelined} requests sent ahead of their answers")
                self._close(conn, graceful=True)
                return
            conn.begin(HEAD, self.limits.header)
        else:
            conn.pipelined = 0
            conn.begin(IDLE, self.limits.keepalive if self.alive else STOP_LINGER)
        self._track(conn)
        self._read(conn)

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
        self.buffered -= end
        conn.phase = SERVING
        self._track(conn)
        self._watch(conn, 0)
        self.reading.pop(conn, None)
        self.enqueue_req(conn)
        self._resume()

    # -- reading and writing ------------------------------------------------------------------------------

    def _advance(self, conn: Conn, _fileobj: object = None) -> None:
        if conn.closed:  # a deferred call for a connection closed meanwhile
            return
        try:
            if conn.phase in (WRITING, SERVING):
                self._flush(conn)  # SERVING: a thread waits for room in the output buffer
            elif conn not in self.reading:
                return
            elif conn.phase == CLOSING:
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

    def _flush(self, conn: Conn) -> None:
        out = conn.output
        while chunk := out.peek(SEND_SIZE):
            try:
                sent = conn.sock.send(chunk)
            except (ssl.SSLWantWriteError, BlockingIOError):
                self._watch(conn, selectors.EVENT_WRITE)
                return
            except ssl.SSLWantReadError:
                self._watch(conn, selectors.EVENT_READ)
                return
            out.consumed(sent)
        if conn.phase == WRITING:
            self._responded(conn)
        else:
            self._watch(conn, 0)

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
            if isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
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
            self._track(conn)
            self._check_caller(conn, head)
            if head.chunked:
                conn.chunked = framing.ChunkedBody(head.end, body_limit(head.path, limits.max_body))
            if head.expect_continue and len(conn.buf) == head.end:
                send_quietly(conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        if conn.chunked is not None:
            return conn.chunked.end(conn.buf)
        end = framing.content_end(conn.head, body_limit(conn.head.path, limits.max_body))
        return end if len(conn.buf) >= end else None

    def _check_caller(self, conn: Conn, head: framing.Head) -> None:
        """Refuse a caller the path does not answer as soon as its head is read: its body is never read, so
        a stranger costs the server no more than the refusal (the app checks again, for servers without a
        poller). The refusal closes the connection; what the client still sends is discarded unread."""
        if conn.probe or self.callers is None or not callers.needs_certificate(head.path):
            return
        why = callers.refusal(head.path, callers.peer_identity(conn.sock), self.callers, conn.source)
        if why is not None:
            self.drops.drop("refused-caller", conn.client, clip(f"{head.path}: {why}", 240))
            raise framing.FramingError(403, why)

    def _resume(self) -> None:
        while self.paused and self.buffered < self.limits.buffered:
            conn = self.paused.popleft()
            if conn in self.reading:
                self.method_queue.defer(self._advance, conn)
