"""The agent's probe, metrics and inspection endpoints, plain HTTP on ``--listen HOST:PORT``:

- ``/healthz``: the process serves (200 always);
- ``/readyz``: NVML initialised and the last pass reached the API server (503 with the reason otherwise);
- ``/metrics``: Prometheus text: GPUs by fabric health, hot-add and release counts and durations;
- ``/gpus``: what the agent last read from NVML, process IDs and memory included, for an operator at the
  node. It answers loopback clients only: in the DaemonSet's pod that is ``kubectl port-forward`` or
  ``kubectl exec``, both of which the API server authenticates and authorizes; everyone else gets 403.

Every answer other than the Prometheus text is JSON, errors included: Flask's 404 and 405, and the 400, 414
and 431 the HTTP server itself sends for a request it cannot parse, and the 503 of a full server.

The server (``webhook.agent.http_server``) holds a fixed number of threads whatever its clients do.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

from webhook.agent.http_server import (
    IDLE_TIMEOUT_S,
    MAX_CONNECTIONS,
    MAX_THREADS,
    REQUEST_TIMEOUT_S,
    BoundedServer,
    handler_class,
    listening_socket,
)
from webhook.agent.loop import Agent
from webhook.wire.addresses import is_loopback
from webhook.wire.text import ELLIPSIS, clip

log = logging.getLogger(__name__)

ENDPOINTS = ("/healthz", "/readyz", "/metrics", "/gpus")
LOCAL_ONLY = "/gpus"
_ECHO_LIMIT = 120  # characters of a client's method or path repeated in an error
View = TypeVar("View", bound=Callable[..., Any])


def _echo(text: str) -> str:
    return clip(text, _ECHO_LIMIT + len(ELLIPSIS))


def _json_error(status: int, message: str) -> Response:
    response = jsonify(error=message, status=status)
    response.status_code = status
    return response


def create_app(agent: Agent) -> Flask:
    app = Flask("imex-webhook-agent", static_folder=None)  # no /static route: every answer is JSON

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


class ProbeServer:
    """``create_app`` served in a daemon thread by a bounded server (a handful of probe requests per minute;
    see the module's docstring for the limits)."""

    def __init__(self, agent: Agent, listen: str, idle_timeout: float = IDLE_TIMEOUT_S, *,
                 request_timeout: float = REQUEST_TIMEOUT_S, max_threads: int = MAX_THREADS,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        """Binds ``listen`` (HOST:PORT, port 0 for any free one); raises ``OSError`` when it cannot."""
        host, _, port = listen.rpartition(":")
        sock = listening_socket(host.strip("[]") or "127.0.0.1", int(port))
        try:
            self._server = BoundedServer(sock, create_app(agent), handler_class(idle_timeout), max_threads=max_threads,
                                          max_connections=max_connections, idle_timeout=idle_timeout,
                                          request_timeout=request_timeout)
        finally:
            sock.close()  # the server holds its own duplicate
        self.port: int = self._server.port
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-http", daemon=True)

    @property
    def connections(self) -> tuple[int, int]:
        """Open connections: (waiting for their request head, queued for a thread or being served)."""
        return self._server.connections

    def start(self) -> ProbeServer:
        self._thread.start()
        log.info("agent endpoints on http://%s:%d (%s; %s to loopback clients only)", self._server.host, self.port,
                 " ".join(ENDPOINTS), LOCAL_ONLY)
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
