"""Where a request ends, from the bytes received so far: one row per framing rule, and for any request cut
at any points the end is found exactly when its last byte arrives, never before (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.domain.limits import body_limit
from webhook.serving import framing

LIMIT, MAX_BODY = 65536, 1000


def end_of(data: bytes, max_body: int = MAX_BODY) -> int | None:
    """What the worker computes after each read: the end offset, or None while incomplete."""
    head = framing.find_head(data, LIMIT)
    if head is None:
        return None
    if head.chunked:
        return framing.ChunkedBody(head.end, max_body).end(data)
    end = framing.content_end(head, max_body)
    return end if len(data) >= end else None


HEAD = b"POST /filter HTTP/1.1\r\nHost: x\r\n"

COMPLETE = [
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 0),
    (HEAD + b"Content-Length: 2\r\n\r\n{}", 0),
    (HEAD + b"content-length:  0 \r\n\r\n", 0),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 0),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2;ext=1\r\n{}\r\n0\r\nTrailer: t\r\n\r\n", 0),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", 0),
    (HEAD + b"Content-Length: 2\r\n\r\n{}GET /next HTTP/1.1\r\n", len(b"GET /next HTTP/1.1\r\n")),  # pipelined
]


@pytest.mark.parametrize(("data", "after"), COMPLETE)
def test_a_complete_request_ends_where_its_framing_says(data: bytes, after: int) -> None:
    assert end_of(data) == len(data) - after


INCOMPLETE = [
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r",
    HEAD + b"Content-Length: 2\r\n\r\n{",
    HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}",
    HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n",
    HEAD + b"Transfer-Encoding: chunked\r\n\r\n0\r\nTrailer: t\r\n",
]


@pytest.mark.parametrize("data", INCOMPLETE)
def test_an_incomplete_request_has_no_end_yet(data: bytes) -> None:
    assert end_of(data) is None


REFUSED = [
    (HEAD + b"Content-Length: 1001\r\n\r\n", 413, "larger than the limit"),
    (HEAD + b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n", 413, "larger than the limit"),
    (HEAD + b"Content-Length: -1\r\n\r\n", 400, "one decimal number"),
    (HEAD + b"Content-Length: 1e3\r\n\r\n", 400, "one decimal number"),
    (HEAD + b"Content-Length: \xd9\xa1\r\n\r\n", 400, "one decimal number"),  # ARABIC-INDIC DIGIT ONE
    (HEAD + b"Content-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400, "one decimal number"),
    (HEAD + b"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "ambiguous"),
    (HEAD + b"Transfer-Encoding: chunked, gzip\r\n\r\n", 400, "end with chunked"),
    # Nothing decodes a coding but chunked: a compressed body would reach the app as bytes it cannot read.
    (HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400, "no other coding is accepted"),
    (HEAD + b"Transfer-Encoding: chunked, chunked\r\n\r\n", 400, "end with chunked"),
    (HEAD + b" folded\r\n\r\n", 400, "malformed header line"),
    (HEAD + b"NoColon\r\n\r\n", 400, "malformed header line"),
    (HEAD + b"Name : v\r\n\r\n", 400, "malformed header line"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"f" * 17 + b"\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 2000, 400, "chunk-size line too long"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX", 400, "not followed by CRLF"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n3e9\r\n", 413, "larger than the limit"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"1f4\r\n" + b"x" * 500 + b"\r\n1f5\r\n", 413, "larger"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n0\r\n" + b"T: " + b"t" * 9000, 400, "trailers too long"),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * LIMIT, 431, "request head larger than"),
    # gunicorn's parser limits, checked first so that the answer is ours (JSON), not its HTML page.
    (b"GET /" + b"a" * 4094 + b" HTTP/1.1", 414, "request line longer than 4094"),  # still arriving
    (b"GET /" + b"a" * 4094 + b" HTTP/1.1\r\n\r\n", 414, "request line longer than 4094"),
    (HEAD + b"".join(b"X-%d: v\r\n" % i for i in range(100)) + b"\r\n", 431, "more than 100 header fields"),
    (HEAD + b"X: " + b"a" * 8186 + b"\r\n\r\n", 431, "a header field longer than 8190"),
]


@pytest.mark.parametrize("data", [
    b"GET /" + b"a" * 4078 + b" HTTP/1.1\r\n\r\n",  # a request line of exactly 4094 bytes
    HEAD + b"".join(b"X-%d: v\r\n" % i for i in range(99)) + b"\r\n",  # Host and 99 more: exactly 100 fields
    HEAD + b"X: " + b"a" * 8185 + b"\r\n\r\n",  # a field line of 8190 bytes with its CRLF
])
def test_a_head_at_the_parsers_limits_is_still_read(data: bytes) -> None:
    assert end_of(data) == len(data)


@pytest.mark.parametrize(("data", "status", "words"), REFUSED)
def test_a_request_that_cannot_be_framed_is_refused_with_a_status_and_a_reason(
        data: bytes, status: int, words: str) -> None:
    with pytest.raises(framing.FramingError) as refused:
        end_of(data)
    assert refused.value.status == status
    assert words in str(refused.value)


def test_expect_100_continue_is_noticed() -> None:
    head = framing.find_head(HEAD + b"Expect: 100-Continue\r\nContent-Length: 2\r\n\r\n", LIMIT)
    assert head is not None and head.expect_continue and head.length == 2


def test_a_resumed_head_search_finds_an_end_that_straddles_two_reads() -> None:
    first = b"GET / HTTP/1.1\r\nHost: x\r\n\r"
    assert framing.find_head(first, LIMIT) is None
    resume = max(0, len(first) - len(framing.HEAD_END) + 1)  # as the worker resumes
    head = framing.find_head(first + b"\n", LIMIT, resume)
    assert head is not None and head.end == len(first) + 1


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=300))
    if draw(st.booleans()):
        return HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
    sizes = draw(st.lists(st.integers(1, 64), max_size=8))
    chunks, rest = b"", body
    for size in sizes:
        piece, rest = rest[:size], rest[size:]
        if piece:
            chunks += b"%x\r\n%s\r\n" % (len(piece), piece)
    trailer = draw(st.sampled_from([b"", b"X-T: 1\r\n"]))
    return HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n" + trailer + b"\r\n"


@given(requests(), st.lists(st.integers(1, 50), min_size=1, max_size=40), st.binary(max_size=40))
def test_the_end_is_found_exactly_when_the_last_byte_arrives_however_the_bytes_are_split(
        request: bytes, cuts: list[int], pipelined: bytes) -> None:
    stream = request + pipelined
    received = b""
    head: framing.Head | None = None
    body: framing.ChunkedBody | None = None
    scanned = 0
    pos = 0
    found = None
    before = 0  # how much had arrived before the read that completed the request
    for cut in [*cuts, len(stream)]:  # a real client's writes; the last one sends the rest
        before = len(received)
        received += stream[pos:pos + cut]
        pos += cut
        if head is None:
            head = framing.find_head(received, LIMIT, scanned)
            scanned = max(0, len(received) - len(framing.HEAD_END) + 1)
            if head is not None and head.chunked:
                body = framing.ChunkedBody(head.end, MAX_BODY)
        if head is not None:
            end = body.end(received) if body else framing.content_end(head, MAX_BODY)
            if end is not None and len(received) >= end:
                found = end
                break
    assert found == len(request)
    assert before < len(request) <= len(received)  # not a read too early


@pytest.mark.parametrize("data", [
    b"GET /healthz HTTP/1.1\nHost: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\n\r\n",
    b"GET /healthz HTTP/1.1\r\nX-A: a\rb\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\n",  # refused before the head is complete
])
def test_a_bare_lf_or_cr_in_the_head_is_refused(data: bytes) -> None:
    with pytest.raises(framing.FramingError, match="bare LF or CR") as refused:
        framing.find_head(data, LIMIT)
    assert refused.value.status == 400


def test_a_cr_at_the_end_of_what_arrived_is_not_yet_bare() -> None:
    assert framing.find_head(b"GET /healthz HTTP/1.1\r", LIMIT) is None
    assert framing.find_head(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r", LIMIT) is None


@pytest.mark.parametrize(("line", "path"), [
    (b"POST /mutate?timeout=5s HTTP/1.1", "/mutate"),
    (b"POST //bind/ HTTP/1.1", "/bind"),
    (b"POST /./filter HTTP/1.1", "/filter"),
    (b"POST https://imex-webhook.imex-system.svc/prioritize HTTP/1.1", "/prioritize"),
    (b"GET healthz HTTP/1.1", ""),
    (b"GET /a b HTTP/1.1", ""),
    (b"POST /%66ilter HTTP/1.1", "/filter"),  # percent-decoded, as PATH_INFO
    (b"POST /%2F%2Fbind%2F HTTP/1.1", "/bind"),
])
def test_the_route_path_is_the_one_the_router_sees(line: bytes, path: str) -> None:
    assert framing.route_path(line) == path


@pytest.mark.parametrize(("path", "limit"), [
    ("/filter", 64 << 20), ("/prioritize", 64 << 20), ("/preempt", 64 << 20), ("/mutate", 3 << 20),
    ("/bind", 64 << 10), ("/healthz", 64 << 10), ("/nowhere", 64 << 10), ("", 64 << 10),
])
def test_each_route_has_a_body_limit_sized_from_its_peer(path: str, limit: int) -> None:
    assert body_limit(path, 64 << 20) == limit
    assert body_limit(path, 4096) == 4096  # never above --max-body


def test_a_body_over_its_routes_limit_is_refused_before_it_is_read() -> None:
    head = framing.find_head(b"POST /bind HTTP/1.1\r\nContent-Length: 65537\r\n\r\n", LIMIT)
    assert head is not None and head.path == "/bind"
    with pytest.raises(framing.FramingError, match="65536") as refused:
        framing.content_end(head, body_limit(head.path, 64 << 20))
    assert refused.value.status == 413
