"""The preempt verb: which victims kube-scheduler may evict for a pod, and, for a group without a
reservation, the domain it will take once they are gone, recorded before anything is evicted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from webhook.domain.decisions import preemption
from webhook.domain.model import Pod, Snapshot
from webhook.domain.placement import vacated
from webhook.engine.choices import DomainArbiter
from webhook.engine.core import Core
from webhook.engine.decision_log import decision_log, log
from webhook.errors import DecisionError, DomainFull, StoreConflict


def preempt(core: Core, pod: Pod, candidates: Mapping[str, Sequence[str]],
            sent: Mapping[str, Pod]) -> preemption.PreemptOutcome:
    """``candidates``: node -> victim UIDs; ``sent``: victims the scheduler sent whole (no node cache).
    The caches' copy of a victim wins: it is what our accounting counted.

    A domain chosen for a group with no reservation (the cluster as it will be once the victims are
    gone) is stored as the group's reservation before anything is evicted. kube-scheduler preempts
    for one pod at a time, each with its own candidates; without the record, the next member could
    choose another domain, and the group would evict pods in two domains and fit in neither (seen
    with the real scheduler). If the record cannot be made, nothing is evicted this cycle."""
    core.require_loaded()
    now = core.clock()
    victims = {}
    for uids in candidates.values():
        for uid in uids:
            known = core.store.pod_by_uid(uid) or sent.get(uid)
            if known is not None:
                victims[uid] = known
    inputs = core.decision_inputs(now)
    snapshot = inputs.snapshot
    result = preemption.preempt(pod, candidates, victims, inputs)
    ctx = result.context
    if (result.reason_class == "chosen-after-eviction" and ctx is not None and ctx.group is not None
            and ctx.reservation is not None and not ctx.reservation.version):
        result = _reserve_for_preemption(core, pod, candidates, victims, snapshot, result)
        ctx = result.context
    if ctx is not None:
        decision_log("preempt", pod.ref, group=ctx.group.id if ctx.group else None, domain=ctx.domain,
                     outcome=result.outcome, kept=len(result.kept), dropped=len(result.dropped), reason=ctx.reason)
    return result


def _reserve_for_preemption(core: Core, pod: Pod, candidates: Mapping[str, Sequence[str]],
                            victims: Mapping[str, Pod], snapshot: Snapshot,
                            result: preemption.PreemptOutcome) -> preemption.PreemptOutcome:
    ctx = result.context
    assert ctx is not None and ctx.group is not None and ctx.reservation is not None
    res = replace(ctx.reservation, created_at=core.clock(), holder=core.holder)
    after = vacated.without_victims(snapshot, candidates, victims, core.policy)
    try:
        arbiter = DomainArbiter(core.choices, core.snapshot, res, ctx.group, ctx.demand, None, after)
        stored = core.choices.record(res, arbiter)
    except (DomainFull, DecisionError, StoreConflict) as exc:
        why = f"could not reserve domain {res.domain} for group {res.namespace}/{res.group_name} before " \
              f"evicting pods ({exc}); nothing is evicted now, the scheduler retries"
        log.info("%s", why)
        return preemption.PreemptOutcome((), dict.fromkeys(candidates, why), replace(ctx, reason=why),
                                         "none-kept", "reserve-failed")
    if stored.domain == res.domain:
        core.report.reserved(pod, ctx.group, stored, snapshot.catalog)
        return result
    # Another replica reserved the group elsewhere first: preempt only inside that domain.
    return preemption.preempt(pod, candidates, victims, core.decision_inputs())
