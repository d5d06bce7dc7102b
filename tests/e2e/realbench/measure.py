"""Reading the figures: kube-scheduler's Prometheus histograms, percentiles of samples, and a process
tree's CPU time and memory from /proc.

kube-scheduler has no metric of its own for extender calls; its scheduling algorithm
(``scheduler_scheduling_algorithm_duration_seconds``) is the in-tree PreFilter, Filter, PreScore and Score
extension points plus the extenders' filter and prioritize calls, so what the algorithm spent outside those
extension points is the extenders' share (and the little glue between them).
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
IN_TREE_ALGORITHM_POINTS = ("PreFilter", "Filter", "PreScore", "Score")


@dataclass(frozen=True)
class Histogram:
    """One histogram summed over every label set that ``where`` selected: cumulative buckets, sum, count."""

    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending, +Inf last
    total: float
    count: float

    def quantile(self, q: float) -> float | None:
        """As Prometheus' histogram_quantile: linear inside the bucket; None without observations."""
        if not self.count or not self.buckets:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for upper, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(upper):
                    return lower
                inside = cumulative - below
                return lower + (upper - lower) * ((rank - below) / inside if inside else 0.0)
            lower, below = upper, cumulative
        return lower


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"not a Prometheus text sample: {line[:200]!r}")
        name, labels, value = match.groups()
        out.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    return out


def histogram(samples: Iterable[tuple[str, dict[str, str], float]], name: str,
              where: Mapping[str, str] | None = None) -> Histogram:
    buckets: dict[float, float] = defaultdict(float)
    total = count = 0.0
    for metric, labels, value in samples:
        if any(labels.get(k) != v for k, v in (where or {}).items()):
            continue
        if metric == f"{name}_bucket":
            buckets[float(labels["le"])] += value
        elif metric == f"{name}_sum":
            total += value
        elif metric == f"{name}_count":
            count += value
    return Histogram(tuple(sorted(buckets.items())), total, count)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def median(values: Iterable[float | None]) -> float | None:
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    middle = len(present) // 2
    return present[middle] if len(present) % 2 else (present[middle - 1] + present[middle]) / 2


# -- processes ------------------------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    cpu_seconds: float
    rss_bytes: int


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system seconds) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_usage(root: int) -> Usage:
    """CPU seconds and resident memory of ``root`` and every process below it (gunicorn's worker)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            parents[int(entry)], cpu[int(entry)] = stat
    members, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in members]
        members.update(children)
        frontier.extend(children)
    return Usage(sum(cpu.get(pid, 0.0) for pid in members), sum(_rss(pid) for pid in members if pid in cpu))
