"""A HEAD request costs at most a rate-limited log line, whoever answers it, and still gets the head GET
would get (JSON).

Through the real server over TLS, with ``--client-ca`` as in a cluster. The caller check answered a
stranger ahead of Flask with the GET body; gunicorn dropped that body on a HEAD with a WARNING line each
time, so a client could write the log as fast as it sent HEADs (500 lines for 500 HEADs of ``/%66ilter``).
Now the poller refuses the stranger on its head (``/%66ilter`` is ``/filter`` to it as to the router) and
logs the refusal as a dropped connection, 20 lines at once and 2 a second after that; nothing answers a
HEAD with a body."""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import serving

HEADS = 500



@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> serving.Pki:
    return serving.scheduler_pki(tmp_path_factory.mktemp("head"))


@pytest.fixture(scope="module")
def served(pki: serving.Pki) -> Iterator[serving.Served]:
    with serving.serve_with_client_ca(pki) as s:
        yield s


def _connection(served: serving.Served, cert: tuple[Path, Path] | None = None) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(served.ca))
    if cert is not None:
        context.load_cert_chain(*cert)
    return http.client.HTTPSConnection("localhost", served.port, context=context, timeout=30)


def _head(conn: http.client.HTTPSConnection, path: str) -> http.client.HTTPResponse:
    conn.request("HEAD", path)
    reply = conn.getresponse()
    assert reply.read() == b""
    return reply


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if "WARNING" in line or "ERROR" in line]


@pytest.mark.parametrize("path", ["/filter", "/%66ilter"])
def test_many_heads_refused_by_the_caller_check_log_a_rate_limited_line(served: serving.Served, path: str) -> None:
    start = len(served.output())
    began = time.monotonic()
    conn = _connection(served)
    try:
        for _ in range(HEADS):
            reply = _head(conn, path)
            assert reply.status == 403 and reply.getheader("Content-Type") == "application/json"
            assert int(reply.getheader("Content-Length") or 0) > 0  # the length of the JSON GET would get
    finally:
        conn.close()
    lines = _warnings(served.output()[start:])
    assert not [line for line in lines if "no-body response" in line]
    assert all("refused-caller" in line or "not logged" in line for line in lines), lines[:3]
    assert len(lines) <= 20 + 2 * (time.monotonic() - began) + 2, len(lines)


def test_the_schedulers_heads_get_their_json_heads_and_log_nothing(served: serving.Served, pki: serving.Pki) -> None:
    start = len(served.output())
    conn = _connection(served, pki.scheduler)
    try:
        for _ in range(HEADS // 5):
            refused = _head(conn, "/filter")
            assert refused.status == 405 and refused.getheader("Allow") == "POST"
            assert refused.getheader("Content-Type") == "application/json"
            assert _head(conn, "/readyz").getheader("Content-Type") == "application/json"
    finally:
        conn.close()
    assert _warnings(served.output()[start:]) == []
