"""``imex-webhook simulate --seeds``: one run per seed, side by side, and the service against `gang-tas`.

The p99 wait of a size class with a few dozen jobs is its longest wait or the second: one job decides it,
and which one is down to the seed's arrivals and fault draws. A claim about a class holds only over several
seeds, so this runs each seed as ``simulate --seed`` would (its own ``seed-<n>/`` directory, the same files,
the same figures: a seed's result does not depend on the others or on the worker count), in worker
processes, and writes ``seeds.md`` and ``seeds.json`` with, per policy, seed and size class, the wait
p50 / p90 / p99 / p100 (the longest wait: a job that starves shows there first), and for each
imex-webhook policy each class's p99 against `gang-tas`'s on the same seed; and the same over all seeds
pooled (``pool``), as a reading beside the per-seed one.

A class is compared only where both policies started every job of it: `gang-tas` never starts the jobs
that need fabric GPUs attached, so its percentiles in the 1-pod and 2-4-pod classes leave the hardest jobs
out and the cell reads ``not comparable``.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from webhook.tools.simulate.racks import waits
from webhook.tools.simulate.report import class_label, wait_percentiles
from webhook.tools.simulate.workload import Params

PEER = "gang-tas"
MAX_SEEDS = 64
SEED_MAX = 2**31 - 1


def parse_seeds(text: str) -> tuple[int, ...]:
    """``6,7,8`` -> (6, 7, 8); a clear ValueError for anything else (empty, not a number, repeated, too many)."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise ValueError(f"--seeds {text[:40]!r}: expected comma-separated whole numbers, e.g. 6,7,8")
    if len(parts) > MAX_SEEDS:  # before any per-seed work: a hostile list may be megabytes long
        raise ValueError(f"--seeds: {len(parts)} seeds; at most {MAX_SEEDS} in one run")
    seeds: list[int] = []
    for part in parts:
        if not part.isdigit() or len(part) > 10 or int(part) > SEED_MAX:
            raise ValueError(f"--seeds: {part[:20]!r} is not a whole number from 0 to {SEED_MAX}")
        if int(part) in seeds:
            raise ValueError(f"--seeds: seed {int(part)} is given twice")
        seeds.append(int(part))
    return tuple(seeds)


def seed_dir(out: Path, seed: int) -> Path:
    return out / f"seed-{seed}"


def _one(params: Params, policies: tuple[str, ...], out: Path, plots: bool) -> dict[str, Any]:
    from webhook.tools.simulate import simulation

    return simulation.run(params, policies, seed_dir(out, params.seed), plots=plots, progress=False)


def run(params: Params, seeds: Sequence[int], policies: tuple[str, ...], out: Path, plots: bool = True,
        workers: int | None = None) -> dict[str, Any]:
    """Every seed's run (in ``workers`` processes; default: one per CPU, at most one per seed), then the
    comparison, written to ``out``. A worker's failure is raised here, naming its seed."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(seeds)))
    out.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, Any]] = {}
    if workers == 1:
        for seed in seeds:
            results[seed] = _one(replace(params, seed=seed), policies, out, plots)
    else:
        # spawn: a fresh interpreter per worker, not a fork of a process that may hold threads and locks
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {seed: pool.submit(_one, replace(params, seed=seed), policies, out, plots) for seed in seeds}
            for seed, future in futures.items():
                try:
                    results[seed] = future.result()
                except Exception as exc:
                    raise RuntimeError(f"seed {seed}: {type(exc).__name__}: {exc}") from exc
    combined = combine(results)
    (out / "seeds.json").write_bytes(orjson.dumps(combined, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    (out / "seeds.md").write_text(markdown(combined), encoding="utf-8")
    return combined


def _cell(c: dict[str, Any]) -> dict[str, Any]:
    return {k: c[k] for k in ("submitted", "started", "completed", "split", "stuck", "wait_p50_minutes",
                              "wait_p90_minutes", "wait_p99_minutes", "wait_p100_minutes")}


def compare(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """One class on one seed: our p99 against the peer's, where both started every job of the class."""
    whole = ours["started"] == ours["submitted"] and peer["started"] == peer["submitted"]
    if not whole or ours["wait_p99_minutes"] is None or peer["wait_p99_minutes"] is None:
        return {"comparable": False, "met": None, "over_minutes": None}
    over = ours["wait_p99_minutes"] - peer["wait_p99_minutes"]
    return {"comparable": True, "met": over <= 0.0, "over_minutes": max(over, 0.0)}


def combine(results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per policy, seed and class the figures; per imex-webhook policy the comparison with the peer."""
    seeds = sorted(results)
    first = results[seeds[0]]
    classes = list(next(iter(first["policies"].values()))["delay_by_size"])
    names = list(first["policies"])
    table: dict[str, dict[str, Any]] = {}
    for name in names:
        table[name] = {}
        for seed in seeds:
            row = results[seed]["policies"][name]
            table[name][str(seed)] = {
                "completed": row["completed"], "submitted": row["submitted"], "split": row["split"],
                "stuck": row["stuck"], "pending": row["pending"], "utilisation_useful": row["utilisation_useful"],
                "classes": {c: _cell(row["delay_by_size"][c]) for c in classes}}
    against: dict[str, Any] = {}
    if PEER in names:
        for name in (n for n in names if n.startswith("imex-webhook")):
            cells = {str(s): {c: compare(table[name][str(s)]["classes"][c], table[PEER][str(s)]["classes"][c])
                              for c in classes} for s in seeds}
            flat = [v for per in cells.values() for v in per.values() if v["comparable"]]
            clean = all(table[name][str(s)]["split"] == 0 and table[name][str(s)]["stuck"] == 0 for s in seeds)
            against[name] = {"cells": cells, "compared": len(flat), "met": sum(1 for v in flat if v["met"]),
                             "no_split_or_stuck": clean,
                             "target_met": clean and all(v["met"] for v in flat)}
    pooled = {name: {c: pool([results[s]["policies"][name]["delay_by_size"][c] for s in seeds]) for c in classes}
              for name in names}
    totals = {name: totals_of([table[name][str(s)] for s in seeds]) for name in names}
    if PEER in names:
        for name, verdict in against.items():
            verdict["pooled"] = {c: compare(pooled[name][c], pooled[PEER][c]) for c in classes}
    return {"seeds": seeds, "classes": classes, "policies": table, "against_peer": against, "pooled": pooled,
            "pooled_totals": totals, "parameters": {k: v for k, v in first["parameters"].items() if k != "seed"}}


def pool(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One class over several seeds, as one run of all their jobs: the counts summed, the percentiles over
    every started job's wait. A reading beside the per-seed one, not in its place: the target is per seed."""
    waits = sorted(w for c in cells for w in c["waits_minutes"])
    out: dict[str, Any] = {k: sum(c[k] for c in cells) for k in ("submitted", "completed", "split", "stuck")}
    out["started"] = sum(c["started"] for c in cells)
    out["after_arrivals"] = sum(c["after_arrivals"] for c in cells)
    out["after_arrivals_gpu_hours"] = sum(c["after_arrivals_gpu_hours"] for c in cells)
    out.update(wait_percentiles(waits))
    return out


def totals_of(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One policy over several seeds: completed, submitted, split, stuck and pending summed; the useful
    utilisation's mean, lowest and highest over the seeds."""
    util = [r["utilisation_useful"] for r in rows]
    out: dict[str, Any] = {k: sum(r[k] for r in rows) for k in ("completed", "submitted", "split", "stuck", "pending")}
    out.update(utilisation_useful_mean=sum(util) / len(util), utilisation_useful_min=min(util),
               utilisation_useful_max=max(util))
    return out


def markdown(combined: dict[str, Any]) -> str:
    seeds, classes = combined["seeds"], combined["classes"]
    lines = ["# imex-webhook simulate, several seeds", "",
             f"Seeds {', '.join(map(str, seeds))}; each seed's own report is in seed-<n>/report.md.", "",
             "Per policy and seed: completed of submitted, split, stuck, useful utilisation; per size class the "
             "wait p50 / p90 / p99 / p100 minutes over the jobs that started (started/submitted in brackets when not "
             "all started).", "",
             "| policy | seed | completed | split | stuck | useful util | "
             + " | ".join(map(class_label, classes)) + " |",
             "|---" * (6 + len(classes)) + "|"]
    for name, per_seed in combined["policies"].items():
        for seed in seeds:
            r = per_seed[str(seed)]
            cells = [_waits_of_started(r["classes"][c]) for c in classes]
            lines.append(f"| {name} | {seed} | {r['completed']} of {r['submitted']} | {r['split']} | {r['stuck']} "
                         f"| {r['utilisation_useful']:.1%} | " + " | ".join(cells) + " |")
    for name, verdict in combined["against_peer"].items():
        lines += ["", f"{name} against {PEER}: p99 wait per class, at or below (ok) or over by how many minutes; "
                  f"{verdict['met']} of {verdict['compared']} comparable cells at or below; split and stuck "
                  f"{'none' if verdict['no_split_or_stuck'] else 'some'}; target (every comparable cell at or "
                  f"below, none split or stuck) {'met' if verdict['target_met'] else 'not met'}.", "",
                  "| seed | " + " | ".join(map(class_label, classes)) + " |", "|---" * (1 + len(classes)) + "|"]
        for seed in seeds:
            lines.append(f"| {seed} | " + " | ".join(_verdicts(verdict["cells"][str(seed)], classes)) + " |")
        lines.append("| pooled | " + " | ".join(_verdicts(verdict["pooled"], classes)) + " |")
    lines += _pooled_table(combined, "Pooled over the seeds (every started job of a class on every seed, as one "
                           "run): wait p50 / p90 / p99 / p100 minutes (p100: the longest wait on any seed). The target "
                           "above is per seed; this reading is beside it, with a few hundred jobs per class instead of "
                           "a few dozen.", _waits_of_started)
    lines += _pooled_table(combined, "Put off until the stream ended, pooled: per class, the jobs whose run began "
                           "only after the last arrival, and their GPU-hours. A policy that leaves a class's jobs "
                           "waiting until nothing new arrives spares the other classes that room on a finite stream; "
                           "on a cluster whose jobs keep coming that moment never comes (docs/SIMULATE.md, \"What the "
                           "stream's end hides\").", _put_off)
    lines += ["", "Over the seeds, per policy: completed of submitted, split, stuck and pending summed; useful "
              "utilisation, mean (lowest to highest seed).", "",
              "| policy | completed | split | stuck | pending | useful util |", "|---" * 6 + "|"]
    for name, t in combined["pooled_totals"].items():
        lines.append(f"| {name} | {t['completed']} of {t['submitted']} | {t['split']} | {t['stuck']} | "
                     f"{t['pending']} | {t['utilisation_useful_mean']:.1%} ({t['utilisation_useful_min']:.1%} to "
                     f"{t['utilisation_useful_max']:.1%}) |")
    return "\n".join(lines) + "\n"


def _pooled_table(combined: dict[str, Any], intro: str, cell: Callable[[dict[str, Any]], str]) -> list[str]:
    """Markdown lines: ``intro``, then per policy one pooled cell per class."""
    classes = combined["classes"]
    lines = ["", intro, "", "| policy | " + " | ".join(map(class_label, classes)) + " |",
             "|---" * (1 + len(classes)) + "|"]
    for name, per_class in combined["pooled"].items():
        lines.append(f"| {name} | " + " | ".join(cell(per_class[c]) for c in classes) + " |")
    return lines


def _put_off(x: dict[str, Any]) -> str:
    return f"{x['after_arrivals']} of {x['submitted']} ({x['after_arrivals_gpu_hours']:.0f} GPU-h)"


def _waits_of_started(x: dict[str, Any]) -> str:
    """A class's waits p50 / p90 / p99 / p100, with started/submitted when not every job started."""
    longest = "-" if x["wait_p100_minutes"] is None else f"{x['wait_p100_minutes']:.1f}"
    return (f"{waits(x)} / {longest}"
            + ("" if x["started"] == x["submitted"] else f" ({x['started']}/{x['submitted']})"))


def _verdicts(row: dict[str, dict[str, Any]], classes: Sequence[str]) -> list[str]:
    return ["not comparable" if not v["comparable"] else "ok" if v["met"] else f"+{v['over_minutes']:.1f}"
            for v in (row[c] for c in classes)]
