"""The Flask application factory: blueprints, JSON error handlers, body limit."""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from webhook.http import admission, extender, ops
from webhook.http.common import Services, error_response
from webhook.http.metrics import Metrics
from webhook.state.backend import Backend
from webhook.state.engine import Engine

# A 5,000-node NodeList from kube-scheduler is about 25-40 MiB of JSON; leave room above that.
DEFAULT_MAX_BODY = 64 * 1024 * 1024


def _always_ready() -> tuple[bool, str]:
    return True, "loaded"


def create_app(engine: Engine, backend: Backend, max_body: int = DEFAULT_MAX_BODY,
               tls_ready: Callable[[], tuple[bool, str]] = _always_ready) -> Flask:
    app = Flask("imex_webhook")
    app.config["MAX_CONTENT_LENGTH"] = max_body

    def reservation_counts() -> dict[str, int]:
        stored = len(engine.reservations.all())
        proposed = len(engine.proposals.view(engine.clock()))
        return {"reserved": stored, "proposed": proposed}

    metrics = Metrics(engine.store.sync_state, reservation_counts)
    app.extensions["imex"] = Services(engine=engine, backend=backend, metrics=metrics, tls_ready=tls_ready)
    app.register_blueprint(extender.blueprint)
    app.register_blueprint(ops.blueprint)
    app.register_blueprint(admission.blueprint)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        # Never an HTML page: 404, 405, 413 and friends answer in JSON like everything else.
        return error_response(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        app.logger.exception("unhandled error")
        return error_response(500, f"internal error ({type(exc).__name__})")

    return app
