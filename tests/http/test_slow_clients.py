"""Slow and idle clients cannot starve the service: 200 connections that never start TLS, stall in the
handshake, trickle the request head or trickle the body are held open (and reopened whenever the server
drops them) while a well-behaved client calls /healthz on fresh connections, as the kubelet probes, and
/filter on a kept-alive connection, as kube-scheduler does. Its p99 must stay under 1 s.

How long the 200 are held: ``IMEX_SLOW_CLIENT_SECONDS`` (default 12 s, for CI; the issue's figure is 60 s).
The server runs with short deadlines here so that every kind of slow connection is dropped and reopened
several times within the run; the deadlines' own tests check each one closes its connection.

Reading whole requests in the poller must not change what a correct client sees: pipelined requests,
a request sent a byte at a time, chunked bodies and ``Expect: 100-continue`` are served as before; an
oversized body or head, a broken chunked body and a stalled body are answered in JSON and closed.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests import serving
from webhook.tools.stats import percentile

HOLD_SECONDS = float(os.environ.get("IMEX_SLOW_CLIENT_SECONDS", "12"))
SLOW_CONNECTIONS = 200
KINDS = ("tcp-idle", "handshake", "head", "body")
DEADLINES = ("--handshake-timeout", "2", "--header-timeout", "2", "--body-timeout", "3")


def _client_hello(host: str) -> bytes:
    """The first flight of a real TLS client, so a stalled handshake looks like a real one to the server."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context.wrap_bio(incoming, outgoing, server_hostname=host)
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


@dataclass
class Slow:
    kind: str
    sock: socket.socket
    pending: bytes  # what is still to be trickled, one byte per tick


@dataclass
class SlowClients:
    """Holds ``count`` slow connections of the four kinds, one byte per second each, reopening any the server
    closes; ``dropped`` counts the closes per kind (the server's deadlines at work)."""

    host: str
    port: int
    ca: Path
    count: int = SLOW_CONNECTIONS
    tick: float = 1.0
    dropped: Counter[str] = field(default_factory=Counter)
    held: list[int] = field(default_factory=list)
    _conns: list[Slow] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.context = ssl.create_default_context(cafile=str(self.ca))
        self.hello = _client_hello("localhost")
        self.pool = ThreadPoolExecutor(16)

    def open(self, kind: str) -> None:
        if self._stop.is_set():
            return
        try:
            raw = socket.create_connection((self.host, self.port), timeout=10)
        except OSError:
            self.pool.submit(self._later, kind)
            return
        sock: socket.socket = raw
        pending = b""
        try:
            if kind == "handshake":
                raw.sendall(self.hello[:8])
                pending = self.hello[8:]
            elif kind in ("head", "body"):
                sock = self.context.wrap_socket(raw, server_hostname="localhost")
                head = b"POST /filter HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                if kind == "head":
                    sock.sendall(head[:20])
                    pending = head[20:] + b"X-Slow: " + b"x" * 4096
                else:
                    sock.sendall(head + b"Content-Length: 100000\r\n\r\n{")
                    pending = b" " * 100000
        except OSError:
            raw.close()
            self.dropped[kind] += 1
            self.pool.submit(self._later, kind)
            return
        with self._lock:
            self._conns.append(Slow(kind, sock, pending))

    def _later(self, kind: str) -> None:
        time.sleep(0.2)
        self.open(kind)

    def start(self) -> None:
        for i in range(self.count):
            self.pool.submit(self.open, KINDS[i % len(KINDS)])
        threading.Thread(target=self._trickle, name="slow-clients", daemon=True).start()

    def _trickle(self) -> None:
        while not self._stop.wait(self.tick):
            with self._lock:
                conns = list(self._conns)
            self.held.append(len(conns))
            for conn in conns:
                if self._closed_by_server(conn) or not self._send_one(conn):
                    with self._lock:
                        self._conns.remove(conn)
                    conn.sock.close()
                    self.dropped[conn.kind] += 1
                    self.pool.submit(self.open, conn.kind)

    @staticmethod
    def _closed_by_server(conn: Slow) -> bool:
        with selectors.DefaultSelector() as sel:
            sel.register(conn.sock, selectors.EVENT_READ)
            if not sel.select(0):
                return False
        try:
            conn.sock.setblocking(False)
            data = conn.sock.recv(4096)
        except (ssl.SSLWantReadError, BlockingIOError):
            return False
        except OSError:
            return True
        finally:
            with contextlib.suppress(OSError):
                conn.sock.settimeout(5)
        return not data or data.startswith(b"HTTP/1.1 4")  # closed, or answered with an error

    @staticmethod
    def _send_one(conn: Slow) -> bool:
        if conn.kind == "tcp-idle":
            return True
        if not conn.pending:
            return True  # the whole thing was sent: it waits for the server now
        try:
            conn.sock.sendall(conn.pending[:1])
        except OSError:
            return False
        conn.pending = conn.pending[1:]
        return True

    def stop(self) -> None:
        self._stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for conn in self._conns:
                conn.sock.close()
            self._conns.clear()


@contextlib.contextmanager
def slow_clients(served: serving.Served) -> Iterator[SlowClients]:
    clients = SlowClients("127.0.0.1", served.port, served.ca)
    clients.start()
    try:
        yield clients
    finally:
        clients.stop()


def _timed(call: object) -> float:
    start = time.perf_counter()
    try:
        reply = call()  # type: ignore[operator]
        ok = reply.status_code == 200
    except requests.RequestException:
        ok = False
    elapsed = time.perf_counter() - start
    return elapsed if ok else max(elapsed, 10.0)  # a failed call counts as a 10 s one


def test_two_hundred_slow_or_idle_connections_leave_a_well_behaved_client_under_one_second_p99(
        tmp_path: Path) -> None:
    body = serving.fixture("extender/filter-names-plain.json")
    with serving.serve(tmp_path, *DEADLINES) as served, slow_clients(served) as slow:
        time.sleep(2)  # let the 200 connect first
        session = requests.Session()
        healthz: list[float] = []
        filters: list[float] = []
        end = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < end:
            healthz.append(_timed(lambda: requests.get(served.url + "/healthz", verify=str(served.ca), timeout=10)))
            filters.append(_timed(lambda: served.post("/filter", body, session=session)))
            time.sleep(0.02)
        held = sorted(slow.held)
    report = (f"held {held[len(held) // 2] if held else 0} slow connections (median), dropped by the server "
              f"{dict(slow.dropped)}; /healthz p99 {percentile(healthz, 99) * 1000:.0f} ms over {len(healthz)}, "
              f"/filter p99 {percentile(filters, 99) * 1000:.0f} ms over {len(filters)}")
    print(report)
    assert len(healthz) >= 100 and len(filters) >= 100, report
    assert held and held[len(held) // 2] >= SLOW_CONNECTIONS * 0.9, report
    assert percentile(healthz, 99) < 1.0, report
    assert percentile(filters, 99) < 1.0, report
    if HOLD_SECONDS >= 8:
        # Every kind outlived its deadline (3 s at most here) and was dropped by the server, then reopened.
        assert all(slow.dropped[kind] > 0 for kind in KINDS), report


@pytest.mark.parametrize("kind", KINDS)
def test_the_server_drops_each_kind_of_slow_connection_at_its_deadline(kind: str, tmp_path: Path) -> None:
    with serving.serve(tmp_path, *DEADLINES) as served:
        clients = SlowClients("127.0.0.1", served.port, served.ca, count=0)
        clients.open(kind)
        (conn,) = clients._conns
        start = time.monotonic()
        try:
            while time.monotonic() - start < 15:
                if SlowClients._closed_by_server(conn) or not SlowClients._send_one(conn):
                    break
                time.sleep(0.5)
            lasted = time.monotonic() - start
        finally:
            clients.stop()
        # The shortest deadline here is 2 s and the longest 3 s; the poller checks them once a second.
        assert lasted < 6, f"{kind}: still open after {lasted:.1f}s"


# -- what a correct client sees when requests are read whole by the poller ---------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    """A server with a 4 KiB body limit and the short deadlines above."""
    with serving.serve(tmp_path_factory.mktemp("small"), "--max-body", "4096", *DEADLINES) as served:
        yield served


@contextlib.contextmanager
def raw_tls(served: serving.Served) -> Iterator[ssl.SSLSocket]:
    context = ssl.create_default_context(cafile=str(served.ca))
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        yield tls


def read_all(sock: ssl.SSLSocket, until: bytes | None = None, limit: float = 10) -> bytes:
    """Everything until the server closes (or ``until`` has arrived)."""
    data = b""
    end = time.monotonic() + limit
    while time.monotonic() < end and (until is None or until not in data):
        try:
            chunk = sock.recv(65536)
        except (ssl.SSLError, OSError):
            break
        if not chunk:
            break
        data += chunk
    return data


def request(path: str, body: bytes = b"", extra: str = "") -> bytes:
    method = "POST" if body else "GET"
    head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{extra}"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def test_pipelined_requests_are_answered_in_order(small: serving.Served) -> None:
    with raw_tls(small) as tls:
        tls.sendall(request("/healthz") + request("/readyz") + request("/healthz", extra="Connection: close\r\n"))
        data = read_all(tls)
    assert data.count(b"HTTP/1.1 200") == 3, data[:500]
    assert data.index(b'"status":"ok"') < data.index(b'"ready"') < data.rindex(b'"status":"ok"')


def test_a_request_sent_a_byte_at_a_time_within_the_deadline_is_served(small: serving.Served) -> None:
    body = json.dumps({"x": 1}).encode()
    payload = request("/nowhere", body, "Connection: close\r\n")
    with raw_tls(small) as tls:
        for i in range(len(payload)):
            tls.sendall(payload[i:i + 1])
        data = read_all(tls)
    assert data.startswith(b"HTTP/1.1 404") and b'"error"' in data  # the app saw the whole request


def test_a_chunked_body_is_read_to_its_end_and_served(small: serving.Served) -> None:
    body = json.dumps(serving.fixture("admission/create-plain-pod.json")).encode()
    if len(body) > 4000:
        pytest.skip("fixture larger than this server's body limit")
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 100]), body[i:i + 100]) for i in range(0, len(body), 100))
    head = (b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    with raw_tls(small) as tls:
        tls.sendall(head + chunks + b"0\r\n\r\n")
        data = read_all(tls)
    assert data.startswith(b"HTTP/1.1 200"), data[:300]
    assert b'"response"' in data


def test_expect_100_continue_gets_its_interim_answer_before_the_body_is_sent(small: serving.Served) -> None:
    body = b'{"x": 1}'
    with raw_tls(small) as tls:
        tls.sendall(request("/nowhere", body, "Expect: 100-continue\r\nConnection: close\r\n")[:-len(body)])
        interim = read_all(tls, until=b"\r\n\r\n", limit=5)
        assert interim.startswith(b"HTTP/1.1 100"), interim
        tls.sendall(body)
        data = read_all(tls)
    assert b"HTTP/1.1 404" in data


@pytest.mark.parametrize(("payload", "status", "words"), [
    (b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n", 413, b"larger than the limit of 4096"),
    (b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", 413, b"larger than"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000, 431, b"request head larger than"),
    (b"GET /inspect?" + b"q" * 6000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, b"request line longer than"),
    (b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, b"bad chunk size"),
    (b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1001\r\n", 413, b"larger than the limit"),
    (b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", 400,
     b"ambiguous"),
    (b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", 400,
     b"one decimal number"),
    (b"POST /filter HTTP/1.1\r\nHost: x\r\n folded: value\r\n\r\n", 400, b"malformed header line"),
    (b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{", 408, b"request body not received in time"),
], ids=["body-over-limit", "absurd-length", "head-over-64k", "uri-over-4k", "bad-chunk", "chunk-over-limit",
        "te-and-cl", "two-lengths", "obsolete-folding", "stalled-body"])
def test_requests_that_cannot_be_served_get_a_json_error_and_the_connection_closes(
        small: serving.Served, payload: bytes, status: int, words: bytes) -> None:
    with raw_tls(small) as tls:
        tls.sendall(payload)
        data = read_all(tls)
    assert data.startswith(f"HTTP/1.1 {status}".encode()), data[:300]
    assert b"application/json" in data.split(b"\r\n\r\n")[0].lower()
    assert words in data
    assert small.get("/healthz").status_code == 200


def test_past_the_buffer_budget_bodies_wait_for_room_and_are_served_when_it_frees(tmp_path: Path) -> None:
    # Budget 8 KiB: three stalled 3,000-byte bodies fill it, so the rest of a correct client's body is not
    # read until the stalled ones miss their deadline (3 s) and are dropped with a 408; then it is served.
    # Requests without a body are not held up meanwhile.
    with serving.serve(tmp_path, "--max-body", "4096", "--max-buffered", "8192", *DEADLINES) as served:
        stalled = []
        for _ in range(3):
            tls = ssl.create_default_context(cafile=str(served.ca)).wrap_socket(
                socket.create_connection(("127.0.0.1", served.port), timeout=10), server_hostname="localhost")
            tls.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n" + b" " * 3000)
            stalled.append(tls)
        try:
            time.sleep(1)  # the correct client's own 3 s body deadline ends well after theirs
            body = b"[" + b"0," * 1499 + b"0]"
            payload = request("/nowhere", body, "Connection: close\r\n")
            with raw_tls(served) as good:
                good.sendall(payload[:-2000])
                time.sleep(0.3)
                good.sendall(payload[-2000:])
                assert served.get("/healthz").status_code == 200  # no body: never waits
                answer = read_all(good, limit=20)
                assert answer.startswith(b"HTTP/1.1 404"), answer[:200]  # the app read the whole body
            for tls in stalled:
                # Already there when the correct client got its answer: the 408s freed the room it waited for.
                tls.settimeout(0.5)
                assert read_all(tls, until=b"\r\n\r\n", limit=1).startswith(b"HTTP/1.1 408")
        finally:
            for tls in stalled:
                tls.close()
