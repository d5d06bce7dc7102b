"""The segmented job over TLS: the first member's /filter, a later member's /filter and the worker's memory,
on ``imex-webhook serve`` itself (docs/BENCHMARKS.md, "Jobs larger than one domain").

The first filter of a job plans it and stores one reservation per segment, once: the service has no way to
forget them, so each sample is the first /filter a freshly started server answers for the job, and
``repeats`` servers are started for as many samples (in parallel; each loads the same ``--cluster`` file
and first serves the measured one-domain group, as the bench's other servers do, so what the job's filter
finds built is what a running service has built). The body is the member's ExtenderArgs as kube-scheduler
sends them with ``nodeCacheCapable: true``: the pod and the names of every node.

Beside each figure, the same-bytes baseline (``webhook.tools.bench.baseline``, ``canned_path``): the same
request decoded through the same worker and TLS, answered with the very bytes the service answered, so the
ratio is what the service spends beyond reading 20,000 names and writing the reply. First filters
alternate (service then baseline, then baseline then service, ...) and the median of the pairwise ratios is
reported; a later member's filter is sent one at a time for ``duration`` seconds per run, A/B then B/A.
"""

from __future__ import annotations

import http.client
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from webhook.tools import servers
from webhook.tools.bench import baseline as baseline_app
from webhook.tools.bench import loadgen, payloads, segmented, serial
from webhook.tools.servers import Server, Tls


def peak_rss(server: Server) -> int:
    """The worker's peak resident memory so far (VmHWM), in bytes; 0 where unavailable."""
    total = 0
    for pid in server.pids[1:]:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += sum(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:"))
    return total


def once(server: Server, tls: Tls, path: str, body: bytes) -> tuple[float, float, bytes]:
    """(seconds, the server's CPU seconds, reply) of one POST on a connection whose handshake is done."""
    conn = http.client.HTTPSConnection(server.host, server.port, context=tls.client_context(), timeout=600)
    try:
        conn.request("GET", "/readyz")  # the handshake stays out of the figure
        conn.getresponse().read()
        cpu = server.cpu_seconds()
        begin = time.perf_counter()
        conn.request("POST", path, body=body, headers=loadgen.HEADERS)
        response = conn.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - begin
        cpu = server.cpu_seconds() - cpu
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"{server.name} {path}: HTTP {response.status}: {data[:300]!r}")
    return elapsed, cpu, data


def can(baseline: Server, tls: Tls, name: str, reply: bytes) -> str:
    """Store ``reply`` on the baseline under ``name``; the path that answers it."""
    path = baseline_app.canned_path("filter", name)
    conn = http.client.HTTPSConnection(baseline.host, baseline.port, context=tls.client_context(), timeout=120)
    try:
        conn.request("PUT", path, body=reply, headers=loadgen.HEADERS)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"the baseline did not store the {name} reply (HTTP {response.status}: {data[:200]!r})")
    return path


def _passed(reply: bytes) -> tuple[int, int]:
    decoded = orjson.loads(reply)
    return len(decoded.get("NodeNames") or []), len(decoded.get("FailedNodes") or {})


def _first_filters(fresh: list[Server], baseline: Server, tls: Tls, size: int, body: bytes,
                   log: Callable[[str], None]) -> dict[str, Any]:
    imex: list[dict[str, float]] = []
    base: list[dict[str, float]] = []
    replies: list[bytes] = []
    canned = ""
    for k, server in enumerate(fresh):
        for side in ("imex", "baseline") if k % 2 == 0 else ("baseline", "imex"):
            if side == "imex":
                elapsed, cpu, reply = once(server, tls, "/filter", body)
                replies.append(reply)
                canned = canned or can(baseline, tls, f"segment-first-{size}", reply)
                imex.append({"ms": elapsed * 1e3, "server_cpu_ms": cpu * 1e3})
            else:
                elapsed, cpu, _ = once(baseline, tls, canned, body)
                base.append({"ms": elapsed * 1e3, "server_cpu_ms": cpu * 1e3})
        log(f"  segmented job, first /filter at {size} nodes {k + 1}/{len(fresh)}: {imex[-1]['ms']:.1f} ms "
            f"(same-bytes baseline {base[-1]['ms']:.1f} ms)")
    passed, failed = _passed(replies[0])
    return {
        "samples": len(imex), "p50_ms": statistics.median(r["ms"] for r in imex),
        "baseline_p50_ms": statistics.median(r["ms"] for r in base),
        "ratio": statistics.median(a["ms"] / b["ms"] for a, b in zip(imex, base, strict=True)),
        "server_cpu_ms": statistics.median(r["server_cpu_ms"] for r in imex),
        "baseline_server_cpu_ms": statistics.median(r["server_cpu_ms"] for r in base),
        "body_bytes": len(body), "reply_bytes": len(replies[0]), "passed": passed, "failed": failed,
        "same_reply_on_every_server": len(set(replies)) == 1, "runs": {"imex": imex, "baseline": base},
    }


def _later_filters(server: Server, baseline: Server, tls: Tls, size: int, body: bytes, duration: float,
                   repeats: int, least: int, log: Callable[[str], None]) -> dict[str, Any]:
    _, _, reply = once(server, tls, "/filter", body)
    sides = {"imex": (server, [("/filter", body)]),
             "baseline": (baseline, [(can(baseline, tls, f"segment-later-{size}", reply), body)])}
    runs: dict[str, list[dict[str, Any]]] = {"imex": [], "baseline": []}
    for r in range(repeats):
        for side in ("imex", "baseline") if r % 2 == 0 else ("baseline", "imex"):
            target, steps = sides[side]
            runs[side].append(serial.cycles(target, tls, steps, duration, least))
        log(f"  segmented job, later member's /filter at {size} nodes {r + 1}/{repeats}: p50 "
            f"{runs['imex'][-1]['pair_p50_ms']:.2f} ms (same-bytes baseline {runs['baseline'][-1]['pair_p50_ms']:.2f})")
    passed, failed = _passed(reply)

    def median(side: str, key: str) -> float:
        return float(statistics.median(run[key] for run in runs[side]))

    return {
        "requests": sum(run["cycles"] for run in runs["imex"]), "p50_ms": median("imex", "pair_p50_ms"),
        "p99_ms": median("imex", "pair_p99_ms"), "baseline_p50_ms": median("baseline", "pair_p50_ms"),
        "baseline_p99_ms": median("baseline", "pair_p99_ms"),
        "ratio": statistics.median(a["pair_p50_ms"] / b["pair_p50_ms"]
                                   for a, b in zip(runs["imex"], runs["baseline"], strict=True)),
        "server_cpu_ms": median("imex", "server_cpu_ms_per_cycle"),
        "baseline_server_cpu_ms": median("baseline", "server_cpu_ms_per_cycle"),
        "body_bytes": len(body), "reply_bytes": len(reply), "passed": passed, "failed": failed,
        "runs": runs,
    }


def run(size: int, cluster: Path, baseline: Server, tls: Tls, work: Path, settings: dict[str, Any],
        command: Callable[[int, Path], list[str]], warm: Callable[[Server], Any],
        log: Callable[[str], None]) -> dict[str, Any]:
    """The job at ``size`` nodes over TLS: ``settings`` holds repeats, duration, min_requests and
    ready_timeout; ``command(port, cluster)`` starts the service; ``warm(server)`` serves the one-domain
    group first."""
    shape = segmented.job_shape(size)
    first = orjson.dumps(payloads.extender_args(payloads.segment_pod(shape["first_rank"]), size, full=False))
    later = orjson.dumps(payloads.extender_args(payloads.segment_pod(shape["later_rank"]), size, full=False))
    count = settings["repeats"]
    log(f"bench: the segmented job at {size} nodes ({shape['pods']} pods in {shape['segments']} segments): "
        f"starting {count} fresh server(s)")
    began = time.monotonic()
    fresh = []
    for k in range(count):
        port = servers.free_port()
        fresh.append(servers.spawn(f"imex-{size}-segments-{k}", command(port, cluster), port,
                                   work / f"imex-{size}-segments-{k}.log"))
    with servers.running(fresh):
        # Loading is pure Python and the servers load side by side: allow for the size and their number.
        timeout = settings["ready_timeout"] * max(1.0, size * count / 10_000)
        for server in fresh:
            servers.wait_ready(server, tls, timeout)
        ready_s = time.monotonic() - began
        for server in fresh:
            warm(server)
        memory = {"cached": fresh[0].worker_rss()}
        first_filter = _first_filters(fresh, baseline, tls, size, first, log)
        memory["after_first_filter"] = fresh[0].worker_rss()
        later_filter = _later_filters(fresh[0], baseline, tls, size, later, settings["duration"],
                                      settings["repeats"], settings["min_requests"], log)
        memory["after_later_filters"] = fresh[0].worker_rss()
        memory["peak"] = peak_rss(fresh[0])
        memory["baseline"] = baseline.worker_rss()
    return {"servers": count, "ready_s": ready_s, "wall_s": time.monotonic() - began, "first_filter": first_filter,
            "later_filter": later_filter, "memory": memory}
