"""Retrying the groups we refused, once our own state could place them (docs/SCHEDULER.md).

When the extender rejects nodes, kube-scheduler marks the pod as rejected by "Extender", a plugin that
takes every cluster event as a reason to try again; but it only hears of Pod, Node, claim and similar
changes, never of ours (a reservation released, a promise dropped, a change our cache saw after the
scheduler did). So every refusal is remembered here with the candidates the scheduler sent, and after
each change of the caches (``webhook.service.upkeep``) the refused groups are checked against the current
state with the same decision the filter makes. A group that would pass now has its waiting pods updated
through the ``Nudger`` port: a pod condition, an update of the pod itself, which requeues it at once.

Why this cannot loop: a group is checked again only after a refusal newer than its last retry, and only
when some input of the filter changed since that refusal; the filter is a pure function of those inputs
and the candidates, so an unchanged state gives the same "no" without another write.
"""

from __future__ import annotations

from collections.abc import Callable

from webhook.domain import requeue
from webhook.domain.decisions import filtering
from webhook.domain.model import Pod
from webhook.engine.core import Core
from webhook.engine.decision_log import decision_log, log
from webhook.engine.ports import Nudger
from webhook.errors import ImexWebhookError
from webhook.wire.timestamps import rfc3339

MAX_NUDGES = 256  # pod updates one pass makes; the rest stay due for the next pass


class Requeuer:
    """One pass over the refused groups (``run``), called by the worker after housekeeping."""

    def __init__(self, core: Core, nudger: Nudger, clock: Callable[[], float] | None = None) -> None:
        self._core = core
        self._nudger = nudger
        self._clock = clock or core.clock

    def run(self) -> list[Pod]:
        """Retry every refused group that would pass now; returns the pods updated."""
        core = self._core
        refusals = core.refusals
        if core.loading() is not None:
            return []
        fingerprint = core.fingerprint()
        decided = core.decision_inputs(self._clock())
        snapshot = decided.snapshot
        if not refusals.seeded:
            refusals.seeded = True
            for group_id in requeue.waiting_groups(snapshot, core.policy.scheduler_name):
                refusals.refused(group_id, None, None)
        nudged: list[Pod] = []
        for group_id, refusal in refusals.due():
            pending = requeue.pending_members(snapshot, group_id)
            if not pending:
                refusals.drop(group_id)  # placed, or gone
                continue
            if refusal.inputs is not None and all(a is b for a, b in zip(refusal.inputs, fingerprint, strict=True)):
                continue  # the same inputs give the same refusal
            now = decided.now
            candidates = refusal.candidates if refusal.candidates is not None else tuple(snapshot.nodes)
            try:
                outcome = filtering.filter_nodes(pending[0], candidates, decided)
            except ImexWebhookError as exc:  # e.g. a claim the cache does not have yet
                log.debug("group %s is not retried yet: %s", group_id, exc)
                continue
            if not outcome.passed:
                refusals.checked(group_id, refusal, fingerprint)
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
