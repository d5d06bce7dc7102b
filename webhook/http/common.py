"""Shared pieces of the views: the services container, the bounded JSON body, JSON replies, timing and the
400 channel."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from flask import Response, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

from webhook.domain.errors import WireError
from webhook.domain.limits import MAX_DEPTH
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


def too_large(limit: int) -> RequestEntityTooLarge:
    return RequestEntityTooLarge(f"request body over {limit} bytes (--max-body)")


def _read_body() -> bytes:
    """The whole body, at most MAX_CONTENT_LENGTH bytes, whatever the transfer encoding.

    werkzeug refuses a Content-Length over the limit before reading, but a chunked body has no length:
    it reads such a body up to the limit and stops there, silently, so a valid document followed by junk
    past the limit would be served. One byte more from the server's (de-chunked) input tells them apart."""
    limit: int = current_app.config["MAX_CONTENT_LENGTH"]
    data = request.get_data(cache=False)
    if len(data) >= limit and request.content_length is None and request.environ["wsgi.input"].read(1):
        raise too_large(limit)
    return data


def json_body() -> Any:
    """The request body as JSON, nested at most MAX_DEPTH levels; anything else is a WireError (a 400
    through ``timed``), a body over the limit a 413."""
    try:
        doc = orjson.loads(_read_body())
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise WireError("", f"request body nests deeper than {MAX_DEPTH} levels of objects and arrays") from None
        raise WireError("", f"request body is not JSON: {exc}") from None
    if isinstance(doc, dict | list):
        try:
            # orjson writes at most MAX_DEPTH levels, in C: the cheapest exact depth check there is (about a
            # sixth of the decoding time), and the /filter reply echoes NodeList items, which must encode.
            orjson.dumps(doc)
        except orjson.JSONEncodeError:
            raise WireError("", f"request body nests deeper than {MAX_DEPTH} levels of objects and arrays") from None
    return doc


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")


def error_response(status: int, message: str, field: str | None = None) -> Response:
    body: dict[str, Any] = {"error": message, "status": status}
    if field:
        body["field"] = field
    return json_response(body, status)


def timed(verb: str) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
    """Time a view; a malformed request (WireError) becomes a 400 that names the field. Every reply, this
    400 included, is counted once by the app (``webhook.http.app``), whatever produced it."""

    def wrap(view: Callable[..., Response]) -> Callable[..., Response]:
        @functools.wraps(view)
        def inner(*args: Any, **kwargs: Any) -> Response:
            metrics = services().metrics
            start = time.perf_counter()
            try:
                response = view(*args, **kwargs)
            except WireError as exc:
                response = error_response(400, f"malformed {verb} request: {exc}", exc.path or None)
            finally:
                metrics.latency.labels(verb).observe(time.perf_counter() - start)
            return response

        return inner

    return wrap
