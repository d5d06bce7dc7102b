"""How long a group runs at most (docs/GROUPS.md, "Walltime"): what lets the extender plan when a running
group frees its domain, and which waiting group may run in a domain held for another until then.

The bound comes from what Kubernetes and Kueue already enforce, or from what the group's owner states:

- the pod's ``spec.activeDeadlineSeconds`` (the kubelet ends the pod past it, counted from its start);
- its Job's ``spec.activeDeadlineSeconds`` (the Job controller ends the Job past it);
- Kueue's ``kueue.x-k8s.io/max-exec-time-seconds`` label on the Job (Kueue evicts the workload past it);
- the annotation ``imex-webhook.io/max-runtime`` on the pods or their ComputeDomain (the pods' value wins),
  a duration such as ``90m``, ``4h`` or ``1h30m``: advisory, a group that runs longer is planned around,
  never ended by us.

The smallest of those present is the group's walltime. A value that is not one is refused with the reason
(at admission, and at scheduling for pods admitted before): an unusable walltime would let a group that
never ends use a domain held for another.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from webhook.domain import keys
from webhook.domain.model import Catalog, ComputeDomain, Member, Pod, Walltime
from webhook.wire.text import shown

# The longest walltime taken as one: a year. Longer bounds plan as "never ends" would, and the number stays
# far from where a float loses whole seconds.
MAX_SECONDS = 366 * 24 * 3600
MAX_TEXT = 32  # characters of a duration; "8784h" is 5

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(?:[0-9]{1,9}(?:\.[0-9]{1,9})?[hms])+")
_PART = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)([hms])")
_DIGITS = re.compile(r"[0-9]{1,12}")


def parse_duration(raw: str) -> float | None:
    """Seconds of a duration as Go and kubectl write it, in hours, minutes and seconds (``90m``, ``1h30m``,
    ``2.5h``, ``3600s``), above 0 and at most a year; None when the text is not one."""
    text = raw.strip()
    if len(text) > MAX_TEXT or not _DURATION.fullmatch(text):
        return None
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(text))
    return seconds if 0 < seconds <= MAX_SECONDS else None


def _kueue_seconds(raw: str) -> float | None:
    text = raw.strip()
    if not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return float(value) if 0 < value <= MAX_SECONDS else None


def requested(pod: Pod, catalog: Catalog, cd: ComputeDomain | None) -> tuple[Walltime | None, str | None]:
    """(the group's walltime as the pod, its Job and its ComputeDomain state it, or None; why a stated
    bound is unusable, or None)."""
    found: list[Walltime] = []
    if pod.active_deadline:
        found.append(Walltime(float(min(pod.active_deadline, MAX_SECONDS)), "the pod's activeDeadlineSeconds", True))
    job = next((catalog.jobs.get((pod.namespace, o.name)) for o in pod.owners if o.kind == "Job" and o.controller),
               None)
    problem = None
    if job is not None:
        what = f"Job {job.namespace}/{job.name}'s"
        if job.active_deadline:
            found.append(Walltime(float(min(job.active_deadline, MAX_SECONDS)), f"{what} activeDeadlineSeconds", True))
        if job.max_exec is not None:
            seconds = _kueue_seconds(job.max_exec)
            if seconds is None:
                problem = (f"{what} label {keys.KUEUE_MAX_EXEC_LABEL}={shown(job.max_exec)} is not a number of "
                           f"seconds from 1 to {MAX_SECONDS}")
            else:
                found.append(Walltime(seconds, f"{what} {keys.KUEUE_MAX_EXEC_LABEL}", True))
    raw, where = pod.annotations.get(keys.MAX_RUNTIME_ANNOTATION), "the pod's"
    if raw is None and cd is not None and cd.max_runtime is not None:
        raw, where = cd.max_runtime, f"ComputeDomain {cd.namespace}/{cd.name}'s"
    if raw is not None:
        seconds = parse_duration(raw)
        if seconds is None:
            problem = (f"{where} annotation {keys.MAX_RUNTIME_ANNOTATION}={shown(raw)} is not a duration: write "
                       "hours, minutes or seconds (e.g. '90m', '4h', '1h30m'), more than 0 and at most 8784h, "
                       "or remove it")
        else:
            found.append(Walltime(seconds, f"{where} annotation {keys.MAX_RUNTIME_ANNOTATION}", False))
    return (min(found, key=lambda w: (w.seconds, not w.enforced)) if found else None), problem


def started(members: Iterable[Member]) -> float | None:
    """When the group started running: the earliest start of its members bound and started, or None."""
    starts = [m.pod.started_at for m in members if m.pod.node_name and m.pod.started_at is not None
              and not m.pod.terminated]
    return min(starts) if starts else None


def expected_end(walltime: Walltime | None, members: Iterable[Member]) -> float | None:
    """When a running group ends at the latest, by its walltime; None when it states none (it never ends,
    for planning) or has not started."""
    if walltime is None:
        return None
    start = started(members)
    return start + walltime.seconds if start is not None else None
