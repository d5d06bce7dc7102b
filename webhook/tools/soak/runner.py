"""``imex-webhook soak``: a long mixed stream against a real ``serve``, with resource and invariant checks.

Starts ``imex-webhook serve`` (one gunicorn worker, embedded built-in demo cluster, TLS on 127.0.0.1
only) and drives it the way kube-apiserver and kube-scheduler would for the whole run: groups of pods
(``imex-webhook.io/group`` + ``group-size`` annotations, 4 GPUs a pod) are admitted through ``/mutate``
(the JSON patch is applied), then every pod goes ``/filter`` over the nodes with enough free GPUs,
``/prioritize`` when more than one passes, and ``/bind`` to the best-scored node. Groups that do not fit
now are refused and retried later; groups that ran their random run time finish: the embedded cluster
has no watch, so the only way the service learns a completion is a later extender request that carries
the pod, and the soak re-sends each finished pod (``status.phase: Succeeded``, its ``nodeName``) as the
Pod of a ``/filter`` with no candidate nodes; the service's ``note_pod`` stores it as terminated.

Every ``interval`` seconds it samples the worker's RSS, open descriptors and threads from ``/proc`` and
the p50/p99 latency per verb over the interval. At the end it checks the invariants against ``/inspect``
and its own record of bindings (see ``check_invariants``) and the RSS growth after warm-up. The stream
itself: ``webhook.tools.soak.stream``.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from webhook.demo import cluster as demo
from webhook.tools import servers
from webhook.tools.soak.stream import VERBS, Client, Group, Stream


@dataclass
class Config:
    minutes: float = 1.0
    interval: float = 10.0
    seed: int = 1
    out: Path | None = None
    rss_growth_mib: float = 64.0  # allowed RSS growth from the end of warm-up to the end
    warmup: float = 0.25  # fraction of the run (at least one interval) before the RSS baseline is taken
    threads: int = 4
    ready_timeout: float = 60.0
    housekeeping: float = 2.0  # the service's --housekeeping-interval: releases finished groups' reservations


@dataclass
class Sample:
    t: float
    rss_kib: int
    fds: int
    threads: int
    requests: int
    errors: int
    groups_placed: int
    groups_finished: int
    refusals: int
    latency_ms: dict[str, dict[str, float]]


def proc_sample(pid: int) -> tuple[int, int, int]:
    """(VmRSS KiB, open descriptors, threads) of ``pid`` from /proc."""
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    return rss, fds, threads


def check_invariants(inspect: Mapping[str, Any], node_domain: Mapping[str, str | None],
                     groups: list[Group], node_gpus: Mapping[str, int],
                     used: Mapping[str, int]) -> list[str]:
    """Violations of: every group in one domain (ours and the service's record); no domain with more GPUs
    used plus promised to unfinished groups than it has; at most one reservation per group; every group
    with pods still running keeps exactly one reservation, in the domain its pods are in."""
    problems: list[str] = []
    for g in groups:
        domains = {node_domain.get(n) for n in g.bound.values()}
        if len(domains) > 1:
            problems.append(f"group {g.name} split across domains {sorted(map(str, domains))}")
    for sg in inspect.get("groups", []):
        domains = {node_domain.get(p["node"]) for p in sg.get("pods", []) if p.get("node")}
        if len(domains) > 1:
            problems.append(f"service group {sg['group']} split across domains {sorted(map(str, domains))}")
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for res in inspect.get("reservations", []):
        by_name.setdefault(res["name"], []).append(res)
    for name, found in by_name.items():
        if len(found) > 1:
            problems.append(f"group {name} holds {len(found)} reservations")
    group_ids = {res["group"] for res in inspect.get("reservations", [])}
    if len(group_ids) != len(inspect.get("reservations", [])):
        problems.append("a group id appears in more than one reservation")
    ours = {f"{demo.NAMESPACE}/{g.name}": g for g in groups}
    domain_used: dict[str, int] = {}
    domain_total: dict[str, int] = {}
    for node, dom in node_domain.items():
        if dom:
            domain_used[dom] = domain_used.get(dom, 0) + used.get(node, 0)
            domain_total[dom] = domain_total.get(dom, 0) + node_gpus.get(node, 0)
    promised = dict.fromkeys(domain_total, 0)
    for res in inspect.get("reservations", []):
        mine = ours.get(res["name"])
        if mine is not None and mine.finished:
            continue  # finished: released by the service's housekeeping after its grace period
        placed = len(mine.bound) if mine is not None else 0
        dom = res["domain"]
        promised[dom] = promised.get(dom, 0) + max(0, res["size"] - placed) * res["gpusPerPod"]
    for dom, total in domain_total.items():
        if domain_used[dom] + promised.get(dom, 0) > total:
            problems.append(f"domain {dom} over-committed: {domain_used[dom]} used + {promised[dom]} promised "
                            f"> {total} GPUs")
    for d in inspect.get("domains", []):
        if d.get("freeGpus", 0) < 0:
            problems.append(f"domain {d['domain']} has {d['freeGpus']} free GPUs")
    for g in groups:
        if g.finished or not g.bound:
            continue
        found = by_name.get(f"{demo.NAMESPACE}/{g.name}", [])
        runs_in = {node_domain.get(n) for n in g.bound.values()}
        if len(found) != 1:
            problems.append(f"group {g.name} with running pods has {len(found)} reservations (lost)")
        elif {found[0]["domain"]} != runs_in:
            problems.append(f"group {g.name} reserved {found[0]['domain']} but runs in {sorted(map(str, runs_in))}")
    return problems


@dataclass
class Result:
    samples: list[Sample]
    violations: list[str]
    rss_baseline_kib: int
    rss_final_kib: int
    rss_growth_mib: float
    rss_bound_mib: float
    groups: int
    groups_placed: int
    groups_finished: int
    refusals: int
    requests: int
    errors: int
    binding_errors: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.violations and self.errors == 0


def _line(s: Sample) -> str:
    lat = " ".join(f"{v}={s.latency_ms[v]['p50']:.1f}/{s.latency_ms[v]['p99']:.1f}" for v in VERBS
                   if s.latency_ms[v]["n"])
    return (f"t={s.t:6.1f}s rss={s.rss_kib / 1024:7.1f}MiB fds={s.fds:3d} threads={s.threads:3d} "
            f"req={s.requests:6d} err={s.errors} placed={s.groups_placed} finished={s.groups_finished} "
            f"refused={s.refusals} p50/p99ms {lat}")


def drive(client: Client, pid: int, cfg: Config, stream: TextIO,
          clock: Callable[[], float] = time.monotonic) -> Result:
    rng = random.Random(cfg.seed)
    work = Stream(client, rng)
    begin = clock()
    end = begin + cfg.minutes * 60
    next_sample = begin + cfg.interval
    samples: list[Sample] = []
    violations: list[str] = []
    while True:
        now = clock()
        if now >= next_sample:
            rss, fds, threads = proc_sample(pid)
            s = Sample(round(now - begin, 1), rss, fds, threads, client.requests, client.errors,
                       sum(1 for g in work.groups if g.started is not None),
                       sum(1 for g in work.groups if g.finished and g.started is not None),
                       work.refusals, client.take_latencies())
            samples.append(s)
            print(_line(s), file=stream, flush=True)
            inspect = client.call("inspect", "GET", "/inspect")
            for v in check_invariants(inspect, work.cluster.domain, work.groups, work.cluster.gpus,
                                      work.cluster.used):
                if v not in violations:
                    violations.append(v)
                    print(f"soak: VIOLATION at t={s.t}s: {v}", file=stream, flush=True)
            next_sample += cfg.interval
        if now >= end:
            break
        work.step(now)
    # What the service and we believe while groups still run, then the completions of the rest.
    inspect = client.call("inspect", "GET", "/inspect")
    violations += [v for v in check_invariants(inspect, work.cluster.domain, work.groups, work.cluster.gpus,
                                                work.cluster.used) if v not in violations]
    work.finish_all()
    inspect = client.call("inspect", "GET", "/inspect")
    for sg in inspect.get("groups", []):
        if f"{demo.NAMESPACE}/soak-" in sg["group"] and sg.get("pods"):
            violations.append(f"service still counts {len(sg['pods'])} live pods of finished group {sg['group']}")
    warm = max(1, int(len(samples) * cfg.warmup))
    baseline = samples[warm - 1].rss_kib if samples else 0
    final = proc_sample(pid)[0]
    growth = (final - baseline) / 1024
    if samples and growth > cfg.rss_growth_mib:
        violations.append(f"RSS grew {growth:.1f} MiB after warm-up (bound {cfg.rss_growth_mib:g} MiB)")
    return Result(samples, violations, baseline, final, round(growth, 1), cfg.rss_growth_mib, len(work.groups),
                  sum(1 for g in work.groups if g.started is not None),
                  sum(1 for g in work.groups if g.finished and g.started is not None), work.refusals,
                  client.requests, client.errors, work.binding_errors, round(clock() - begin, 1))


def report_markdown(result: Result, cfg: Config) -> str:
    lines = [f"# imex-webhook soak ({cfg.minutes:g} min, interval {cfg.interval:g}s, seed {cfg.seed})", "",
             "| t (s) | RSS MiB | fds | threads | requests | errors | " +
             " | ".join(f"{v} p50/p99 ms" for v in VERBS) + " |",
             "|---" * (6 + len(VERBS)) + "|"]
    for s in result.samples:
        lat = " | ".join(f"{s.latency_ms[v]['p50']:.1f}/{s.latency_ms[v]['p99']:.1f}" for v in VERBS)
        lines.append(f"| {s.t} | {s.rss_kib / 1024:.1f} | {s.fds} | {s.threads} | {s.requests} | {s.errors} | {lat} |")
    lines += ["", f"Groups: {result.groups} admitted, {result.groups_placed} placed, {result.groups_finished} "
              f"finished; {result.refusals} refusals; {result.requests} requests, {result.errors} errors.",
              f"RSS {result.rss_baseline_kib / 1024:.1f} MiB after warm-up, {result.rss_final_kib / 1024:.1f} MiB at "
              f"the end: {result.rss_growth_mib:+.1f} MiB (bound {result.rss_bound_mib:g}).", "",
              "Invariant violations: " + ("none" if not result.violations else ""),
              *[f"- {v}" for v in result.violations]]
    return "\n".join(lines) + "\n"


def run(cfg: Config, stream: TextIO = sys.stdout) -> Result:
    workdir = Path(tempfile.mkdtemp(prefix="imex-webhook-soak-"))
    tls = servers.make_tls(workdir / "tls")
    port = servers.free_port()
    command = [sys.executable, "-m", "webhook", "serve", "--bind", f"127.0.0.1:{port}", *servers.tls_flags(tls),
               "--workers", "1", "--threads", str(cfg.threads), "--log-level", "warning",
               "--housekeeping-interval", str(cfg.housekeeping)]
    server = servers.start("imex-webhook", command, port, tls, workdir / "serve.log", cfg.ready_timeout)
    with servers.running([server]):
        workers = server.pids[1:]
        if not workers:
            raise RuntimeError("no gunicorn worker found under the serve process")
        print(f"soak: serve pid {server.process.pid}, worker {workers[0]}, https://127.0.0.1:{port}, "
              f"{cfg.minutes:g} min, interval {cfg.interval:g}s, seed {cfg.seed}", file=stream, flush=True)
        client = Client(port, tls)
        try:
            result = drive(client, workers[0], cfg, stream)
        finally:
            client.close()
    if cfg.out is not None:
        cfg.out.mkdir(parents=True, exist_ok=True)
        data = {**asdict(result), "ok": result.ok,
                "parameters": {"minutes": cfg.minutes, "interval": cfg.interval, "seed": cfg.seed,
                               "rss_growth_mib": cfg.rss_growth_mib, "threads": cfg.threads}}
        (cfg.out / "soak.json").write_text(json.dumps(data, indent=2))
        (cfg.out / "soak.md").write_text(report_markdown(result, cfg))
    print(f"soak: {result.groups} groups ({result.groups_placed} placed, {result.groups_finished} finished), "
          f"{result.refusals} refusals, {result.requests} requests, {result.errors} errors; RSS "
          f"{result.rss_growth_mib:+.1f} MiB after warm-up (bound {cfg.rss_growth_mib:g})", file=stream)
    for v in result.violations:
        print(f"soak: VIOLATION: {v}", file=stream)
    print("soak: " + ("ok" if result.ok else "FAILED"), file=stream, flush=True)
    return result
