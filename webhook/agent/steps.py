"""Steps with deadlines, for the hot-add and release procedures: each step is logged with its duration
and reported to the metrics, and a step that runs out of time fails with what it last saw.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from webhook.errors import ImexWebhookError
from webhook.wire.fabric_attachment import Attachment, Condition
from webhook.wire.timestamps import rfc3339

log = logging.getLogger(__name__)

Observe = Callable[[str, str, float], None]  # (step, outcome "ok"|"refused"|"failed", seconds)


@dataclass(frozen=True)
class Deadlines:
    """Seconds each step may take. The defaults fit real hardware: enumeration and driver binding take
    seconds (GPU init, ECC scrub), the device plugin restarts and re-registers with the kubelet within
    tens of seconds, and the kubelet reports allocatable with its next node status update (10 s)."""

    rescan: float = 10.0
    enumerate: float = 60.0
    driver: float = 60.0
    nvml: float = 60.0
    check: float = 60.0
    persistence: float = 10.0
    device_plugin: float = 30.0
    allocatable: float = 180.0
    gone: float = 60.0
    poll: float = 0.5  # between two looks at something we wait for; API reads happen at most this often


class Refused(ImexWebhookError):
    """Not a failure: the procedure may not go on now (a GPU in use); it is tried again later."""


class StepFailed(ImexWebhookError):
    def __init__(self, step: str, reason: str, elapsed: float) -> None:
        super().__init__(f"step {step} failed after {elapsed:.1f}s: {reason}")
        self.step = step
        self.reason = reason
        self.elapsed = elapsed


class Steps:
    """One run of a procedure (``what``, e.g. "hot-add fa-123"): times its steps and waits."""

    def __init__(self, what: str, observe: Observe | None = None, poll: float = 0.5) -> None:
        self.what = what
        self.observe = observe
        self.poll = poll
        self.started = time.monotonic()
        self.timings: list[tuple[str, float]] = []

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        except StepFailed as exc:
            self._record(name, "failed", time.monotonic() - began, exc.reason)
            raise
        except Refused as exc:
            self._record(name, "refused", time.monotonic() - began, str(exc))
            raise
        except Exception as exc:
            took = time.monotonic() - began
            self._record(name, "failed", took, str(exc))
            raise StepFailed(name, str(exc), took) from exc
        self._record(name, "ok", time.monotonic() - began, "")

    def _record(self, name: str, outcome: str, took: float, reason: str) -> None:
        self.timings.append((name, took))
        if outcome == "ok":
            log.info("%s: step %s done in %.3fs", self.what, name, took)
        elif outcome == "refused":
            log.info("%s: step %s refused after %.3fs: %s", self.what, name, took, reason)
        else:
            log.warning("%s: step %s failed after %.3fs: %s", self.what, name, took, reason)
        if self.observe is not None:
            self.observe(name, outcome, took)

    def wait(self, name: str, deadline: float, check: Callable[[], str | None],
             retry: Callable[[], None] | None = None, retry_every: float = 0.0) -> None:
        """Call ``check`` until it returns None (done); it returns what is still missing otherwise.
        ``retry`` (e.g. another PCI rescan) runs every ``retry_every`` seconds while waiting."""
        began = last_retry = time.monotonic()
        delay = min(0.01, self.poll)
        while True:
            missing = check()
            if missing is None:
                return
            now = time.monotonic()
            if now - began >= deadline:
                raise StepFailed(name, f"{missing} (waited {deadline:g}s)", now - began)
            if retry is not None and retry_every and now - last_retry >= retry_every:
                retry()
                last_retry = now
            time.sleep(min(delay, max(0.0, deadline - (now - began))))
            delay = min(delay * 2, self.poll)


def now_rfc3339() -> str:
    """Now, as a condition's ``lastTransitionTime`` (``metav1.Time``: whole seconds)."""
    return rfc3339(time.time(), "s")


def set_condition(att: Attachment, kind: str, status: str, reason: str, message: str) -> tuple[Condition, ...]:
    """The attachment's conditions with ``kind`` set; its transition time moves only when the status does."""
    old = att.condition(kind)
    since = old.last_transition_time if old is not None and old.status == status else now_rfc3339()
    new = Condition(type=kind, status=status, reason=reason, message=message, last_transition_time=since)
    return (*(c for c in att.conditions if c.type != kind), new)
