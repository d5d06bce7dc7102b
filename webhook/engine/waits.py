"""Each group's wait, reported once when it runs whole (``webhook.domain.groups.waits`` measures it; the
``WaitObserver`` port, ``/metrics`` in the service, counts it).

The bind of a group's last member reports the wait. Two binds of a group's last members run on two threads
at once, and each may see the other's pod already bound (``ClusterStore.assume_bound`` shows it before the
binding is asked for): both find the group whole. ``Reported`` lets the first of them report it, so a wait
is counted once per job, whichever thread and however many binds a retrying scheduler sends.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from webhook.domain.decisions.binding import BindPlan
from webhook.domain.groups import waits
from webhook.domain.model import Pod
from webhook.domain.placement import plain_pods
from webhook.engine.decision_log import log
from webhook.engine.ports import WaitObserver

# Jobs whose wait was reported, remembered to count each once; past it the oldest are forgotten (a job is
# whole within seconds of its previous member's bind, long before 4,096 other jobs start).
REMEMBERED = 4096


class Reported:
    """The jobs whose wait was reported, thread-safe and bounded."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self._lock = threading.Lock()
        self._keys: OrderedDict[tuple[str, float], None] = OrderedDict()
        self._size = size

    def first(self, key: tuple[str, float]) -> bool:
        """True for the first caller with ``key``, False for every later one."""
        with self._lock:
            if key in self._keys:
                self._keys.move_to_end(key)
                return False
            self._keys[key] = None
            while len(self._keys) > self._size:
                self._keys.popitem(last=False)
            return True


def report(observer: WaitObserver, reported: Reported, pod: Pod, plan: BindPlan,
           members: waits.MembersByGroup, now: float) -> None:
    """After ``pod`` was bound at ``now``: report its job's wait if the job is whole now. Never raises: a
    metric is no reason for a bind to fail."""
    try:
        if plan.group is not None:
            size = plan.reservation.size if plan.reservation is not None else 0  # unknown: no wait
            wait = waits.whole(plan.group, size, members, now)
        else:
            wait = waits.single(pod, now) if plain_pods.asks_gpus(pod) else None
        if wait is not None and reported.first(wait.key):
            observer.group_waited(wait.size_class, wait.seconds)
    except Exception:
        log.exception("could not report the wait of the group of pod %s", pod.ref)
