"""Hostile clients for the connection-limit tests: idle TCP connections that never start TLS, and slow
readers that pipeline requests and never read the answers. Each is held open from its own loopback
source address (127.0.0.2 and up, so that the per-source caps apply to them, not to the well-behaved
client on 127.0.0.1) and reopened whenever the server drops it, as a persistent attacker would."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8  # Linux's tcp_states.h


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed it, from the kernel's TCP state: a slow reader never reads its answers, so
    a pending end of stream would stay behind them."""
    try:
        state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
    except OSError:
        return True
    return state in (TCP_CLOSE, TCP_CLOSE_WAIT)


@dataclass
class Hostile:
    """``idle`` idle TCP connections spread over ``sources`` addresses, and ``slow`` TLS connections that
    each pipeline ``pipeline`` requests for ``path`` and never read (from one more address)."""

    port: int
    ca: Path
    idle: int = 0
    slow: int = 0
    sources: int = 5
    path: str = "/inspect"
    pipeline: int = 20
    request: bytes = b""  # sent ``pipeline`` times instead of GET ``path``
    tick: float = 0.5
    opened: Counter[str] = field(default_factory=Counter)
    held: list[tuple[int, int]] = field(default_factory=list)  # (idle, slow) held at each tick
    _idle: list[socket.socket] = field(default_factory=list)
    _slow: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.context = ssl.create_default_context(cafile=str(self.ca))
        self._thread = threading.Thread(target=self._hold, name="hostile", daemon=True)

    def _connect(self, source: str) -> socket.socket | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that takes little at a time
        try:
            sock.bind((source, 0))
            sock.settimeout(5)
            sock.connect(("127.0.0.1", self.port))
        except OSError:
            sock.close()
            return None
        return sock

    def _open_idle(self, i: int) -> None:
        sock = self._connect(f"127.0.0.{2 + i % self.sources}")
        if sock is not None:
            self._idle.append(sock)
            self.opened["idle"] += 1

    def _open_slow(self) -> None:
        raw = self._connect(f"127.0.0.{2 + self.sources}")
        if raw is None:
            return
        try:
            tls = self.context.wrap_socket(raw, server_hostname="localhost")
            request = self.request or f"GET {self.path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
            tls.sendall(request * self.pipeline)
        except OSError:
            raw.close()
            return
        self._slow.append(tls)
        self.opened["slow"] += 1

    def start(self) -> Hostile:
        for i in range(self.idle):
            self._open_idle(i)
        for _ in range(self.slow):
            self._open_slow()
        self._thread.start()
        return self

    def _hold(self) -> None:
        while not self._stop.wait(self.tick):
            for group in (self._idle, self._slow):
                for sock in [s for s in group if _closed(s)]:
                    group.remove(sock)
                    sock.close()
            self.held.append((len(self._idle), len(self._slow)))
            for i in range(self.idle - len(self._idle)):
                if self._stop.is_set():
                    return
                self._open_idle(i)
            for _ in range(self.slow - len(self._slow)):
                self._open_slow()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for sock in self._idle + self._slow:
            with contextlib.suppress(OSError):
                sock.close()
