"""The benchmark's baseline (webhook/tools/bench/baseline.py): it echoes the body, answers stored bytes after
decoding the request, and runs behind the service's own gunicorn worker and application class."""

from __future__ import annotations

from pathlib import Path

import orjson

from webhook.tools import servers
from webhook.tools.bench import baseline


def test_baseline_echoes_the_body() -> None:
    client = baseline.create_app().test_client()
    body = {"Pod": {"metadata": {"name": "x"}}, "NodeNames": ["a"], "Nodes": None}
    reply = client.post("/filter", data=orjson.dumps(body), content_type="application/json")
    assert reply.status_code == 200 and orjson.loads(reply.data) == body
    assert client.get("/readyz").status_code == 200


def test_the_baseline_runs_behind_the_services_own_worker_and_application_class(tmp_path: Path) -> None:
    from webhook.service.server import _Server
    from webhook.service.settings import ServerSettings, Settings, TlsSettings
    from webhook.serving.worker import Worker

    tls = servers.make_tls(tmp_path)
    settings = Settings(server=ServerSettings(bind="127.0.0.1:0"), tls=TlsSettings(cert=tls.cert, key=tls.key))
    server = baseline.BaselineServer(settings, tls.cert, tls.key)
    service = _Server(settings, tls.cert, tls.key)
    assert server.cfg.worker_class is service.cfg.worker_class is Worker
    assert isinstance(server, _Server) and server.cfg.threads == service.cfg.threads


def test_the_baseline_answers_stored_bytes_after_decoding_the_request() -> None:
    client = baseline.create_app().test_client()
    assert client.post("/canned/filter", data=b"{}").status_code == 404
    stored = b'{"NodeNames":["a"],"FailedNodes":{},"Error":""}'
    assert client.put("/canned/filter", data=stored).status_code == 200
    reply = client.post("/canned/filter", data=b'{"NodeNames": ["a", "b"]}', content_type="application/json")
    assert reply.status_code == 200 and reply.data == stored


def test_replies_of_thousands_of_names_are_canned_on_the_extender_route_that_admits_them() -> None:
    client = baseline.create_app().test_client()
    path = baseline.canned_path("filter", "first")
    assert path.split("?", 1)[0] == "/filter"  # a route whose body limit is --max-body, not 64 KiB
    stored = b'{"NodeNames":[],"FailedNodes":{"n":"' + b"x" * 100_000 + b'"},"Error":""}'
    assert client.put(path, data=stored).status_code == 200
    reply = client.post(path, data=b'{"NodeNames": ["n"]}', content_type="application/json")
    assert reply.status_code == 200 and reply.data == stored
    assert client.post(baseline.canned_path("filter", "other"), data=b"{}").status_code == 404
    assert orjson.loads(client.post("/filter", data=b'{"a": 1}').data) == {"a": 1}  # no query: still an echo


def test_the_served_baseline_takes_a_canned_reply_larger_than_the_workers_limit_for_other_routes(
        tmp_path: Path) -> None:
    import http.client

    from webhook.domain.limits import SMALL_MAX_BODY

    tls = servers.make_tls(tmp_path / "tls")
    port = servers.free_port()
    server = servers.start("baseline", baseline.command(port, tls, 2), port, tls, tmp_path / "baseline.log", 60)
    stored = b'{"FailedNodes":{"n":"' + b"x" * (SMALL_MAX_BODY + 1) + b'"}}'
    path = baseline.canned_path("filter", "big")
    with servers.running([server]):
        conn = http.client.HTTPSConnection(server.host, port, context=tls.client_context(), timeout=30)
        try:
            conn.request("PUT", path, body=stored)
            assert conn.getresponse().read() == b'{"stored":true}'
            conn.request("POST", path, body=b'{"NodeNames": ["n"]}')
            assert conn.getresponse().read() == stored
        finally:
            conn.close()
