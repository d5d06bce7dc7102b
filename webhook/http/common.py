"""Shared pieces of the views: the services container, the bounded JSON body, JSON replies, timing and the
400 channel."""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from flask import Response, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

from webhook.domain.limits import MAX_DEPTH
from webhook.engine.engine import Engine
from webhook.engine.ports import Backend, EmbeddedCluster
from webhook.errors import WireError
from webhook.http.metrics import Metrics

Check = Callable[[], tuple[bool, str]]


@dataclass(frozen=True)
class Services:
    engine: Engine
    backend: Backend
    metrics: Metrics
    tls_ready: Check
    # More /readyz checks, given at construction (the fabric inventory's, when a fabric is configured).
    checks: dict[str, Check] = field(default_factory=dict)
    # /healthz checks: what would make a restart the right answer (the server's stalled service port).
    liveness: dict[str, Check] = field(default_factory=dict)
    # The embedded mode's cluster, told of the pods the scheduler asks about; None where watches feed it.
    embedded: EmbeddedCluster | None = None


def services() -> Services:
    svc: Services = current_app.extensions["imex"]
    return svc


def too_large(limit: int) -> RequestEntityTooLarge:
    return RequestEntityTooLarge(f"request body larger than the limit of {limit} bytes (this route's: "
                                 "3 MiB for /mutate, 64 KiB for /bind, --max-body for the NodeList verbs)")


def _read_body() -> bytes:
    """The whole body, at most MAX_CONTENT_LENGTH bytes, whatever the transfer encoding.

    werkzeug refuses a Content-Length over the limit before reading, but a chunked body has no length:
    it reads such a body up to the limit and stops there, silently, so a valid document followed by junk
    past the limit would be served. One byte more from the server's (de-chunked) input tells them apart."""
    limit: int = request.max_content_length or current_app.config["MAX_CONTENT_LENGTH"]  # the route's
    data = request.get_data(cache=False)
    if len(data) >= limit and request.content_length is None and request.environ["wsgi.input"].read(1):
        raise too_large(limit)
    return data


def json_body() -> Any:
    """The request body as JSON (``decode``); a body over the limit is a 413."""
    return decode(_read_body(), current_app.config["MAX_CONTENT_LENGTH"])


# A body with fewer opening brackets than this cannot nest deeper; counting them (memchr speed) is cheaper
# than the encoding below, for bodies up to this size (beyond, a NodeList has brackets by the thousand).
_COUNTED = 256 * 1024


# What decoding costs in Python objects, per JSON token, rounded up from orjson on CPython 3.11-3.13: a
# small dict about 200 bytes, a list 56 plus its slots, a short string 50-70, a float or an int 24-32 plus
# the slot that holds it. Counting the tokens runs at memchr speed (about 5 ms for 16 MiB), so a body is
# refused before it is decoded when it would cost more than DECODE_BUDGET_FACTOR x --max-body: 16 MiB of
# "[[],[],...]" would take 400 MiB, a NodeList of the same size about 200.
_TOKEN_COST = ((b"{", 240), (b"[", 72), (b'"', 32), (b",", 40), (b":", 24))
DECODE_BUDGET_FACTOR = 16
_ESTIMATED_FROM = 64 * 1024  # below this the worst body costs under 3 MiB: not worth counting


def decoded_size(data: bytes) -> int:
    """An upper bound of what ``orjson.loads(data)`` allocates (each quote is half a string). A byte of text
    may become four: one character outside the Basic Multilingual Plane stores its whole string with four
    bytes a character."""
    return 4 * len(data) + sum(data.count(token) * cost for token, cost in _TOKEN_COST)


def decode(data: bytes, max_body: int | None = None) -> Any:
    """``data`` as JSON, nested at most MAX_DEPTH levels and, with ``max_body``, costing at most
    DECODE_BUDGET_FACTOR times it; anything else is a WireError (a 400 through ``answered``)."""
    if max_body is not None and len(data) > _ESTIMATED_FROM:
        estimate, budget = decoded_size(data), DECODE_BUDGET_FACTOR * max_body
        if estimate > budget:
            raise WireError("", f"request body of {len(data)} bytes would take about {estimate >> 20} MiB to "
                                f"decode, over the {budget >> 20} MiB allowed ({DECODE_BUDGET_FACTOR} x --max-body); "
                                "no AdmissionReview or ExtenderArgs is shaped like it")
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


# glibc keeps freed memory in its heaps for the next allocation; after a large body has been decoded and
# dropped, giving it back keeps the worker's RSS at its working size (a burst of 16 MiB bodies otherwise
# leaves hundreds of MiB resident). About a millisecond per call; only after bodies this large.
TRIM_FROM = 1024 * 1024
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
_malloc_trim = getattr(_libc, "malloc_trim", None)  # glibc only; elsewhere nothing to do


def release_memory(size: int | None) -> None:
    """After a request or a response of ``size`` bytes: give the memory it freed back to the system."""
    if _malloc_trim is not None and size is not None and size >= TRIM_FROM:
        _malloc_trim(0)


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
    that names the field. Every reply, this 400 included, is counted once by the app (``webhook.http.app``)."""
    start = time.perf_counter()
    try:
        return 200, answer()
    except WireError as exc:
        return 400, error_json(400, f"malformed {verb} request: {exc}", exc.path or None)
    finally:
        metrics.latency.labels(verb).observe(time.perf_counter() - start)
