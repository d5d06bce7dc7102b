"""Segments given to members without a rank (``webhook.domain.jobs.segment_assignment``): written on the pod as
the label ``imex-webhook.io/segment`` through the ``Binder`` before any node passes, and remembered until
the cache shows the label.

One member is given a segment at a time (``lock``): two filters running at once would both see the last
place of a segment free. The record covers the moment between the write and the watch event that brings
the label back, and a stale event of the pod from before the write that may arrive after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from webhook.domain import keys
from webhook.domain.groups import segments
from webhook.domain.model import Group, Pod
from webhook.engine.ports import Binder
from webhook.state.cluster import ClusterStore

# Seconds a given segment is remembered: far beyond a watch's delay, short enough that a member deleted
# right after it was given a segment does not hold that place for long.
GIVEN_TTL = 60.0


class SegmentLabels:
    def __init__(self, binder: Binder, store: ClusterStore, clock: Callable[[], float]) -> None:
        self._binder = binder
        self._store = store
        self._clock = clock
        self._given: dict[str, tuple[str, float]] = {}  # pod uid -> (segment id, when)
        self._mu = threading.Lock()
        self.lock = threading.Lock()  # held by the filter of an unranked member from decision to label

    def given(self) -> dict[str, str]:
        """Pod uid -> segment id given by this process and not yet seen on the pod in the cache."""
        now = self._clock()
        with self._mu:
            for uid in [u for u, (_, at) in self._given.items() if now - at > GIVEN_TTL]:
                del self._given[uid]
            return {uid: seg for uid, (seg, _) in self._given.items()}

    def give(self, pod: Pod, member: Group) -> None:
        """Write the segment on the pod; raises DecisionError when the API server refuses (the scheduler
        retries the pod)."""
        assert member.segment is not None
        index = member.segment.index
        self._binder.label_segment(pod, index)
        with self._mu:
            self._given[pod.uid] = (segments.segment_id(member.segment.job_id, index), self._clock())
        value = str(index)

        def labelled(current: Pod | None) -> Pod | None:
            # This process's cache shows the label at once (prioritize and preempt of the same cycle read
            # it); the watch brings the same label a moment later, and to the other replicas.
            if current is None or current.uid != pod.uid or current.labels.get(keys.SEGMENT_LABEL) == value:
                return current
            return replace(current, labels={**current.labels, keys.SEGMENT_LABEL: value})

        self._store.modify("Pod", pod.key, labelled)
