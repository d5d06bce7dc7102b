"""Watch-backed caches: one daemon thread per kind keeps a ``Sink`` equal to the API server's view.

The loop is client-go's reflector, reduced to what we need:

1. LIST in pages -> ``sink.replace(kind, items)`` and ``sink.mark_synced(kind)``;
2. WATCH from the list's resourceVersion, with bookmarks and a server-side timeout; each event ->
   ``sink.apply``; when the server ends the watch, watch again from the last resourceVersion seen;
3. 410 Gone (HTTP status, or an ERROR event with code 410): the server no longer has the history we
   need, so relist at once; any other failure: relist after an exponential, jittered back-off.

Each relist is logged with its reason. A resource marked optional (a CRD that may not be installed)
that answers 404 counts as synced and empty, and is looked for again now and then; so does a 403 for one
marked ``forbidden_ok`` (objects that only refine decisions, which an operator may choose not to grant).
``interrupt`` shuts the socket of the call in progress, so ``stop`` does not wait for a quiet watch.

One event never stops a watch: an event line that is not JSON, or whose ``sink.apply`` raises, is logged
and skipped, and the watch goes on with the next event from the resourceVersion it carried (the store
itself skips and counts objects it cannot parse, ``webhook.state.cluster``).

Progress, for readiness (``stalled``): a watcher makes progress when a list is applied to its sink, when
a watch request is answered, with every line the watch delivers (events and bookmarks alike: we ask for
``allowWatchBookmarks``), and when the server ends a watch at its ``timeoutSeconds``. A quiet cluster
sends no events, so an open watch also counts as healthy until its own deadline (the server-side timeout
plus ``WATCH_SLACK``): by then the server has ended it and we watched again, or the read timed out and we
relist (a resource that is not served counts as healthy while it waits to be looked for again). So an
idle but healthy watch is never stalled, whatever the bound; a watcher is stalled when it
has made no progress for longer than ``WatchSettings.stall_timeout`` and has no watch open within its
deadline: it is failing to list (or to re-watch) again and again, or its thread is stuck.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import orjson
import urllib3

from webhook.adapters.kube.api import Api, ApiError
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.errors import ImexWebhookError
from webhook.wire.kinds import Kind

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.5
# A watch silent for longer than its server-side timeout plus this is dead (a half-open connection after
# a network partition): the server ends every watch at timeoutSeconds, with a bookmark first.
WATCH_SLACK = 30.0
# A watch that lived this long, or delivered an event, proves the connection healthy: the back-off resets.
HEALTHY_WATCH = 30.0
# A watch that ends quicker than this with nothing in it is a failure (a proxy cutting streams, say):
# re-watching at once would spin.
WATCH_AT_ONCE = 0.5


class Sink(Protocol):
    """Where a watcher puts what it learns (``ClusterStore``, a ``cache.WatchedCache``), told the kind watched."""

    def replace(self, kind: Kind, objects: Iterable[Mapping[str, Any]]) -> None: ...

    def apply(self, kind: Kind, event: str, obj: Mapping[str, Any]) -> None: ...

    def mark_synced(self, kind: Kind, synced: bool = True) -> None: ...


class _Gone(ImexWebhookError):
    """410: our resourceVersion is older than the history the API server keeps; only a relist helps."""


def _jitter(delay: float) -> float:
    # Replicas that lost the API server together should not come back in lockstep.
    return delay * random.uniform(0.8, 1.2)


class Watcher:
    def __init__(self, api: Api, watched: Kind, sink: Sink, stopping: threading.Event, *,
                 optional: bool = False, forbidden_ok: bool = False, settings: WatchSettings | None = None,
                 label_selector: str = "") -> None:
        self._api = api
        self._watched = watched
        # Lists and watches carry it: the node agent keeps only its own node's attachments.
        self._selection = [("labelSelector", label_selector)] if label_selector else []
        self._sink = sink
        self._stopping = stopping
        self._optional = optional
        self._forbidden_ok = forbidden_ok  # a 403 counts as not served (least privilege is a choice)
        self._settings = settings or WatchSettings()
        self._lock = threading.Lock()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._absent = False
        self._clock = self._settings.clock
        self._progress_at = self._clock()  # guarded by _lock, as are the two below
        self._open_until: float | None = None  # the deadline of the watch request in progress
        self._problem = ""  # why the last list or watch failed, for the stall reason
        self._thread = threading.Thread(target=self._run, name=f"watch-{watched.plural}", daemon=True)

    @property
    def kind(self) -> str:
        """The label of the kind watched: the watch's name in logs, /readyz and the metrics."""
        return self._watched.label

    def start(self) -> None:
        self._progressed()
        self._thread.start()

    def stalled(self) -> str | None:
        """Why this watcher counts as stalled (module docstring), or ``None`` while it makes progress."""
        bound = self._settings.stall_timeout
        with self._lock:
            now = self._clock()
            if self._open_until is not None and now < self._open_until:
                return None
            idle = now - self._progress_at
            problem = self._problem
        if idle <= bound:
            return None
        return (f"the {self.kind} watch has made no progress for {idle:.0f}s (more than {bound:g}s)"
                + (f": {problem}" if problem else ""))

    def progress_age(self) -> float:
        """Seconds since the last progress; an idle open watch ages up to its deadline and stays healthy."""
        with self._lock:
            return max(0.0, self._clock() - self._progress_at)

    def _progressed(self, problem: str = "") -> None:
        with self._lock:
            self._progress_at = self._clock()
            self._problem = problem

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def interrupt(self) -> None:
        """Wake the thread from a blocking read (call after setting ``stopping``)."""
        with self._lock:
            response = self._response
        if response is not None:
            try:
                response.shutdown()
            except (ValueError, RuntimeError, OSError):
                pass  # already released or closed: the thread is not blocked on it

    def _track(self, response: urllib3.BaseHTTPResponse | None) -> None:
        with self._lock:
            self._response = response
        if response is not None and self._stopping.is_set():
            self.interrupt()  # stop() ran between the request and the tracking

    def _run(self) -> None:
        delay = BACKOFF_FIRST
        why = "initial list"
        while not self._stopping.is_set():
            try:
                version = self._list(why)
                while not self._stopping.is_set():
                    version, events, lasted = self._watch(version)
                    if events or lasted >= HEALTHY_WATCH:
                        delay = BACKOFF_FIRST
                    elif lasted < WATCH_AT_ONCE and not self._stopping.is_set():
                        raise ApiError(0, "WatchClosed", "the API server ended the watch at once")
                return
            except _Gone as exc:
                why = str(exc)
                continue  # relist at once: the data is fine, only our position in its history is lost
            except ApiError as exc:
                if self._stopping.is_set():
                    return
                if self._optional and (exc.status == 404 or (exc.status == 403 and self._forbidden_ok)):
                    self._not_served(exc)
                    why = "looking again for a resource that was not served"
                    continue
                why = str(exc)
            except Exception as exc:  # a bug or an answer we cannot read: keep the cache alive regardless
                if self._stopping.is_set():
                    return
                log.exception("%s: unexpected failure in the watch loop", self.kind)
                why = f"unexpected {type(exc).__name__}: {exc}"
            pause = _jitter(delay)
            with self._lock:
                self._problem = why
            log.warning("%s: %s; relisting in %.1fs", self.kind, why, pause)
            if self._stopping.wait(pause):
                return
            delay = min(delay * 2, self._settings.backoff_max)

    def _not_served(self, exc: ApiError) -> None:
        if not self._absent:
            log.warning("%s: the API server does not serve %s%s (%s); treating it as empty and looking again "
                        "every %gs", self.kind, self._watched.qualified,
                        " to us" if exc.status == 403 else "", exc, self._settings.absent_recheck)
            self._absent = True
        self._sink.replace(self._watched, [])
        self._sink.mark_synced(self._watched)
        self._progressed()
        with self._lock:  # waiting to look again is as healthy as an open watch
            self._open_until = self._clock() + self._settings.absent_recheck + WATCH_SLACK
        try:
            self._stopping.wait(self._settings.absent_recheck)
        finally:
            with self._lock:
                self._open_until = None

    def _list(self, why: str) -> str:
        # Looking again for a CRD that is still missing is routine: keep it out of the INFO log.
        log.log(logging.DEBUG if self._absent else logging.INFO, "%s: listing (%s)", self.kind, why)
        items: list[Any] = []
        version = token = ""
        while True:
            query = [("limit", str(self._settings.page_size)), *self._selection] + (
                [("continue", token)] if token else [])
            try:
                page = self._api.call("GET", self._watched.path(), query=query, track=self._track)
            except ApiError as exc:
                if exc.status == 410:  # the continue token expired: start the list over
                    raise _Gone(f"list page expired ({exc.message})") from exc
                raise
            items.extend(page.get("items") or ())
            meta = page.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")  # every page shares the first's
            token = str(meta.get("continue") or "")
            if not token:
                break
        if self._absent:
            log.info("%s: %s is served now", self.kind, self._watched.qualified)
            self._absent = False
        self._sink.replace(self._watched, [i for i in items if isinstance(i, dict)])
        self._sink.mark_synced(self._watched)
        self._progressed()
        log.debug("%s: %d objects at resourceVersion %s", self.kind, len(items), version)
        return version

    def _watch(self, version: str) -> tuple[str, int, float]:
        """One watch request; returns the last resourceVersion seen, the events applied, the seconds."""
        server_timeout = self._settings.timeout or random.uniform(300, 600)
        query = [("watch", "true"), ("resourceVersion", version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(max(1, round(server_timeout)))), *self._selection]
        timeout = (self._api.timeout[0], server_timeout + WATCH_SLACK)
        started, events = time.monotonic(), 0
        try:
            response = self._api.open("GET", self._watched.path(), query=query, timeout=timeout)
        except ApiError as exc:
            if exc.status == 410:
                raise _Gone(f"watch from resourceVersion {version} expired ({exc.message})") from exc
            raise
        self._track(response)
        with self._lock:
            self._open_until = self._clock() + server_timeout + WATCH_SLACK
        self._progressed()
        ended = False
        try:
            for line in self._api.lines(response, timeout):
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    log.warning("%s: skipped a watch event that is not readable JSON (%s); the watch goes on",
                                self.kind, exc)
                    continue
                kind, obj = (event.get("type"), event.get("object")) if isinstance(event, dict) else (None, None)
                if not isinstance(obj, dict):
                    continue
                if kind == "ERROR":
                    code = obj.get("code")
                    message = str(obj.get("message") or "")
                    if code == 410:
                        raise _Gone(f"watch from resourceVersion {version} expired ({message})")
                    raise ApiError(code if isinstance(code, int) else 0, str(obj.get("reason") or "Error"),
                                   message or "error event in the watch")
                self._progressed()  # an event or a bookmark
                meta = obj.get("metadata")
                version = str((meta.get("resourceVersion") if isinstance(meta, dict) else None) or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(kind, obj)
                    events += 1
            ended = True
        finally:
            with self._lock:
                self._open_until = None
            if ended:
                self._progressed()  # the server ended the watch at its timeout: we watch again at once
            self._track(None)
            response.close()
            response.release_conn()
        return version, events, time.monotonic() - started

    def _apply(self, event: str, obj: dict[str, Any]) -> None:
        try:
            self._sink.apply(self._watched, event, obj)
        except Exception:  # one event must never stop the watch; the next one is applied
            meta = obj.get("metadata")
            name = "/".join(str(meta.get(k) or "") for k in ("namespace", "name")) if isinstance(meta, dict) else "?"
            log.exception("%s: could not apply %s of %s; skipped, the watch goes on", self.kind, event, name)
