"""What the composition root hands the HTTP server, and how.

gunicorn makes the worker itself, from the class its configuration names, and gives it the application
object the configuration came from: that object is the one channel. It implements :class:`Host`; each
worker process asks it for its :class:`Setup` once, when it starts. Nothing else passes between them.

The server knows nothing of what it serves: the body limit of each route, where its counts go and where its
liveness check is registered arrive here as plain values and callables (``webhook.service.server`` makes
them from the app it loads, its metrics and ``serve``'s settings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from webhook.serving.callers import Allowed
from webhook.serving.conns import Limits

Check = Callable[[], tuple[bool, str]]  # (passing?, why), as /healthz and /readyz show it


def _nowhere(*_args: object) -> None:
    return None


@dataclass(frozen=True)
class Reports:
    """Where the server reports to the app it serves. Each is called on the poller or on a worker thread,
    and must not block; each reports nowhere by default (an app without metrics: the benchmark's baseline).
    The app is loaded after the worker starts, so the callables reach it when they are called."""

    # (name, check): a /healthz check of the server's own, registered once the app is loaded (the stalled
    # service port, webhook.serving.stalls).
    register_liveness: Callable[[str, Check], None] = _nowhere
    # A connection the server dropped, by reason (webhook.serving.conn_limits, webhook.serving.closing).
    dropped: Callable[[str], None] = _nowhere
    # A reply the server wrote itself, never the app: (the first bytes of the request it answers, status).
    refused: Callable[[bytes, int], None] = _nowhere
    # A request that failed for the server's own fault, by the path of its request line ("" unknown).
    internal_error: Callable[[str], None] = _nowhere


@dataclass(frozen=True)
class Setup:
    """Everything a worker process needs besides gunicorn's own configuration."""

    limits: Limits
    service_pool: tuple[int, int]  # (cap, per source) of the connections on --bind (webhook.serving.conn_limits)
    probe_pool: tuple[int, int]  # the same for --probe-bind
    body_limit: Callable[[str], int]  # the largest body the route of a path (as the router sees it) accepts
    stall_timeout: float  # a request of --bind waiting longer for a thread and its answer fails /healthz
    callers: Allowed | None = None  # who may call which path, checked on the head; None: anyone
    probe_fd: int = -1  # the descriptor of the --probe-bind listener, -1 without one
    # Called with the size of each response written out: gives the memory a large one freed back.
    release_memory: Callable[[int], None] = _nowhere
    reports: Reports = field(default_factory=Reports)


class Host(Protocol):
    """The gunicorn application a worker is started by (``webhook.service.server``'s)."""

    def serving_setup(self) -> Setup:
        """The worker's setup, asked once in each worker process before it serves (the listeners exist)."""
        ...
