"""One client connection of the worker (:mod:`webhook.serving.worker`): its phase, deadline, the request
bytes read so far and the response bytes still to write.

A thread never writes to the socket. The response it produces goes into the connection's
:class:`Output`, which the poller writes out without blocking, under the write deadline. A thread waits
only when one response grows past :attr:`Limits.output` bytes that the client has not taken yet, and then
for the rest of the write deadline at most; smaller responses to a client that does not read cost memory
until the deadline, never a thread.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gunicorn import http
from gunicorn.http import unreader
from gunicorn.workers import gthread

from webhook.serving import framing

HANDSHAKE, IDLE, HEAD, BODY = "handshake", "idle", "head", "body"
SERVING, WRITING, CLOSING = "serving", "writing", "closing"
IDLE_PHASES = frozenset({HANDSHAKE, IDLE, HEAD})  # a pool may evict these, and CLOSING (conn_limits)


@dataclass(frozen=True)
class Limits:
    handshake: float  # accept to the end of the TLS handshake
    header: float  # first byte (or the handshake's end) to the end of the request head
    body: float  # end of the head to the end of the body
    keepalive: float  # idle between two requests on one connection
    write: float  # the end of a response to its last byte taken by the client
    max_head: int
    max_body: int
    buffered: int  # request bytes held by the poller across all connections
    output: int = 1024 * 1024  # response bytes one connection may hold before its thread waits
    pipelined: int = 8  # requests served in a row from bytes sent ahead, before the connection closes


class WriteStalled(OSError):
    """The client did not take the response within the write deadline."""


class Output:
    """Response bytes of one connection: appended by a thread, written out by the poller."""

    def __init__(self, cap: int, seconds: float) -> None:
        self.cap = cap
        self.seconds = seconds
        self.buf = bytearray()
        self.cond = threading.Condition()
        self.failed = False
        self.wake: Callable[[], None] = lambda: None  # asks the poller to write now (set by the worker)
        self.deadline: float | None = None  # set when the client is first waited for
        self.total = 0  # bytes of the current response so far

    def start(self) -> float:
        """The write deadline, from now unless it runs already."""
        with self.cond:
            if self.deadline is None:
                self.deadline = time.monotonic() + self.seconds
            return self.deadline

    # -- the thread's side: what gunicorn's Response sees as its socket ---------------------------------

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        with self.cond:
            if self.failed:
                raise WriteStalled("the client stopped reading")
            self.buf += data
            self.total += len(data)
            if len(self.buf) <= self.cap:
                return
        deadline = self.start()
        self.wake()
        with self.cond:
            while len(self.buf) > self.cap and not self.failed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.failed = True
                    break
                self.cond.wait(remaining)
            if self.failed:
                raise WriteStalled("the client stopped reading")

    def send(self, data: bytes | bytearray | memoryview) -> int:
        self.sendall(data)
        return len(data)

    # -- the poller's side --------------------------------------------------------------------------------

    def peek(self, size: int) -> bytes:
        with self.cond:
            return bytes(self.buf[:size])

    def consumed(self, size: int) -> None:
        with self.cond:
            del self.buf[:size]
            self.cond.notify_all()

    def reset(self) -> int:
        """The response is written out: the next one starts. Returns the size of the one just written."""
        with self.cond:
            self.deadline = None
            total, self.total = self.total, 0
            return total

    def fail(self) -> None:
        with self.cond:
            self.failed = True
            self.buf.clear()
            self.cond.notify_all()

    def __len__(self) -> int:
        return len(self.buf)


class RequestBytes(unreader.Unreader):  # type: ignore[misc]
    """The parser's source: the bytes of whole requests the poller collected, and nothing more (a parser
    that wants more than the framing gave it is reading a malformed request).

    gunicorn's own buffer copies everything it still holds on every read, so a body left unread by the app
    (a refusal, a 404) and drained 1 KiB at a time by ``finish_body`` cost time quadratic in its size: 82 s
    for 16 MiB. Here a read copies only what it returns, and handing back what was just read moves a
    position instead of copying the rest."""

    PIECE = 64 * 1024  # what one read without a size returns at most (the head parser reads that way)

    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.pos = 0

    def chunk(self, size_hint: int | None = None) -> bytes:
        return b""

    def read(self, size: int | None = None, read_ahead: int | None = None) -> bytes:
        if size is not None and not isinstance(size, int):
            raise TypeError("size parameter must be an int or long.")
        if size is None or size < 0:
            size = max(read_ahead or 0, self.PIECE)
        out = self.data[self.pos:self.pos + size]
        self.pos += len(out)
        return out

    def unread(self, data: bytes) -> None:
        if not data:
            return
        start = self.pos - len(data)
        if start >= 0 and memoryview(self.data)[start:self.pos] == data:
            self.pos = start  # the bytes just read, given back
        else:
            self.data, self.pos = bytes(data) + self.data[self.pos:], 0

    def take_buffered(self) -> bytes:
        rest, self.data, self.pos = self.data[self.pos:], b"", 0
        return rest


class Conn(gthread.TConn):  # type: ignore[misc]
    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, limits: Limits,
                 probe: bool = False) -> None:
        super().__init__(cfg, sock, client, server)
        self.limits = limits
        self.probe = probe  # accepted on the probe listener: plain HTTP, its own pool and threads
        self.source = str(client[0]) if isinstance(client, tuple) and client else str(client)
        self.data_ready = True  # requests arrive whole: the thread never waits for data
        self.phase = HANDSHAKE
        self.deadline = time.monotonic() + limits.handshake
        self.events = 0
        self.closed = False
        self.buf = bytearray()
        self.ready = b""  # the complete request handed to the thread
        self.received = b""  # its first bytes, to count a refusal under its path
        self.head: framing.Head | None = None
        self.chunked: framing.ChunkedBody | None = None
        self.scanned = 0
        self.output = Output(limits.output, limits.write)
        self.keep = False  # the response just written allows another request
        self.served = 0  # requests handed to a thread
        self.pipelined = 0  # requests served in a row that were sent before the previous answer was read
        self.drain_left = 0  # bytes a closing connection may still send before it is closed outright

    def init(self) -> None:
        """In the thread, before each request: the whole request in the parser, which never reads the socket."""
        parser: Any = self.parser  # type: ignore[has-type]
        if parser is None:
            self.initialized = True
            parser = self.parser = http.get_parser(self.cfg, self.sock, self.client)
            parser.unreader = RequestBytes()
        if self.ready:
            parser.unreader.unread(self.ready)
            self.ready = b""

    def begin(self, phase: str, seconds: float) -> None:
        self.phase, self.deadline = phase, time.monotonic() + seconds
        self.head, self.chunked, self.scanned = None, None, 0
