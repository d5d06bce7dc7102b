"""A run's figures from its raw material, the alternated pairs' median ratios, the targets, and the table.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tests.e2e.realbench import measure
from tests.e2e.realbench.workload import Workload

VARIANTS = {"a": "imex-scheduler + imex-webhook", "b": "imex-scheduler + pass-through",
            "c": "default profile, no extender"}
# Every figure a run reports; the CI-sized test checks that each one is produced.
FIGURES = (
    "pods", "bound", "unbound", "groups", "groups_bound", "groups_split",
    "pods_per_s", "burst_pods_per_s",
    "latency_p50_s", "latency_p99_s", "sli_p50_s", "sli_p99_s", "attempt_p50_s", "attempt_p99_s",
    "algorithm_s", "in_tree_s", "extender_s", "extender_share",
    "group_span_p50_s", "group_span_p99_s", "group_span_max_s",
    "service_cpu_s", "service_rss_mib", "scheduler_cpu_s", "apiserver_cpu_s", "passthrough_cpu_s",
)
TARGET_THROUGHPUT, TARGET_P99 = 0.8, 1.25


def figures(data: Any, workload: Workload, clique_of: Mapping[str, str], burst: set[str]) -> dict[str, Any]:
    """``data`` is a run.RunData; ``clique_of`` maps node name -> clique."""
    seen = data.seen
    created, bound = seen.created, seen.bound
    latencies = [max(0.0, bound[n] - created[n]) for n in bound if n in created]
    start = min(created.values(), default=0.0)
    last = max(bound.values(), default=start)
    burst_created = [created[n] for n in burst if n in created]
    burst_bound = [bound[n] for n in burst if n in bound]
    burst_span = (max(burst_bound) - min(burst_created)) if burst_bound and burst_created else None
    spans, split, groups_bound = [], 0, 0
    for job in workload.jobs:
        members = [f"{job.name}-{i}" for i in range(job.size)]
        if all(m in bound for m in members):
            groups_bound += 1
            spans.append(max(bound[m] for m in members) - min(created[m] for m in members if m in created))
        domains = {clique_of.get(seen.node[m], "?") for m in members if m in seen.node}
        split += len(domains) > 1
    samples = measure.parse(data.metrics) if data.metrics else []
    sli = measure.histogram(samples, "scheduler_pod_scheduling_sli_duration_seconds")
    attempt = measure.histogram(samples, "scheduler_scheduling_attempt_duration_seconds", {"result": "scheduled"})
    algorithm = measure.histogram(samples, "scheduler_scheduling_algorithm_duration_seconds")
    in_tree = sum(measure.histogram(samples, "scheduler_framework_extension_point_duration_seconds",
                                    {"extension_point": p}).total for p in measure.IN_TREE_ALGORITHM_POINTS)
    all_attempts = measure.histogram(samples, "scheduler_scheduling_attempt_duration_seconds")
    extender = max(0.0, algorithm.total - in_tree) if data.variant != "c" else 0.0

    def cpu(name: str) -> float | None:
        if name not in data.after or name not in data.before:
            return None
        spent: float = data.after[name].cpu_seconds - data.before[name].cpu_seconds
        return round(spent, 2)

    return {
        "pods": workload.pods, "bound": len(bound), "unbound": workload.pods - len(bound),
        "groups": len(workload.jobs), "groups_bound": groups_bound, "groups_split": split,
        "pods_per_s": _rate(len(bound), last - start),
        "burst_pods_per_s": _rate(len(burst_bound), burst_span),
        "latency_p50_s": _r(measure.percentile(latencies, 0.5)),
        "latency_p99_s": _r(measure.percentile(latencies, 0.99)),
        "sli_p50_s": _r(sli.quantile(0.5)), "sli_p99_s": _r(sli.quantile(0.99)),
        "attempt_p50_s": _r(attempt.quantile(0.5)), "attempt_p99_s": _r(attempt.quantile(0.99)),
        "algorithm_s": _r(algorithm.total), "in_tree_s": _r(in_tree), "extender_s": _r(extender),
        "extender_share": _r(extender / all_attempts.total if all_attempts.total else None),
        "group_span_p50_s": _r(measure.percentile(spans, 0.5)),
        "group_span_p99_s": _r(measure.percentile(spans, 0.99)),
        "group_span_max_s": _r(max(spans, default=None) if spans else None),
        "service_cpu_s": cpu("imex-webhook"),
        "service_rss_mib": round(data.peak_rss.get("imex-webhook", 0) / 2**20, 1),
        "scheduler_cpu_s": cpu("kube-scheduler"), "apiserver_cpu_s": cpu("kube-apiserver"),
        "passthrough_cpu_s": cpu("pass-through"),
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _rate(count: int, seconds: float | None) -> float | None:
    return round(count / seconds, 2) if seconds and seconds > 0 and count else None


def summary(runs: Sequence[tuple[int, str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Medians per variant, and the (a)/(b) ratios as medians over the rounds that ran both."""
    by_variant: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    by_round: dict[int, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for round_no, variant, figs in runs:
        by_variant[variant].append(figs)
        by_round[round_no][variant] = figs
    medians = {v: {f: measure.median(r.get(f) for r in rs) for f in FIGURES} for v, rs in by_variant.items()}
    pairs = [r for r in by_round.values() if "a" in r and "b" in r]

    def ratio(figure: str) -> float | None:
        values = [p["a"][figure] / p["b"][figure] for p in pairs if p["a"].get(figure) and p["b"].get(figure)]
        return _r(measure.median(values))

    throughput, burst, p99 = ratio("pods_per_s"), ratio("burst_pods_per_s"), ratio("latency_p99_s")
    split = sum(int(r.get("groups_split") or 0) for r in by_variant.get("a", []))
    targets = {
        "throughput_ratio": throughput, "burst_throughput_ratio": burst, "p99_ratio": p99, "pairs": len(pairs),
        "throughput_met": None if burst is None else burst >= TARGET_THROUGHPUT,
        "p99_met": None if p99 is None else p99 <= TARGET_P99,
        "one_domain_met": split == 0 and bool(by_variant.get("a")),
    }
    return {"medians": medians, "targets": targets}


_ROWS: tuple[tuple[str, Callable[[Mapping[str, Any]], str]], ...] = (
    ("pods bound / created", lambda m: f"{_n(m['bound'])} / {_n(m['pods'])}"),
    ("groups bound / split", lambda m: f"{_n(m['groups_bound'])} / {_n(m['groups_split'])}"),
    ("pods/s, whole run", lambda m: _n(m["pods_per_s"])),
    ("pods/s, burst", lambda m: _n(m["burst_pods_per_s"])),
    ("create -> bound p50 / p99 (s)", lambda m: f"{_n(m['latency_p50_s'])} / {_n(m['latency_p99_s'])}"),
    ("scheduler SLI p50 / p99 (s)", lambda m: f"{_n(m['sli_p50_s'])} / {_n(m['sli_p99_s'])}"),
    ("scheduling attempt p50 / p99 (s)", lambda m: f"{_n(m['attempt_p50_s'])} / {_n(m['attempt_p99_s'])}"),
    ("extender share of the cycle", lambda m: _n(m["extender_share"])),
    ("algorithm: in-tree / extender (s)", lambda m: f"{_n(m['in_tree_s'])} / {_n(m['extender_s'])}"),
    ("group first pod -> last bound p50 / p99 / max (s)",
     lambda m: f"{_n(m['group_span_p50_s'])} / {_n(m['group_span_p99_s'])} / {_n(m['group_span_max_s'])}"),
    ("imex-webhook CPU (s) / peak RSS (MiB)", lambda m: f"{_n(m['service_cpu_s'])} / {_n(m['service_rss_mib'])}"),
    ("pass-through CPU (s)", lambda m: _n(m["passthrough_cpu_s"])),
    ("kube-scheduler CPU (s)", lambda m: _n(m["scheduler_cpu_s"])),
    ("kube-apiserver CPU (s)", lambda m: _n(m["apiserver_cpu_s"])),
)


def _n(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def table(result: Mapping[str, Any]) -> str:
    medians = result["medians"]
    variants = [v for v in VARIANTS if v in medians]
    lines = ["| median over runs | " + " | ".join(f"({v}) {VARIANTS[v]}" for v in variants) + " |",
             "|---|" + "---|" * len(variants)]
    lines += [f"| {label} | " + " | ".join(row(medians[v]) for v in variants) + " |" for label, row in _ROWS]
    t = result["targets"]
    lines += ["", f"(a)/(b) over {t['pairs']} alternated pairs: pods/s whole run {_n(t['throughput_ratio'])}, "
                  f"burst {_n(t['burst_throughput_ratio'])} (target >= {TARGET_THROUGHPUT}: "
                  f"{_met(t['throughput_met'])}); create -> bound p99 {_n(t['p99_ratio'])} "
                  f"(target <= {TARGET_P99}: {_met(t['p99_met'])}); every (a) group in one domain: "
                  f"{_met(t['one_domain_met'])}"]
    return "\n".join(lines)


def _met(flag: bool | None) -> str:
    return "n/a" if flag is None else ("met" if flag else "NOT met")
