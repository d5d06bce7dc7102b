"""Metrics, ``report.md``, ``metrics.json`` and the PNG plots of ``imex-webhook simulate``.

The metrics are defined so that they add up and can be checked: every submitted job is exactly one of
completed, stuck or pending at the end; split jobs are a subset of the completed ones. Utilisation is
time-weighted over the arrival window (first to last arrival), where the offered load is steady, not
over the drain at the end: *useful* counts GPUs of the runs that completed whole inside one domain (a run
cut short by a restart is lost work, not useful), *held* every GPU bound to a pod (including partial
placements, split jobs and runs later lost). Queueing delay (every wait of a job: from its arrival, and
from each restart, until it runs) is also given per job-size class (``workload.SIZE_CLASSES``: median,
p90, p99 and p100 (the longest) over the jobs that started, with how many did), with the restarts, the
runs lost to a degraded fabric and the useful utilisation of each class. ComputeDomain jobs that asked for an NVLink
domain of their own (``Params.exclusive_share``) and the others are counted apart too (``compute_domains``),
to see who pays for exclusivity.
Fields whose name starts with ``decision_`` or ends in ``wall_seconds`` are wall-clock timings;
everything else is deterministic.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from webhook.tools.simulate import racks, workload
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


def _useful_share(pairs: list[tuple[Job, JobState]], window: tuple[float, float], gpus: int) -> float:
    """The share of all GPUs, time-weighted over ``window``, that the completed runs whole in one domain used."""
    start, end = window
    if end <= start:
        return 0.0
    used = sum(j.gpu_demand * max(0.0, min(s.ended, end) - max(s.started, start)) for j, s in pairs
               if s.outcome == "completed" and not s.split and s.started is not None and s.ended is not None)
    return used / (gpus * (end - start))


def _wait_minutes(s: JobState) -> float | None:
    return s.waited / 60 if s.started is not None else None


WAIT_QUANTILES = (50, 90, 99, 100)  # p100: the longest wait, what "never starves" is about


def wait_percentiles(waits: list[float]) -> dict[str, float | None]:
    """The median, p90, p99 and p100 (the longest) of the waits in minutes, as every class's figures name them
    (None: no wait)."""
    return {f"wait_p{q}_minutes": percentile(waits, q) if waits else None for q in WAIT_QUANTILES}


def delay_by_size(jobs: list[Job], states: list[JobState], window: tuple[float, float],
                  gpus: int) -> dict[str, dict[str, Any]]:
    """Per job-size class (``workload.SIZE_CLASSES``, and ``workload.RACK_CLASS`` when the stream has
    multi-rack jobs): jobs submitted, started, completed, split (of the completed), stuck and pending;
    restarts, runs lost to a degraded fabric (of those restarts) and GPU-hours lost; the useful utilisation
    (share of all GPUs); the jobs (and their GPU-hours) whose run began only after the stream's last arrival
    (``after_arrivals``: work a policy put off until no new job competes for the room, which a finite stream
    rewards and a cluster whose jobs keep coming does not); and the median, p90, p99 and p100 (longest) wait in
    minutes until the job runs, over the jobs that started (``None``: none did; jobs that never ran are not in
    the percentiles, so read them with that count)."""
    out: dict[str, dict[str, Any]] = {}
    for label in workload.class_labels(jobs):
        pairs = [(j, s) for j, s in zip(jobs, states, strict=True) if workload.job_class(j) == label]
        waits = [w for _, s in pairs if (w := _wait_minutes(s)) is not None]
        late = [j for j, s in pairs if s.started is not None and s.started > window[1]]
        out[label] = {"submitted": len(pairs), "started": len(waits),
                      "after_arrivals": len(late),
                      "after_arrivals_gpu_hours": sum(j.gpu_demand * j.runtime for j in late) / 3600,
                      "completed": sum(1 for _, s in pairs if s.outcome == "completed"),
                      "split": sum(1 for _, s in pairs if s.outcome == "completed" and s.split),
                      **{k: sum(1 for _, s in pairs if s.outcome == k) for k in ("stuck", "pending")},
                      "restarts": sum(s.restarts for _, s in pairs),
                      "lost_to_degraded_fabric": sum(s.lost_fabric for _, s in pairs),
                      "restart_gpu_hours_lost": sum(s.lost_gpu_seconds for _, s in pairs) / 3600,
                      "utilisation_useful": _useful_share(pairs, window, gpus),
                      **wait_percentiles(waits),
                      # every started job's wait, for readings over several seeds (webhook.tools.simulate.seeds)
                      "waits_minutes": sorted(round(w, 4) for w in waits)}
    return out


def by_exclusivity(jobs: list[Job], states: list[JobState]) -> dict[str, dict[str, Any]]:
    """ComputeDomain jobs that asked for an exclusive NVLink domain and those that did not: submitted,
    completed, stuck, pending, and the median, p90, p99 and p100 wait in minutes over those that started."""
    out: dict[str, dict[str, Any]] = {}
    for label, wanted in (("exclusive", True), ("shared", False)):
        pairs = [s for j, s in zip(jobs, states, strict=True) if j.kind == "nvlink" and j.exclusive == wanted]
        waits = [w for s in pairs if (w := _wait_minutes(s)) is not None]
        out[label] = {"submitted": len(pairs),
                      **{k: sum(1 for s in pairs if s.outcome == k) for k in ("completed", "stuck", "pending")},
                      **wait_percentiles(waits)}
    return out


def metrics(o: Outcome) -> dict[str, Any]:
    p, jobs, states = o.params, o.jobs, o.states
    count = {k: sum(1 for s in states if s.outcome == k) for k in ("completed", "stuck", "pending", "running")}
    split = sum(1 for s in states if s.outcome == "completed" and s.split)
    delays = sorted(w for s in states if (w := _wait_minutes(s)) is not None)
    window = workload.window(jobs)
    gpus = p.total_gpus
    every = list(zip(jobs, states, strict=True))
    by_kind: dict[str, dict[str, float]] = {}
    for kind in workload.KINDS:
        pairs = [(j, s) for j, s in zip(jobs, states, strict=True) if j.kind == kind]
        waits = [w for _, s in pairs if (w := _wait_minutes(s)) is not None]
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
        "restarts": sum(s.restarts for s in states),
        "restarts_node_failure": sum(s.restarts_node for s in states),
        "lost_to_degraded_fabric": sum(s.lost_fabric for s in states),
        "restart_gpu_hours_lost": sum(s.lost_gpu_seconds for s in states) / 3600,
        "by_kind": by_kind,
        "utilisation_useful": _useful_share(every, window, gpus),
        "utilisation_held": _weighted(o.timeline, *window, column=1) / gpus,
        "queue_delay_minutes": {"p50": percentile(delays, 50), "p99": percentile(delays, 99),
                                "mean": sum(delays) / len(delays) if delays else 0.0, "started": len(delays)},
        "delay_by_size": delay_by_size(jobs, states, window, gpus),
        "compute_domains": by_exclusivity(jobs, states),
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
        ax.step(t, [e[2] / gpus for e in o.timeline], where="post", label=f"{o.policy} running", linewidth=1,
                color=colour)
        ax.step(t, [e[1] / gpus for e in o.timeline], where="post", linestyle=":", linewidth=0.8, color=colour,
                label=f"{o.policy} held")
    ax.set(xlabel="hours", ylabel="fraction of all GPUs", ylim=(0, 1.02),
           title="GPU utilisation: running whole in one domain vs held (bound to any pod)")
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "utilisation.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for o in outcomes:
        delays = sorted(w for s in o.states if (w := _wait_minutes(s)) is not None)
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
            "| held util | delay p50 min | delay p99 min | restarts (node failure / degraded fabric) "
            "| GPU-h lost to restarts | fabric attaches | decision us/pod (p50/p99) |")
    lines = [head, "|---" * 14 + "|"]
    for r in rows:
        d, t = r["queue_delay_minutes"], r["decision_time_us"]
        lines.append(f"| {r['policy']} | {r['submitted']} | {r['completed']} | {r['split']} | {r['stuck']} "
                     f"| {r['pending']} | {r['utilisation_useful']:.1%} | {r['utilisation_held']:.1%} "
                     f"| {d['p50']:.1f} | {d['p99']:.1f} "
                     f"| {r['restarts']} ({r['restarts_node_failure']} / {r['lost_to_degraded_fabric']}) "
                     f"| {r['restart_gpu_hours_lost']:.0f} "
                     f"| {r['fabric_attaches']} | {t['p50']:.0f} / {t['p99']:.0f} |")
    return lines


def class_label(label: str) -> str:
    """A size class as a table heading: ``9-16 pods``, or the multi-rack class's own name."""
    return label if label == workload.RACK_CLASS else f"{label} pods"


def _by_size(rows: list[dict[str, Any]], cell: Callable[[dict[str, Any]], str]) -> list[str]:
    labels = list(rows[0]["delay_by_size"]) if rows else []
    lines = ["| policy | " + " | ".join(map(class_label, labels))
             + " |", "|---" * (len(labels) + 1) + "|"]
    for r in rows:
        lines.append(f"| {r['policy']} | " + " | ".join(cell(r["delay_by_size"][label]) for label in labels) + " |")
    return lines


def size_table(rows: list[dict[str, Any]]) -> list[str]:
    """Queueing delay per job-size class (markdown table lines): p50 / p90 / p99 minutes (started of submitted)."""
    return _by_size(rows, lambda c: f"{racks.waits(c)} ({c['started']}/{c['submitted']})")


def fault_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per job-size class (markdown table lines): completed of submitted, restarts (lost to a degraded
    fabric), useful utilisation."""
    return _by_size(rows, lambda c: f"{c['completed']}/{c['submitted']}, {c['restarts']} "
                                    f"({c['lost_to_degraded_fabric']}), {c['utilisation_useful']:.1%}")


SIZE_NOTE = ("Queueing delay by job size (pods per job): median / p90 / p99 minutes waited until the whole job "
             "runs (from arrival and from each restart), over the jobs that started (started/submitted in "
             "brackets).")
FAULT_NOTE = ("Faults by job size: completed/submitted, restarts (of them lost to a degraded fabric), useful "
              "utilisation (share of all GPUs used by runs that completed whole in one domain).")


def exclusive_table(rows: list[dict[str, Any]]) -> list[str]:
    """ComputeDomain jobs asking for an exclusive domain and the others (markdown table lines): completed /
    stuck / pending of submitted, wait p50 / p90 / p99 minutes."""
    lines = ["| policy | exclusive ComputeDomains | other ComputeDomains |", "|---|---|---|"]
    for r in rows:
        kinds = (r["compute_domains"][k] for k in ("exclusive", "shared"))
        cells = [f"{c['completed']} / {c['stuck']} / {c['pending']} of {c['submitted']}, {racks.waits(c)}"
                 for c in kinds]
        lines.append(f"| {r['policy']} | " + " | ".join(cells) + " |")
    return lines


EXCLUSIVE_NOTE = ("ComputeDomain jobs annotated imex-webhook.io/exclusive-domain and the others: completed / stuck "
                  "/ pending of submitted, wait p50 / p90 / p99 minutes (only the imex-webhook policies read the "
                  "annotation).")


def _exclusive_lines(stream: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The exclusivity table, when any job asked for an exclusive domain; the per-class table of
    completed, split, stuck and pending jobs, when any job spans racks."""
    lines = []
    if stream.get("exclusive_compute_domains"):
        lines += ["", EXCLUSIVE_NOTE, "", *exclusive_table(rows)]
    if stream.get("multi_rack_jobs") and rows:
        lines += ["", racks.CLASS_NOTE, "", *racks.class_table(rows, list(rows[0]["delay_by_size"]))]
    return lines


def fault_line(described: dict[str, Any]) -> str:
    return (f"Faults (the same for every policy): {described['node_failures']} node failures "
            f"({described['node_hours_down']:.0f} node-hours down), {described['fabric_degradations']} fabric "
            f"degradations ({described['node_hours_degraded']:.0f} node-hours degraded).")


def tables(result: dict[str, Any]) -> str:
    """What ``imex-webhook simulate`` prints: the three tables, from ``write``'s result."""
    rows = list(result["policies"].values())
    return "\n".join([fault_line(result["faults"]), "", *summary_table(rows), "", SIZE_NOTE, "",
                      *size_table(rows), "", FAULT_NOTE, "", *fault_table(rows),
                      *_exclusive_lines(result["stream"], rows)]) + "\n"


def _md(params: Params, stream: dict[str, Any], described: dict[str, Any], rows: list[dict[str, Any]],
        plots: list[str]) -> str:
    lines = ["# imex-webhook simulate", "",
             f"Seed {params.seed}; {params.cliques} NVLink cliques of {params.clique_nodes} nodes x "
             f"{params.gpus_per_node} GPUs, {params.fabric_zones} fabric zones of {params.fabric_nodes} nodes "
             f"({params.fabric_local_gpus} local GPU, {params.fabric_slots} slots, pool {params.fabric_pool}); "
             f"{params.total_gpus} GPUs. {stream['jobs']} jobs ({stream['by_kind']}) over "
             f"{stream['arrival_span_hours']:.1f} h, offered load {params.load:.0%} of the clique GPUs, median run "
             f"{stream['median_runtime_hours']:.2f} h; stuck after {params.stuck_timeout / 60:.0f} min partly placed"
             + (f"; {stream['exclusive_compute_domains']} ComputeDomain jobs ask for an exclusive NVLink domain "
                f"(share {params.exclusive_share:g})" if params.exclusive_share else "")
             + (f"; {stream['multi_rack_jobs']} multi-rack jobs (2-4 racks, segments of {params.clique_nodes}) "
                f"offering {params.multi_rack_load:.0%} more." if stream.get("multi_rack_jobs") else "."),
             "", f"Fault model: {params.node_failures:g} node failures per node and {params.fabric_degradations:g} "
             f"fabric degradations per NVLink tray per day, repaired after {params.repair_hours:g} h and healthy "
             f"again after {params.degraded_hours:g} h on average; a running ComputeDomain job lost with chance "
             f"{params.degraded_loss:g} per degradation of its domain. {fault_line(described)}",
             "", *summary_table(rows)]
    lines += ["", SIZE_NOTE, "", *size_table(rows), "", FAULT_NOTE, "", *fault_table(rows)]
    lines += _exclusive_lines(stream, rows)
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


def write(out: Path, params: Params, jobs: list[Job], outcomes: list[Outcome], plots: bool = True,
          described: dict[str, Any] | None = None) -> dict[str, Any]:
    """``described``: ``faults.describe`` of the run's faults (none when absent)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [metrics(o) for o in outcomes]
    stream = workload.describe(jobs)
    described = described or {"node_failures": 0, "node_hours_down": 0.0, "fabric_degradations": 0,
                               "node_hours_degraded": 0.0, "nodes_failed": [], "nodes_degraded": []}
    images = _plots(out, outcomes, params.total_gpus) if plots else []
    result = {"parameters": asdict(params), "total_gpus": params.total_gpus, "stream": stream, "faults": described,
              "policies": {r["policy"]: r for r in rows}, "plots": images, "timing_fields": list(TIMING_KEYS)}
    (out / "metrics.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    (out / "report.md").write_text(_md(params, stream, described, rows, images), encoding="utf-8")
    return result
