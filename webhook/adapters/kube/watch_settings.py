"""How the watches behave: timeouts, paging, readiness and back-off (``WatchSettings``).

Apart from ``watch`` so that reading the defaults (``serve``'s command line shows them) does not load
the Kubernetes client: every ``serve`` and every ``--help`` would pay for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

BACKOFF_MAX = 30.0  # seconds: the longest pause between relists after repeated failures


@dataclass(frozen=True, slots=True)
class WatchSettings:
    timeout: float | None = None  # server-side timeoutSeconds; None: 5-10 min at random, as client-go
    absent_recheck: float = 60.0  # how often an optional resource that is not served is looked for again
    page_size: int = 500  # objects per LIST page: bounded memory and answer time on a 5,000-node cluster
    stall_timeout: float = 300.0  # seconds without progress (see the module docstring) before not ready
    # The longest pause between relists after repeated failures: once the API server is healthy again,
    # a cache is back in step within this plus one list (tests shorten it to state a tighter bound).
    backoff_max: float = BACKOFF_MAX
    clock: Callable[[], float] = time.monotonic
