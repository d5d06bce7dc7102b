"""The hot verbs answered without Flask (``webhook.http.fast``) answer exactly as Flask does: the same
status, headers, body and metrics for valid, malformed and hostile requests, and anything unusual (another
method, a chunked body, a declared length over the limit, a short body) is left to Flask."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from flask import Flask, request_started
from werkzeug.test import EnvironBuilder

from tests import admission_support, builders, serving
from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain.limits import MAX_DEPTH
from webhook.domain.policy import Policy
from webhook.http import extender
from webhook.http.app import create_app
from webhook.state.cluster import ClusterStore

Reply = tuple[str, list[tuple[str, str]], bytes]


def _app(max_body: int = 64 * 1024 * 1024) -> Flask:
    policy = Policy()
    store = ClusterStore(policy)
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    backend.start()
    return create_app(builders.engine(backend, policy), backend, max_body=max_body, embedded=backend)


def _call(wsgi: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> Reply:
    seen: list[Any] = []
    body = b"".join(wsgi(environ, lambda status, headers, exc=None: seen.append((status, headers))))
    status, headers = seen[0]
    return status, sorted(headers), body


def _environ(method: str, path: str, data: bytes) -> dict[str, Any]:
    environ: dict[str, Any] = EnvironBuilder(method=method, path=path, data=data,
                                             content_type="application/json").get_environ()
    return environ


def _fast(app: Flask, *args: Any) -> Reply:
    return _call(app.wsgi_app, _environ(*args))


def _flask(app: Flask, *args: Any) -> Reply:
    return _call(lambda e, s: Flask.wsgi_app(app, e, s), _environ(*args))


def _counts(app: Flask) -> dict[str, str]:
    text = app.test_client().get("/metrics").get_data(as_text=True)
    wanted = ("imex_webhook_requests_total", "imex_webhook_decisions_total", "imex_webhook_internal_errors_total")
    return dict(re.findall(r"^((?:" + "|".join(wanted) + r")\{[^}]*\}) (\S+)$", text, re.M))


def _filter_body() -> dict[str, Any]:
    return serving.fixture("extender/filter-names-train-8.json")  # type: ignore[no-any-return]


def _requests() -> list[tuple[str, str, bytes]]:
    names = _filter_body()
    deep = json.dumps({**names, "x": json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)}).encode()
    unhashable = json.dumps({**names, "NodeNames": ["gb200-a-00", {"x": 1}]}).encode()
    return [
        ("POST", "/filter", json.dumps(names).encode()),
        ("POST", "/prioritize", json.dumps(names).encode()),
        ("POST", "/filter", json.dumps(serving.fixture("extender/filter-names-plain.json")).encode()),
        ("POST", "/filter", json.dumps(serving.fixture("extender/filter-nodelist-train-8.json")).encode()),
        ("POST", "/bind", json.dumps(serving.fixture("extender/bind-train-8-0.json")).encode()),
        ("POST", "/preempt", json.dumps(serving.fixture("extender/preempt-meta-train-4.json")).encode()),
        ("POST", "/mutate", json.dumps(admission_support.review("create-job-pod-generate-name.json")).encode()),
        ("POST", "/mutate", json.dumps(admission_support.review("create-two-compute-domains.json")).encode()),
        ("POST", "/filter", b"not json"),
        ("POST", "/filter", b""),
        ("POST", "/prioritize", b"[1, 2]"),
        ("POST", "/filter", json.dumps({**names, "NodeNames": [1, 2]}).encode()),
        ("POST", "/filter", unhashable),
        ("POST", "/prioritize", json.dumps({**names, "NodeNames": ["n" * 100_000]}).encode()),
        ("POST", "/filter", json.dumps({"Nodes": None, "NodeNames": []}).encode()),
        ("POST", "/filter", deep),
        ("POST", "/mutate", b'{"request": {"uid": 7}}'),
        ("POST", "/bind", b'{"PodName": "' + b"x" * 300 + b'"}'),
        ("GET", "/filter", b""),
        ("PUT", "/mutate", b"{}"),
        ("POST", "/healthz", b"{}"),
    ]


def test_every_request_gets_the_same_reply_and_the_same_counts_both_ways() -> None:
    fast, slow = _app(), _app()
    for method, path, data in _requests():
        got, want = _fast(fast, method, path, data), _flask(slow, method, path, data)
        assert got == want, (method, path, data[:80])
        assert dict(got[1])["Content-Length"] == str(len(got[2]))
    assert _counts(fast) == _counts(slow) and _counts(fast)


def test_a_plain_request_skips_flask_and_anything_else_goes_through_it() -> None:
    app = _app(max_body=4096)
    seen: list[str] = []

    def flask_saw_it(_: Flask, **__: Any) -> None:
        seen.append("flask")

    request_started.connect(flask_saw_it, app)

    body = json.dumps(_filter_body()).encode()
    assert _fast(app, "POST", "/filter", body)[0] == "200 OK" and seen == []
    assert _fast(app, "GET", "/filter", b"")[0].startswith("405") and seen == ["flask"]
    chunked = _environ("POST", "/filter", body)
    chunked["HTTP_TRANSFER_ENCODING"] = "chunked"
    del chunked["CONTENT_LENGTH"]
    chunked["wsgi.input_terminated"] = True
    assert _call(app.wsgi_app, chunked)[0] == "200 OK" and seen == ["flask"] * 2
    big = json.dumps({**_filter_body(), "pad": "x" * 5000}).encode()
    status, _, reply = _fast(app, "POST", "/filter", big)
    assert status.startswith("413") and json.loads(reply)["status"] == 413 and seen == ["flask"] * 3
    short = _environ("POST", "/filter", body)
    short["CONTENT_LENGTH"] = str(len(body) + 10)
    status, _, reply = _call(app.wsgi_app, short)
    assert status.startswith("400") and seen == ["flask"] * 4


def test_an_exception_no_answer_catches_is_a_json_500_counted_as_internal_both_ways(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(extender, "parse_args", broken)
    fast, slow = _app(), _app()
    body = json.dumps(_filter_body()).encode()
    got, want = _fast(fast, "POST", "/filter", body), _flask(slow, "POST", "/filter", body)
    assert got == want and got[0].startswith("500")
    assert json.loads(got[2]) == {"error": "internal error (RuntimeError)", "status": 500}
    assert _counts(fast) == _counts(slow)
    assert _counts(fast)['imex_webhook_internal_errors_total{verb="filter"}'] == "1.0"


def test_concurrent_callers_on_the_fast_path_all_get_their_own_answers() -> None:
    app = _app()
    body = json.dumps(_filter_body()).encode()
    plain = json.dumps(serving.fixture("extender/filter-names-plain.json")).encode()
    want = {b: _fast(app, "POST", "/filter", b)[2] for b in (body, plain)}
    bad: list[Any] = []

    def caller(data: bytes) -> None:
        for _ in range(40):
            reply = _fast(app, "POST", "/filter", data)
            if reply[2] != want[data]:
                bad.append(reply)

    threads = [threading.Thread(target=caller, args=(body if i % 2 else plain,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    assert _counts(app)['imex_webhook_requests_total{code="200",verb="filter"}'] == f"{320 + 2}.0"
