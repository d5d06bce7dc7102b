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

from webhook.domain.limits import MAX_DEPTH
from webhook.errors import WireError
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
    """The request body as JSON (``decode``); a body over the limit is a 413."""
    return decode(_read_body())


# A body with fewer opening brackets than this cannot nest deeper; counting them (memchr speed) is cheaper
# than the encoding below, for bodies up to this size (beyond, a NodeList has brackets by the thousand).
_COUNTED = 256 * 1024


def decode(data: bytes) -> Any:
    """``data`` as JSON, nested at most MAX_DEPTH levels; anything else is a WireError (a 400 through
    ``timed`` or ``answered``)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise WireError("", f"request body nests deeper than {MAX_DEPTH} levels of objects and arrays") from None
        raise WireError("", f"request body is not JSON: {exc}") from None
    if isinstance(doc, dict | list) and (len(data) > _COUNTED or data.count(b"[") + data.count(b"{") >= MAX_DEPTH):
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
    return Response(error_json(status, message, field), status=status, mimetype="application/json")


def error_json(status: int, message: str, field: str | None = None) -> bytes:
    """The body of ``error_response``."""
    body: dict[str, Any] = {"error": message, "status": status}
    if field:
        body["field"] = field
    return orjson.dumps(body)


def answered(verb: str, metrics: Metrics, answer: Callable[[], bytes]) -> tuple[int, bytes]:
    """(status, JSON body) of one call of a verb: ``answer()`` timed, a malformed request (WireError) a 400
    that names the field. What ``timed`` does for a view, for a reply built as bytes (``webhook.http.fast``)."""
    start = time.perf_counter()
    try:
        return 200, answer()
    except WireError as exc:
        return 400, error_json(400, f"malformed {verb} request: {exc}", exc.path or None)
    finally:
        metrics.latency.labels(verb).observe(time.perf_counter() - start)


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
