"""The app has no static route: ``/static/...`` answers like any path it does not serve, a 404 in JSON,
whatever the method.

Flask makes a ``/static/<path>`` route for every app unless told not to, before the app's configuration
turns automatic OPTIONS off: ``OPTIONS /static/x`` was an empty HTML 200 (Allow: GET, HEAD, OPTIONS), the one
answer of the service that was not JSON, and ``GET /static/<file>`` served the files under
``$PWD/static``."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask

from tests import builders
from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain.policy import Policy
from webhook.http.app import create_app
from webhook.state.cluster import ClusterStore

METHODS = ["OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "TRACE"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("path", ["/static/x", "/static/ui_page.html", "/static/"])
def test_a_static_path_answers_in_json_as_an_unknown_path_does(demo_app: Flask, method: str, path: str) -> None:
    client = demo_app.test_client()
    reply, unknown = client.open(path, method=method), client.open("/nope", method=method)
    assert reply.status_code == unknown.status_code == 404
    assert reply.content_type == "application/json" and "Allow" not in reply.headers
    assert reply.get_data() == unknown.get_data()  # HEAD: both empty
    if method != "HEAD":
        assert reply.get_json()["status"] == 404


def _app() -> Flask:
    policy = Policy()
    store = ClusterStore(policy)
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    return create_app(builders.engine(backend, policy), backend, embedded=backend)


def test_no_file_of_the_working_directory_is_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "secret.txt").write_text("a token\n")
    monkeypatch.chdir(tmp_path)  # where Flask looks for its static folder when the app is made
    reply = _app().test_client().get("/static/secret.txt")
    assert reply.status_code == 404 and reply.content_type == "application/json"
    assert b"token" not in reply.get_data()
