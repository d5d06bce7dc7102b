"""The scheduling cycle as kube-scheduler runs it, against a baseline that answers the same bytes.

kube-scheduler calls the extender inside its serial scheduling cycle: one pod at a time, /filter with every
feasible node's name, then /prioritize with the nodes that passed, on a kept-alive connection. What a
cluster feels is the latency of that pair at concurrency 1, so this scenario measures exactly that: one
connection, one request at a time, filter then prioritize, for ``duration`` seconds, and the p50 of the
pair.

The baseline answers the same requests through the same gunicorn worker, TLS and Flask setup
(``webhook.tools.bench.baseline``): it decodes each request and returns the very bytes the service returned
for it (``baseline.canned_path``). Reply sizes are then equal on both sides, so the ratio of the two pairs is
what the service spends on top of reading the request and writing its reply. Both sides run alternately,
``repeats`` times; the median of the pairwise ratios is reported.

The same pod is sent every cycle, so the service's pod cache answers /filter too; in a real cycle the
filter parses the pod once and prioritize reuses it (the in-process figure ``parse_pod`` says what that
parse costs).
"""

from __future__ import annotations

import http.client
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from webhook.tools import stats
from webhook.tools.bench import baseline as baseline_app
from webhook.tools.bench import loadgen, payloads
from webhook.tools.servers import Server, Tls

REPLY_LIMIT = 300 * 1024  # bytes of the filter reply at 5,000 names (the target)


def _post(conn: http.client.HTTPSConnection, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers=loadgen.HEADERS)
    response = conn.getresponse()
    return response.status, response.read()


def _connect(server: Server, tls: Tls) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(server.host, server.port, context=tls.client_context(), timeout=120)


def cycles(server: Server, tls: Tls, steps: list[tuple[str, bytes]], duration: float, least: int) -> dict[str, Any]:
    """Send ``steps`` (path, body) one after the other on one kept-alive connection, again and again for
    ``duration`` seconds (at least ``least`` times); the latency of each step and of the whole cycle."""
    conn = _connect(server, tls)
    try:
        for path, body in steps:  # the handshake and first calls stay out of the figures
            _post(conn, "POST", path, body)
        per_step: list[list[float]] = [[] for _ in steps]
        whole: list[float] = []
        cpu0 = server.cpu_seconds()
        stop = time.monotonic() + duration
        while time.monotonic() < stop or len(whole) < least:
            begin = time.perf_counter()
            for i, (path, body) in enumerate(steps):
                start = time.perf_counter()
                status, data = _post(conn, "POST", path, body)
                if status != 200:
                    raise RuntimeError(f"{server.name} {path}: HTTP {status}: {data[:200]!r}")
                per_step[i].append(time.perf_counter() - start)
            whole.append(time.perf_counter() - begin)
        cpu = server.cpu_seconds() - cpu0
    finally:
        conn.close()
    out: dict[str, Any] = {"cycles": len(whole), "pair_p50_ms": stats.percentile(whole, 50) * 1e3,
                           "pair_p99_ms": stats.percentile(whole, 99) * 1e3,
                           "server_cpu_ms_per_cycle": cpu / len(whole) * 1e3}
    for (path, _), latencies in zip(steps, per_step, strict=True):
        verb = path.split("?", 1)[0].rsplit("/", 1)[1]
        out[f"{verb}_p50_ms"] = stats.percentile(latencies, 50) * 1e3
        out[f"{verb}_p99_ms"] = stats.percentile(latencies, 99) * 1e3
    return out


def reasons_complete(names: list[str], reply: dict[str, Any]) -> bool:
    """Every candidate either passed or has a non-empty reason (kube-scheduler's FailedScheduling shows them)."""
    passed = set(reply.get("NodeNames") or ())
    reasons = {**(reply.get("FailedNodes") or {}), **(reply.get("FailedAndUnresolvableNodes") or {})}
    return all(name in passed or (isinstance(reasons.get(name), str) and reasons[name]) for name in names)


def run(imex: Server, baseline: Server, tls: Tls, size: int, duration: float, repeats: int, least: int,
        log: Callable[[str], None]) -> dict[str, Any]:
    pod = payloads.scheduled_pod(f"{payloads.MEASURED_CD}-1", payloads.MEASURED_CD)
    names = payloads.names(size)
    filter_body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    conn, base = _connect(imex, tls), _connect(baseline, tls)
    try:
        _, filter_reply = _post(conn, "POST", "/filter", filter_body)
        reply = orjson.loads(filter_reply)
        passed = reply.get("NodeNames") or []
        prioritize_body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": passed})
        _, prioritize_reply = _post(conn, "POST", "/prioritize", prioritize_body)
        for name, data in (("filter", filter_reply), ("prioritize", prioritize_reply)):
            status, _ = _post(base, "PUT", baseline_app.canned_path(name, name), data)
            if status != 200:
                raise RuntimeError(f"the baseline did not store the {name} reply (HTTP {status})")
    finally:
        conn.close()
        base.close()
    sides = {"imex": (imex, [("/filter", filter_body), ("/prioritize", prioritize_body)]),
             "baseline": (baseline, [(baseline_app.canned_path("filter", "filter"), filter_body),
                                     (baseline_app.canned_path("prioritize", "prioritize"), prioritize_body)])}
    runs: dict[str, list[dict[str, Any]]] = {"imex": [], "baseline": []}
    for r in range(repeats):
        for side in ("imex", "baseline") if r % 2 == 0 else ("baseline", "imex"):
            server, steps = sides[side]
            figures = cycles(server, tls, steps, duration, least)
            runs[side].append(figures)
            log(f"  serial cycle {size} {side} {r + 1}/{repeats}: pair p50 {figures['pair_p50_ms']:.2f} ms "
                f"(filter {figures['filter_p50_ms']:.2f}, prioritize {figures['prioritize_p50_ms']:.2f}), "
                f"{figures['cycles']} cycles")
    ratio = statistics.median(a["pair_p50_ms"] / b["pair_p50_ms"]
                              for a, b in zip(runs["imex"], runs["baseline"], strict=True) if b["pair_p50_ms"])
    imex_fig = {k: statistics.median(r[k] for r in runs["imex"]) for k in runs["imex"][0]}
    base_fig = {k: statistics.median(r[k] for r in runs["baseline"]) for k in runs["baseline"][0]}
    pair = imex_fig["pair_p50_ms"] / 1e3
    return {
        "nodes": size, "passed": len(passed), "filter_reply_bytes": len(filter_reply),
        "prioritize_reply_bytes": len(prioritize_reply), "reasons_complete": reasons_complete(names, reply),
        "filter_p50_ms": imex_fig["filter_p50_ms"], "filter_p99_ms": imex_fig["filter_p99_ms"],
        "prioritize_p50_ms": imex_fig["prioritize_p50_ms"], "prioritize_p99_ms": imex_fig["prioritize_p99_ms"],
        "pair_p50_ms": imex_fig["pair_p50_ms"], "baseline_pair_p50_ms": base_fig["pair_p50_ms"],
        "pair_ratio": ratio, "extender_pods_per_s_ceiling": 1 / pair if pair else 0.0,
        "imex": imex_fig | {"runs": runs["imex"]}, "baseline": base_fig | {"runs": runs["baseline"]},
    }
