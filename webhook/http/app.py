"""The Flask application factory: blueprints, JSON error handlers, body limit, and the request count.

Every reply is JSON (but /metrics' exposition) and every reply is counted once in
``imex_webhook_requests_total{verb, code}``, whatever produced it: a view, a 400 for a malformed body, a
413 for a body over --max-body, a 404 or 405 from routing, or the 500 fallback for an exception no view
caught (also counted in ``imex_webhook_internal_errors_total``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook.domain.limits import DEFAULT_MAX_BODY, body_limit
from webhook.engine.engine import Engine
from webhook.engine.ports import Backend, EmbeddedCluster
from webhook.http import admission, extender, fast, ops, ui
from webhook.http.cluster_metrics import ClusterMetrics
from webhook.http.common import Check, Services, error_response, release_memory, too_large
from webhook.http.metrics import Metrics, verb_of
from webhook.wire.addresses import normalized


def always_ready() -> tuple[bool, str]:
    return True, "loaded"


def create_app(engine: Engine, backend: Backend, metrics: Metrics | None = None, max_body: int = DEFAULT_MAX_BODY,
               tls_ready: Check = always_ready, checks: Mapping[str, Check] | None = None, *,
               liveness: dict[str, Check] | None = None, unaccounted: Callable[[], int] | None = None,
               embedded: EmbeddedCluster | None = None) -> Flask:
    """``metrics``: the observer the service's other parts already report to (a new one if None); the
    cluster's view is added to its registry here. ``checks``: more /readyz checks by name (the fabric
    inventory's, when a fabric is configured); ``liveness``: the /healthz checks, a table the server adds its
    own to (it is read at each probe); ``unaccounted``: the fabric reconciler's count of leaked blocks;
    ``embedded``: the embedded mode's cluster, told of every pod the scheduler asks about (None where watches
    feed the cluster)."""
    # No static route: Flask's own (/static/<path>, made before the config below) would serve the files of
    # $PWD/static and answer OPTIONS with an empty HTML 200; the map page carries everything it needs.
    app = Flask("imex_webhook", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = max_body
    # OPTIONS would answer an empty HTML-typed 200 on every route; no peer of ours sends it.
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False

    if metrics is None:
        metrics = Metrics()
    metrics.registry.register(ClusterMetrics(engine, backend.watch_health, unaccounted))
    app.extensions["imex"] = Services(engine=engine, backend=backend, metrics=metrics, tls_ready=tls_ready,
                                      checks=dict(checks or {}), liveness=liveness if liveness is not None else {},
                                      embedded=embedded)
    app.register_blueprint(extender.blueprint)
    app.register_blueprint(ops.blueprint)
    app.register_blueprint(admission.blueprint)
    app.register_blueprint(ui.blueprint)
    fast.install(app, {**extender.ANSWERS, "mutate": admission.mutate_answer}, max_body)  # the hot verbs

    @app.before_request
    def refuse_declared_oversize() -> Response | None:
        # Views that read no body (GET /healthz...) would otherwise accept any declared length; each route
        # has its own limit (webhook.domain.limits), which the server's poller applies first.
        length, limit = request.content_length, body_limit(normalized(request.path), max_body)
        if length is not None and length > limit:
            raise too_large(limit)
        request.max_content_length = limit
        return None

    @app.teardown_request
    def give_memory_back(_: BaseException | None) -> None:
        release_memory(request.content_length)

    @app.after_request
    def count(response: Response) -> Response:
        metrics.count(request.path, response.status_code)
        return response

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        # Never an HTML page: 404, 405, 413 and friends answer in JSON like everything else, keeping the
        # headers that go with them (Allow on a 405, Location on a redirect to the merged-slashes path).
        response = error_response(exc.code or 500, exc.description or exc.name)
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        new_url = getattr(exc, "new_url", None)
        if isinstance(new_url, str):
            response.headers["Location"] = new_url
        return response

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        app.logger.exception("unhandled error")
        metrics.internal_errors.labels(verb_of(request.path)).inc()
        return error_response(500, f"internal error ({type(exc).__name__})")

    return app
