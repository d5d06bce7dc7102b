"""Connection limits, the probe listener and slow readers, through the real server on loopback.

The load test holds idle TCP connections (no TLS, no bytes) and slow readers (TLS connections that
pipeline ``GET /inspect`` and never read) open, reopening any the server drops, while a well-behaved
client calls ``/healthz`` on the probe port on fresh connections (as the kubelet probes) and ``/filter`` on
a kept-alive connection (as kube-scheduler does). CI runs a small bounded version and asserts success
ratios; the figures in docs/HARDENING.md come from a run by hand with ``IMEX_CONN_IDLE=1200
IMEX_CONN_SLOW=20 IMEX_CONN_SECONDS=60 IMEX_CONN_NODES=5000`` and the default caps.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests import serving
from tests.http.hostile import Hostile, _closed
from tests.http.test_slow_clients import raw_tls, read_all
from webhook.tools.bench import payloads
from webhook.tools.stats import percentile

IDLE = int(os.environ.get("IMEX_CONN_IDLE", "300"))
SLOW = int(os.environ.get("IMEX_CONN_SLOW", "5"))
SECONDS = float(os.environ.get("IMEX_CONN_SECONDS", "5"))
NODES = int(os.environ.get("IMEX_CONN_NODES", "0"))  # 0: the built-in demo cluster
BY_HAND = IDLE >= 1000
CAPS = () if BY_HAND else ("--max-connections", "200", "--max-connections-per-source", "100")
DEADLINES = ("--handshake-timeout", "2", "--header-timeout", "2", "--write-timeout", "3")


def _samples(text: str, name: str) -> dict[tuple[str, ...], float]:
    return {tuple(sorted(s.labels.values())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def _dropped(url: str) -> dict[str, float]:
    text = requests.get(url + "/metrics", timeout=10).text
    return {k[0]: v for k, v in _samples(text, "imex_webhook_connections_dropped_total").items()}


def _wait(check: object, seconds: float = 15) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def _timed(call: object) -> float | None:
    start = time.perf_counter()
    try:
        ok = call().status_code == 200  # type: ignore[operator]
    except requests.RequestException:
        ok = False
    return time.perf_counter() - start if ok else None


def test_idle_connections_and_slow_readers_leave_the_probes_and_filter_answering(tmp_path: Path) -> None:
    args = [*DEADLINES, *CAPS]
    body = serving.fixture("extender/filter-names-plain.json")
    if NODES:
        args += ["--cluster", str(payloads.write_cluster(tmp_path / "cluster.json", NODES))]
        body = payloads.extender_args(body["Pod"], NODES, full=False)
    probe_port = serving.free_port()
    with serving.serve(tmp_path / "serve", "--probe-bind", f"127.0.0.1:{probe_port}", *args,
                       ready_timeout=120) as served:
        probe = f"http://127.0.0.1:{probe_port}"
        hostile = Hostile(served.port, served.ca, idle=IDLE, slow=SLOW).start()
        try:
            time.sleep(1)
            session = requests.Session()
            probes: list[float | None] = []
            direct: list[float | None] = []
            filters: list[float | None] = []
            end = time.monotonic() + SECONDS
            while time.monotonic() < end:
                probes.append(_timed(lambda: requests.get(probe + "/healthz", timeout=10)))
                filters.append(_timed(lambda: served.post("/filter", body, session=session)))
                direct.append(_timed(lambda: served.get("/healthz")))
                time.sleep(0.05)
            held = sorted(hostile.held)
        finally:
            hostile.stop()
        dropped = _dropped(probe)
        log = served.output()

    def summary(name: str, calls: list[float | None]) -> str:
        ok = [c for c in calls if c is not None]
        p99 = percentile(ok, 99) * 1000 if ok else float("nan")
        return f"{name} {len(ok)}/{len(calls)} ok, p99 {p99:.0f} ms"

    report = (f"held (idle, slow) median {held[len(held) // 2] if held else None}, opened {dict(hostile.opened)}; "
              f"{summary('probe /healthz', probes)}; {summary('/filter', filters)}; "
              f"{summary('8443 /healthz', direct)}; dropped {dropped}")
    print(report)
    assert len(probes) >= 10, report
    assert sum(c is not None for c in probes) >= 0.95 * len(probes), report
    assert sum(c is not None for c in filters) >= 0.95 * len(filters), report
    assert dropped.get("evicted-idle", 0) + dropped.get("evicted-idle-source", 0) > 0, report
    assert "Traceback" not in log, log[-3000:]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[serving.Served, str]]:
    probe_port = serving.free_port()
    with serving.serve(tmp_path_factory.mktemp("limits"), "--probe-bind", f"127.0.0.1:{probe_port}",
                       "--max-connections", "12", "--max-connections-per-source", "4", "--write-timeout", "3",
                       "--handshake-timeout", "30") as s:
        yield s, f"http://127.0.0.1:{probe_port}"


def test_the_probe_port_serves_the_probes_and_metrics_and_nothing_else(served: tuple[serving.Served, str]) -> None:
    _, probe = served
    for path in ("/healthz", "/readyz"):
        reply = requests.get(probe + path, timeout=10)
        assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/json", path
    assert "imex_webhook_requests_total" in requests.get(probe + "/metrics", timeout=10).text
    for method, path in (("GET", "/inspect"), ("POST", "/filter"), ("GET", "/ui"), ("POST", "/mutate")):
        reply = requests.request(method, probe + path, data=b"{}" if method == "POST" else None, timeout=10)
        assert reply.status_code == 404 and reply.json()["status"] == 404, (method, path)
    counted = _samples(requests.get(probe + "/metrics", timeout=10).text, "imex_webhook_requests_total")
    assert counted.get(("404", "inspect"), 0) >= 1 and counted.get(("404", "filter"), 0) >= 1


def _idle_from(source: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def test_past_a_cap_the_oldest_idle_connection_makes_room(served: tuple[serving.Served, str]) -> None:
    server, probe = served
    before = _dropped(probe)
    first: list[socket.socket] = []
    others: list[socket.socket] = []
    with raw_tls(server) as busy, contextlib.ExitStack() as held:  # a request whose body is arriving stays
        held.callback(lambda: [s.close() for s in first + others])
        busy.sendall(b"POST /bind HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")
        first += [_idle_from("127.0.0.2", server.port) for _ in range(4)]
        time.sleep(0.5)  # accepted in this order
        first.append(_idle_from("127.0.0.2", server.port))  # past 4 from one address: its oldest idle one goes
        assert _wait(lambda: _closed(first[0])), "the oldest idle connection of 127.0.0.2 is still open"
        assert not any(_closed(s) for s in first[1:])
        others += [_idle_from(f"127.0.0.{3 + i % 3}", server.port) for i in range(7)]  # 12, busy included
        time.sleep(0.5)
        others.append(_idle_from("127.0.0.6", server.port))  # past 12: the oldest idle one of all goes
        assert _wait(lambda: _closed(first[1]))
        assert not any(_closed(s) for s in first[2:] + others)
        busy.sendall(b"123456789")
        assert read_all(busy, until=b"}").startswith(b"HTTP/1.1 400")  # served: not evicted
    after = _dropped(probe)
    assert after.get("evicted-idle-source", 0) - before.get("evicted-idle-source", 0) >= 1
    assert after.get("evicted-idle", 0) - before.get("evicted-idle", 0) >= 1
    assert requests.get(probe + "/healthz", timeout=10).status_code == 200


def test_pipelined_requests_past_the_cap_close_the_connection(served: tuple[serving.Served, str]) -> None:
    server, probe = served
    before = _dropped(probe).get("pipelined", 0)
    with raw_tls(server) as tls:
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 12)
        data = read_all(tls)
    assert data.count(b"HTTP/1.1 200") == 8, data[:300]
    assert _wait(lambda: _dropped(probe).get("pipelined", 0) == before + 1)


def test_a_client_that_never_reads_is_dropped_at_the_write_deadline_with_one_line(
        served: tuple[serving.Served, str]) -> None:
    server, probe = served
    before = _dropped(probe).get("write-timeout", 0)
    # /filter in NodeList mode echoes the nodes: an answer of 6 MB, more than the socket buffers hold.
    body = json.dumps(payloads.extender_args(serving.fixture("extender/filter-names-plain.json")["Pod"], 1000,
                                             full=True)).encode()
    request = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    hostile = Hostile(server.port, server.ca, slow=1, sources=1, request=request, pipeline=1, tick=0.2).start()
    try:
        assert _wait(lambda: _dropped(probe).get("write-timeout", 0) > before, 20), server.output()[-2000:]
    finally:
        hostile.stop()
    log = server.output()
    assert "write-timeout" in log and "Traceback" not in log


@pytest.mark.parametrize(("head", "limit"), [
    (b"POST /bind HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n", 65536),
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 3145729\r\n\r\n", 3145728),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n", 65536),
    (b"POST /bind HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10001\r\n", 65536),
], ids=["bind", "mutate", "get-with-a-body", "bind-chunked"])
def test_each_route_refuses_a_body_over_its_own_limit_before_reading_it(
        served: tuple[serving.Served, str], head: bytes, limit: int) -> None:
    server, _ = served
    with raw_tls(server) as tls:
        tls.sendall(head)
        data = read_all(tls)
    assert data.startswith(b"HTTP/1.1 413") and b"application/json" in data.lower(), data[:300]
    assert str(limit).encode() in data
