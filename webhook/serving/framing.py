"""Where an HTTP/1.1 request ends, judged from the bytes received so far (pure; RFC 9112 section 6).

The server reads each request completely in its poller before a thread serves it (see
:mod:`webhook.serving.reading`), so it must know from the buffered bytes alone whether the head is
complete, how the body is framed and whether the body is complete. A head whose framing cannot be
trusted (a malformed header line, conflicting or malformed Content-Length and Transfer-Encoding) is
refused here with 400, as the HTTP parser behind would refuse it, so that no thread ever waits on the
socket for a body whose end is unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from webhook.errors import ImexWebhookError
from webhook.wire.addresses import normalized

HEAD_END = b"\r\n\r\n"
# A chunk-size line (hex size and extensions) longer than this is not one a real client sends.
MAX_CHUNK_LINE = 1024
# Chunks in one body. Each costs the poller a scan step however small it is (the data limit alone admits
# 3 million one-byte chunks to /mutate, a second of the poller's time); clients write chunks of kilobytes
# (Go's and Python's HTTP clients one per buffered write), so no real body comes near.
MAX_CHUNKS = 65536
# A line ends with CRLF; a bare LF or CR in a head is refused (RFC 9112 section 2.2 lets a server do so).
_BARE_LF_OR_CR = re.compile(rb"(?<!\r)\n|\r(?=[^\n])")

class FramingError(ImexWebhookError):
    """The request cannot be read to its end: answered with ``status`` and the message, then closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LineLimits:
    """The HTTP parser's own limits (gunicorn's ``limit_request_line``, ``limit_request_fields``,
    ``limit_request_field_size``; 0 or less: its defaults). Checked here first so that a request beyond
    them gets our JSON answer, not the parser's HTML page."""

    line: int = 4094
    fields: int = 100
    field_size: int = 8190


@dataclass(frozen=True)
class Head:
    """The framing facts of a complete request head."""

    end: int  # offset just past the blank line
    length: int | None = None  # Content-Length
    chunked: bool = False
    expect_continue: bool = False
    path: str = ""  # the request target's path, as the router sees it ("//bind/" is "/bind")


def route_path(request_line: bytes) -> str:
    """The path of a request line's target, percent-decoded and slashes merged as the router does ("" when
    there is none): ``/%66ilter`` is the router's ``/filter``, and must meet its caller check and body limit."""
    parts = request_line.split(b" ")
    if len(parts) != 3:
        return ""
    target = parts[1].split(b"?", 1)[0].split(b"#", 1)[0].decode("latin-1")
    if target.startswith(("http://", "https://")):  # absolute form: the path after the authority
        target = "/" + target.split("://", 1)[1].partition("/")[2]
    if not target.startswith("/"):
        return ""
    return normalized(unquote_to_bytes(target).decode("latin-1"))  # PATH_INFO as gunicorn makes it


def find_head(buf: bytes | bytearray, limit: int, start: int = 0,
              lines: LineLimits = LineLimits()) -> Head | None:
    """The head, once ``buf`` holds all of it; ``None`` while it is still arriving. ``start``: where the
    search may resume (no head end begins before it), so a head trickled byte by byte costs linear time."""
    if lines.line > 0 and buf.find(b"\r\n", 0, lines.line + 2) < 0 and len(buf) - 2 > lines.line:
        raise FramingError(414, f"request line longer than {lines.line} bytes")
    end = buf.find(HEAD_END, start, limit + len(HEAD_END))
    if _BARE_LF_OR_CR.search(buf, max(0, start - 1), end + 2 if end >= 0 else min(len(buf), limit + 2)):
        raise FramingError(400, "a bare LF or CR in the request head: lines end with CRLF")
    if end < 0:
        if len(buf) > limit:
            raise FramingError(431, f"request head larger than {limit} bytes")
        return None
    return parse_head(bytes(buf[:end]), end + len(HEAD_END), lines)


def parse_head(head: bytes, end: int, lines: LineLimits = LineLimits()) -> Head:
    lengths: list[bytes] = []
    codings: list[bytes] = []
    expect = False
    request_line, *fields = head.split(b"\r\n")
    path = route_path(request_line)
    if len(fields) > lines.fields > 0:
        raise FramingError(431, f"more than {lines.fields} header fields")
    for line in fields:
        if len(line) + 2 > lines.field_size > 0:
            raise FramingError(431, f"a header field longer than {lines.field_size} bytes")
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise FramingError(400, "malformed header line (obsolete line folding or no field name)")
        key = name.lower()
        if key == b"content-length":
            lengths.append(value.strip())
        elif key == b"transfer-encoding":
            codings.extend(c.strip().lower() for c in value.split(b","))
        elif key == b"expect" and value.strip().lower() == b"100-continue":
            expect = True
    if codings:
        if lengths:
            raise FramingError(400, "both Content-Length and Transfer-Encoding: the body's end is ambiguous")
        if codings[-1] != b"chunked" or codings.count(b"chunked") > 1:
            raise FramingError(400, "Transfer-Encoding must end with chunked, once")
        if len(codings) > 1:  # the thread gets the body de-chunked (unchunked): no other coding is undone
            raise FramingError(400, "Transfer-Encoding other than chunked alone: no other coding is accepted")
        return Head(end, chunked=True, expect_continue=expect, path=path)
    if not lengths:
        return Head(end, path=path)
    if len(lengths) > 1 or not lengths[0].isascii() or not lengths[0].isdigit():
        raise FramingError(400, "Content-Length must be one decimal number")
    # Beyond 18 digits it is above any body limit; int() of thousands of digits would be refused anyway.
    length = int(lengths[0]) if len(lengths[0]) <= 18 else 10**18
    return Head(end, length=length, expect_continue=expect, path=path)


class ChunkedBody:
    """Scans a chunked body as it arrives; each call resumes where the last complete chunk ended, so a body
    of many small chunks costs linear time however it is split across reads. The chunks' data is kept as
    it is scanned (``data``): the thread gets the request framed by its length (:func:`unchunked`), because
    gunicorn's chunk parser copies the rest of the body for every chunk it reads (2 MB in one-byte chunks
    held a thread for over 5 minutes)."""

    def __init__(self, start: int, max_body: int) -> None:
        self.pos = start
        self.total = 0
        self.max_body = max_body
        self.in_trailers = False
        self.data = bytearray()
        self.chunks = 0

    def end(self, buf: bytes | bytearray) -> int | None:
        """Offset just past the last chunk and the trailers; ``None`` while they are still arriving. Raises
        :class:`FramingError` for a malformed or oversized body."""
        while not self.in_trailers:
            line_end = buf.find(b"\r\n", self.pos, self.pos + MAX_CHUNK_LINE + 2)
            if line_end < 0:
                if len(buf) - self.pos > MAX_CHUNK_LINE:
                    raise FramingError(400, "malformed chunked body: chunk-size line too long")
                return None
            size = _chunk_size(bytes(buf[self.pos:line_end]))
            if self.total + size > self.max_body:
                raise FramingError(413, f"request body larger than the limit of {self.max_body} bytes")
            if size == 0:
                self.pos, self.in_trailers = line_end + 2, True
                break
            self.chunks += 1
            if self.chunks > MAX_CHUNKS:
                raise FramingError(400, f"chunked body of more than {MAX_CHUNKS} chunks: send larger chunks")
            data_end = line_end + 2 + size
            if len(buf) < data_end + 2:
                return None
            if buf[data_end:data_end + 2] != b"\r\n":
                raise FramingError(400, "malformed chunked body: chunk data not followed by CRLF")
            self.data += buf[line_end + 2:data_end]
            self.pos, self.total = data_end + 2, self.total + size
        return _trailers_end(buf, self.pos)


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    if not text or len(text) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in text):
        raise FramingError(400, "malformed chunked body: bad chunk size")
    return int(text, 16)


def _trailers_end(buf: bytes | bytearray, pos: int) -> int | None:
    if buf[pos:pos + 2] == b"\r\n":
        return pos + 2
    end = buf.find(HEAD_END, pos)
    if end < 0:
        if len(buf) - pos > MAX_CHUNK_LINE * 8:
            raise FramingError(400, "malformed chunked body: trailers too long")
        return None
    return end + len(HEAD_END)


def unchunked(head: bytes, body: bytes | bytearray) -> bytes:
    """A chunked request (its head, CRLF CRLF included, and its chunks' data) as the same request framed by
    Content-Length; its trailers, which nothing here reads, are left out. The head was checked by
    :func:`parse_head`: every line after the first is a field."""
    request_line, *fields = head[:-len(HEAD_END)].split(b"\r\n")
    kept = [f for f in fields if f.partition(b":")[0].lower() != b"transfer-encoding"]
    return b"\r\n".join([request_line, *kept, b"Content-Length: %d" % len(body)]) + HEAD_END + body


def content_end(head: Head, max_body: int) -> int:
    """Offset just past a request framed by Content-Length (or without a body)."""
    length = head.length or 0
    if length > max_body:
        raise FramingError(413, f"request body of {length} bytes is larger than the limit of {max_body} bytes")
    return head.end + length
