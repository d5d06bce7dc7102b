"""The agent's probe and metrics endpoints, plain HTTP on a node-local port (``--listen HOST:PORT``):

- ``/healthz``: the process serves (200 always);
- ``/readyz``: NVML initialised and the last pass reached the API server (503 with the reason otherwise);
- ``/metrics``: Prometheus text: GPUs by fabric health, hot-add and release counts and durations;
- ``/gpus``: what the agent last read from NVML, as JSON, for an operator at the node.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from flask import Flask, Response, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.serving import BaseWSGIServer, make_server

from webhook.agent.loop import Agent

log = logging.getLogger(__name__)


def create_app(agent: Agent) -> Flask:
    app = Flask("imex-webhook-agent")

    @app.get("/healthz")
    def healthz() -> Any:
        return jsonify(status="ok")

    @app.get("/readyz")
    def readyz() -> Any:
        ready, why = agent.ready()
        return jsonify(ready=ready, reason=why), 200 if ready else 503

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(agent.metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    @app.get("/gpus")
    def gpus() -> Any:
        return jsonify(node=agent.api.node, nvml={"initialised": agent.nvml.initialised, "error": agent.nvml.error,
                                                  "driver": agent.nvml.driver},
                       gpus=[dataclasses.asdict(g) for g in agent.gpus])

    return app


class ProbeServer:
    """``create_app`` served by werkzeug in a daemon thread (a handful of probe requests per minute)."""

    def __init__(self, agent: Agent, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        self._server: BaseWSGIServer = make_server(host.strip("[]") or "0.0.0.0", int(port), create_app(agent),
                                                   threaded=True)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-http", daemon=True)

    def start(self) -> ProbeServer:
        self._thread.start()
        log.info("agent endpoints on http://%s:%d (/healthz /readyz /metrics /gpus)", self._server.host, self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(5)
