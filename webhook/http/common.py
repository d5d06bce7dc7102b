"""Shared pieces of the views: the services container, JSON replies, timing and the 400 channel."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from flask import Response, current_app, request

from webhook.domain.errors import WireError
from webhook.http.metrics import Metrics
from webhook.state.backend import Backend
from webhook.state.engine import Engine

Check = Callable[[], tuple[bool, str]]


@dataclass(frozen=True)
class Services:
    engine: Engine
    backend: Backend
    metrics: Metrics
    tls_ready: Check
    # More /readyz checks registered after start-up (the fabric inventory, when a fabric is configured).
    checks: dict[str, Check] = field(default_factory=dict)


def services() -> Services:
    svc: Services = current_app.extensions["imex"]
    return svc


def json_body() -> Any:
    """The request body as JSON; anything else is a WireError (a 400 through ``timed``)."""
    try:
        return orjson.loads(request.get_data(cache=False))
    except orjson.JSONDecodeError as exc:
        raise WireError("", f"request body is not JSON: {exc}") from exc


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")


def error_response(status: int, message: str, field: str | None = None) -> Response:
    body: dict[str, Any] = {"error": message, "status": status}
    if field:
        body["field"] = field
    return json_response(body, status)


def timed(verb: str) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
    """Count and time a view; a malformed request (WireError) becomes a 400 that names the field."""

    def wrap(view: Callable[..., Response]) -> Callable[..., Response]:
        @functools.wraps(view)
        def inner(*args: Any, **kwargs: Any) -> Response:
            metrics = services().metrics
            start = time.perf_counter()
            try:
                response = view(*args, **kwargs)
            except WireError as exc:
                response = error_response(400, f"malformed {verb} request: {exc}", exc.path or None)
            metrics.latency.labels(verb).observe(time.perf_counter() - start)
            metrics.requests.labels(verb, str(response.status_code)).inc()
            return response

        return inner

    return wrap
