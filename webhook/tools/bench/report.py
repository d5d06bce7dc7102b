"""``bench.json`` (every figure) and ``bench.md`` (the tables a reader looks at) for ``imex-webhook bench``.

Every HTTP figure is stored with its ratio to the baseline measured in the same run, and the run
records the machine (cores, Python, library versions) and the parameters, because an absolute
figure means little without them and a ratio means little without the method behind it.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from webhook.tools.bench.segmented_report import segments_markdown, segments_summary

TARGETS = {"throughput": ">= 0.8 x baseline", "p99": "<= 1.25 x baseline",
           "filter_names_5000_p99_ms": "<= 5 ms in-process", "nodelist_vs_loads": "<= 1.5 x orjson.loads",
           "mutate_p50_ms": "<= 0.2 ms in-process"}


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(), "python": platform.python_version(),
        "implementation": platform.python_implementation(), "platform": platform.platform(),
        "processor": platform.machine(), "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg")
        else None,
        "packages": {p: _version(p) for p in ("gunicorn", "flask", "werkzeug", "orjson")},
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with its figure and met or missed. Sizes are the run's: the smallest
    stands for 500 nodes, the largest for 5,000 (a --quick run checks shapes with smaller ones)."""
    http, serial, memory = results["http"], results["serial_cycle"], results.get("memory", {})
    small, big = min(results["parameters"]["sizes"]), max(results["parameters"]["sizes"])
    out: list[dict[str, Any]] = []

    def add(name: str, target: str, value: Any, met: bool | None) -> None:
        out.append({"name": name, "target": target, "value": value, "met": met})

    for scenario in (f"filter-names-{small}", f"prioritize-names-{small}", "mutate"):
        row = http.get(scenario)
        if row is None:
            add(f"{scenario} throughput", ">= 0.8 x baseline", None, None)
            continue
        ratio = row["ratio"]
        add(f"{scenario} throughput", ">= 0.8 x baseline", ratio["throughput"], ratio["throughput"] >= 0.8)
        add(f"{scenario} p99", "<= 1.25 x baseline", ratio["p99"], ratio["p99"] <= 1.25)
    add(f"serial cycle at {big} nodes: filter + prioritize p50", "<= 2.5 ms", serial["pair_p50_ms"],
        serial["pair_p50_ms"] <= 2.5)
    add(f"serial cycle at {big} nodes vs the same bytes", "<= 1.3 x baseline", serial["pair_ratio"],
        serial["pair_ratio"] <= 1.3)
    for scenario in (f"filter-names-{big}", f"prioritize-names-{big}"):
        ratio = http[scenario]["ratio"]["throughput"]
        add(f"{scenario} throughput (concurrency {http[scenario]['concurrency']})", ">= 0.5 x baseline", ratio,
            ratio >= 0.5)
    add(f"filter reply at {big} names", "<= 300 KiB", serial["filter_reply_bytes"] / 1024,
        serial["filter_reply_bytes"] <= 300 * 1024)
    add("every rejected node has a reason", "yes", serial["reasons_complete"], bool(serial["reasons_complete"]))
    rss = memory.get("cached", {}).get(f"imex-{big}")
    add(f"RSS of the worker with {big} nodes cached", "reported (MiB)", rss / 2**20 if rss else None, None)
    return out


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The figures the targets are about, in one place (``None`` where the run did not produce one)."""
    out: dict[str, Any] = {"targets": TARGETS, "targets_met": {}, "issue_targets": []}
    if "http" in results:  # a run of the segmented job alone (``--only segments``) has only its own figures
        out |= _service_summary(results)
    return out | segments_summary(results.get("segments", {}))


def _service_summary(results: dict[str, Any]) -> dict[str, Any]:
    http, micro = results["http"], results["in_process"]
    sizes = results["parameters"]["sizes"]
    big = max(sizes)
    out: dict[str, Any] = {}
    for name, row in http.items():
        out[f"{name}_throughput_ratio"] = row["ratio"]["throughput"]
        out[f"{name}_p99_ratio"] = row["ratio"]["p99"]
    reserved = micro.get(f"filter_names_{big}_reserved", {})
    first = micro.get(f"filter_names_{big}_first_pod", {})
    out[f"filter_names_{big}_in_process_p99_ms"] = reserved.get("p99_ms")
    out[f"filter_names_{big}_first_pod_in_process_p99_ms"] = first.get("p99_ms")
    for size in sizes:
        out[f"filter_nodelist_{size}_ratio_to_orjson_loads"] = micro.get(f"filter_nodelist_{size}", {}).get(
            "ratio_to_loads")
    out["mutate_in_process_p50_ms"] = micro.get("mutate", {}).get("p50_ms")
    met = {name: all(row["met"].values()) for name, row in http.items()}
    p99 = out[f"filter_names_{big}_in_process_p99_ms"]
    ratios = [out[f"filter_nodelist_{size}_ratio_to_orjson_loads"] for size in sizes]
    out["targets_met"] = {
        **{f"http {name}": ok for name, ok in met.items()},
        f"filter_names_{big}_p99<=5ms": p99 is not None and p99 <= 5.0,
        "nodelist<=1.5x_loads": all(r is not None and r <= 1.5 for r in ratios),
        "mutate_p50<=0.2ms": (out["mutate_in_process_p50_ms"] or 99.0) <= 0.2,
    }
    serial = results["serial_cycle"]
    out["scheduler_pods_per_s_ceiling"] = serial.get("extender_pods_per_s_ceiling")
    out["serial_pair_p50_ms"] = serial.get("pair_p50_ms")
    out["serial_pair_ratio_to_same_bytes"] = serial.get("pair_ratio")
    out["issue_targets"] = targets(results)
    return out


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["parameters"]
    lines = [
        "# imex-webhook bench", "",
        f"Machine: {m['cores']} cores, {m['implementation']} {m['python']}, {m['platform']}; "
        f"gunicorn {m['packages']['gunicorn']}, Flask {m['packages']['flask']}, orjson {m['packages']['orjson']}.",
        f"Run: {p['repeats']} A/B pairs per scenario, {p['duration']}s per run, concurrency {p['concurrency']} "
        f"(bodies over {p['heavy_bytes'] // 2**20} MiB: 1), load generator processes {p['procs']}, "
        f"one gunicorn gthread worker x {p['threads']} threads on both sides, TLS, keep-alive; "
        f"service log level {p['log_level']}{'; QUICK run: shapes only, not figures to quote' if p['quick'] else ''}.",
        "",
    ]
    if "http" in results:
        lines += _service_markdown(results)
    lines += segments_markdown(results.get("segments", {}))
    lines += ["## Summary of every figure", "", "| figure | value |", "|---|---:|"]
    for key, value in results["summary"].items():
        if key not in ("targets", "targets_met", "issue_targets"):
            lines.append(f"| {key} | {_f(value)} |")
    met = results["summary"]["targets_met"]
    missed = [k for k, ok in met.items() if not ok]
    if met:
        lines += ["", f"Targets met: {len(met) - len(missed)} of {len(met)}"
                  + (f"; missed: {', '.join(missed)}." if missed else "."),
                  "", f"Targets: {'; '.join(f'{k} {v}' for k, v in TARGETS.items())}."]
    lines += ["", f"Wall time of the run: {results['wall_seconds']:.0f}s; peak resident memory of the bench process "
              f"{results['machine'].get('bench_peak_rss', 0) / 2**20:,.0f} MiB.", ""]
    return "\n".join(lines)


def _service_markdown(results: dict[str, Any]) -> list[str]:
    lines = [
        "## HTTP: the service vs the trivial baseline (medians; ratios are medians of pairwise ratios)", "",
        "| scenario | body | reply imex / base | conc | imex req/s | base req/s | thr ratio | imex p50 ms "
        "| imex p99 ms | base p99 ms | p99 ratio | imex CPU ms/req | base CPU ms/req | CPU ratio | targets met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in results["http"].items():
        i, b, r = row["imex"], row["baseline"], row["ratio"]
        met = "yes" if all(row["met"].values()) else ", ".join(f"NO {k}" for k, v in row["met"].items() if not v)
        lines.append(
            f"| {name} | {row['body_bytes'] / 1024:,.0f} KiB | {i['reply_bytes'] / 1024:,.0f} / "
            f"{b['reply_bytes'] / 1024:,.0f} KiB | {row['concurrency']} | {_f(i['throughput_rps'], 1)} "
            f"| {_f(b['throughput_rps'], 1)} | {_f(r['throughput'])} | {_f(i['p50_ms'])} | {_f(i['p99_ms'])} "
            f"| {_f(b['p99_ms'])} | {_f(r['p99'])} | {_f(i['server_cpu_ms_per_request'], 3)} "
            f"| {_f(b['server_cpu_ms_per_request'], 3)} | {_f(r['cpu_per_request'])} | {met} |")
    for name, why in results["skipped"].items():
        lines.append(f"| {name} | skipped: {why} |")
    lines += ["", "prioritize-names-N sends every name, the worst case: kube-scheduler sends /prioritize only the "
              "nodes that passed /filter (see the serial cycle below). The baseline echoes the request, so its reply "
              "is the request's size; the service's filter reply carries a reason for every rejected node."]
    lines += ["", "## In-process decision cost", "", "| case | p50 ms | p99 ms | mean ms | samples | note |",
              "|---|---:|---:|---:|---:|---|"]
    for name, row in results["in_process"].items():
        if "decision" in row:
            d, f = row["decision"], row["orjson_loads"]
            lines.append(f"| {name} | {_f(d['p50_ms'])} | {_f(d['p99_ms'])} | {_f(d['mean_ms'])} | {d['samples']} "
                         f"| orjson.loads p50 {_f(f['p50_ms'])} ms of {row['bytes'] / 2**20:.1f} MiB; "
                         f"ratio {_f(row['ratio_to_loads'])} (target <= {row['target_ratio']}) |")
        else:
            lines.append(f"| {name} | {_f(row['p50_ms'], 3)} | {_f(row['p99_ms'], 3)} | {_f(row['mean_ms'], 3)} "
                         f"| {row['samples']} | {row.get('what', '')} |")
    s = results["serial_cycle"]
    b = s["baseline"]
    lines += [
        "", "## What kube-scheduler's serial cycle sees", "",
        f"At {s['nodes']} nodes, one pod at a time on one kept-alive connection: /filter of every name p50 "
        f"{_f(s['filter_p50_ms'])} ms (p99 {_f(s['filter_p99_ms'])}), /prioritize of the {s['passed']} survivors "
        f"p50 {_f(s['prioritize_p50_ms'])} ms (p99 {_f(s['prioritize_p99_ms'])}); the pair p50 "
        f"{_f(s['pair_p50_ms'])} ms against {_f(s['baseline_pair_p50_ms'])} ms for the baseline that decodes the same "
        f"requests and answers the same bytes ({s['filter_reply_bytes'] / 1024:,.0f} KiB and "
        f"{s['prioritize_reply_bytes'] / 1024:,.1f} KiB): **{_f(s['pair_ratio'])}x** (median of pairwise ratios; "
        f"baseline filter p50 {_f(b['filter_p50_ms'])}, prioritize p50 {_f(b['prioritize_p50_ms'])} ms). "
        f"CPU per cycle {_f(s['imex']['server_cpu_ms_per_cycle'])} / {_f(b['server_cpu_ms_per_cycle'])} ms. "
        f"The extender alone leaves room for at most {_f(s['extender_pods_per_s_ceiling'], 0)} pods/s on the "
        "scheduling cycle.", "",
    ]
    memory = results.get("memory", {})
    if memory:
        lines += ["## Memory (resident set of each gunicorn worker)", "",
                  "| server | cluster cached, one group filtered | after the run (NodeList bodies included) |",
                  "|---|---:|---:|"]
        for name, cached in memory.get("cached", {}).items():
            after = memory.get("after_run", {}).get(name)
            lines.append(f"| {name} | {cached / 2**20:,.1f} MiB | {_f(after / 2**20 if after else None, 1)} MiB |")
        lines.append("")
    lines += ["## The targets", "", "| target | wanted | value | met |", "|---|---|---:|---|"]
    for t in results["summary"]["issue_targets"]:
        met = "reported" if t["met"] is None and t["value"] is not None else ("met" if t["met"] else "**missed**")
        lines.append(f"| {t['name']} | {t['target']} | {_f(t['value'])} | {met} |")
    return [*lines, ""]


def write(out: Path, results: dict[str, Any]) -> None:
    results["summary"] = summary(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    (out / "bench.md").write_text(markdown(results), encoding="utf-8")
