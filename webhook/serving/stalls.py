"""Whether the service port still answers: the requests of ``--bind`` between the moment the poller hands
them to the thread pool and the moment their response is ready, and how long the oldest has waited.

The probe port has threads of its own, so that no client of the service port can make a healthy replica
fail its probes. The other side of that coin: when the service port stops answering (every thread held by
requests that do not finish, or requests queued behind them), the probes would stay green and the kubelet
would keep a replica that serves no one, while ``/mutate`` (failurePolicy Fail) and the extender are down.
So ``/healthz`` on the probe port asks :meth:`Stalls.check`: once a request has waited longer than
``--stall-timeout`` for a thread and its answer, the replica is not live, and the kubelet restarts it. A
stall is logged once, when it is first seen, and once more when it ends.

A response being written to a client that reads slowly holds no thread and does not count: the poller
writes it, under its own deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

log = logging.getLogger("imex_webhook.serve")


class Stalls:
    """Requests in the thread pool's hands, by connection: since when, and to which path. The poller
    begins and ends them; the probe thread checks them (hence the lock)."""

    def __init__(self, limit: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self._since: dict[Hashable, tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._stalled = False

    def begin(self, key: Hashable, path: str) -> None:
        with self._lock:
            self._since[key] = (self.clock(), path)

    def end(self, key: Hashable) -> None:
        with self._lock:
            self._since.pop(key, None)

    def check(self) -> tuple[bool, str]:
        """(live?, why) for /healthz."""
        now = self.clock()
        with self._lock:
            count = len(self._since)
            oldest = min(self._since.values(), default=None)
        age = now - oldest[0] if oldest is not None else 0.0
        if oldest is None or age <= self.limit:
            if self._stalled:
                self._stalled = False
                log.warning("the service port answers again (%d requests in a thread's hands)", count)
            return True, f"{count} requests in a thread's hands, the oldest for {age:.1f} s"
        why = (f"a request to {oldest[1] or 'an unknown path'} has waited {age:.0f} s for a thread and its "
               f"answer (--stall-timeout {self.limit:g} s); {count} requests in a thread's hands")
        if not self._stalled:
            self._stalled = True
            log.warning("the service port is stalled: %s; /healthz fails until it answers again", why)
        return False, why
