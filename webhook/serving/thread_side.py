"""What a worker thread does with one whole request (:class:`ThreadSide`): parse it, run the app, put the
response in the connection's :class:`~webhook.serving.conns.Output` (the poller writes it), and answer in
JSON whatever the HTTP parser refuses.

Replies the server writes itself, never the app, are JSON too: ``{"error": ..., "status": N}``. gunicorn
answers a request its parser refuses with an HTML page (and a ``SCRIPT_NAME`` header that does not prefix
the path with an HTML 500); here each gets the status gunicorn would have chosen, in JSON, counted in
``imex_webhook_requests_total`` like the app's own replies.

A thread never touches the socket: the parser reads from the request bytes the poller collected, and the
response goes to the output buffer. ``gunicorn.socket`` in the WSGI environment is still the real one, for
the client certificate (:mod:`webhook.serving.callers`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Protocol

import orjson
from gunicorn.http import errors, wsgi

from webhook.serving.conns import Conn, WriteStalled
from webhook.serving.handover import Reports
from webhook.wire.addresses import normalized

log = logging.getLogger("imex_webhook.serve")


REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout",
           413: "Content Too Large", 414: "URI Too Long", 417: "Expectation Failed",
           429: "Too Many Requests", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
           501: "Not Implemented", 503: "Service Unavailable", 505: "HTTP Version Not Supported"}

# The probe listener (--probe-bind) serves these and nothing else.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

_BAD_REQUEST: tuple[type[Exception], ...] = (
    errors.InvalidRequestLine, errors.InvalidRequestMethod, errors.InvalidHTTPVersion, errors.InvalidHeader,
    errors.InvalidHeaderName, errors.ObsoleteFolding, errors.InvalidChunkSize, errors.ChunkMissingTerminator,
    errors.InvalidChunkExtension, errors.InvalidSchemeHeaders, errors.InvalidProxyLine, errors.NoMoreData,
    # A SCRIPT_NAME header that is not a prefix of the path: the client's header, not our configuration.
    errors.ConfigurationProblem,
)
_BY_TYPE: tuple[tuple[tuple[type[Exception], ...], int], ...] = (
    ((errors.LimitRequestLine,), 414),
    ((errors.LimitRequestHeaders,), 431),
    ((errors.UnsupportedTransferCoding,), 501),
    ((errors.ExpectationFailed,), 417),
    ((errors.ForbiddenProxyRequest,), 403),
    (_BAD_REQUEST, 400),
)


def classify(exc: BaseException) -> tuple[int, str] | None:
    """(status, message) for a request the HTTP parser refused; ``None`` for anything else (a server fault)."""
    for types, status in _BY_TYPE:
        if isinstance(exc, types):
            if isinstance(exc, errors.NoMoreData):
                return status, "the request ended before its framing said it would"
            return status, _describe(exc)
    return None


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def error_response(status: int, message: str, keep_alive: bool = False) -> bytes:
    body = orjson.dumps({"error": message, "status": status})
    head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n" + ("" if keep_alive else "Connection: close\r\n") + "\r\n")
    return head.encode() + body


class Served(Protocol):
    """The gunicorn worker the threads serve for: its hooks are called with it, it counts the requests
    served and stops after ``max_requests`` of them."""

    cfg: Any
    log: Any
    wsgi: Any
    alive: bool
    nr: int
    max_requests: int


class ThreadSide:
    """Serves whole requests on the worker's threads; never touches a socket."""

    def __init__(self, worker: Served, reports: Reports) -> None:
        self.worker = worker
        self.reports = reports

    def handle(self, conn: Conn) -> bool:
        """Serve one request; whether the connection may carry another."""
        req = None
        try:
            conn.init()
            req = next(conn.parser)
            if not req:
                return False
            if conn.probe and normalized(req.path) not in PROBE_PATHS:
                self._reply(conn, 404, "the probe port serves /healthz, /readyz and /metrics only")
                return False
            if not self.handle_request(req, conn):
                return False
            return bool(conn.parser.finish_body())
        except (StopIteration, WriteStalled):
            return False  # the poller drops a connection whose client stopped reading (write-timeout)
        except Exception as exc:
            self._refused(conn, req, exc)
            return False

    def handle_request(self, req: Any, conn: Conn) -> bool:
        """gunicorn's, with the response written to the connection's output buffer."""
        worker = self.worker
        environ: dict[str, Any] = {}
        resp = None
        try:
            worker.cfg.pre_request(worker, req)
            start = datetime.now()
            req._expected_100_continue = False  # the poller sent the interim answer when it was due
            resp, environ = wsgi.create(req, conn.sock, conn.client, conn.server, worker.cfg)
            resp.sock = conn.output
            environ["wsgi.multithread"] = True
            worker.nr += 1
            if worker.nr >= worker.max_requests and worker.alive:
                log.info("Autorestarting worker after current request.")
                worker.alive = False
            if not worker.alive or not worker.cfg.keepalive:
                resp.force_close()
            respiter = worker.wsgi(environ, resp.start_response)
            # A HEAD answer has no body, but the layers that answer ahead of Flask (the caller check's 403)
            # write the GET one: gunicorn drops it with a WARNING line per request, a flood any client
            # could cause. Dropped here, quietly; the head still says what GET would (JSON, its length).
            no_body = req.method == "HEAD"
            try:
                for item in respiter:
                    resp.write(b"" if no_body else item)
                resp.close()
            finally:
                worker.log.access(resp, req, environ, datetime.now() - start)
                if hasattr(respiter, "close"):
                    respiter.close()
            return not resp.should_close()
        except Exception:
            if resp is not None and resp.headers_sent:
                raise StopIteration() from None  # half a response went out: nothing more can be said
            raise
        finally:
            try:
                worker.cfg.post_request(worker, req, environ, resp)
            except Exception:
                log.exception("Exception in post_request hook")

    def _refused(self, conn: Conn, req: Any, exc: BaseException) -> None:
        known = classify(exc)
        if known is None:
            log.error("error handling request %s: %s: %s", getattr(req, "uri", "(no request line read)"),
                      type(exc).__name__, exc, exc_info=exc)
            self.reports.internal_error(conn.head.path if conn.head is not None else "")
            self._reply(conn, 500, f"internal error ({type(exc).__name__})")
        else:
            log.debug("invalid request from %s: %s", conn.source, known[1])
            self._reply(conn, *known)

    def _reply(self, conn: Conn, status: int, message: str) -> None:
        if len(conn.output) or conn.output.failed:
            return  # part of another answer is there already
        try:
            conn.output.sendall(error_response(status, message))
        except WriteStalled:
            return
        self.reports.refused(conn.received, status)


def answer_error(client: Any, exc: BaseException) -> None:
    """gunicorn's own error page, should any path of its still call it: JSON, best effort."""
    status, message = classify(exc) or (500, f"internal error ({type(exc).__name__})")
    try:
        client.sendall(error_response(status, message))
    except Exception:
        log.debug("could not send an error answer", exc_info=True)
