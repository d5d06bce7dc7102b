"""Each route's body limit in the app itself (webhook.domain.limits), whatever server runs it: a declared
length past the route's limit and a chunked body that runs past it are both 413 JSON, on the fast path and
through Flask; the NodeList verbs keep --max-body; the limit never exceeds --max-body."""

from __future__ import annotations

import io
import json

import pytest
from flask import Flask

from tests.http.test_fast_path import _app
from webhook.domain.limits import MUTATE_MAX_BODY, SMALL_MAX_BODY, body_limit

MAX_BODY = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def app() -> Flask:
    return _app(max_body=MAX_BODY)


def _post(app: Flask, path: str, body: bytes, chunked: bool) -> tuple[int, dict[str, object]]:
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "x", "SERVER_PORT": "443",
               "wsgi.url_scheme": "https", "wsgi.input": io.BytesIO(body), "CONTENT_TYPE": "application/json"}
    if chunked:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
        environ["wsgi.input_terminated"] = True
    else:
        environ["CONTENT_LENGTH"] = str(len(body))
    seen: list[str] = []
    reply = b"".join(app.wsgi_app(environ, lambda status, headers, exc=None: seen.append(status)))
    return int(seen[0].split()[0]), json.loads(reply)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize(("path", "limit"), [("/mutate", MUTATE_MAX_BODY), ("/bind", SMALL_MAX_BODY)])
def test_a_body_past_the_routes_limit_is_a_413_that_names_it(app: Flask, path: str, limit: int, chunked: bool) -> None:
    status, body = _post(app, path, b" " * (limit + 1), chunked)
    assert status == 413 and body["status"] == 413 and str(limit) in str(body["error"]), body


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_nodelist_verbs_take_bodies_up_to_max_body(app: Flask, chunked: bool) -> None:
    status, body = _post(app, "/filter", b" " * (4 * 1024 * 1024) + b"{}", chunked)
    assert status == 400 and "malformed filter request" in str(body["error"]), body  # read and parsed, not 413


@pytest.mark.parametrize(("path", "expected"), [("/filter", MAX_BODY), ("/prioritize", MAX_BODY),
                                                ("/preempt", MAX_BODY), ("/mutate", MUTATE_MAX_BODY),
                                                ("/bind", SMALL_MAX_BODY), ("/healthz", SMALL_MAX_BODY),
                                                ("/nope", SMALL_MAX_BODY)])
def test_each_route_has_its_limit_and_none_exceeds_max_body(path: str, expected: int) -> None:
    assert body_limit(path, MAX_BODY) == expected
    assert body_limit(path, 1000) == 1000
