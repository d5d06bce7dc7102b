"""Metrics, ``report.md``, ``metrics.json`` and the PNG plots of ``imex-webhook simulate``.

The metrics are defined so that they add up and can be checked: every submitted job is exactly one of
completed, stuck or pending at the end; split jobs are a subset of the completed ones. Utilisation is
time-weighted over the arrival window (first to last arrival), where the offered load is steady, not
over the drain at the end: *useful* counts GPUs of jobs running whole inside one domain, *held* every
GPU bound to a pod (including partial placements and split jobs). Queueing delay is also given per
job-size class (``workload.SIZE_CLASSES``: median and p90 over the jobs that started, with how many did).
Fields whose name starts with ``decision_`` or ends in ``wall_seconds`` are wall-clock timings;
everything else is deterministic.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from webhook.tools.simulate import workload
from webhook.tools.simulate.outcome import JobState, Outcome
from webhook.tools.simulate.workload import Job, Params
from webhook.tools.stats import percentile

TIMING_KEYS = ("decision_time_us", "wall_seconds")


def _weighted(timeline: list[tuple[float, int, int]], start: float, end: float, column: int) -> float:
    """Time-weighted mean of a step function sampled at events, over [start, end]."""
    if end <= start:
        return 0.0
    total = 0.0
    for (t0, *v0), (t1, *_) in itertools.pairwise(timeline):
        a, b = max(t0, start), min(t1, end)
        if b > a:
            total += (b - a) * v0[column - 1]
    return total / (end - start)


def delay_by_size(jobs: list[Job], states: list[JobState]) -> dict[str, dict[str, Any]]:
    """Per job-size class (``workload.SIZE_CLASSES``): jobs submitted and started, and the median and p90
    wait in minutes from arrival until the whole job runs, over the jobs that started (``None``: none did;
    jobs that never ran are not in the percentiles, so read them with the started count)."""
    out: dict[str, dict[str, Any]] = {}
    for label, *_ in workload.SIZE_CLASSES:
        pairs = [(j, s) for j, s in zip(jobs, states, strict=True) if workload.size_class(j.pods) == label]
        waits = [(s.started - j.arrival) / 60 for j, s in pairs if s.started is not None]
        out[label] = {"submitted": len(pairs), "started": len(waits),
                      "wait_p50_minutes": percentile(waits, 50) if waits else None,
                      "wait_p90_minutes": percentile(waits, 90) if waits else None}
    return out


def metrics(o: Outcome) -> dict[str, Any]:
    p, jobs, states = o.params, o.jobs, o.states
    count = {k: sum(1 for s in states if s.outcome == k) for k in ("completed", "stuck", "pending", "running")}
    split = sum(1 for s in states if s.outcome == "completed" and s.split)
    delays = sorted((s.started - j.arrival) / 60 for j, s in zip(jobs, states, strict=True) if s.started is not None)
    window = (jobs[0].arrival, jobs[-1].arrival) if jobs else (0.0, 0.0)
    gpus = p.total_gpus
    by_kind: dict[str, dict[str, float]] = {}
    for kind in workload.KINDS:
        pairs = [(j, s) for j, s in zip(jobs, states, strict=True) if j.kind == kind]
        waits = [(s.started - j.arrival) / 60 for j, s in pairs if s.started is not None]
        by_kind[kind] = {"submitted": len(pairs),
                         **{k: sum(1 for _, s in pairs if s.outcome == k) for k in ("completed", "stuck", "pending")},
                         "split": sum(1 for _, s in pairs if s.outcome == "completed" and s.split),
                         "delay_p50_minutes": percentile(waits, 50), "delay_p99_minutes": percentile(waits, 99)}
    decisions_us = [d * 1e6 for d in o.decisions]
    return {
        "policy": o.policy,
        "submitted": len(jobs), **count, "split": split,
        "split_gpu_hours": sum(j.gpu_demand * j.runtime for j, s in zip(jobs, states, strict=True)
                               if s.outcome == "completed" and s.split) / 3600,
        "stuck_gpu_hours_held": sum(s.held_gpu_seconds for s in states) / 3600,
        "by_kind": by_kind,
        "utilisation_useful": _weighted(o.timeline, *window, column=2) / gpus,
        "utilisation_held": _weighted(o.timeline, *window, column=1) / gpus,
        "queue_delay_minutes": {"p50": percentile(delays, 50), "p99": percentile(delays, 99),
                                "mean": sum(delays) / len(delays) if delays else 0.0, "started": len(delays)},
        "delay_by_size": delay_by_size(jobs, states),
        "fabric_attaches": o.attaches, "fabric_gpus_attached": o.attached_gpus,
        "pod_attempts": len(o.decisions),
        "decision_time_us": {"mean": sum(decisions_us) / len(decisions_us) if decisions_us else 0.0,
                             "p50": percentile(decisions_us, 50), "p99": percentile(decisions_us, 99)},
        "wall_seconds": o.wall_seconds,
    }


def _plots(out: Path, outcomes: list[Outcome], gpus: int) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for k, o in enumerate(outcomes):
        t = [e[0] / 3600 for e in o.timeline]
        colour = f"C{k}"
        ax.step(t, [e[2] / gpus for e in o.timeline], where="post", label=f"{o.policy} useful", linewidth=1,
                color=colour)
        ax.step(t, [e[1] / gpus for e in o.timeline], where="post", linestyle=":", linewidth=0.8, color=colour,
                label=f"{o.policy} held")
    ax.set(xlabel="hours", ylabel="fraction of all GPUs", ylim=(0, 1.02),
           title="GPU utilisation: useful (one domain, running) vs held (bound to any pod)")
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "utilisation.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for o in outcomes:
        delays = sorted((s.started - j.arrival) / 60 for j, s in zip(o.jobs, o.states, strict=True)
                        if s.started is not None)
        if delays:
            ax.step([max(d, 0.01) for d in delays], [(i + 1) / len(o.jobs) for i in range(len(delays))],
                    where="post", label=o.policy)
    ax.set(xscale="log", xlabel="queueing delay, minutes (log; no delay drawn at 0.01)",
           ylabel="fraction of submitted jobs started",
           title="Queueing delay (jobs never started stay below the curve's top)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "delay.png", dpi=110)
    plt.close(fig)
    return ["utilisation.png", "delay.png"]


def summary_table(rows: list[dict[str, Any]]) -> list[str]:
    """The policies side by side (markdown table lines)."""
    head = ("| policy | submitted | completed | split (broken) | stuck partial | pending at end | useful util "
            "| held util | delay p50 min | delay p99 min | fabric attaches | decision us/pod (p50/p99) |")
    lines = [head, "|---" * 12 + "|"]
    for r in rows:
        d, t = r["queue_delay_minutes"], r["decision_time_us"]
        lines.append(f"| {r['policy']} | {r['submitted']} | {r['completed']} | {r['split']} | {r['stuck']} "
                     f"| {r['pending']} | {r['utilisation_useful']:.1%} | {r['utilisation_held']:.1%} "
                     f"| {d['p50']:.1f} | {d['p99']:.1f} | {r['fabric_attaches']} | {t['p50']:.0f} / {t['p99']:.0f} |")
    return lines


def _minutes(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def size_table(rows: list[dict[str, Any]]) -> list[str]:
    """Queueing delay per job-size class (markdown table lines): p50 / p90 minutes (started of submitted)."""
    labels = [label for label, *_ in workload.SIZE_CLASSES]
    lines = ["| policy | " + " | ".join(f"{label} pods" for label in labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for r in rows:
        cells = [f"{_minutes(c['wait_p50_minutes'])} / {_minutes(c['wait_p90_minutes'])} "
                 f"({c['started']}/{c['submitted']})" for c in (r["delay_by_size"][label] for label in labels)]
        lines.append(f"| {r['policy']} | " + " | ".join(cells) + " |")
    return lines


SIZE_NOTE = ("Queueing delay by job size (pods per job): median / p90 minutes from arrival until the whole job "
             "runs, over the jobs that started (started/submitted in brackets).")


def tables(result: dict[str, Any]) -> str:
    """What ``imex-webhook simulate`` prints: both tables, from ``write``'s result."""
    rows = list(result["policies"].values())
    return "\n".join([*summary_table(rows), "", SIZE_NOTE, "", *size_table(rows)]) + "\n"


def _md(params: Params, stream: dict[str, Any], rows: list[dict[str, Any]], plots: list[str]) -> str:
    lines = ["# imex-webhook simulate", "",
             f"Seed {params.seed}; {params.cliques} NVLink cliques of {params.clique_nodes} nodes x "
             f"{params.gpus_per_node} GPUs, {params.fabric_zones} fabric zones of {params.fabric_nodes} nodes "
             f"({params.fabric_local_gpus} local GPU, {params.fabric_slots} slots, pool {params.fabric_pool}); "
             f"{params.total_gpus} GPUs. {stream['jobs']} jobs ({stream['by_kind']}) over "
             f"{stream['arrival_span_hours']:.1f} h, offered load {params.load:.0%} of the clique GPUs, median run "
             f"{stream['median_runtime_hours']:.2f} h; stuck after {params.stuck_timeout / 60:.0f} min partly placed.",
             "", *summary_table(rows)]
    lines += ["", SIZE_NOTE, "", *size_table(rows)]
    lines += ["", "By kind (completed / split / stuck / pending of submitted; queueing delay p50 / p99 minutes):", ""]
    for r in rows:
        parts = [f"{k} {v['completed']}/{v['split']}/{v['stuck']}/{v['pending']} of {v['submitted']} "
                 f"(delay {v['delay_p50_minutes']:.0f} / {v['delay_p99_minutes']:.0f})"
                 for k, v in r["by_kind"].items()]
        lines.append(f"- {r['policy']}: " + "; ".join(parts) +
                     f"; GPU-hours wasted: split {r['split_gpu_hours']:.0f}, held by stuck jobs "
                     f"{r['stuck_gpu_hours_held']:.0f}")
    lines += ["", "Split jobs run (holding their GPUs) but do no useful work; stuck jobs are torn down and not "
              "resubmitted; pending jobs never got a pod placed (fabric jobs cannot run without attach).", ""]
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def write(out: Path, params: Params, jobs: list[Job], outcomes: list[Outcome], plots: bool = True) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    rows = [metrics(o) for o in outcomes]
    stream = workload.describe(jobs)
    images = _plots(out, outcomes, params.total_gpus) if plots else []
    result = {"parameters": asdict(params), "total_gpus": params.total_gpus, "stream": stream,
              "policies": {r["policy"]: r for r in rows}, "plots": images, "timing_fields": list(TIMING_KEYS)}
    (out / "metrics.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    (out / "report.md").write_text(_md(params, stream, rows, images), encoding="utf-8")
    return result
