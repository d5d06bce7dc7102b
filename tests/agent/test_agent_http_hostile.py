"""The agent's HTTP endpoints under hostile input, over a real socket to the real server (``ProbeServer``).

Fuzzed with hypothesis (a few hundred requests, derandomized, about ten seconds): methods of any token and
odd bytes, paths with traversal, escapes, NULs, absolute forms and huge lengths, junk headers and hostile
JSON bodies (deep nesting, 1e999, numbers of thousands of digits, invalid UTF-8). Whatever arrives, the
answer is JSON (the Prometheus text of ``/metrics`` excepted) and never a 5xx. Table-driven: requests the
HTTP server itself refuses before Flask sees them (garbage request lines, HTTP/0.9, a bad version, a
malformed absolute target, an overlong target, too many headers) get JSON errors too, with a status line.
Also: ``/gpus`` answers loopback clients only (403 to any other address, IPv4-mapped loopback accepted);
OPTIONS is refused like any other method; an idle connection is closed; concurrent hostile and legitimate
callers each get their own correct answer.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agent.conftest import scenario_path
from webhook.agent.loop import Agent
from webhook.agent.nvml import Nvml
from webhook.agent.server import ProbeServer, create_app, is_loopback
from webhook.agent.sysfs import Host
from webhook.sim import node_scenario as scenario
from webhook.sim.agents import MemoryNodeApi
from webhook.sim.host import SimHost
from webhook.sim.nvml import FakePynvml

IDLE_TIMEOUT_S = 1.0
FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self) -> object:
        return json.loads(self.body)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One simulated node and its agent's endpoints on a loopback port, for the whole module."""
    sim = scenario.load(scenario_path("nvl72-tray"))
    root = tmp_path_factory.mktemp("agent-http")
    kernel = SimHost(sim, root / "sys", root / "proc").start()
    nvml = Nvml(FakePynvml(sim))
    agent = Agent(nvml, Host(root / "sys", root / "proc", own_pid=-1), MemoryNodeApi({"metadata": {"name": "n1"}}, sim))
    agent.pass_once()
    server = ProbeServer(agent, "127.0.0.1:0", idle_timeout=IDLE_TIMEOUT_S).start()
    try:
        yield server.port
    finally:
        server.stop()
        kernel.close()
        nvml.shutdown()


def exchange(port: int, raw: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes and end our side, then read until the server closes (one request per connection).
    Ending our side lets the server see the end of a body it did not read, instead of waiting for more."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered a bad head and closed before reading the rest: read its answer
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass  # closed with our unread bytes in its buffer: what it sent first is still here
    return b"".join(chunks)


def parse(raw: bytes, method: bytes = b"GET") -> Answer:
    while raw.startswith(b"HTTP/1.1 100 "):  # the interim answer to `Expect: 100-continue`
        raw = raw.partition(b"\r\n\r\n")[2]
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, f"no complete HTTP response: {raw[:300]!r}"
    status_line, *lines = head.decode("latin-1").split("\r\n")
    version, status, *_ = status_line.split(" ")
    assert version.startswith("HTTP/1."), status_line
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    if "content-length" in headers and method != b"HEAD":
        assert len(body) == int(headers["content-length"])
    return Answer(int(status), headers, body)


def request(port: int, method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]] = (),
            body: bytes = b"") -> Answer:
    lines = [method + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1", *(k + b": " + v for k, v in headers)]
    if body:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return parse(exchange(port, b"\r\n".join(lines) + b"\r\n\r\n" + body), method)


def assert_json_or_metrics(answer: Answer, method: bytes) -> None:
    assert answer.status < 500, (answer.status, answer.body[:300])
    if answer.content_type.startswith("text/plain"):
        assert answer.status == 200 and (method == b"HEAD" or b"# HELP imex_agent" in answer.body)
        return
    assert answer.content_type == "application/json", (answer.status, answer.content_type, answer.body[:300])
    if method != b"HEAD":
        doc = answer.json()
        assert isinstance(doc, dict)
        if answer.status >= 400:
            assert isinstance(doc["error"], str) and doc["error"]


# Bytes a request line can carry without ending or splitting it (no whitespace, CR or LF).
_LINE_BYTES = st.binary(min_size=1, max_size=60).map(
    lambda b: bytes(c for c in b if c not in b" \t\r\n\x0b\x0c") or b"X")
_METHODS = st.one_of(
    st.sampled_from([b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"TRACE", b"CONNECT",
                     b"PROPFIND", b"get", b"G\xc9T"]),
    _LINE_BYTES)
_PATHS = st.one_of(
    st.sampled_from([b"/healthz", b"/readyz", b"/metrics", b"/gpus", b"/gpus/", b"/", b"*", b"/../../etc/passwd",
                     b"/%2e%2e/%2e%2e/", b"/gpus%00", b"/%ff%fe", b"/gpus?x=1&x=2", b"/\xff\xfe", b"//gpus",
                     b"http://127.0.0.1/gpus", b"http://[::1]:8081/readyz", b"localhost:8081", b"/" + b"a" * 8000,
                     b"/%" + b"25" * 3000, b"/gpus#frag", b"/readyz;x=y"]),
    _LINE_BYTES.map(lambda b: b"/" + b),
    st.text(max_size=80).map(lambda s: ("/" + s).encode("utf-8", "surrogatepass")
                             .replace(b" ", b"%20").replace(b"\r", b"").replace(b"\n", b"").replace(b"\t", b"")
                             .replace(b"\x0b", b"").replace(b"\x0c", b"")))
_HEADER_VALUES = st.one_of(
    st.sampled_from([b"", b"\xff\xfe", b"x" * 8000, b"-1", b"99999999999999999999999", b"100-continue", b"chunked",
                     b"application/json; charset=utf-7", b"() { :; }; echo"]),
    st.binary(max_size=100).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")))
_HEADERS = st.lists(st.tuples(st.sampled_from([b"X-Junk", b"Content-Type", b"Accept", b"Expect", b"Cookie",
                                               b"X-Forwarded-For", b"Authorization", b"Range"]),
                              _HEADER_VALUES), max_size=4)
_BODIES = st.one_of(
    st.just(b""),
    st.sampled_from([b"[" * 5000 + b"]" * 5000, b'{"a":' * 3000 + b"1" + b"}" * 3000, b"1e999", b"NaN",
                     b"9" * 5000, b'{"gpus": "' + b"\xff" * 100 + b'"}', b"\x00" * 100, b'"\\ud800"']),
    st.binary(max_size=300),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                 lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                                  max_size=4),
                 max_leaves=20).map(lambda v: json.dumps(v).encode()))


@FUZZ
@given(method=_METHODS, target=_PATHS, headers=_HEADERS, body=_BODIES)
def test_whatever_a_client_sends_the_answer_is_json_and_never_a_server_error(
        served: int, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    assert_json_or_metrics(request(served, method, target, headers, body), method)


@pytest.mark.parametrize(("raw", "status", "names"), [
    (b"GARBAGE\r\n\r\n", 400, "Bad request syntax"),
    (b"GET /x y z HTTP/1.1\r\n\r\n", 400, "Bad request"),
    (b"GET /healthz\r\n\r\n", 400, "HTTP/0.9 is not served"),
    (b"GET /healthz HTTP/9.9\r\n\r\n", 505, "Invalid HTTP version"),
    (b"GET /healthz HTTP/one\r\n\r\n", 400, "Bad request version"),
    (b"GET http://[::1/healthz HTTP/1.1\r\n\r\n", 400, "malformed request target: Invalid IPv6 URL"),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414, "Request-URI Too Long"),
    (b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 120 + b"\r\n", 431, "Too many headers"),
    (b"GET /healthz HTTP/1.1\r\nX: " + b"y" * 70000 + b"\r\n\r\n", 431, "Line too long"),
])
def test_requests_the_http_server_refuses_get_a_json_error_with_a_status_line(served: int, raw: bytes, status: int,
                                                                             names: str) -> None:
    answer = parse(exchange(served, raw))

    assert answer.status == status
    assert answer.content_type == "application/json"
    doc = answer.json()
    assert isinstance(doc, dict) and names in doc["error"] and doc["status"] == status


@pytest.mark.parametrize("method", [b"POST", b"PUT", b"DELETE", b"OPTIONS", b"TRACE"])
def test_a_wrong_method_is_a_json_405_that_names_it_and_allows_get(served: int, method: bytes) -> None:
    answer = request(served, method, b"/gpus", body=b'{"x": 1}' if method != b"OPTIONS" else b"")

    assert answer.status == 405 and sorted(answer.headers["allow"].split(", ")) == ["GET", "HEAD"]
    assert answer.json() == {"error": f"method {method.decode()!r} is not allowed on '/gpus'; use GET", "status": 405}


def test_an_unknown_path_is_a_json_404_listing_the_endpoints(served: int) -> None:
    answer = request(served, b"GET", b"/secrets")

    assert answer.status == 404
    assert answer.json() == {"error": "no endpoint '/secrets'; the agent serves /healthz, /readyz, /metrics, /gpus",
                             "status": 404}


def test_a_huge_path_is_echoed_shortened(served: int) -> None:
    answer = request(served, b"GET", b"/" + b"b" * 5000)

    error = answer.json()["error"]  # type: ignore[index]
    assert answer.status == 404 and len(error) < 300 and "bbb..." in error


@pytest.mark.parametrize(("address", "local"), [
    ("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("10.244.1.7", False), ("192.168.0.1", False), ("fd00::1", False), ("::ffff:10.0.0.1", False),
    ("0.0.0.0", False), ("", False), (None, False), ("localhost", False), ("127.0.0.1.evil", False),
    ("fe80::1%eth0", False), ("::1%lo", True),
])
def test_only_loopback_addresses_count_as_the_node(address: str | None, local: bool) -> None:
    assert is_loopback(address) is local


def _agent(tmp_path: Path) -> tuple[Agent, SimHost, Nvml]:
    sim = scenario.load(scenario_path("nvl72-tray"))
    kernel = SimHost(sim, tmp_path / "sys", tmp_path / "proc").start()
    nvml = Nvml(FakePynvml(sim))
    agent = Agent(nvml, Host(tmp_path / "sys", tmp_path / "proc", own_pid=-1),
                  MemoryNodeApi({"metadata": {"name": "n1"}}, sim))
    agent.pass_once()
    return agent, kernel, nvml


@pytest.mark.parametrize("remote", ["10.244.3.9", "192.168.1.20", "fd00::17", "::ffff:10.0.0.1"])
def test_gpus_refuses_every_client_that_is_not_on_the_node(tmp_path: Path, remote: str) -> None:
    agent, kernel, nvml = _agent(tmp_path)
    try:
        client = create_app(agent).test_client()
        refused = client.get("/gpus", environ_base={"REMOTE_ADDR": remote})
        probes = [client.get(p, environ_base={"REMOTE_ADDR": remote}).status_code for p in ("/healthz", "/readyz")]
    finally:
        kernel.close()
        nvml.shutdown()

    assert refused.status_code == 403 and "pid" not in refused.get_data(as_text=True)
    assert "answers only on the node" in refused.get_json()["error"]
    assert probes == [200, 200]  # the kubelet's probes come from the node's address, not loopback


def test_gpus_answers_a_loopback_client_with_the_processes(served: int) -> None:
    answer = request(served, b"GET", b"/gpus")

    assert answer.status == 200
    doc = answer.json()
    assert isinstance(doc, dict) and doc["node"] == "n1" and len(doc["gpus"]) == 4
    assert all("processes" in gpu for gpu in doc["gpus"])


def test_an_idle_connection_is_closed_after_the_idle_timeout(served: int) -> None:
    with socket.create_connection(("127.0.0.1", served), timeout=IDLE_TIMEOUT_S * 10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # and then nothing: no end of headers
        assert sock.recv(100) == b""  # closed by the server, well before our own timeout


def test_concurrent_hostile_and_legitimate_callers_each_get_their_own_answer(served: int) -> None:
    raws = {
        "ready": b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n",
        "gpus": b"GET /gpus HTTP/1.1\r\nHost: x\r\n\r\n",
        "garbage": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        "deep": b"POST /readyz HTTP/1.1\r\nContent-Length: 20000\r\n\r\n" + b"[" * 10000 + b"]" * 10000,
        "missing": b"GET /nope HTTP/1.1\r\n\r\n",
    }
    expected = {"ready": 200, "gpus": 200, "garbage": 400, "deep": 405, "missing": 404}
    results: dict[str, list[int]] = {name: [] for name in raws}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def caller(name: str) -> None:
        try:
            for _ in range(5):
                answer = parse(exchange(served, raws[name]))
                assert answer.content_type == "application/json"
                with lock:
                    results[name].append(answer.status)
        except BaseException as exc:  # reported below, with the thread's name
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(name,)) for name in raws for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert not errors, errors
    assert results == {name: [status] * 15 for name, status in expected.items()}
