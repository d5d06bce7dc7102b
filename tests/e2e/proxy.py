"""A TCP load balancer on loopback, as a Service's virtual IP is to the scheduler and the API server.

New connections go round-robin to the upstreams that are marked up; ``drop_connections`` closes the ones
open now, so the callers' next requests reconnect (kube-proxy balances connections, not requests, and a
kept-alive connection stays with one replica until it closes).
"""

from __future__ import annotations

import itertools
import socket
import threading
from contextlib import suppress


class RoundRobinProxy:
    def __init__(self, upstreams: list[int]) -> None:
        self.upstreams = list(upstreams)
        self.up = set(upstreams)
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.connections: dict[int, int] = dict.fromkeys(upstreams, 0)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def _pick(self) -> int | None:
        with self._lock:
            live = [p for p in self.upstreams if p in self.up]
            if not live:
                return None
            port = live[next(self._turn) % len(live)]
            self.connections[port] += 1
            return port

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            port = self._pick()
            if port is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True, name="proxy-pump").start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._open.difference_update((source, sink))

    def add(self, port: int) -> None:
        with self._lock:
            if port not in self.upstreams:
                self.upstreams.append(port)
                self.connections[port] = 0
            self.up.add(port)

    def remove(self, port: int) -> None:
        with self._lock:
            self.up.discard(port)

    def drop_connections(self) -> None:
        with self._lock:
            sockets = list(self._open)
        for s in sockets:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()
        self.drop_connections()
