"""Kubernetes mode's ``EventSink``: occurrences become events.k8s.io/v1 Events in the API server.

``record`` only puts the occurrence in a bounded queue (``MAX_QUEUED``, client-go's size) and returns; a
full queue drops it and counts it. One background thread takes them out, correlates them
(``event_series``: series and the rate limit) and writes: a POST for a new Event, a JSON merge PATCH
of ``series`` for a repeat, a POST again when the Event to patch is gone (the API server's Event TTL).
An API server that fails (500, 429, no answer) is tried ``TRIES`` times with a growing pause, then the
write is dropped and counted; one that refuses (4xx) is not tried again. Nothing here raises into the
engine, and the extender never waits on it: a hung API server fills the queue, not a request.

The objects are shaped as kube-apiserver validates them for events.k8s.io/v1 (its events validation):
``eventTime`` is set (MicroTime, microseconds), ``reportingController`` is a qualified name,
``reportingInstance``, ``action`` and ``reason`` are 1 to 128 characters, ``note`` at most 1,024 bytes,
``type`` Normal or Warning, ``series.count`` at least 2; the name is a DNS subdomain,
``<regarding name>.<hex nanoseconds>`` as client-go names them, in the regarding object's namespace.
"""

from __future__ import annotations

import logging
import queue
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from webhook.adapters.kube.api import JSON, MERGE_PATCH, Api, ApiError
from webhook.adapters.kube.event_series import Correlator, Series, Write
from webhook.engine.occurrences import DROP_REASONS, ObjectRef, Occurrence
from webhook.wire.kinds import EVENTS
from webhook.wire.text import clip_bytes
from webhook.wire.timestamps import rfc3339

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "imex-webhook.io/extender"
MAX_QUEUED = 1000  # client-go tools/events maxQueuedEvents
TRIES = 3  # writes to an API server that fails; client-go tries 12 times, 10 s apart, which we cannot afford
PAUSE = 0.5  # seconds before the second try, doubled after each, jittered by a quarter
TICK = 10.0  # seconds between looks at the series owed a write (ended, heartbeat, waiting for a token)
# Limits of kube-apiserver's events validation.
NOTE_BYTES, FIELD_CHARS, NAME_CHARS = 1024, 128, 253


class ObjectReferenceWire(TypedDict):
    apiVersion: str
    kind: str
    namespace: str
    name: str
    uid: NotRequired[str]


class EventSeriesWire(TypedDict):
    count: int
    lastObservedTime: str


class EventMetaWire(TypedDict):
    name: str
    namespace: str


class EventWire(TypedDict):
    apiVersion: str
    kind: str
    metadata: EventMetaWire
    eventTime: str
    reportingController: str
    reportingInstance: str
    action: str
    reason: str
    type: str
    note: str
    regarding: ObjectReferenceWire
    related: NotRequired[ObjectReferenceWire]
    series: NotRequired[EventSeriesWire]


_LABEL_BAD = re.compile(r"[^a-z0-9-]+")


def name_prefix(name: str) -> str:
    """The regarding object's name as the start of a DNS-subdomain Event name (API objects' names are
    already; anything else is made so), short enough to leave room for ``.<16 hex digits>``."""
    labels = (_LABEL_BAD.sub("-", label).strip("-") for label in name.lower().split("."))
    prefix = ".".join(label for label in labels if label)[: NAME_CHARS - 17].rstrip(".-")
    return prefix or "object"


def _ref(obj: ObjectRef) -> ObjectReferenceWire:
    wire: ObjectReferenceWire = {"apiVersion": obj.api_version, "kind": obj.kind, "namespace": obj.namespace,
                                 "name": obj.name}
    if obj.uid:
        wire["uid"] = obj.uid
    return wire


def event_object(series: Series, instance: str, count: int = 1, last: float | None = None) -> EventWire:
    occ = series.occurrence
    event: EventWire = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        # The Event lives with what it is about; a cluster-scoped object's would go to "default".
        "metadata": {"name": series.name, "namespace": occ.regarding.namespace or "default"},
        "eventTime": rfc3339(series.first, "us"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:FIELD_CHARS] or "unknown",
        "action": occ.reason.action[:FIELD_CHARS], "reason": occ.reason.name[:FIELD_CHARS],
        "type": occ.reason.type, "note": clip_bytes(occ.note, NOTE_BYTES), "regarding": _ref(occ.regarding),
    }
    if occ.related is not None:
        event["related"] = _ref(occ.related)
    if count > 1:
        observed = last if last is not None else series.first
        event["series"] = {"count": count, "lastObservedTime": rfc3339(observed, "us")}
    return event


@dataclass
class _Sync:
    """Put in the queue by ``sync``: set once everything queued before it is handled."""

    done: threading.Event = field(default_factory=threading.Event)


class EventRecorder:
    """``EventSink`` on the API server. ``instance`` is this replica's name (``reportingInstance``)."""

    def __init__(self, api: Api, instance: str, *, clock: Callable[[], float] = time.time,
                 correlator: Correlator | None = None, queue_size: int = MAX_QUEUED, tries: int = TRIES,
                 pause: float = PAUSE, tick: float = TICK) -> None:
        self._api = api
        self.instance = instance
        self.clock = clock
        self.correlator = correlator if correlator is not None else Correlator()
        self.tries = max(1, tries)
        self.pause = pause
        self.tick = tick
        self._queue: queue.Queue[Occurrence | _Sync | None] = queue.Queue(queue_size)
        self._dropped: Counter[str] = Counter()
        self._counting = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kube-events", daemon=True)
        self._last_nanos = 0

    # -- the sink: called on request threads ------------------------------------------------------------

    def record(self, occurrence: Occurrence) -> None:
        try:
            self._queue.put_nowait(occurrence)
        except queue.Full:
            self._drop("queue-full")

    def dropped(self) -> Mapping[str, int]:
        with self._counting:
            return {reason: self._dropped[reason] for reason in DROP_REASONS}

    def _drop(self, why: str) -> None:
        with self._counting:
            self._dropped[why] += 1

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stopping.is_set():
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop after the write in progress (no more tries); what is still queued is not written."""
        self._stopping.set()
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # the thread sees _stopping after its current item
        if self._thread.is_alive():
            self._thread.join(timeout)

    def sync(self, timeout: float = 10.0) -> bool:
        """Wait until what was recorded so far is handled and the writes now due are made (tests)."""
        marker = _Sync()
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.done.wait(timeout)

    # -- the thread ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        next_look = self.clock() + self.tick
        while not self._stopping.is_set():
            try:
                item = self._queue.get(timeout=self.tick)
            except queue.Empty:
                item = _Sync()
            if item is None:
                return
            try:
                if isinstance(item, Occurrence):
                    self._observe(item)
                if isinstance(item, _Sync) or self.clock() >= next_look:
                    next_look = self.clock() + self.tick
                    for write in self.correlator.due(self.clock()):
                        self._write(write)
            except Exception:  # a bug here must not end the thread: later Events still go out
                log.exception("recording an Event failed")
            finally:
                if isinstance(item, _Sync):
                    item.done.set()

    def _name(self, occ: Occurrence, now: float) -> str:
        # client-go names an Event after its object and the time in nanoseconds; one recorder never
        # repeats a stamp, so two Events of one object in one nanosecond (a coarse clock) do not collide.
        self._last_nanos = max(int(now * 1e9), self._last_nanos + 1)
        return f"{name_prefix(occ.regarding.name)}.{self._last_nanos:x}"

    def _observe(self, occ: Occurrence) -> None:
        now = self.clock()
        writes, admitted = self.correlator.observe(occ, now, self._name(occ, now))
        if not admitted:
            self._drop("rate-limited")
        for write in writes:
            self._write(write)

    def _write(self, write: Write) -> None:
        series, ns = write.series, write.series.occurrence.regarding.namespace or "default"
        ok = False
        try:
            if write.verb == "patch":
                patch = {"series": {"count": write.count, "lastObservedTime": rfc3339(write.last, "us")}}
                try:
                    self._call("PATCH", EVENTS.path(ns, series.name), patch)
                except ApiError as exc:
                    if exc.status != 404:
                        raise
                    # The Event expired meanwhile (or was deleted): create it again, with its series.
                    self._call("POST", EVENTS.path(ns), event_object(series, self.instance, write.count, write.last))
            else:
                self._call("POST", EVENTS.path(ns), event_object(series, self.instance))
            ok = True
        except ApiError as exc:
            if exc.status == 409 and exc.reason == "AlreadyExists":
                ok = True  # a try that timed out had landed: the name is ours (one recorder never repeats one)
                return
            transient = exc.status in (0, 429) or exc.status >= 500
            self._drop("unavailable" if transient else "rejected")
            log.log(logging.DEBUG if exc.status == 409 else logging.WARNING,
                    "Event %s %s about %s not written: %s", series.occurrence.reason.name, write.verb,
                    series.occurrence.regarding.ref, exc)
        finally:
            self.correlator.done(write, self.clock(), ok)

    def _call(self, method: str, path: str, body: object) -> None:
        pause = self.pause
        for attempt in range(1, self.tries + 1):
            try:
                self._api.call(method, path, body=body, content_type=MERGE_PATCH if method == "PATCH" else JSON)
                return
            except ApiError as exc:
                transient = exc.status in (0, 429) or exc.status >= 500
                if not transient or attempt == self.tries or self._stopping.is_set():
                    raise
            # A jittered pause, so that replicas coming back together do not retry in step.
            if self._stopping.wait(pause * random.uniform(0.75, 1.25)):
                raise ApiError(0, "Stopping", "the recorder is stopping")
            pause *= 2
