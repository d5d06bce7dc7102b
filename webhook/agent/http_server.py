"""The agent's HTTP server: plain HTTP with a fixed number of threads, whatever its clients do.

Bounded: one loop accepts connections and reads their request heads without blocking, so a connection
takes no thread until its whole head has arrived; at most ``max_threads`` (32) requests are then handled at
once, by a fixed pool, the others queued for a thread. One request per connection (HTTP/1.0 answers, closed
after), so no kept-alive client holds a thread between requests. A connection that has not sent its head
``idle_timeout`` (30 s) after it connected is closed; one not answered ``request_timeout`` (10 s) after its
head arrived is cut off, so a client that stalls its body or does not read the answer frees its thread. At
most ``max_connections`` (256) are open: past it the oldest connection still sending its head is closed to
make room, or, when every one is being served, the newcomer gets a short JSON 503 and is closed. So a probe
still gets its answer at once while hundreds of idle or slow clients are connected, and the process keeps a
fixed number of threads.
"""

from __future__ import annotations

import io
import json
import logging
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from flask import Flask
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, get_sockaddr, select_address_family

log = logging.getLogger(__name__)

# A connection that has not sent its request head this long after it connected is closed (also the longest
# wait for one read of a body).
IDLE_TIMEOUT_S = 30.0
# From a complete request head to the end of its answer; a client slower than that is cut off.
REQUEST_TIMEOUT_S = 10.0
MAX_THREADS = 32  # requests handled at once; the process keeps no more threads than this for HTTP
MAX_CONNECTIONS = 256  # open connections, waiting for their first bytes or served
_LISTEN_BACKLOG = 128
# Request heads are read by the serving loop up to this; past it the handler answers 414 or 431.
_HEAD_LIMIT = 66 * 1024
_BUSY_BODY = json.dumps({"error": "the agent is serving as many connections as it takes; retry", "status": 503})
BUSY_ANSWER = (f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
               f"{len(_BUSY_BODY)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n{_BUSY_BODY}").encode()


class _JsonErrorsHandler(WSGIRequestHandler):
    """werkzeug's request handler with the HTTP server's own errors in JSON instead of an HTML page."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        if self.request_version == "HTTP/0.9":
            # Also what http.server assumes before it has read a version: answer with a status line anyway.
            self.request_version = "HTTP/1.0"
        short = self.responses.get(code, ("Error", ""))[0]
        body = json.dumps({"error": message or short, "status": code}).encode()
        self.log_error("code %d, message %s", code, message or short)
        self.send_response(code, short)
        self.send_header("Connection", "close")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            super().log_request(code, size)
        except ValueError:  # werkzeug parses the path to log it; log a malformed one as it came
            self.log("info", '"%s" %s %s', self.requestline.encode("unicode_escape").decode(), code, size)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":
            self.send_error(400, "HTTP/0.9 is not served: send HTTP/1.0 or HTTP/1.1")
            return False
        try:
            urlsplit(self.path)  # werkzeug would fail on it (a bad IPv6 host) and answer nothing at all
        except ValueError as exc:
            self.send_error(400, f"malformed request target: {exc}")
            return False
        return True


class _Replay(io.RawIOBase):
    """A connection's bytes as its request handler reads them: first those the serving loop already took
    (the request head, perhaps some body), then the socket's."""

    def __init__(self, taken: bytes, sock: socket.socket) -> None:
        super().__init__()
        self._taken = memoryview(taken)
        self._rest = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        if self._taken:
            n = min(len(buffer), len(self._taken))
            buffer[:n] = self._taken[:n]
            self._taken = self._taken[n:]
            return n
        return self._rest.readinto(buffer)

    def close(self) -> None:
        self._rest.close()
        super().close()


def handler_class(idle_timeout: float) -> type[WSGIRequestHandler]:
    class Handler(_JsonErrorsHandler):
        timeout = idle_timeout  # each read of a body waits this long at most
        protocol_version = "HTTP/1.0"  # one request per connection: no kept-alive client holds a thread
        server: BoundedServer

        def setup(self) -> None:
            super().setup()
            plain, self.rfile = self.rfile, io.BufferedReader(_Replay(self.server.taken(self.request), self.request))
            plain.close()  # or the socket's descriptor would stay open until the garbage collector ran

    return Handler


def listening_socket(host: str, port: int, backlog: int = _LISTEN_BACKLOG) -> socket.socket:
    """A socket bound and listening on ``host:port`` (port 0: any free one); raises ``OSError`` (the port in
    use, an address that is not this machine's, a name that does not resolve), where werkzeug would print
    and exit. The fabric simulator listens the same way."""
    family = select_address_family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(get_sockaddr(host, port, family))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class _Waiting:
    address: Any
    close_at: float
    head: bytearray = field(default_factory=bytearray)


class BoundedServer(BaseWSGIServer):
    """werkzeug's single-threaded WSGI server, turned into a bounded one: one loop accepts connections and
    reads their request heads without blocking; a fixed pool of threads serves the complete ones; the loop
    closes connections past their deadlines (see the module's docstring)."""

    multithread = True

    def __init__(self, sock: socket.socket, app: Flask, handler: type[WSGIRequestHandler], *,
                 max_threads: int, max_connections: int, idle_timeout: float, request_timeout: float) -> None:
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self._pool = ThreadPoolExecutor(max_threads, thread_name_prefix="agent-http")
        self._lock = threading.Lock()
        self._waiting: dict[socket.socket, _Waiting] = {}  # head not complete yet; oldest first
        self._served: dict[socket.socket, float] = {}  # queued or in a thread -> cut off at
        self._taken: dict[socket.socket, bytes] = {}  # what the loop read, for the handler to read first
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._made = False  # werkzeug calls server_close() in __init__, for a socket it does not use
        host, port = sock.getsockname()[:2]
        super().__init__(host, port, app, handler, fd=sock.fileno())
        self._made = True

    @property
    def connections(self) -> tuple[int, int]:
        with self._lock:
            return len(self._waiting), len(self._served)

    def taken(self, sock: socket.socket) -> bytes:
        with self._lock:
            return self._taken.pop(sock, b"")

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._selector.register(self.socket, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._stopping.is_set():
                for key, _ in self._selector.select(self._until_next_deadline(poll_interval)):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj is not self._wake_r:
                        self._read(key.fileobj)  # type: ignore[arg-type]
                self._expire(time.monotonic())
        finally:
            for sock in list(self._waiting):
                self._forget(sock)
            self._stopped.set()

    def shutdown(self) -> None:
        self._stopping.set()
        self._wake_w.send(b"x")
        self._stopped.wait()
        with self._lock:
            served = list(self._served)
        for sock in served:  # a thread blocked on a slow client returns at once
            _cut_off(sock)
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:  # those still queued for a thread, whose turn never comes
            left = list(self._served)
            self._served.clear()
            self._taken.clear()
        for sock in left:
            self.shutdown_request(sock)

    def server_close(self) -> None:
        super().server_close()
        if self._made:  # after shutdown(): serve_forever no longer uses them
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _until_next_deadline(self, poll_interval: float) -> float:
        with self._lock:
            first = next(iter(self._waiting.values()), None)
        return poll_interval if first is None else max(0.0, min(poll_interval, first.close_at - time.monotonic()))

    def _accept(self) -> None:
        try:
            sock, address = self.socket.accept()
        except OSError:
            return  # the client gave up before we took it
        with self._lock:
            full = len(self._waiting) + len(self._served) >= self.max_connections
            oldest = next(iter(self._waiting), None) if full else None
        if full and oldest is None:  # every slot is serving a request: say so, briefly, and close
            sock.setblocking(False)
            try:
                sock.send(BUSY_ANSWER)
            except OSError:
                pass
            self.shutdown_request(sock)
            return
        if oldest is not None:
            self._forget(oldest)  # the client that connected first and still has not sent a request makes room
        sock.setblocking(False)
        with self._lock:
            self._waiting[sock] = _Waiting(address, time.monotonic() + self.idle_timeout)
        self._selector.register(sock, selectors.EVENT_READ)

    def _read(self, sock: socket.socket) -> None:
        """Take what arrived; hand the connection to a thread once its head is complete (or too long for
        one, or the client stopped sending: the handler answers what it got)."""
        with self._lock:
            waiting = self._waiting.get(sock)
        if waiting is None:
            return  # closed to make room earlier in this round
        try:
            chunk = sock.recv(_HEAD_LIMIT)
        except BlockingIOError:
            return
        except OSError:
            self._forget(sock)
            return
        if not chunk and not waiting.head:
            self._forget(sock)  # connected and left
            return
        seen = len(waiting.head)
        waiting.head += chunk
        tail = bytes(waiting.head[max(0, seen - 3):])
        if chunk and b"\r\n\r\n" not in tail and b"\n\n" not in tail and len(waiting.head) < _HEAD_LIMIT:
            return
        self._selector.unregister(sock)
        sock.setblocking(True)
        with self._lock:
            del self._waiting[sock]
            self._taken[sock] = bytes(waiting.head)
            self._served[sock] = time.monotonic() + self.request_timeout
        try:
            self._pool.submit(self._serve, sock, waiting.address)
        except RuntimeError:  # the pool is shutting down
            self._done(sock)

    def _serve(self, sock: socket.socket, address: Any) -> None:
        try:
            with self._lock:
                late = self._served.get(sock, 0.0) <= time.monotonic()
            if not late:  # one that waited for a thread past its deadline is only closed
                self.finish_request(sock, address)
        except Exception:
            self.handle_error(sock, address)
        finally:
            self._done(sock)

    def _done(self, sock: socket.socket) -> None:
        with self._lock:
            self._served.pop(sock, None)
            self._taken.pop(sock, None)
        self.shutdown_request(sock)

    def _expire(self, now: float) -> None:
        with self._lock:
            idle = [s for s, w in self._waiting.items() if w.close_at <= now]
            late = [s for s, at in self._served.items() if at <= now]
        for sock in idle:
            self._forget(sock)
        for sock in late:  # its thread's next read or write fails, and the thread moves on
            _cut_off(sock)

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._waiting.pop(sock, None)
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        self.shutdown_request(sock)


def _cut_off(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed
