"""What one request may cost the worker (webhook.http.common: the decode estimate, the memory given back).

Table-driven on the estimate: an upper bound of what orjson really allocates, for the hostile shapes and the
legitimate ones. Then ``imex-webhook serve`` as a real subprocess with its defaults: bodies built to cost the
most per byte, at the largest size each route admits, are refused before they are decoded, a legitimate
body of the largest size is served, the worker's peak resident memory (VmHWM) stays under the 512 MiB the
Deployment is sized for, /healthz answers meanwhile, and the resident memory returns after the burst."""

from __future__ import annotations

import threading
import time
import tracemalloc
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import serving
from tests.http.test_bounded_memory import _rss_kb, _worker
from webhook.domain.limits import DEFAULT_MAX_BODY
from webhook.http import common

SHAPES = ["[],", "{},", "[0],", "[[]],", '"ab",', '"a",', "1.5,", "0,", "true,", '{"a":1},', '{"ab":"cd"},',
          '{"name":"A","value":"b"},', '"a-node-name-of-some-length-0001",', r'"\u00e9\u4e2d\ud83d\ude00abc",',
          '"' + "a" * 200 + r'\ud83d\ude00",', '{"' + "k" * 70 + '":null},', '"' + "a" * 200 + '😀",']


def _allocated(body: bytes) -> int:
    tracemalloc.start()
    try:
        doc = orjson.loads(body)
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del doc
    return used


@pytest.mark.parametrize("shape", SHAPES)
def test_the_estimate_is_never_below_what_decoding_takes(shape: str) -> None:
    body = b"[" + shape.encode() * (1_000_000 // len(shape)) + b"0]"
    used = _allocated(body)
    assert common.decoded_size(body) >= used, (shape, common.decoded_size(body), used)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=12), children, max_size=8),
    max_leaves=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON, min_size=1, max_size=40))
def test_the_estimate_bounds_any_json_document(doc: list[object]) -> None:
    body = orjson.dumps(doc * 50)  # repeated: allocator noise is small next to it
    assert common.decoded_size(body) >= _allocated(body)


def _hostile(shape: bytes, size: int) -> bytes:
    return b'{"Pod": {}, "NodeNames": [' + shape * ((size - 64) // len(shape)) + b'"x"]}'


def _legit(size: int) -> bytes:
    """An ExtenderArgs naming as many (unknown) nodes as fit: the shape a 20,000-node cluster sends, larger."""
    pod = serving.fixture("extender/filter-names-plain.json")["Pod"]
    names = [f"gb200-rack{i // 18:05d}-tray{i % 18:02d}-{'x' * 20}" for i in range(size // 48)]
    return orjson.dumps({"Pod": pod, "NodeNames": names})


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads RSS from /proc")
def test_the_costliest_bodies_each_route_admits_keep_the_worker_under_512_mib(tmp_path: Path) -> None:
    limit = DEFAULT_MAX_BODY - 1024
    probes: list[float] = []
    stop = threading.Event()
    with serving.serve(tmp_path, "--threads", "4") as served:
        worker = _worker(served.process.pid)
        base = _rss_kb(worker)

        def probe() -> None:
            while not stop.is_set():
                started = time.monotonic()
                assert served.get("/healthz").status_code == 200
                probes.append(time.monotonic() - started)
                stop.wait(0.05)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        try:
            for shape in (b"[],", b"{},", b'{"a":1},', b'"ab",', b"[[]],"):
                reply = served.post("/filter", data=_hostile(shape, limit))
                assert reply.status_code == 400 and "would take about" in reply.json()["error"], reply.text[:300]
            legit = _legit(limit - 4096)
            assert len(legit) <= limit
            for _ in range(3):
                reply = served.post("/filter", data=legit)
                assert reply.status_code == 200 and reply.json()["Error"] == "", reply.text[:300]
        finally:
            stop.set()
            prober.join(30)
        peak = _status_kb(worker, "VmHWM")
        after = _rss_kb(worker)
    probes.sort()
    p99 = probes[min(len(probes) - 1, int(len(probes) * 0.99))] if probes else 0.0
    print(f"worker RSS base {base >> 10} MiB, peak {peak >> 10} MiB, after {after >> 10} MiB; "
          f"/healthz {len(probes)} probes, p99 {p99 * 1000:.0f} ms")
    assert peak < 512 * 1024, f"peak {peak >> 10} MiB"
    assert after < base + 96 * 1024, f"RSS after the burst {after >> 10} MiB, before {base >> 10} MiB"
    assert probes, "/healthz answered while the large bodies were processed"


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")
