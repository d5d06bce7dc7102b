"""The rounds: every variant once per round, in an order that rotates, so each (a)/(b) pair ran close in
time on the same cluster; then the figures, the medians, the ratios and the table, written to ``out``."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from tests.e2e.realbench import report, run
from tests.e2e.realbench.cluster import bench_cluster
from tests.e2e.realbench.workload import Layout, plan


@dataclass(frozen=True)
class Settings:
    nodes: int
    rounds: int = 2
    variants: str = "abc"
    seed: int = 1
    fill: float = 0.5
    steady_rate: float = 2.0
    stall: float = 20.0
    run_timeout: float = 900.0


def order(round_no: int, variants: str) -> str:
    """Round k starts k places further along, so no variant always runs first (a cold or warm cluster)."""
    shift = round_no % len(variants)
    return variants[shift:] + variants[:shift]


def bench(settings: Settings, out: Path, log: IO[str], workdir: Path | None = None) -> dict[str, Any]:
    if not settings.variants or set(settings.variants) - set(report.VARIANTS):
        raise ValueError(f"--variants takes letters of {''.join(report.VARIANTS)}, got {settings.variants!r}")
    layout = Layout(settings.nodes)
    workload = plan(layout, seed=settings.seed, fill=settings.fill, steady_rate=settings.steady_rate)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    runs: list[tuple[int, str, dict[str, Any]]] = []
    with bench_cluster(workdir or out / "cluster", layout, log) as cluster:
        clique_of = {layout.node_name(i): str(layout.clique_of(i)) for i in range(layout.nodes)}
        burst = run.burst_names(workload)
        setup_s = time.monotonic() - started
        log.write(f"cluster of {layout.nodes} nodes ready in {setup_s:.0f} s; workload: {len(workload.jobs)} "
                  f"jobs ({workload.group_pods} pods), {len(workload.plain)} plain pods\n")
        log.flush()
        for round_no in range(settings.rounds):
            for variant in order(round_no, settings.variants):
                namespace = f"r{round_no}-{variant}"
                data = run.one_run(cluster, variant, namespace, workload, log, stall=settings.stall,
                                   timeout=settings.run_timeout)
                figs = report.figures(data, workload, clique_of, burst)
                runs.append((round_no, variant, figs))
                (out / f"{namespace}.metrics.txt").write_text(data.metrics)
                (out / "runs.json").write_text(json.dumps([{"round": r, "variant": v, **f} for r, v, f in runs],
                                                          indent=1))
                run.cleanup(cluster, namespace, log)
        timings = dict(cluster.timings, setup_s=setup_s, total_s=time.monotonic() - started)
    result = {"settings": asdict(settings), "jobs": len(workload.jobs), "group_pods": workload.group_pods,
              "plain_pods": len(workload.plain), "timings": timings, **report.summary(runs),
              "runs": [{"round": r, "variant": v, **f} for r, v, f in runs]}
    (out / "result.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(report.table(result) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m tests.e2e.realbench", description=__doc__)
    parser.add_argument("--nodes", type=int, required=True, help="fake GB200 nodes, in cliques of 18")
    parser.add_argument("--out", type=Path, required=True, help="directory for result.json, table.md, logs")
    parser.add_argument("--rounds", type=int, default=Settings.rounds, help="alternated rounds (default 2)")
    parser.add_argument("--variants", default=Settings.variants, help="which of a, b, c to run (default abc)")
    parser.add_argument("--seed", type=int, default=Settings.seed)
    parser.add_argument("--fill", type=float, default=Settings.fill,
                        help="share of the free nodes the jobs take (default 0.5)")
    parser.add_argument("--steady-rate", type=float, default=Settings.steady_rate,
                        help="jobs per second before the burst (default 2)")
    parser.add_argument("--stall", type=float, default=Settings.stall,
                        help="seconds without a binding after which a run ends (default 20)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    settings = Settings(args.nodes, args.rounds, args.variants, args.seed, args.fill, args.steady_rate, args.stall)
    result = bench(settings, args.out, sys.stderr)
    print(report.table(result))
    print(f"\ntook {result['timings']['total_s']:.0f} s; figures in {args.out / 'result.json'}")
    return 0
