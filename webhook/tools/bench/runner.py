"""``imex-webhook bench``: the service against a trivial baseline, in one run, on this machine.

Method (docs/BENCHMARKS.md; made for a shared two-core machine):
- the real service (``imex-webhook serve``, embedded cluster of N nodes in cliques of 18 x 4 GPUs) and
  the baseline (``baseline``: decode and re-encode the body) run under the same gunicorn application
  class, worker (``webhook.serving.worker.Worker``, gthread) and TLS setup, one worker each, the same
  certificate;
- for every scenario the two are loaded in turn, A/B then B/A, ``repeats`` times; each pair gives a
  ratio, and the median of the pairwise ratios is reported, so drift and busy neighbours cancel out;
- the CPU seconds of each server's gunicorn master and worker per request are reported beside the
  wall-clock figures: they do not depend on what else the machine is doing.
- the serial scheduling cycle at the largest size (``webhook.tools.bench.serial``) runs against a baseline that
  answers the service's own reply bytes, and the worker's resident memory is read once the cluster is
  cached and again at the end.
The group measured has a stored reservation (its first pod was filtered and bound during set-up),
which is what every pod of a group but the first sees.
- a job larger than one domain (``segmented``, ``segmented_http``): its plan, its first member's filter on
  freshly started servers and a later member's, at every size where it has segments; ``segments_only``
  (``--only segments``) runs that alone, for cluster sizes the other scenarios are not made for.
"""

from __future__ import annotations

import functools
import http.client
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from webhook.serving.worker import Worker
from webhook.tools import servers, stats
from webhook.tools.bench import baseline, loadgen, micro, payloads, report, segmented, segmented_http, serial
from webhook.tools.bench.loadgen import Run, Target
from webhook.tools.servers import Server, Tls

HEAVY_BYTES = 4 * 1024 * 1024  # bodies above this are sent one at a time (the scheduler's cycle is serial)
NODELIST_MAX_BODY = payloads.NODELIST_MAX_BODY


@dataclass
class Config:
    out: Path
    sizes: tuple[int, ...] = (500, 5000)
    concurrency: int = 4
    duration: float = 3.0
    repeats: int = 3
    procs: int = 1
    threads: int = 8
    min_requests: int = 5
    log_level: str = "info"
    micro_budget: float = 1.0
    nodelist_pairs: int = 5
    quick: bool = False
    segments_only: bool = False  # only the job larger than one domain (``--only segments``)
    ready_timeout: float = 180.0
    progress: bool = True

    @classmethod
    def quick_run(cls, out: Path) -> Config:
        """A few seconds in all: the shape of every output, not figures to quote."""
        return cls(out=out, sizes=(60, 200), concurrency=2, duration=0.3, repeats=1, min_requests=3,
                   micro_budget=0.05, nodelist_pairs=1, quick=True, ready_timeout=60.0)


@dataclass
class Scenario:
    name: str
    verb: str
    mode: str  # names | nodelist | review
    nodes: int
    path: str
    body: bytes
    concurrency: int
    server: Server
    runs: dict[str, list[dict[str, float]]] = field(default_factory=lambda: {"imex": [], "baseline": []})


def _post(server: Server, tls: Tls, path: str, body: Any) -> tuple[int, Any]:
    conn = http.client.HTTPSConnection(server.host, server.port, context=tls.client_context(), timeout=120)
    try:
        conn.request("POST", path, body=orjson.dumps(body), headers=loadgen.HEADERS)
        response = conn.getresponse()
        data = response.read()
        return response.status, orjson.loads(data) if data else None
    finally:
        conn.close()


def reserve(server: Server, tls: Tls, nodes: int) -> dict[str, Any]:
    """Filter and bind the measured group's first pod, so the group holds a stored reservation."""
    first = payloads.scheduled_pod(f"{payloads.MEASURED_CD}-0", payloads.MEASURED_CD)
    status, reply = _post(server, tls, "/filter", {"Pod": first, "Nodes": None, "NodeNames": payloads.names(nodes)})
    if status != 200 or not reply.get("NodeNames"):
        raise RuntimeError(f"set-up filter on {server.name} failed ({status}): {str(reply)[:300]}")
    node = reply["NodeNames"][0]
    meta = first["metadata"]
    status, bound = _post(server, tls, "/bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                                 "PodUID": meta["uid"], "Node": node})
    if status != 200 or bound.get("Error"):
        raise RuntimeError(f"set-up bind on {server.name} failed ({status}): {bound}")
    second = payloads.scheduled_pod(f"{payloads.MEASURED_CD}-1", payloads.MEASURED_CD)
    status, reply = _post(server, tls, "/filter", {"Pod": second, "Nodes": None, "NodeNames": payloads.names(nodes)})
    return {"bound_first_pod_to": node, "second_pod_passes": len(reply.get("NodeNames") or [])}


def mutate_available(server: Server, tls: Tls) -> str:
    """'' when /mutate answers the bench review with a patch; else why the scenario is skipped."""
    status, reply = _post(server, tls, "/mutate", payloads.admission_review())
    if status == 404:
        return "the service has no /mutate endpoint (404)"
    response = (reply or {}).get("response") if isinstance(reply, dict) else None
    if status != 200 or not isinstance(response, dict) or not response.get("patch"):
        return f"/mutate did not return a patch for the bench pod (HTTP {status}: {str(reply)[:200]})"
    return ""


def _figures(run: Run, cpu: float) -> dict[str, float]:
    return {"requests": run.requests, "errors": run.errors, "wall_s": run.wall,
            "throughput_rps": run.throughput, "p50_ms": stats.percentile(run.latencies, 50) * 1e3,
            "p99_ms": stats.percentile(run.latencies, 99) * 1e3,
            "server_cpu_ms_per_request": cpu / run.requests * 1e3 if run.requests else 0.0,
            "client_cpu_utilisation": run.client_cpu / run.wall if run.wall else 0.0,
            "reply_bytes": run.reply_bytes}


def measure(cfg: Config, scenario: Scenario, side: str, server: Server, tls: Tls, label: str) -> dict[str, float]:
    target = Target(server.host, server.port, scenario.path, scenario.body, tls)
    before = server.cpu_seconds()
    run = loadgen.measure(target, scenario.concurrency, cfg.duration, cfg.min_requests, cfg.procs, label,
                          cfg.progress)
    figures = _figures(run, server.cpu_seconds() - before)
    if run.errors:
        raise RuntimeError(f"{side} {scenario.name}: {run.errors} failed requests, first: {run.first_error}")
    return figures


def scenarios(cfg: Config, imex: dict[int, Server], mutate_server: Server | None) -> list[Scenario]:
    out = []
    pod = payloads.scheduled_pod(f"{payloads.MEASURED_CD}-1", payloads.MEASURED_CD)
    for size in cfg.sizes:
        for mode in ("names", "nodelist"):
            body = orjson.dumps(payloads.extender_args(pod, size, full=mode == "nodelist"))
            conc = 1 if len(body) > HEAVY_BYTES else cfg.concurrency
            for verb in ("filter", "prioritize"):
                out.append(Scenario(f"{verb}-{mode}-{size}", verb, mode, size, f"/{verb}", body, conc, imex[size]))
    if mutate_server is not None:
        body = orjson.dumps(payloads.admission_review())
        out.append(Scenario("mutate", "mutate", "review", min(cfg.sizes), "/mutate", body, cfg.concurrency,
                            mutate_server))
    return out


def run_pairs(cfg: Config, items: list[Scenario], baseline: Server, tls: Tls, log: Callable[[str], None]) -> None:
    for scenario in items:
        for r in range(cfg.repeats):
            order = [("imex", scenario.server), ("baseline", baseline)]
            for side, server in order if r % 2 == 0 else order[::-1]:
                label = f"{scenario.name} {side} {r + 1}/{cfg.repeats}"
                figures = measure(cfg, scenario, side, server, tls, label)
                scenario.runs[side].append(figures)
                log(f"  {label:<44} {figures['throughput_rps']:8.1f} req/s  p50 {figures['p50_ms']:7.2f} ms  "
                    f"p99 {figures['p99_ms']:7.2f} ms  cpu {figures['server_cpu_ms_per_request']:6.3f} ms/req")


def summarise(items: list[Scenario]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for s in items:
        imex, base = s.runs["imex"], s.runs["baseline"]
        ratios = {key: statistics.median(a[key] / b[key] for a, b in zip(imex, base, strict=True) if b[key])
                  for key in ("throughput_rps", "p50_ms", "p99_ms", "server_cpu_ms_per_request")}
        result[s.name] = {
            "verb": s.verb, "mode": s.mode, "nodes": s.nodes, "path": s.path, "body_bytes": len(s.body),
            "concurrency": s.concurrency,
            "imex": {k: statistics.median(r[k] for r in imex) for k in imex[0]} | {"runs": imex},
            "baseline": {k: statistics.median(r[k] for r in base) for k in base[0]} | {"runs": base},
            "ratio": {"throughput": ratios["throughput_rps"], "p50": ratios["p50_ms"], "p99": ratios["p99_ms"],
                      "cpu_per_request": ratios["server_cpu_ms_per_request"]},
            "met": {"throughput>=0.8": ratios["throughput_rps"] >= 0.8, "p99<=1.25": ratios["p99_ms"] <= 1.25},
        }
    return result


def imex_command(port: int, tls: Tls, cluster: Path, threads: int, log_level: str) -> list[str]:
    return [sys.executable, "-m", "webhook", "serve", "--bind", f"127.0.0.1:{port}", *servers.tls_flags(tls),
            "--cluster", str(cluster), "--threads", str(threads), "--log-level", log_level, "--workers", "1",
            "--max-body", str(NODELIST_MAX_BODY)]


def _service_phase(cfg: Config, imex: dict[int, Server], base: Server, tls: Tls,
                   say: Callable[[str], None]) -> dict[str, Any]:
    """Every scenario of the one-domain groups over TLS, the serial cycle and the workers' memory."""
    skipped: dict[str, str] = {}
    spawned = [base, *imex.values()]
    setup = {str(size): reserve(server, tls, size) for size, server in imex.items()}
    # The cluster cached and one group's filter served (what a filter keeps per node generation is built).
    memory = {"cached": {server.name: server.worker_rss() for server in spawned}}
    why = mutate_available(imex[min(cfg.sizes)], tls)
    if why:
        skipped["mutate"] = why
        say(f"bench: skipping /mutate: {why}")
    items = scenarios(cfg, imex, None if why else imex[min(cfg.sizes)])
    say(f"bench: {len(items)} scenarios x {cfg.repeats} A/B pairs, {cfg.duration:g}s per run")
    run_pairs(cfg, items, base, tls, say)
    say(f"bench: the serial scheduling cycle at {max(cfg.sizes)} nodes, against the same bytes")
    serial_cycle = serial.run(imex[max(cfg.sizes)], base, tls, max(cfg.sizes), cfg.duration, cfg.repeats,
                              cfg.min_requests, say)
    memory["after_run"] = {server.name: server.worker_rss() for server in spawned}
    return {"setup": setup, "skipped": skipped, "http": summarise(items), "serial_cycle": serial_cycle,
            "memory": memory}


def _segments_http(cfg: Config, clusters: dict[int, Path], base: Server, tls: Tls, work: Path,
                   say: Callable[[str], None]) -> dict[str, Any]:
    """The job larger than one domain over TLS at every size where it has segments (``segmented_http``)."""
    settings = {"repeats": cfg.repeats, "duration": cfg.duration, "min_requests": cfg.min_requests,
                "ready_timeout": cfg.ready_timeout}
    out: dict[str, Any] = {}
    for size, cluster in clusters.items():
        why = segmented.unsegmented(size)
        if why:
            say(f"bench: the segmented job is not measured at {size} nodes: {why}")
            out[str(size)] = {"skipped": why}
            continue
        out[str(size)] = segmented_http.run(
            size, cluster, base, tls, work, settings,
            lambda port, path: imex_command(port, tls, path, cfg.threads, cfg.log_level),
            functools.partial(reserve, tls=tls, nodes=size), say)
    return out


def run(cfg: Config, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    say = log or (lambda text: print(text, file=sys.stderr, flush=True))
    started = time.monotonic()
    work = cfg.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    tls = servers.make_tls(work / "tls")
    say(f"bench: writing clusters of {', '.join(map(str, cfg.sizes))} nodes and starting the servers"
        + (" (the segmented job only)" if cfg.segments_only else ""))
    port = servers.free_port()
    base = servers.spawn("baseline", baseline.command(port, tls, cfg.threads, NODELIST_MAX_BODY), port,
                         work / "baseline.log")
    clusters = {size: payloads.write_cluster(work / f"cluster-{size}.json", size) for size in cfg.sizes}
    imex: dict[int, Server] = {}
    for size in () if cfg.segments_only else cfg.sizes:
        port = servers.free_port()
        imex[size] = servers.spawn(f"imex-{size}", imex_command(port, tls, clusters[size], cfg.threads,
                                                                cfg.log_level), port, work / f"imex-{size}.log")
    results: dict[str, Any] = {
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}
        | {"heavy_bytes": HEAVY_BYTES, "server_workers": 1, "worker_class": "gthread",
           "worker": f"{Worker.__module__}.{Worker.__qualname__}"},
    }
    with servers.running([base, *imex.values()]) as spawned:
        for server in spawned:
            servers.wait_ready(server, tls, cfg.ready_timeout)
        if imex:
            results.update(_service_phase(cfg, imex, base, tls, say))
        segments_http = _segments_http(cfg, clusters, base, tls, work, say)
    if imex:
        say("bench: in-process micro-benchmarks")
        results["in_process"] = micro.run(cfg.sizes, cfg.micro_budget, cfg.nodelist_pairs, say)
    results["segments"] = {size: row if "skipped" in row else segmented.run(int(size), cfg.micro_budget, say) | row
                           for size, row in segments_http.items()}
    results["machine"] = report.machine() | {  # the load average at the end, as the other runs record it
        "bench_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    results["wall_seconds"] = time.monotonic() - started
    report.write(cfg.out, results)
    say(f"bench: wrote {cfg.out / 'bench.md'} and {cfg.out / 'bench.json'} in {results['wall_seconds']:.0f}s")
    return results
