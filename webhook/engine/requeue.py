"""Retrying the groups we refused, once our own state could place them (docs/SCHEDULER.md).

When the extender rejects nodes, kube-scheduler marks the pod as rejected by "Extender", a plugin that
takes every cluster event as a reason to try again; but it only hears of Pod, Node, claim and similar
changes, never of ours (a reservation released, a promise dropped, a change our cache saw after the
scheduler did). So every refusal is remembered here with the candidates the scheduler sent, and after
each change of the caches (``webhook.service.workers``) the refused groups are checked against the current
state with the same decision the filter makes. A group that would pass now has its waiting pods updated
through the ``Nudger`` port: a pod condition, an update of the pod itself, which requeues it at once.

Why this cannot loop: a group is checked again only after a refusal newer than its last retry, and only
when some input of the filter changed since that refusal; the filter is a pure function of those inputs
and the candidates, so an unchanged state gives the same "no" without another write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from webhook.domain import filtering, requeue
from webhook.domain.model import Pod
from webhook.errors import ImexWebhookError
from webhook.engine.decision_log import decision_log, log
from webhook.wire.timestamps import rfc3339

if TYPE_CHECKING:
    from webhook.engine.engine import Engine

MAX_WAITING = 1024  # refused groups remembered; past it the oldest refusal is forgotten
MAX_NUDGES = 256  # pod updates one pass makes; the rest stay due for the next pass


class Nudger(Protocol):
    """Makes kube-scheduler try a pod again (Kubernetes mode: ``webhook.adapters.kube.nudges``)."""

    def nudge(self, pod: Pod, message: str, now: float) -> None:
        """Raises an ``ImexWebhookError`` naming the pod when it cannot; a pod that is gone is no error."""
        ...


@dataclass(frozen=True, slots=True)
class Refusal:
    seq: int  # order of refusals and retries (a clock may stand still in tests and simulations)
    candidates: Sequence[str] | None  # the nodes the scheduler offered; None: unknown (seeded at start)
    inputs: tuple[object, ...] | None  # the filter's inputs, by identity, when it refused
    retried: int = 0  # seq of the last retry; due again once seq > retried


class Refusals:
    """The groups the filter refused, thread-safe: request threads record, one worker reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Refusal] = {}
        self._seq = 0
        self.seeded = False

    def refused(self, group_id: str, candidates: Sequence[str] | None, inputs: tuple[object, ...] | None) -> None:
        with self._lock:
            self._seq += 1
            old = self._items.pop(group_id, None)  # re-inserted last: dict order is refusal order
            self._items[group_id] = Refusal(self._seq, candidates, inputs, old.retried if old else 0)
            while len(self._items) > MAX_WAITING:
                del self._items[next(iter(self._items))]

    def due(self) -> list[tuple[str, Refusal]]:
        """Refusals newer than the group's last retry, oldest first."""
        with self._lock:
            return [(g, r) for g, r in self._items.items() if r.seq > r.retried]

    def retried(self, group_id: str) -> None:
        with self._lock:
            current = self._items.get(group_id)
            if current is not None:
                self._seq += 1
                self._items[group_id] = replace(current, retried=self._seq)

    def checked(self, group_id: str, refusal: Refusal, inputs: tuple[object, ...]) -> None:
        """The refusal still holds against ``inputs``: remember them instead of the older ones (no
        second check until they change, and no old snapshot kept alive)."""
        with self._lock:
            if self._items.get(group_id) is refusal:
                self._items[group_id] = replace(refusal, inputs=inputs)

    def drop(self, group_id: str) -> None:
        with self._lock:
            self._items.pop(group_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class Requeuer:
    """One pass over the refused groups (``run``), called by the worker after housekeeping."""

    def __init__(self, engine: Engine, nudger: Nudger, clock: Callable[[], float] | None = None) -> None:
        self._engine = engine
        self._nudger = nudger
        self._clock = clock or engine.clock

    def run(self) -> list[Pod]:
        """Retry every refused group that would pass now; returns the pods updated."""
        engine = self._engine
        refusals = engine.refusals
        if engine.loading() is not None:
            return []
        inputs = engine.inputs()
        snapshot = engine.snapshot()
        if not refusals.seeded:
            refusals.seeded = True
            for group_id in requeue.waiting_groups(snapshot, engine.policy.scheduler_name):
                refusals.refused(group_id, None, None)
        nudged: list[Pod] = []
        for group_id, refusal in refusals.due():
            pending = requeue.pending_members(snapshot, group_id)
            if not pending:
                refusals.drop(group_id)  # placed, or gone
                continue
            if refusal.inputs is not None and all(a is b for a, b in zip(refusal.inputs, inputs, strict=True)):
                continue  # the same inputs give the same refusal
            now = self._clock()
            candidates = refusal.candidates if refusal.candidates is not None else tuple(snapshot.nodes)
            try:
                outcome = filtering.filter_nodes(pending[0], candidates, snapshot, engine.policy,
                                                 engine.lazy_promised(now), now, None, engine.holder,
                                                 engine.node_sets)
            except ImexWebhookError as exc:  # e.g. a claim the cache does not have yet
                log.debug("group %s is not retried yet: %s", group_id, exc)
                continue
            if not outcome.passed:
                refusals.checked(group_id, refusal, inputs)
                continue
            budget = MAX_NUDGES - len(nudged)
            if len(pending) > budget and nudged:
                break  # the whole group in the next pass (it stays due); a group alone gets the budget
            pods = pending[:budget]
            ctx = outcome.context
            group = ctx.group if ctx is not None else None
            text = requeue.message(group.name if group else group_id, ctx.domain if ctx else None,
                                   rfc3339(now, "ms"))
            done = [pod for pod in pods if self._nudge(pod, text, now)]
            if done:
                refusals.retried(group_id)
                nudged.extend(done)
                decision_log("retry", group_id, domain=ctx.domain if ctx else None, pods=len(done),
                             reason="capacity returned")
        return nudged

    def _nudge(self, pod: Pod, text: str, now: float) -> bool:
        try:
            self._nudger.nudge(pod, text, now)
        except ImexWebhookError as exc:
            log.warning("could not ask kube-scheduler to retry pod %s: %s", pod.ref, exc)
            return False
        return True
