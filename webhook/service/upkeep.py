"""The worker that acts on cache changes: housekeeping, holds (timed rounds), then the retry of the groups
we refused.

It wakes on every change of the caches and every refusal (``Engine.changes``), lets a burst of watch
events settle for ``SETTLE`` seconds (a Job's pods are deleted together: one pass, not one per pod), and
runs ``Engine.housekeep`` and ``Requeuer.run``. Without changes it still runs every ``interval`` seconds:
reservation TTLs expire and the grace of webhook.engine.housekeeping ends with no event to announce it.
Only that timed round prunes dead ledger promises (an API write per domain; once a round is enough).
"""

from __future__ import annotations

import logging
import threading
import time

from webhook.engine.engine import Engine
from webhook.engine.requeue import Requeuer

log = logging.getLogger(__name__)
SETTLE = 0.2  # seconds


class Upkeep:
    def __init__(self, engine: Engine, interval: float, requeuer: Requeuer | None) -> None:
        self._engine = engine
        self._interval = interval
        self._requeuer = requeuer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="upkeep", daemon=True)

    def start(self) -> Upkeep:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._engine.changes.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        changes = self._engine.changes
        due = time.monotonic() + self._interval
        while not self._stop.is_set():
            woke = changes.wait(max(0.0, due - time.monotonic()))
            if self._stop.is_set():
                return
            if woke:
                self._stop.wait(SETTLE)
            changes.clear()  # changes from here on wake the next pass
            timed = time.monotonic() >= due
            if timed:
                due = time.monotonic() + self._interval
            self.run_once(prune=timed)

    def run_once(self, prune: bool = True) -> None:
        try:
            self._engine.housekeep(prune=prune)
        except Exception:  # keep the worker alive; the next pass retries
            log.exception("reservation housekeeping failed")
        if prune:  # planning reads every domain's running groups: once a timed round, as Slurm's backfill does
            try:
                self._engine.plan_holds()
            except Exception:
                log.exception("planning holds failed")
        if self._requeuer is None:
            return
        try:
            self._requeuer.run()
        except Exception:
            log.exception("retrying the refused groups failed")
