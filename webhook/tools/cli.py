"""Command lines of ``imex-webhook bench``, ``simulate``, ``soak`` and ``explain`` (hosted by ``webhook.cli``).

Each is a :class:`webhook.command.Command`: its flags and its run over the parsed namespace.
``python -m webhook.tools.cli bench|simulate|soak ...`` hosts the first three on its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from webhook import command
from webhook.command import Bounds, Command, out_of_range
from webhook.tools.simulate import workload


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated node counts, got {text!r}") from exc
    if not sizes or any(s < 18 for s in sizes):
        raise argparse.ArgumentTypeError("node counts must be at least 18 (one clique)")
    return sizes


# What each tool can use; beyond it a run would never end or overflow (one line naming the flag, exit 2).
BENCH_BOUNDS: Bounds = {"--concurrency": (1, 1024), "--duration": (0.01, 3600), "--repeats": (1, 100),
                        "--procs": (1, 64), "--threads": (1, 1024), "--micro-budget": (0.001, 600)}
SIMULATE_BOUNDS: Bounds = {"--cliques": (1, 20_000), "--jobs": (1, 10_000_000), "--load": (0.001, 100),
                           "--fabric-zones": (0, 10_000), "--fabric-pool": (0, 1_000_000),
                           "--stuck-timeout": (1, 365 * 86400), "--node-failures": (0, 100),
                           "--repair-hours": (0.01, 8760), "--fabric-degradations": (0, 100),
                           "--degraded-hours": (0.01, 8760), "--degraded-loss": (0, 1), "--exclusive-share": (0, 1),
                           "--multi-rack-load": (0, 1), "--walltime-share": (0, 1)}
WORKERS_MAX = 256
SOAK_BOUNDS: Bounds = {"--minutes": (0.01, 24 * 60), "--interval": (0.1, 3600), "--rss-growth-mib": (0.1, 1 << 20)}


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="output directory (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="a few seconds in all, for CI: checks shapes, not figures")
    p.add_argument("--nodes", type=_sizes, default=None, metavar="N[,N...]",
                   help="cluster sizes, nodes in cliques of 18 x 4 GPUs (default 500,5000)")
    p.add_argument("--concurrency", type=int, default=None, help="concurrent kept-alive connections (default 4)")
    p.add_argument("--duration", type=float, default=None, help="seconds per run (default 3)")
    p.add_argument("--repeats", type=int, default=None, help="A/B pairs per scenario (default 3)")
    p.add_argument("--procs", type=int, default=1,
                   help="load generator processes sharing the connections (default 1; see docs/BENCHMARKS.md)")
    p.add_argument("--threads", type=int, default=8, help="gunicorn threads per worker, both sides (default 8)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                   help="the service's log level (default info, as deployed: one decision line per request)")
    p.add_argument("--micro-budget", type=float, default=None, help="seconds per in-process case (default 1)")
    p.add_argument("--only", choices=("segments",), default=None,
                   help="run one scenario alone: 'segments', the job larger than one domain (docs/BENCHMARKS.md)")


def run_bench(ns: argparse.Namespace) -> int:
    from webhook.tools.bench import runner as bench

    cfg = bench.Config.quick_run(ns.out) if ns.quick else bench.Config(out=ns.out)
    overrides = {"sizes": ns.nodes, "concurrency": ns.concurrency, "duration": ns.duration, "repeats": ns.repeats,
                 "micro_budget": ns.micro_budget}
    for key, value in overrides.items():
        if value is not None:
            setattr(cfg, key, value)
    cfg.procs, cfg.threads, cfg.log_level = ns.procs, ns.threads, ns.log_level
    cfg.segments_only = ns.only == "segments"
    problem = out_of_range(ns, BENCH_BOUNDS)
    if problem:
        print(f"imex-webhook bench: {problem}", file=sys.stderr)
        return 2
    try:
        bench.run(cfg)
    except (RuntimeError, OSError) as exc:
        print(f"imex-webhook bench: {exc}", file=sys.stderr)
        return 1
    return 0


def add_simulate_arguments(p: argparse.ArgumentParser) -> None:
    d = workload.Params()
    p.add_argument("--out", type=Path, default=Path("simulation"), help="output directory (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed of the job stream (default %(default)s)")
    p.add_argument("--cliques", type=int, default=d.cliques, help="NVL72 cliques of 18 x 4 GPUs (default %(default)s)")
    p.add_argument("--jobs", type=int, default=d.jobs, help="jobs submitted (default %(default)s)")
    p.add_argument("--load", type=float, default=d.load,
                   help="offered GPU load as a fraction of the clique GPUs (default %(default)s)")
    p.add_argument("--fabric-zones", type=int, default=d.fabric_zones, help="composable zones (default %(default)s)")
    p.add_argument("--fabric-pool", type=int, default=d.fabric_pool,
                   help="free fabric GPU blocks per zone (default %(default)s)")
    p.add_argument("--stuck-timeout", type=float, default=d.stuck_timeout,
                   help="seconds a partly placed job may wait before it is torn down as stuck (default %(default)s)")
    p.add_argument("--node-failures", type=float, default=d.node_failures,
                   help="node failures per node per day (default %(default)s)")
    p.add_argument("--repair-hours", type=float, default=d.repair_hours,
                   help="mean hours until a failed node is back (default %(default)s)")
    p.add_argument("--fabric-degradations", type=float, default=d.fabric_degradations,
                   help="NVLink fabric degradations per tray per day (default %(default)s)")
    p.add_argument("--degraded-hours", type=float, default=d.degraded_hours,
                   help="mean hours a degraded fabric takes to be healthy again (default %(default)s)")
    p.add_argument("--degraded-loss", type=float, default=d.degraded_loss,
                   help="chance that a running job is lost per degradation of its domain (default %(default)s)")
    p.add_argument("--exclusive-share", type=float, default=d.exclusive_share, metavar="F",
                   help="share of ComputeDomain jobs annotated imex-webhook.io/exclusive-domain=true, drawn from the "
                        "seed on a stream of their own (default %(default)s)")
    p.add_argument("--multi-rack-load", type=float, default=d.multi_rack_load, metavar="F",
                   help="GPU load offered by ComputeDomain jobs of 2-4 racks (segment-size = a rack's trays), as a "
                        "fraction of the clique GPUs, on top of --load, on an arrival stream of their own; needs "
                        "--cliques 2 or more (default %(default)s)")
    p.add_argument("--walltime-share", type=float, default=d.walltime_share, metavar="F",
                   help="share of jobs that state a walltime (imex-webhook.io/max-runtime: the runtime times 1.2 to 3, "
                        "drawn from the seed on a stream of their own); the service holds domains for the groups "
                        "that wait longest and backfills by it (default %(default)s)")
    p.add_argument("--policies", default=",".join(workload.DEFAULT_POLICIES),
                   help=f"comma-separated, from {', '.join(workload.POLICIES)} (default %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--seeds", default=None, metavar="N[,N...]",
                   help="run each of these seeds instead of --seed, each in OUT/seed-<n>/, and write seeds.md and "
                        "seeds.json: every class on every seed side by side and the service's p99 against gang-tas's")
    p.add_argument("--workers", type=int, default=None,
                   help="processes for --seeds (default: one per CPU, at most one per seed)")


def run_simulate(ns: argparse.Namespace) -> int:
    from webhook.tools.simulate import report, simulation
    from webhook.tools.simulate import seeds as seed_runs

    policies = tuple(p.strip() for p in ns.policies.split(",") if p.strip())
    unknown = [p for p in policies if p not in workload.POLICIES]
    if unknown or not policies:
        print(f"imex-webhook simulate: unknown policy {unknown}; choose from {', '.join(workload.POLICIES)}",
              file=sys.stderr)
        return 2
    problem = out_of_range(ns, SIMULATE_BOUNDS)
    seeds: tuple[int, ...] = ()
    if not problem and ns.seeds is not None:
        try:
            seeds = seed_runs.parse_seeds(ns.seeds)
        except ValueError as exc:
            problem = str(exc)
    if not problem and ns.workers is not None and not 1 <= ns.workers <= WORKERS_MAX:
        problem = f"--workers {ns.workers}: expected 1 to {WORKERS_MAX}"
    if not problem and ns.multi_rack_load > 0 and ns.cliques < 2:
        problem = f"--multi-rack-load {ns.multi_rack_load:g} needs --cliques 2 or more (a multi-rack job spans 2 to 4)"
    problem = problem or (_plots_problem() if not ns.no_plots else None)
    problem = problem or _out_problem(ns.out)
    if problem:
        print(f"imex-webhook simulate: {problem}", file=sys.stderr)
        return 2
    params = workload.Params(seed=ns.seed, cliques=ns.cliques, jobs=ns.jobs, load=ns.load,
                             fabric_zones=ns.fabric_zones, fabric_pool=ns.fabric_pool, stuck_timeout=ns.stuck_timeout,
                             node_failures=ns.node_failures, repair_hours=ns.repair_hours,
                             fabric_degradations=ns.fabric_degradations, degraded_hours=ns.degraded_hours,
                             degraded_loss=ns.degraded_loss, exclusive_share=ns.exclusive_share,
                             multi_rack_load=ns.multi_rack_load, walltime_share=ns.walltime_share)
    if seeds:
        combined = seed_runs.run(params, seeds, policies, ns.out, plots=not ns.no_plots, workers=ns.workers)
        print(seed_runs.markdown(combined), end="")
        print(f"Wrote seeds.md, seeds.json and seed-<n>/ for seeds {ns.seeds} to {ns.out.resolve()}")
        return 0
    result = simulation.run(params, policies, ns.out, plots=not ns.no_plots)
    print(report.tables(result), end="")
    written = ["report.md", "metrics.json", *result["plots"]]
    print(f"Wrote {', '.join(written)} to {ns.out.resolve()}")
    return 0


def _plots_problem() -> str | None:
    """Checked before a run that may take minutes, not after it."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return "the PNG plots need matplotlib: pip install 'imex-webhook[tools]', or pass --no-plots"
    return None


def _out_problem(out: Path) -> str | None:
    """--out must be a directory we can write (created if absent), checked before the run."""
    import tempfile

    if out.exists() and not out.is_dir():
        return f"--out {out}: exists and is not a directory"
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        return f"--out {out}: cannot write there: {exc.strerror or exc}"
    return None


def add_soak_arguments(p: argparse.ArgumentParser) -> None:
    from webhook.tools.soak import runner as soak  # it drives the demo cluster: imported for soak alone

    d = soak.Config
    p.add_argument("--minutes", type=float, required=True, help="how long to run")
    p.add_argument("--interval", type=float, default=d.interval,
                   help="seconds between samples (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed of the stream (default %(default)s)")
    p.add_argument("--out", type=Path, default=d.out, help="write soak.json and soak.md here")
    p.add_argument("--rss-growth-mib", type=float, default=d.rss_growth_mib,
                   help="allowed RSS growth of the worker after warm-up, MiB (default %(default)s)")


def run_soak(ns: argparse.Namespace) -> int:
    from webhook.tools.soak import runner as soak

    problem = out_of_range(ns, SOAK_BOUNDS)
    if problem:
        print(f"imex-webhook soak: {problem}", file=sys.stderr)
        return 2
    cfg = soak.Config(minutes=ns.minutes, interval=ns.interval, seed=ns.seed, out=ns.out,
                      rss_growth_mib=ns.rss_growth_mib)
    try:
        result = soak.run(cfg)
    except (RuntimeError, OSError) as exc:
        print(f"imex-webhook soak: {exc}", file=sys.stderr)
        return 1
    return 0 if result.ok else 1


def add_explain_arguments(p: argparse.ArgumentParser) -> None:
    from webhook.tools.explain import client as explain  # an HTTP client: imported for explain alone

    p.description = explain.DESCRIPTION
    explain.add_arguments(p)


def run_explain(ns: argparse.Namespace) -> int:
    from webhook.tools.explain import client as explain

    return explain.run(ns)


BENCH = Command(
    "bench", "measure the service against a trivial baseline in the same run", add_bench_arguments, run_bench,
    "Measure /filter, /prioritize and /mutate of the real service (gunicorn gthread, TLS, embedded cluster) "
    "against a trivial Flask baseline behind the same configuration, in one run, plus in-process decision "
    "costs. Writes bench.md and bench.json to --out.")
SIMULATE = Command(
    "simulate", "compare placement policies on a simulated cluster", add_simulate_arguments, run_simulate,
    "Discrete-event simulation of a large GPU cluster under four placement policies fed the same job stream: "
    "imex-webhook (the service's own engine behind kube-scheduler's emulated scheduling cycle), default "
    "(least-allocated, no domain awareness), affinity-only (required pod affinity on the clique label) and "
    "gang-tas (Kueue Topology-Aware Scheduling: a job starts only when one domain has room for all its pods). "
    "Writes report.md, metrics.json and PNG plots to --out and prints the tables, with queueing delay per job "
    "size.")
SOAK = Command(
    "soak", "a long mixed request stream against serve: resources, latency, invariants",
    add_soak_arguments, run_soak,
    "Drive a mixed stream (mutate, filter, prioritize, bind, pod completions, refusals and retries) against a "
    "real `serve` (embedded demo cluster, TLS on 127.0.0.1) for --minutes; print the worker's RSS, open fds, "
    "threads and p50/p99 latency per verb every --interval seconds; check the placement invariants and RSS "
    "growth. Exits 1 on any violation. See docs/SOAK.md.")
EXPLAIN = Command("explain", "ask a running service where a group is placed and why a pod waits",
                  add_explain_arguments, run_explain)
TOOLS = (BENCH, SIMULATE, SOAK)


def main(argv: Sequence[str] | None = None) -> int:
    top = command.parser("python -m webhook.tools.cli", "The benchmark, simulation and soak tools of imex-webhook.",
                         TOOLS)
    return command.main(top, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
