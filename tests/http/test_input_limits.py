"""Input limits end to end: a body over --max-body is a 413 whatever its transfer encoding (a valid
document followed by junk past the limit included), a body nested deeper than 254 levels is a 400 that
says so, every error is JSON from the app's handlers (404, 405, 413, 400 and the 500 fallback), every
reply is counted by status, and no URL credentials reach the log or the anonymous /readyz body."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from tests import builders, serving
from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.limits import MAX_DEPTH
from webhook.domain.policy import Policy
from webhook.http.app import create_app
from webhook.http.metrics import Metrics
from webhook.sim.fabric import inventory
from webhook.sim.fabric.server import start_in_thread
from webhook.state.cluster import ClusterStore

LIMIT = 4096
UNKNOWN_POD = {"PodName": "nobody", "PodNamespace": "ml", "PodUID": "u-1", "Node": "gb200-a-00"}


def _padded(doc: dict[str, Any], size: int) -> bytes:
    """``doc`` as JSON of exactly ``size`` bytes (white space after it is still one valid document)."""
    text = json.dumps(doc).encode()
    assert len(text) <= size
    return text + b" " * (size - len(text))


def _chunks(body: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


def _requests_counted(text: str) -> dict[tuple[str, str], float]:
    return {(s.labels["verb"], s.labels["code"]): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "imex_webhook_requests_total"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.serve(tmp_path_factory.mktemp("limits"), "--max-body", str(LIMIT)) as s:
        yield s


def _post(served: serving.Served, path: str, body: bytes | Iterator[bytes]) -> requests.Response:
    return requests.post(served.url + path, data=body, headers={"Content-Type": "application/json"},
                         verify=str(served.ca), timeout=30)


# -- Body limits through the real server ---------------------------------------------------------------------

@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_valid_document_followed_by_junk_past_the_limit_is_refused(served: serving.Served, chunked: bool) -> None:
    body = _padded(UNKNOWN_POD, LIMIT) + b"junk" * 100
    reply = _post(served, "/bind", _chunks(body) if chunked else body)
    assert reply.status_code == 413 and reply.headers["Content-Type"] == "application/json"
    assert reply.json()["status"] == 413 and str(LIMIT) in reply.json()["error"]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_exactly_at_the_limit_is_served(served: serving.Served, chunked: bool) -> None:
    body = _padded(UNKNOWN_POD, LIMIT)
    reply = _post(served, "/bind", _chunks(body) if chunked else body)
    assert reply.status_code == 200 and "not found" in reply.json()["Error"]


def test_a_body_in_many_tiny_chunks_over_the_limit_is_refused(served: serving.Served) -> None:
    reply = _post(served, "/mutate", _chunks(b"[" + b"0," * LIMIT + b"0]", size=7))
    assert reply.status_code == 413 and reply.json()["status"] == 413


def test_a_declared_length_over_the_limit_is_refused_on_a_route_that_reads_no_body(served: serving.Served) -> None:
    reply = requests.get(served.url + "/healthz", data=b"x" * (LIMIT + 1), verify=str(served.ca), timeout=30)
    assert reply.status_code == 413 and reply.json()["status"] == 413


def test_concurrent_oversized_and_valid_bodies_each_get_their_own_answer(served: serving.Served) -> None:
    statuses: dict[int, int] = {}
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            big = i % 2 == 0
            body = _padded(UNKNOWN_POD, LIMIT) + (b"x" * 50_000 if big else b"")
            statuses[i] = _post(served, "/bind", _chunks(body) if i % 4 < 2 else body).status_code
        except BaseException as exc:  # collected: an assertion in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert statuses == {i: 413 if i % 2 == 0 else 200 for i in range(16)}
    assert served.get("/healthz").status_code == 200


def test_every_error_status_is_json_and_counted(served: serving.Served) -> None:
    before = _requests_counted(served.get("/metrics").text)
    replies = {
        ("other", "404"): requests.get(served.url + "/nope", verify=str(served.ca), timeout=30),
        ("filter", "405"): requests.get(served.url + "/filter", verify=str(served.ca), timeout=30),
        ("healthz", "405"): requests.options(served.url + "/healthz", verify=str(served.ca), timeout=30),
        ("bind", "400"): _post(served, "/bind", b"{not json"),
        ("bind", "413"): _post(served, "/bind", _chunks(b" " * (LIMIT + 1))),
        ("preempt", "413"): _post(served, "/preempt", b" " * (LIMIT + 1)),
    }
    for (_, code), reply in replies.items():
        assert str(reply.status_code) == code and reply.headers["Content-Type"] == "application/json", reply.text
        assert reply.json()["status"] == reply.status_code
    assert replies[("filter", "405")].headers["Allow"] == "POST"
    after = _requests_counted(served.get("/metrics").text)
    for label in replies:
        assert after.get(label, 0) - before.get(label, 0) == 1, label


# -- Nesting -----------------------------------------------------------------------------------------------------

def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(("inner", "status"), [(MAX_DEPTH - 1, 200), (MAX_DEPTH, 400), (1100, 400)])
def test_a_body_nests_at_most_254_levels(demo_app: Flask, inner: int, status: int) -> None:
    # The object is one level, so "x" holds inner levels more: 254 in all is the most.
    body = json.dumps(UNKNOWN_POD)[:-1] + ', "x": ' + _nested(inner) + "}"
    reply = demo_app.test_client().post("/bind", data=body, content_type="application/json")
    assert reply.status_code == status, reply.get_data()[:200]
    if status == 400:
        assert reply.get_json()["error"].endswith("request body nests deeper than 254 levels of objects and arrays")


def test_a_nodelist_item_nested_to_the_limit_is_echoed_back(demo_app: Flask) -> None:
    body = serving.fixture("extender/filter-nodelist-train-8.json")
    body["Pod"] = serving.fixture("extender/filter-names-plain.json")["Pod"]
    body["Pod"]["spec"]["containers"][0]["resources"] = {}  # no group, no GPUs: every node passes, all echoed
    text = json.dumps(body).replace('"nodeInfo": {', f'"deep": {_nested(MAX_DEPTH - 5)}, "nodeInfo": {{', 1)
    reply = demo_app.test_client().post("/filter", data=text, content_type="application/json")
    assert reply.status_code == 200 and reply.get_json()["Error"] == ""
    assert len(reply.get_json()["Nodes"]["items"]) == len(body["Nodes"]["items"])


# -- In-process: the app's own body limit, the 500 fallback -------------------------------------------------

def test_the_app_refuses_a_chunked_body_past_its_limit_behind_any_server() -> None:
    # gunicorn here refuses it before the app; another server might not: werkzeug alone would read the
    # body up to the limit and silently serve the valid document it starts with.
    policy = Policy()
    store = ClusterStore(policy)
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    backend.start()
    app = create_app(builders.engine(backend, policy), backend, max_body=LIMIT, embedded=backend)
    client = app.test_client()

    def send(body: bytes) -> Any:
        return client.post("/bind", input_stream=io.BytesIO(body), content_type="application/json",
                           headers={"Transfer-Encoding": "chunked"}, environ_overrides={"wsgi.input_terminated": True})

    assert send(_padded(UNKNOWN_POD, LIMIT) + b"junk").status_code == 413
    assert send(_padded(UNKNOWN_POD, LIMIT)).status_code == 200
    assert 'imex_webhook_requests_total{code="413",verb="bind"} 1.0' in client.get("/metrics").get_data(as_text=True)


def test_an_exception_no_view_catches_is_a_counted_json_500(demo_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> Any:
        raise RuntimeError("boom")

    monkeypatch.setitem(demo_app.view_functions, "ops.healthz", broken)
    demo_app.logger.disabled = True
    client = demo_app.test_client()
    reply = client.get("/healthz")
    assert reply.status_code == 500 and reply.get_json() == {"error": "internal error (RuntimeError)", "status": 500}
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'imex_webhook_requests_total{code="500",verb="healthz"} 1.0' in metrics
    assert 'imex_webhook_internal_errors_total{verb="healthz"} 1.0' in metrics


def test_a_group_with_a_huge_name_is_refused_with_a_bounded_reason_and_never_listed(demo_app: Flask) -> None:
    body = serving.fixture("extender/filter-names-plain.json")
    body["Pod"]["metadata"]["annotations"] = {keys.GROUP_ANNOTATION: "g" * 200_000}
    client = demo_app.test_client()
    reply = client.post("/filter", data=json.dumps(body), content_type="application/json")
    assert reply.status_code == 200 and not reply.get_json()["NodeNames"]
    assert len(reply.get_data()) < 200_000 and "is not a group name" in reply.get_data(as_text=True)
    inspect = client.get("/inspect")
    assert len(inspect.get_data()) < 200_000
    assert all(len(g["group"]) < 300 for g in inspect.get_json()["groups"])


# -- Credentials ----------------------------------------------------------------------------------------------

SECRET = "S3cretPW-only-here"


def test_fabric_url_credentials_reach_neither_the_log_nor_readyz(tmp_path: Path) -> None:
    creds = tmp_path / "fabric-credentials"
    creds.write_text("admin:admin\n")
    with start_in_thread(inventory.demo()) as sim:
        url = sim.url.replace("://", f"://ops:{SECRET}@", 1)
        with serving.serve(tmp_path / "serve", "--fabric", url, "--fabric-credentials", str(creds),
                           "--fabric-refresh", "0.2") as s:
            readyz = s.get("/readyz")
            assert readyz.status_code == 200 and "127.0.0.1" in readyz.json()["checks"]["fabric"]["detail"]
            log = s.output()
    assert SECRET not in readyz.text and SECRET not in log
    assert "***@" in log  # the settings line still shows where the fabric is


@pytest.mark.parametrize(("received", "verb"), [
    (b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n", "filter"),
    (b"POST //bind?x=1 HTTP/1.1\r\n", "bind"),
    (b"GET /nope HTTP/1.1\r\n", "other"),
    (b"GET /inspect?x=" + b"y" * 5000, "inspect"),  # a request line cut short at the parser's limit
    (b"GET /filter" + b"y" * 5000, "other"),  # cut inside the path: not a route
    (b"\x16\x03\x01 not http at all", "other"),
    (b"", "other"),
])
def test_a_reply_the_server_writes_itself_is_counted_under_the_path_it_was_for(received: bytes, verb: str) -> None:
    metrics = Metrics()
    metrics.count_refused(received, 413)
    assert metrics.registry.get_sample_value("imex_webhook_requests_total", {"verb": verb, "code": "413"}) == 1.0
