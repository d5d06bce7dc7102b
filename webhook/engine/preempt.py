"""The preempt verb: which victims kube-scheduler may evict for a pod, and, for a group without a
reservation, the domain it will take once they are gone, recorded before anything is evicted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from webhook.domain import preemption
from webhook.domain.model import Pod, Snapshot
from webhook.errors import DecisionError, StoreConflict
from webhook.engine.decision_log import decision_log, log
from webhook.engine.choices import DomainArbiter
from webhook.state.reservations import DomainFull

if TYPE_CHECKING:
    from webhook.engine.engine import Engine



def preempt(engine: Engine, pod: Pod, candidates: Mapping[str, Sequence[str]],
            sent: Mapping[str, Pod]) -> preemption.PreemptOutcome:
    """``candidates``: node -> victim UIDs; ``sent``: victims the scheduler sent whole (no node cache).
    The caches' copy of a victim wins: it is what our accounting counted.

    A domain chosen for a group with no reservation (the cluster as it will be once the victims are
    gone) is stored as the group's reservation before anything is evicted. kube-scheduler preempts
    for one pod at a time, each with its own candidates; without the record, the next member could
    choose another domain, and the group would evict pods in two domains and fit in neither (seen
    with the real scheduler). If the record cannot be made, nothing is evicted this cycle."""
    engine.require_loaded()
    now = engine.clock()
    victims = {}
    for uids in candidates.values():
        for uid in uids:
            known = engine.store.pod_by_uid(uid) or sent.get(uid)
            if known is not None:
                victims[uid] = known
    snapshot = engine.snapshot()
    result = preemption.preempt(pod, candidates, victims, snapshot, engine.policy, engine.lazy_promised(now), now,
                                engine.holder)
    ctx = result.context
    if (result.reason_class == "chosen-after-eviction" and ctx is not None and ctx.group is not None
            and ctx.reservation is not None and not ctx.reservation.version):
        result = _reserve_for_preemption(engine, pod, candidates, victims, snapshot, result)
        ctx = result.context
    if ctx is not None:
        decision_log("preempt", pod.ref, group=ctx.group.id if ctx.group else None, domain=ctx.domain,
                     outcome=result.outcome, kept=len(result.kept), dropped=len(result.dropped), reason=ctx.reason)
    return result


def _reserve_for_preemption(engine: Engine, pod: Pod, candidates: Mapping[str, Sequence[str]],
                            victims: Mapping[str, Pod], snapshot: Snapshot,
                            result: preemption.PreemptOutcome) -> preemption.PreemptOutcome:
    ctx = result.context
    assert ctx is not None and ctx.group is not None and ctx.reservation is not None
    res = replace(ctx.reservation, created_at=engine.clock(), holder=engine.holder)
    after = preemption.without_victims(snapshot, candidates, victims, engine.policy)
    try:
        stored = engine.record(res, DomainArbiter(engine, res, ctx.group, ctx.demand, None, after))
    except (DomainFull, DecisionError, StoreConflict) as exc:
        why = f"could not reserve domain {res.domain} for group {res.namespace}/{res.group_name} before " \
              f"evicting pods ({exc}); nothing is evicted now, the scheduler retries"
        log.info("%s", why)
        return preemption.PreemptOutcome((), dict.fromkeys(candidates, why), replace(ctx, reason=why),
                                         "none-kept", "reserve-failed")
    if stored.domain == res.domain:
        engine.report.reserved(pod, ctx.group, stored, snapshot.catalog)
        return result
    # Another replica reserved the group elsewhere first: preempt only inside that domain.
    now = engine.clock()
    return preemption.preempt(pod, candidates, victims, engine.snapshot(), engine.policy, engine.lazy_promised(now),
                              now, engine.holder)
