"""Which occurrences become new Events, which only count in a series, and when a series is written.

The rules are client-go's, for events.k8s.io/v1 (``tools/events``) and for the spam filter of its older
recorder (``tools/record``), restated here:

- **Series.** Occurrences are the same Event when action, reason, reporting controller (one per recorder),
  regarding and related object are equal; the note is not part of the key, so the series keeps the note of
  its first occurrence (the API server refuses to change a note). An isomorphic occurrence within
  ``SERIES_WINDOW`` (6 minutes) of the last one joins the series: ``series.count`` (every occurrence,
  so at least 2) and ``series.lastObservedTime`` are PATCHed onto the existing Event. Later, a new Event.
  A series silent for the window has ended: its count is written once more if it changed, then forgotten.
  A series still going gets a heartbeat write every ``HEARTBEAT`` (30 minutes) so that the API server's
  Event TTL (one hour by default) does not remove it while it grows.
- **Rate limit.** Writes about one object from this recorder draw from a token bucket: ``BURST`` (25)
  tokens, one more every ``REFILL`` seconds (5 minutes). A new Event that finds no token is dropped and
  counted; a series update that finds none stays in the cache and goes out with the next token, the
  heartbeat or the end of the series: counts are delayed, never lost. The end and the heartbeat of a
  series cost no token (each series makes at most one of each per window).
- **Bounds.** At most ``CACHE_SIZE`` (4,096) series and buckets are remembered; the least recently seen
  go first.

Nothing here does I/O or reads a clock: the recorder passes ``now`` in and carries the writes out.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from webhook.engine.occurrences import ObjectRef, Occurrence

SERIES_WINDOW = 6 * 60.0  # client-go tools/events finishTime
HEARTBEAT = 30 * 60.0  # client-go tools/events refreshTime
BURST, REFILL = 25, 300.0  # client-go tools/record: 25 events per source and object, then one per 5 minutes
CACHE_SIZE = 4096  # client-go tools/record maxLruCacheEntries

Key = tuple[str, str, ObjectRef, ObjectRef | None]


@dataclass(slots=True)
class Series:
    """One Event as this recorder knows it."""

    occurrence: Occurrence  # the first one: its note is the Event's note
    name: str  # metadata.name, fixed when the Event is first created
    first: float  # eventTime
    last: float  # the latest occurrence
    count: int = 1  # occurrences so far
    written: int = 0  # count the API server has (0: not created yet)
    written_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Write:
    verb: Literal["create", "patch"]  # create the Event, or patch its series
    key: Key
    series: Series
    count: int  # what this write records
    last: float


class TokenBucket:
    def __init__(self, burst: int, refill: float, now: float) -> None:
        self.burst = burst
        self.refill = refill
        self.tokens = float(burst)
        self.at = now

    def take(self, now: float) -> bool:
        if now > self.at:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) / self.refill)
            self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Correlator:
    """The series cache and the buckets; one thread uses it (the recorder's), so nothing is locked."""

    def __init__(self, *, window: float = SERIES_WINDOW, heartbeat: float = HEARTBEAT, burst: int = BURST,
                 refill: float = REFILL, size: int = CACHE_SIZE) -> None:
        self.window = window
        self.heartbeat = heartbeat
        self.burst = burst
        self.refill = refill
        self.size = size
        self._series: OrderedDict[Key, Series] = OrderedDict()
        self._buckets: OrderedDict[ObjectRef, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._series)

    def _token(self, regarding: ObjectRef, now: float) -> bool:
        bucket = self._buckets.get(regarding)
        if bucket is None:
            bucket = self._buckets[regarding] = TokenBucket(self.burst, self.refill, now)
            if len(self._buckets) > self.size:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(regarding)
        return bucket.take(now)

    @staticmethod
    def key(occ: Occurrence) -> Key:
        return occ.reason.action, occ.reason.name, occ.regarding, occ.related

    def observe(self, occ: Occurrence, now: float, name: str) -> tuple[list[Write], bool]:
        """The writes ``occ`` calls for now, and whether it was admitted (False: rate-limited, dropped).
        ``name`` is used if it starts a new Event."""
        key = self.key(occ)
        writes: list[Write] = []
        series = self._series.get(key)
        if series is not None and now - series.last <= self.window:
            series.count += 1
            series.last = max(series.last, now)
            self._series.move_to_end(key)
            if self._token(occ.regarding, now):
                writes.append(Write("patch", key, series, series.count, series.last))
            return writes, True
        if series is not None:  # ended: its last count goes out before a new Event starts
            writes.extend(self._finish(key, series))
        if not self._token(occ.regarding, now):
            return writes, False
        series = self._series[key] = Series(occ, name, now, now)
        if len(self._series) > self.size:
            self._series.popitem(last=False)
        writes.append(Write("create", key, series, 1, now))
        return writes, True

    def _finish(self, key: Key, series: Series) -> list[Write]:
        del self._series[key]
        if series.written and series.count > series.written:
            return [Write("patch", key, series, series.count, series.last)]
        return []

    def due(self, now: float) -> list[Write]:
        """Writes owed by the passage of time: ended series, heartbeats, counts that waited for a token."""
        writes: list[Write] = []
        for key, series in list(self._series.items()):
            if now - series.last > self.window:
                writes.extend(self._finish(key, series))
            elif not series.written:
                continue  # its create is still to succeed
            elif series.count > 1 and now - series.written_at >= self.heartbeat:
                writes.append(Write("patch", key, series, series.count, series.last))
            elif series.count > series.written and self._token(series.occurrence.regarding, now):
                writes.append(Write("patch", key, series, series.count, series.last))
        return writes

    def done(self, write: Write, now: float, ok: bool) -> None:
        """The result of a write. A create that failed forgets its Event, so that the next occurrence
        tries a new one; a patch that failed leaves the count owed."""
        series = write.series
        if ok:
            series.written = max(series.written, write.count)
            series.written_at = now
        elif write.verb == "create" and self._series.get(write.key) is series:
            del self._series[write.key]
