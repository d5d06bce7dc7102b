"""The agent's probe, metrics and inspection endpoints, plain HTTP on ``--listen HOST:PORT``:

- ``/healthz``: the process serves (200 always);
- ``/readyz``: NVML initialised and the last pass reached the API server (503 with the reason otherwise);
- ``/metrics``: Prometheus text: GPUs by fabric health, hot-add and release counts and durations;
- ``/gpus``: what the agent last read from NVML, process IDs and memory included, for an operator at the
  node. It answers loopback clients only: in the DaemonSet's pod that is ``kubectl port-forward`` or
  ``kubectl exec``, both of which the API server authenticates and authorizes; everyone else gets 403.

Every answer other than the Prometheus text is JSON, errors included: Flask's 404 and 405, and the 400, 414
and 431 the HTTP server itself sends for a request it cannot parse.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from webhook.agent.loop import Agent
from webhook.wire.text import ELLIPSIS, clip

log = logging.getLogger(__name__)

ENDPOINTS = ("/healthz", "/readyz", "/metrics", "/gpus")
LOCAL_ONLY = "/gpus"
# A connection that sends nothing for this long is closed, so idle clients cannot pile up threads.
IDLE_TIMEOUT_S = 30.0
_ECHO_LIMIT = 120  # characters of a client's method or path repeated in an error
View = TypeVar("View", bound=Callable[..., Any])


def is_loopback(address: str | None) -> bool:
    """Whether a peer address is this host's (or, in a pod, this pod's) own: 127.0.0.0/8, ::1, or an
    IPv4-mapped loopback address."""
    try:
        ip = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def _echo(text: str) -> str:
    return clip(text, _ECHO_LIMIT + len(ELLIPSIS))


def _json_error(status: int, message: str) -> Response:
    response = jsonify(error=message, status=status)
    response.status_code = status
    return response


def create_app(agent: Agent) -> Flask:
    app = Flask("imex-webhook-agent")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        if isinstance(exc, NotFound):
            message = f"no endpoint {_echo(request.path)!r}; the agent serves {', '.join(ENDPOINTS)}"
        elif isinstance(exc, MethodNotAllowed):
            message = f"method {_echo(request.method)!r} is not allowed on {_echo(request.path)!r}; use GET"
        else:
            message = exc.description or exc.name
        response = _json_error(status, message)
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value  # Allow on 405, Location on redirects
        return response

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        log.exception("agent endpoint %s failed", request.path)
        return _json_error(500, f"internal error: {type(exc).__name__}")

    def get(rule: str) -> Callable[[View], View]:
        # No automatic OPTIONS: its empty 200 would be the one answer that is not JSON.
        return app.get(rule, provide_automatic_options=False)

    @get("/healthz")
    def healthz() -> Any:
        return jsonify(status="ok")

    @get("/readyz")
    def readyz() -> Any:
        ready, why = agent.ready()
        return jsonify(ready=ready, reason=why), 200 if ready else 503

    @get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(agent.metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    @get(LOCAL_ONLY)
    def gpus() -> Any:
        if not is_loopback(request.remote_addr):
            return _json_error(403, f"{LOCAL_ONLY} shows GPU processes and answers only on the node: "
                                    "`kubectl port-forward` to the agent's pod, then ask 127.0.0.1")
        return jsonify(node=agent.api.node, nvml={"initialised": agent.nvml.initialised, "error": agent.nvml.error,
                                                  "driver": agent.nvml.driver},
                       gpus=[dataclasses.asdict(g) for g in agent.gpus])

    return app


class _JsonErrorsHandler(WSGIRequestHandler):
    """werkzeug's request handler with the HTTP server's own errors in JSON instead of an HTML page."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        if self.request_version == "HTTP/0.9":
            # Also what http.server assumes before it has read a version: answer with a status line anyway.
            self.request_version = "HTTP/1.0"
        short = self.responses.get(code, ("Error", ""))[0]
        body = json.dumps({"error": message or short, "status": code}).encode()
        self.log_error("code %d, message %s", code, message or short)
        self.send_response(code, short)
        self.send_header("Connection", "close")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            super().log_request(code, size)
        except ValueError:  # werkzeug parses the path to log it; log a malformed one as it came
            self.log("info", '"%s" %s %s', self.requestline.encode("unicode_escape").decode(), code, size)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":
            self.send_error(400, "HTTP/0.9 is not served: send HTTP/1.0 or HTTP/1.1")
            return False
        try:
            urlsplit(self.path)  # werkzeug would fail on it (a bad IPv6 host) and answer nothing at all
        except ValueError as exc:
            self.send_error(400, f"malformed request target: {exc}")
            return False
        return True


def _handler(idle_timeout: float) -> type[WSGIRequestHandler]:
    class Handler(_JsonErrorsHandler):
        timeout = idle_timeout

    return Handler


class ProbeServer:
    """``create_app`` served by werkzeug in a daemon thread (a handful of probe requests per minute)."""

    def __init__(self, agent: Agent, listen: str, idle_timeout: float = IDLE_TIMEOUT_S) -> None:
        host, _, port = listen.rpartition(":")
        self._server: BaseWSGIServer = make_server(host.strip("[]") or "127.0.0.1", int(port), create_app(agent),
                                                   threaded=True, request_handler=_handler(idle_timeout))
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-http", daemon=True)

    def start(self) -> ProbeServer:
        self._thread.start()
        log.info("agent endpoints on http://%s:%d (%s; %s to loopback clients only)", self._server.host, self.port,
                 " ".join(ENDPOINTS), LOCAL_ONLY)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
