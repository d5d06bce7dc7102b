"""Every malformed request head gunicorn would answer with its HTML page (a 500 for a ``SCRIPT_NAME``
header) is answered in JSON by our code, with the status it calls for, and counted by status in
``imex_webhook_requests_total``, through the real TLS server. Some are refused by the poller before any
thread sees them (:mod:`webhook.serving.framing`), the rest by the thread that parses the request
(:mod:`webhook.serving.thread_side`); the client sees the same shape either way.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import serving
from tests.http.test_slow_clients import raw_tls, read_all

H = b"Host: x\r\n"
GOOD = b"GET /healthz HTTP/1.1\r\n" + H + b"\r\n"

# (id, bytes sent, status, verb it is counted under)
HEADS = [
    ("duplicate-host", b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "healthz"),
    ("bad-method-token", b"G(T /healthz HTTP/1.1\r\n" + H + b"\r\n", 400, "healthz"),
    ("invalid-http-version", b"GET /healthz HTTP/1.x\r\n" + H + b"\r\n", 400, "healthz"),
    ("request-line-extra-space", b"GET  /healthz HTTP/1.1\r\n" + H + b"\r\n", 400, "other"),
    ("request-line-too-long", b"GET /healthz?" + b"q" * 6000 + b" HTTP/1.1\r\n" + H + b"\r\n", 414, "healthz"),
    ("invalid-request-target", b"GET healthz HTTP/1.1\r\n" + H + b"\r\n", 400, "healthz"),
    ("header-line-too-long", b"GET /healthz HTTP/1.1\r\n" + H + b"X-Big: " + b"a" * 9000 + b"\r\n\r\n", 431,
     "healthz"),
    ("too-many-headers", b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(120)) + b"\r\n",
     431, "healthz"),
    ("space-in-header-name", b"GET /healthz HTTP/1.1\r\n" + H + b"Bad Name: y\r\n\r\n", 400, "healthz"),
    ("control-char-in-header-name", b"GET /healthz HTTP/1.1\r\n" + H + b"X\x01Y: y\r\n\r\n", 400, "healthz"),
    ("space-before-colon", b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400, "healthz"),
    ("bare-lf", b"GET /healthz HTTP/1.1\n" + b"Host: x\n\n", 400, "other"),  # no CRLF: no request line
    ("bare-cr-in-value", b"GET /healthz HTTP/1.1\r\n" + H + b"X-A: a\rb\r\n\r\n", 400, "healthz"),
    ("obs-fold", b"GET /healthz HTTP/1.1\r\n" + H + b"X-A: a\r\n folded\r\n\r\n", 400, "healthz"),
    ("nul-in-header-value", b"GET /healthz HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n", 400, "healthz"),
    ("content-length-and-transfer-encoding",
     b"POST /bind HTTP/1.1\r\n" + H + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
     "bind"),
    ("two-content-lengths", b"POST /bind HTTP/1.1\r\n" + H + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
     400, "bind"),
    ("non-numeric-content-length", b"POST /bind HTTP/1.1\r\n" + H + b"Content-Length: 2x\r\n\r\n{}", 400, "bind"),
    ("negative-content-length", b"POST /bind HTTP/1.1\r\n" + H + b"Content-Length: -2\r\n\r\n{}", 400, "bind"),
    ("bad-chunk-size", b"POST /bind HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bind"),
    ("unsupported-transfer-encoding",
     b"POST /bind HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400, "bind"),
    ("script-name-header", b"GET /healthz HTTP/1.1\r\n" + H + b"SCRIPT_NAME: /x\r\n\r\n", 400, "healthz"),
    ("expectation-we-do-not-meet", b"GET /healthz HTTP/1.1\r\n" + H + b"Expect: 200-ok\r\n\r\n", 417, "healthz"),
]
# A Content-Length one byte short: the request is served, and its last byte starts the next request line.
SHORT_LENGTH = (b"POST /nowhere HTTP/1.1\r\n" + H + b"Content-Length: 1\r\n\r\n{}" + GOOD)


def _counted(served: serving.Served) -> dict[tuple[str, str], float]:
    text = served.get("/metrics").text
    return {(s.labels["verb"], s.labels["code"]): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "imex_webhook_requests_total"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.serve(tmp_path_factory.mktemp("malformed"), "--header-timeout", "3") as s:
        yield s


def _replies(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """(status, head, body) of each response in ``data``."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        out.append((int(head.split(b" ", 2)[1]), head, rest[:length]))
        data = rest[length:]
    return out


@pytest.mark.parametrize(("sent", "status", "verb"), [c[1:] for c in HEADS], ids=[c[0] for c in HEADS])
def test_a_malformed_head_gets_a_json_error_with_its_status_and_is_counted(
        served: serving.Served, sent: bytes, status: int, verb: str) -> None:
    before = _counted(served)
    with raw_tls(served) as tls:
        tls.sendall(sent)
        data = read_all(tls, limit=15)
    ((got, head, body),) = _replies(data)
    assert got == status, data[:400]
    assert b"content-type: application/json" in head.lower() and b"connection: close" in head.lower()
    assert body.startswith(b'{"error":') and f'"status":{status}'.encode() in body, body
    after = _counted(served)
    assert after.get((verb, str(status)), 0) - before.get((verb, str(status)), 0) == 1, (verb, status)


def test_a_short_content_length_leaves_a_byte_that_spoils_the_next_request_line(served: serving.Served) -> None:
    before = _counted(served)
    with raw_tls(served) as tls:
        tls.sendall(SHORT_LENGTH)
        data = read_all(tls, limit=15)
    replies = _replies(data)
    assert [r[0] for r in replies] == [404, 400], data[:600]
    assert all(b"application/json" in head.lower() for _, head, _ in replies)
    assert b"<html" not in data.lower()
    after = _counted(served)
    assert after.get(("healthz", "400"), 0) - before.get(("healthz", "400"), 0) == 1  # "}GET /healthz ..."


def test_every_case_above_is_a_distinct_kind(served: serving.Served) -> None:
    assert len(HEADS) + 1 >= 21 and len({c[1] for c in HEADS}) == len(HEADS)
    assert served.get("/healthz").status_code == 200
