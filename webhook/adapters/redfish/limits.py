"""How much and for how long the Redfish client listens to a service: a cap on every reply body and a total
deadline on every request.

Without them one reply could take the process down or hold it forever: ``requests`` reads a whole body into
memory (a 400 MB answer took a worker to 6.4 GiB), and its ``timeout`` bounds each socket read, not the
request, so a service that drips one byte every 2 s never times out. Here:

- the body is read in chunks and the connection dropped as soon as it passes ``max_response`` bytes
  (after decompression, so a gzip bomb counts in full); a ``Content-Length`` above the cap is refused
  before reading anything;
- every request (connect, headers, body, redirects) gets a total deadline: a process-wide watchdog thread
  shuts the request's socket down when it passes, which wakes a read blocked on a dripping peer. To know
  which socket, the transport mounts ``TrackingAdapter``, whose connection pools note the connection they
  hand out in the requesting thread's ``Guard``.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from webhook.adapters.redfish.payloads import FabricError, short

CHUNK = 64 * 1024
RECUT = 0.05  # a request still connecting at its deadline is cut this long after, once it has a socket

_current = threading.local()  # .guard: the Guard of the request this thread is making


class TooLarge(FabricError):
    """A reply body over the cap: refused, and the connection closed without reading the rest."""

    def __init__(self, where: str, url: str, cap: int, read: int) -> None:
        self.cap = cap
        self.read = read
        super().__init__(where, short(url, 160), f"the reply is larger than {cap} bytes (--fabric-max-response; "
                         f"{read} read): refused, the connection was closed", phase="read")


class Guard:
    """One request's deadline: the connection it runs on, and whether the watchdog cut it."""

    def __init__(self) -> None:
        self.conn: Any = None  # the urllib3 connection in use (set by the tracking pools)
        self.fired = False
        self.done = False
        self._lock = threading.Lock()

    def __enter__(self) -> Guard:
        _current.guard = self
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.done = True  # a late watchdog must not cut the connection the next request reuses
        _current.guard = None

    def cut(self) -> bool:
        """Shut the connection down; True when there is none yet (still connecting): try again shortly."""
        with self._lock:
            if self.done:
                return False
            self.fired = True
            sock = getattr(self.conn, "sock", None)
            if sock is None:
                return True
            try:
                # socket.socket's own shutdown, not SSLSocket's (which first drops its SSL object): the
                # blocked read in the other thread must fail, not touch a half-torn TLS state.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass  # closed already
            return False


def _note(conn: Any) -> None:
    guard: Guard | None = getattr(_current, "guard", None)
    if guard is not None:
        guard.conn = conn


class _HttpPool(HTTPConnectionPool):
    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        _note(conn)
        return conn


class _HttpsPool(HTTPSConnectionPool):
    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        _note(conn)
        return conn


class TrackingAdapter(HTTPAdapter):
    """requests' adapter with pools that tell the current ``Guard`` which connection a request uses."""

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HttpPool, "https": _HttpsPool}


class Watchdog:
    """One daemon thread for the process: cuts each armed request whose deadline passed (real time, so a
    test's fake clock cannot stop it). Finished requests stay queued until their time and are skipped."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, Guard]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, guard: Guard, seconds: float) -> None:
        with self._cond:
            heapq.heappush(self._queue, (time.monotonic() + seconds, next(self._seq), guard))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="redfish-deadlines", daemon=True)
                self._thread.start()
            if self._queue[0][2] is guard:  # due first: the thread sleeps until a later time, or forever
                self._cond.notify()

    def _next(self) -> Guard:
        with self._cond:
            while True:
                while self._queue and self._queue[0][2].done:
                    heapq.heappop(self._queue)
                if not self._queue:
                    self._cond.wait()
                    continue
                due = self._queue[0][0] - time.monotonic()
                if due <= 0:
                    return heapq.heappop(self._queue)[2]
                self._cond.wait(due)

    def _run(self) -> None:
        while True:
            guard = self._next()
            if guard.cut():
                self.arm(guard, RECUT)


WATCHDOG = Watchdog()


def read_body(resp: requests.Response, where: str, cap: int) -> bytes:
    """The whole body, at most ``cap`` bytes; stored in ``resp`` so ``.json()`` and ``.text`` work as usual.
    Raises TooLarge (connection closed) past the cap, requests' errors when the connection breaks."""
    declared = resp.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > cap:
        resp.close()
        raise TooLarge(where, resp.url, cap, 0)
    body = bytearray()
    for chunk in resp.iter_content(CHUNK):
        body += chunk
        if len(body) > cap:
            resp.close()  # mid-body: urllib3 drops the connection instead of draining it
            raise TooLarge(where, resp.url, cap, len(body))
    resp._content = bytes(body)  # what requests itself does once a streamed body is consumed
    return resp._content
