"""The agent's HTTP server keeps a fixed number of threads whatever its clients do (``ProbeServer``, over real
loopback sockets): hundreds of connections that send nothing, trickle a request head, or send a head and
never the body they announce leave the thread count at most the pool's size, and a probe arriving behind
them is answered at once. Past ``max_connections`` the client that connected first and still sent no request
is closed to make room; when every connection is being served, a newcomer gets a JSON 503. The test waits
for events (an answer, a closed socket, the server's own connection count), never for a guessed time."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import Make
from webhook.agent import server as agent_server
from webhook.agent.loop import Agent
from webhook.agent.server import ProbeServer
from webhook.sim.agents import MemoryNodeApi

PATIENCE_S = 60.0  # a safety net only: every wait below ends on an event


def _agent(simulate: Make) -> Agent:
    node = simulate("nvl72-tray")
    agent = Agent(node.nvml, node.host, MemoryNodeApi({"metadata": {"name": "n1"}}, node.sim))
    agent.pass_once()
    return agent


@contextmanager
def _serving(agent: Any, **limits: Any) -> Iterator[ProbeServer]:
    server = ProbeServer(agent, "127.0.0.1:0", **limits).start()
    try:
        yield server
    finally:
        server.stop()


def _get(port: int, path: str = "/readyz") -> tuple[int, dict[str, Any]]:
    """One request on a new connection; the status and the JSON body."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        raw = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"still not {what}"
        time.sleep(0.01)


def _server_threads() -> int:
    return sum(t.name.startswith("agent-http") for t in threading.enumerate())


class _PeakThreads:
    """The most threads, of this process and of the agent's server, while the block ran, sampled from
    another thread (which is not counted)."""

    def __init__(self) -> None:
        self.peak = self.before = threading.active_count()
        self.server_peak = _server_threads()
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.002):
            self.peak = max(self.peak, threading.active_count() - 1)
            self.server_peak = max(self.server_peak, _server_threads())

    def __enter__(self) -> _PeakThreads:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._sampler.join()


SLOW_CLIENTS = [
    ("idle", b""),  # connects and sends nothing
    ("trickling", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"),  # a head that never ends
    ("no-body", b"POST /readyz HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n{"),  # announces a body, sends one byte
]


def test_three_hundred_idle_and_slow_connections_keep_the_threads_bounded_and_a_probe_is_still_answered(
        simulate: Make) -> None:
    with _serving(_agent(simulate)) as server, ExitStack() as clients:
        with _PeakThreads() as threads:
            for i in range(300):
                sock = clients.enter_context(socket.create_connection(("127.0.0.1", server.port), timeout=5))
                sock.sendall(SLOW_CLIENTS[i % len(SLOW_CLIENTS)][1])
            # Accepted in order: once this probe is answered, the server has taken all 300 before it.
            status, body = _get(server.port)
            waiting, served = server.connections

        assert status == 200 and body["ready"] is True
        assert threads.server_peak <= 1 + agent_server.MAX_THREADS  # its loop and its pool, nothing per connection
        # The whole process too (before the limit: one more thread per connection, 300 here); other tests'
        # threads may still be winding down, hence some room.
        assert threads.peak <= threads.before + agent_server.MAX_THREADS + 8, (threads.before, threads.peak)
        assert waiting + served <= agent_server.MAX_CONNECTIONS
        assert waiting >= 2 * 300 // 3 - (300 - agent_server.MAX_CONNECTIONS)  # idle and trickling: no thread


def test_past_the_connection_limit_the_oldest_silent_client_makes_room_for_a_probe(simulate: Make) -> None:
    with _serving(_agent(simulate), max_connections=5) as server, ExitStack() as clients:
        silent = [clients.enter_context(socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE_S))
                  for _ in range(5)]
        _until(lambda: server.connections == (5, 0), "holding the five silent connections")

        assert _get(server.port)[0] == 200
        assert silent[0].recv(1) == b""  # the first to connect was closed for the probe
        assert server.connections == (4, 0)


class _StuckAgent:
    """Stands in for the agent: ``/readyz`` blocks until released, so requests hold their threads."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def ready(self) -> tuple[bool, str]:
        self.entered.release()
        self.release.wait(PATIENCE_S)
        return True, "released"


def test_when_every_connection_is_being_served_a_newcomer_gets_a_json_503(tmp_path: Path) -> None:
    stuck = _StuckAgent()
    answers: list[tuple[int, dict[str, Any]]] = []
    with _serving(stuck, max_threads=1, max_connections=2) as server:
        callers = [threading.Thread(target=lambda: answers.append(_get(server.port))) for _ in range(2)]
        for caller in callers:
            caller.start()
        assert stuck.entered.acquire(timeout=PATIENCE_S)  # one in the only thread
        _until(lambda: server.connections == (0, 2), "serving both")  # the other queued for it

        status, body = _get(server.port)
        stuck.release.set()
        for caller in callers:
            caller.join(PATIENCE_S)

    assert status == 503 and body == {"error": "the agent is serving as many connections as it takes; retry",
                                      "status": 503}
    assert sorted(s for s, _ in answers) == [200, 200]


def test_the_default_limits_are_sane() -> None:
    assert 8 <= agent_server.MAX_THREADS <= 64
    assert agent_server.MAX_THREADS < agent_server.MAX_CONNECTIONS <= 1024
    assert 0 < agent_server.REQUEST_TIMEOUT_S <= agent_server.IDLE_TIMEOUT_S <= 60


@pytest.mark.parametrize("taken", [b"", b"GET /healthz HTTP/1.1\r\n"])
def test_a_connection_that_does_not_finish_its_head_is_closed_after_the_idle_timeout(
        simulate: Make, taken: bytes) -> None:
    with _serving(_agent(simulate), idle_timeout=0.2) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE_S) as sock:
        sock.sendall(taken)
        assert sock.recv(100) == b""
        _until(lambda: server.connections == (0, 0), "forgotten")
