"""The segmented job's part of ``bench.md`` and of the summary (``webhook.tools.bench.report``).

Each figure stands beside what the same run measured for a one-domain group (in-process) or for the
same-bytes baseline (over TLS); in-process ratios are of the two medians, over TLS the medians of the
pairwise ratios (``segmented_http``).
"""

from __future__ import annotations

from typing import Any


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if value < 1 else f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def _mib(value: int | float | None) -> str:
    return f"{value / 2**20:,.0f} MiB" if value else "-"


def _beside(micro: dict[str, Any], case: str, other: str, what: str) -> tuple[str, str, str, str]:
    row, ref = micro.get(case), micro.get(other)
    if row is None:
        return (case, "-", "-", "-")
    ratio = row["p50_ms"] / ref["p50_ms"] if ref and ref["p50_ms"] else None
    return (row["what"], _ms(row["p50_ms"]), f"{what} {_ms(ref['p50_ms'])} ms" if ref else "-",
            f"{ratio:,.2f}" if ratio is not None else "-")


def _rows(size: str, row: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    micro, first, later = row["in_process"], row["first_filter"], row["later_filter"]
    out = [_beside(micro, f"segment_plan_{size}", f"segment_plan_{size}_one_domain_choice", "one-domain choice")]
    refused = micro.get(f"segment_plan_{size}_whole_job_refused")
    if refused is not None:
        out.append((refused["what"], _ms(refused["p50_ms"]), "-", "-"))
    out += [
        _beside(micro, f"segment_first_filter_{size}", f"segment_first_filter_{size}_one_domain_group",
                "one-domain group's first pod"),
        _beside(micro, f"segment_first_filter_{size}_one_domain_group_beside_the_job",
                f"segment_first_filter_{size}_one_domain_group", "the same before the job was reserved"),
        (f"first /filter over TLS, {first['samples']} fresh server(s), {first['body_bytes'] / 1024:,.0f} KiB in, "
         f"{first['reply_bytes'] / 1024:,.0f} KiB out; server CPU {_ms(first['server_cpu_ms'])} ms (in 10 ms ticks)",
         _ms(first["p50_ms"]), f"same-bytes baseline {_ms(first['baseline_p50_ms'])} ms", f"{first['ratio']:,.2f}"),
        _beside(micro, f"segment_later_filter_{size}", f"segment_later_filter_{size}_one_domain_group",
                "one-domain group's reserved member"),
        (f"later member's /filter over TLS, one at a time ({later['requests']} requests; p99 "
         f"{_ms(later['p99_ms'])} ms); server CPU {_ms(later['server_cpu_ms'])} ms",
         _ms(later["p50_ms"]), f"same-bytes baseline {_ms(later['baseline_p50_ms'])} ms", f"{later['ratio']:,.2f}"),
    ]
    return out


def segments_markdown(segments: dict[str, Any]) -> list[str]:
    if not segments:
        return []
    lines = ["## Jobs larger than one domain (segments)", "",
             "A job of 4-GPU pods, one per tray, annotated with a segment size of 18 (one clique), on the same "
             "busy cluster: p50 of each figure beside what the same run measured for a one-domain group "
             "(in-process: ratio of the medians) or for the same-bytes baseline (over TLS: median of the "
             "pairwise ratios).", ""]
    for size, row in segments.items():
        if "skipped" in row:
            lines += [f"### {int(size):,} nodes: not measured", "", row["skipped"], ""]
            continue
        job, memory = row["job"], row["memory"]
        lines += [f"### {int(size):,} nodes: {job['pods']:,} pods in {job['segments']} segments of "
                  f"{job['segment_size']}, planned into {job['domains']} domains", "",
                  "| figure | p50 ms | beside it | ratio |", "|---|---:|---|---:|"]
        lines += [f"| {what} | {value} | {beside} | {ratio} |" for what, value, beside, ratio in _rows(size, row)]
        lines += ["", f"Worker resident memory: {_mib(memory['cached'])} with the cluster cached and one group "
                  f"filtered, {_mib(memory['after_first_filter'])} once the job's plan is stored, "
                  f"{_mib(memory['after_later_filters'])} after the later member's filters, peak "
                  f"{_mib(memory['peak'])} (the baseline's worker {_mib(memory['baseline'])}). "
                  f"{row['servers']} fresh server(s) ready in {row['ready_s']:.0f}s; this size took "
                  f"{row['wall_s']:.0f}s over TLS and {job['engine_setup_s']:.1f}s to set up in-process.", ""]
    return lines


def segments_summary(segments: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size, row in segments.items():
        if "skipped" in row:
            continue
        micro, first, later = row["in_process"], row["first_filter"], row["later_filter"]
        out |= {
            f"segment_plan_{size}_p50_ms": micro[f"segment_plan_{size}"]["p50_ms"],
            f"segment_first_filter_{size}_in_process_p50_ms": micro[f"segment_first_filter_{size}"]["p50_ms"],
            f"segment_first_filter_{size}_http_p50_ms": first["p50_ms"],
            f"segment_first_filter_{size}_http_ratio_to_same_bytes": first["ratio"],
            f"segment_later_filter_{size}_http_p50_ms": later["p50_ms"],
            f"segment_later_filter_{size}_http_ratio_to_same_bytes": later["ratio"],
            f"segment_worker_rss_{size}_mib": row["memory"]["after_first_filter"] / 2**20,
        }
    return out
