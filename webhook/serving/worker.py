"""gunicorn's gthread worker, changed so that no client can hold a thread: a thread serves a request only
once all of it has arrived, and the poller, not the thread, writes the response.

The stock worker hands every accepted connection to a thread, which then does the TLS handshake, reads
the request and writes the response with blocking calls. As many slow clients as there are threads
therefore stop the service. Here the worker's poller (its main thread, which only waits on sockets) takes
each connection through the TLS handshake and reads the request head and body without blocking, each
phase under its own deadline (:mod:`webhook.serving.reading`, :mod:`webhook.serving.closing`). Only a
complete request goes to the thread pool, where gunicorn's parser reads it from memory
(:mod:`webhook.serving.thread_side`); the response goes to the connection's output buffer, which the
poller writes out under the write deadline (:mod:`webhook.serving.conns`).

Connections are counted per listener and per source address (:mod:`webhook.serving.conn_limits`): past a
cap the oldest idle one makes room. The probe listener (``--probe-bind``, plain HTTP) has its own pool and
threads.

gunicorn makes this class itself, so it is the one part that subclasses gunicorn's: it accepts, and hands
everything else to the parts it owns, each made with what it needs. What it gets from the composition
root comes through the application object gunicorn hands it (:mod:`webhook.serving.handover`).
"""

from __future__ import annotations

import errno
import logging
import ssl
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from gunicorn import sock as gsock
from gunicorn import util
from gunicorn.workers import gthread

from webhook.serving import framing
from webhook.serving.closing import SWEEP_INTERVAL, Closer
from webhook.serving.conn_limits import Drops, Pool
from webhook.serving.conns import HEAD, Conn, Limits
from webhook.serving.handover import Host, Setup
from webhook.serving.reading import Reader
from webhook.serving.stalls import Stalls
from webhook.serving.table import ConnTable
from webhook.serving.thread_side import ThreadSide, answer_error

__all__ = ["Worker"]

log = logging.getLogger(__name__)

PROBE_THREADS = 2


class Worker(gthread.ThreadWorker):  # type: ignore[misc]
    """The gunicorn worker: accepts connections and hands them to its parts. Before gunicorn's loop starts
    it owns :class:`~webhook.serving.thread_side.ThreadSide` (a thread's side of a request) and the
    connection caps; once the poller exists (:meth:`run`), the connection table, the closer and the reader
    that drive each connection."""

    setup: Setup
    limits: Limits
    table: ConnTable
    closer: Closer
    reader: Reader

    def init_process(self) -> None:
        host: Host = self.app
        self.setup = setup = host.serving_setup()
        self.limits = setup.limits
        self.pools = {False: Pool("service", *setup.service_pool), True: Pool("probe", *setup.probe_pool)}
        self.probe_tpool = ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="probe")
        self.drops = Drops(setup.reports.dropped)
        self.stalls = Stalls(setup.stall_timeout)
        self.thread_side = ThreadSide(self, setup.reports)
        super().init_process()  # loads the app, then runs gunicorn's loop until the worker stops

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # The probe port's /healthz fails when the service port stops answering (every thread held, or
        # requests queued for one): otherwise the kubelet would keep a replica that serves no one.
        self.setup.reports.register_liveness("service-port", self.stalls.check)

    def run(self) -> None:
        # gunicorn's init_process made the poller (a selector) and the method queue just before it called
        # this: the parts that use them are made here.
        limits, setup = self.limits, self.setup
        self.table = ConnTable(self.poller, self.method_queue.defer, self._advance, self.pools, limits.buffered)
        self.closer = Closer(self.table, limits, self.drops, setup.reports.refused, self._closed, self._alive)
        cfg = self.cfg
        self.reader = Reader(
            self.table, self.closer, limits,
            line_limits=framing.LineLimits(cfg.limit_request_line, cfg.limit_request_fields,
                                           cfg.limit_request_field_size),
            body_limit=setup.body_limit, stalls=self.stalls, drops=self.drops, allowed=setup.callers,
            submit=self.enqueue_req, release_memory=setup.release_memory, alive=self._alive)
        super().run()

    def _advance(self, conn: Conn, _fileobj: object = None) -> None:
        """The poller's callback for a connection (its socket is ready, or a thread asked for it)."""
        self.reader.advance(conn)

    def _alive(self) -> bool:
        return bool(self.alive)

    def _closed(self) -> None:
        self.nr_conns -= 1

    # -- gunicorn's ThreadWorker, overridden ----------------------------------------------------------------

    def accept(self, listener: Any) -> None:
        try:
            client, addr = listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                log.warning("cannot accept a connection: %s", exc.strerror)
            elif exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        probe = listener.fileno() == self.setup.probe_fd
        pool = self.pools[probe]
        source = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        keep, victim, reason = pool.admit(source)
        if victim is not None:
            assert isinstance(victim, Conn)
            self.drops.drop(reason, victim.client, f"{pool.name} port")
            self.closer.close(victim)
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
                self.closer.close(conn)
                return
        self.table.track(conn)
        self.table.read(conn)
        self.reader.advance(conn)

    def enqueue_req(self, conn: Conn) -> None:
        fs = (self.probe_tpool if conn.probe else self.tpool).submit(self.thread_side.handle, conn)
        fs.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def finish_request(self, conn: Conn, fs: Any) -> None:
        """On the poller after a thread served a request: write its response out."""
        self.reader.finish(conn, fs)

    def handle(self, conn: Conn) -> bool:
        return self.thread_side.handle(conn)

    def handle_request(self, req: Any, conn: Conn) -> bool:
        return self.thread_side.handle_request(req, conn)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        answer_error(client, exc)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        # gunicorn wakes up once a second; deadlines are checked every SWEEP_INTERVAL while any are running.
        super().wait_for_and_dispatch_events(min(timeout, SWEEP_INTERVAL) if self.table.reading else timeout)

    def murder_pending(self) -> None:
        super().murder_pending()
        self.closer.sweep()
