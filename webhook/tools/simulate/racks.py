"""Jobs larger than one NVLink domain in ``imex-webhook simulate`` (docs/SIMULATE.md, "Jobs larger than one
rack").

A multi-rack job is a ComputeDomain of k racks (k = 2 to 4, never more than the cluster's cliques) of
whole trays, less a spare tray or two as real jobs leave, annotated ``imex-webhook.io/segment-size`` = the
trays of a rack; its pods carry their Job completion index, as an Indexed Job's do. The service reads both
and plans the segments itself (docs/SCHEDULER.md, "Jobs larger than one NVLink domain"); nothing here
decides for it. Their arrival process is ``workload.multi_rack_jobs`` (from the seed, on a stream of its
own, so the rest of the stream is the same with or without them). Here: what counts as split for them
(``split``: a segment across cliques, not a job across cliques), the gang-tas peer's podset slices
(``pack_slices``) and the per-class table of the report (``class_table``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from webhook.tools.simulate.workload import Job


def segment_of(job: Job, pod: int) -> int:
    """The pod's segment: floor(completion index / segment size), as the service maps ranks; 0 unsegmented."""
    return pod // job.segment_size if job.segment_size else 0


def split(job: Job, domains: Sequence[str | None]) -> bool:
    """Whether a placed job is broken: one of its segments (the whole job, unsegmented) has pods in two
    domains. A multi-rack job in whole segments is not split, however many cliques it spans."""
    seen: dict[int, str] = {}
    for pod, domain in enumerate(domains):
        if domain is None:
            continue
        if seen.setdefault(segment_of(job, pod), domain) != domain:
            return True
    return False


def slice_sizes(job: Job) -> list[int]:
    """Pods per slice (segment), in index order: the last takes the rest."""
    per = job.segment_size or job.pods
    return [min(per, job.pods - start) for start in range(0, job.pods, per)]


def pack_slices(rooms: Mapping[str, int], sizes: Sequence[int]) -> dict[int, str] | None:
    """Kueue TAS's podset slices (``podset-slice-required-topology`` on the clique, ``podset-slice-size``):
    slice index -> domain, each slice inside one domain, or None when not all fit now (the whole job waits).
    As few domains as possible: while the slices left do not fit one domain, the domain that takes the most of
    them (then the most room, then the name) takes as many as fit; the rest goes to the domain that holds it
    with the least room (best fit). ``rooms``: pods each domain can take now."""
    room = dict(rooms)
    left = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    out: dict[int, str] = {}
    while left:
        total = sum(sizes[i] for i in left)
        whole = [d for d in room if room[d] >= total]
        if whole:
            target = min(whole, key=lambda d: (room[d], d))
            out.update(dict.fromkeys(left, target))
            return out

        def takes(domain: str) -> int:
            free, count = room[domain], 0
            for i in left:
                if sizes[i] <= free:
                    free -= sizes[i]
                    count += 1
            return count

        if not room:
            return None
        target = min(room, key=lambda d: (-takes(d), -room[d], d))
        if takes(target) == 0:
            return None
        free = room.pop(target)
        for i in list(left):
            if sizes[i] <= free:
                free -= sizes[i]
                out[i] = target
                left.remove(i)
    return out


def _minutes(value: float | None) -> str:
    """A wait in minutes as the tables show it: one decimal, '-' when no job of the class started."""
    return "-" if value is None else f"{value:.1f}"


def waits(c: dict[str, Any]) -> str:
    """A class's wait p50 / p90 / p99 minutes, as every table shows them."""
    return f"{_minutes(c['wait_p50_minutes'])} / {_minutes(c['wait_p90_minutes'])} / {_minutes(c['wait_p99_minutes'])}"


CLASS_NOTE = ("Per job class (the multi-rack jobs apart): completed / split / stuck / pending of submitted, useful "
              "utilisation, wait p50 / p90 / p99 minutes over the jobs that started. A multi-rack job is split when "
              "one of its segments spans cliques; in whole segments it is not.")


def class_table(rows: list[dict[str, Any]], labels: Sequence[str],
                cell: Callable[[dict[str, Any]], str] | None = None) -> list[str]:
    """Markdown lines: per policy and class, completed / split / stuck / pending, utilisation and waits."""
    def default(c: dict[str, Any]) -> str:
        return (f"{c['completed']} / {c['split']} / {c['stuck']} / {c['pending']} of {c['submitted']}, "
                f"{c['utilisation_useful']:.1%}, {waits(c)}")

    show = cell or default
    lines = ["| policy | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for r in rows:
        lines.append(f"| {r['policy']} | " + " | ".join(show(r["delay_by_size"][label]) for label in labels) + " |")
    return lines
