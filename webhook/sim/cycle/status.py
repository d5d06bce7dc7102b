"""Filter statuses and the FailedScheduling text, formatted as kube-scheduler formats them.

``0/N nodes are available: <reasons>. <post-filter message>``: every rejected node contributes each of
its reasons; equal reasons are counted; the ``"<count> <reason>"`` strings are sorted as strings (so
``"10 x"`` sorts before ``"2 y"``) and joined with ``", "``. Nodes that have no status of their own
(not evaluated because a PreFilter narrowed the list, or left out of an extender's filter reply with no
reason) take the "absent" status: its reasons are counted once per such node, and when it has none (an
extender dropping a node silently) the node vanishes from the text. When a PreFilter plugin rejects the
pod, its message replaces the reasons. The post-filter part (DRA deallocation, ``preemption: ...``)
follows after one space. The Event carries at most 1,024 bytes (``" ..."`` at the cut); the pod's
``PodScheduled`` condition carries the whole text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

UNSCHEDULABLE = "Unschedulable"
UNRESOLVABLE = "UnschedulableAndUnresolvable"
EVENT_LIMIT = 1024
NO_NODES_AVAILABLE = "no nodes available to schedule pods"


@dataclass(frozen=True)
class Status:
    code: str
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)


NO_REASON_UNRESOLVABLE = Status(UNRESOLVABLE)


@dataclass(frozen=True)
class Diagnosis:
    statuses: Mapping[str, Status] = field(default_factory=dict)
    absent: Status = NO_REASON_UNRESOLVABLE
    prefilter_message: str = ""

    def status_of(self, node: str) -> Status:
        return self.statuses.get(node, self.absent)


def fit_error_message(num_all_nodes: int, diagnosis: Diagnosis, post_filter_message: str = "") -> str:
    text = f"0/{num_all_nodes} nodes are available:"
    if diagnosis.prefilter_message:
        text += f" {diagnosis.prefilter_message}."
    else:
        counts: dict[str, int] = {}
        for status in diagnosis.statuses.values():
            for reason in status.reasons:
                counts[reason] = counts.get(reason, 0) + 1
        missing = num_all_nodes - len(diagnosis.statuses)
        if missing > 0:
            for reason in diagnosis.absent.reasons:
                counts[reason] = counts.get(reason, 0) + missing
        histogram = sorted(f"{count} {reason}" for reason, count in counts.items())
        if histogram:
            text += f" {', '.join(histogram)}."
    if post_filter_message:
        text += f" {post_filter_message}"
    return text


def event_text(message: str) -> str:
    """The message as the FailedScheduling Event carries it (cut at 1,024 bytes)."""
    data = message.encode()
    if len(data) <= EVENT_LIMIT:
        return message
    suffix = " ..."
    return data[:EVENT_LIMIT - len(suffix)].decode(errors="ignore") + suffix
