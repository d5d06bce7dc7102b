"""The filter and prioritize verbs: run the pure decision against the current state; the first filter of a
group that has no reservation also chooses its domain and records it (``webhook.engine.choices``) before
any member passes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from webhook.domain.decisions import filtering, scoring
from webhook.domain.jobs import held_out, holds
from webhook.domain.jobs.resolution import Context
from webhook.domain.model import Catalog, Node, Pod, Reservation
from webhook.domain.placement import repair
from webhook.engine.choices import DomainArbiter
from webhook.engine.core import Core
from webhook.engine.decision_log import decision_log, log
from webhook.errors import DecisionError, DomainFull

# Domain choices one first pod makes when other replicas keep filling the domain it chose.
CHOOSE_ATTEMPTS = 5

NodeView = Mapping[str, Node] | None  # the nodes as the scheduler sent them (None: the cache's)


def _decide(core: Core, pod: Pod, candidates: Sequence[str],
            node_view: NodeView) -> tuple[filtering.FilterOutcome, tuple[object, ...]]:
    fingerprint = core.fingerprint()
    return filtering.filter_nodes(pod, candidates, core.decision_inputs(), node_view), fingerprint


def _gives_segment(result: filtering.FilterOutcome) -> bool:
    return result.context is not None and result.context.gives_segment


def filter_pod(core: Core, pod: Pod, candidates: Sequence[str], node_view: NodeView) -> filtering.FilterOutcome:
    core.require_loaded()
    result, inputs = _decide(core, pod, candidates, node_view)
    if not _gives_segment(result):
        return _settle(core, pod, candidates, node_view, result, inputs)
    with core.segment_labels.lock:  # one member without a rank at a time: two never take one place
        result, inputs = _decide(core, pod, candidates, node_view)
        result = _settle(core, pod, candidates, node_view, result, inputs)
        ctx = result.context
        if result.passed and ctx is not None and ctx.gives_segment and ctx.group is not None:
            core.segment_labels.give(pod, ctx.group)
        return result


def _settle(core: Core, pod: Pod, candidates: Sequence[str], node_view: NodeView,
            result: filtering.FilterOutcome, inputs: tuple[object, ...]) -> filtering.FilterOutcome:
    """Store the group's choice when it has none yet, then report and log the decision."""
    ctx = result.context
    if ctx is not None and ctx.reservation is not None and not ctx.reservation.version:
        try:
            result = _choose(core, pod, candidates, node_view, result, inputs)
        except DecisionError as exc:
            decision_log("filter", pod.ref, group=ctx.group.id if ctx.group else None, outcome="error",
                         reason=str(exc))
            raise
    ctx = result.context
    if ctx is not None:
        group = ctx.group
        repairing = None
        if group is not None and not result.passed:
            core.refusals.refused(group.id, tuple(candidates), inputs)
            core.changes.set()
            repairing = _repair_note(core, pod, ctx)
        if repairing is not None and group is not None:
            core.report.replacement_waiting(pod, group, repairing, core.store.snapshot().catalog)
        elif result.outcome == "no-domain":
            catalog = core.store.snapshot().catalog
            core.report.no_domain(pod, ctx, catalog)
            _held_out(core, pod, candidates, ctx, catalog)
        decision_log(
            "filter", pod.ref, group=group.id if group else None, domain=ctx.domain,
            outcome=result.outcome, passed=len(result.passed), failed=len(result.failed),
            unresolvable=len(result.unresolvable), reason=ctx.reason,
        )
    return result


def _held_out(core: Core, pod: Pod, candidates: Sequence[str], ctx: Context, catalog: Catalog) -> None:
    """Tell a refused group about the held domains that kept it out (``held_out``): what it would take to
    backfill there. Only where a hold of another job is live: the search asks the choice again per hold."""
    group = ctx.group
    if group is None or ctx.resolution.problems or ctx.waiting:
        return
    inputs = core.decision_inputs()
    if not any(holds.is_hold(r) for r in inputs.live.values()):
        return
    try:
        found = held_out.held_out(pod, group, ctx.resolution.size, ctx.demand, inputs, candidates)
    except Exception:  # an Event is a courtesy: never a reason for the filter to fail
        log.exception("could not find the held domains that kept pod %s out", pod.ref)
        return
    core.report.no_backfill(pod, group, found, catalog)


def _repair_note(core: Core, pod: Pod, ctx: Context) -> str | None:
    """Why a replacement of a running group's member waits in the group's domain, if that is the case."""
    group = ctx.group
    if group is None or ctx.resolution.problems:
        return None
    inputs = core.decision_inputs()
    snapshot = inputs.snapshot
    known = {m.pod.uid for m in snapshot.members.get(group.id, ())}
    return repair.waiting(group, ctx.resolution.size, ctx.demand, snapshot, inputs.live,
                          pending_self=not pod.uid or pod.uid not in known)


def _choose(core: Core, pod: Pod, candidates: Sequence[str], node_view: NodeView,
            result: filtering.FilterOutcome, inputs: tuple[object, ...] | None) -> filtering.FilterOutcome:
    """The group has no stored reservation: choose under the lock, store, and filter against what holds."""
    allowed = frozenset(candidates)
    choices = core.choices
    what = "of this pod"
    for _ in range(CHOOSE_ATTEMPTS):
        with choices.hold():
            now = core.clock()
            if inputs is None or any(a is not b for a, b in zip(core.fingerprint(), inputs, strict=True)):
                result, inputs = _decide(core, pod, candidates, node_view)  # something changed: choose again
            ctx = result.context
            res = ctx.reservation if ctx is not None else None
            if ctx is None or ctx.group is None or res is None or res.version:
                return result  # stored meanwhile (another thread, the watch), or no domain now
            if ctx.proposal is None and now - res.created_at > core.policy.proposal_ttl / 2:
                res = replace(res, created_at=now, holder=core.holder)  # renew an old promise first
            choices.fly(res)
            for _, sibling in ctx.siblings:
                choices.fly(sibling)
        what = f"{res.namespace}/{res.group_name}"
        try:
            stored = _store_plan(core, ctx, res, allowed)
        except DomainFull as exc:
            log.info("choosing again for group %s: %s", what, exc)
            inputs = None
            continue
        if stored.domain == res.domain:
            core.report.reserved(pod, ctx.group, stored, core.store.snapshot().catalog)
            return result
        # Another replica reserved the group first: its domain holds; filter against it.
        return _decide(core, pod, candidates, node_view)[0]
    raise DecisionError(f"could not reserve a domain for group {what}: other replicas "
                        f"promised each domain chosen to other groups first ({CHOOSE_ATTEMPTS} tries); "
                        "the scheduler retries")


def _store_plan(core: Core, ctx: Context, res: Reservation, allowed: frozenset[str]) -> Reservation:
    """The pod's reservation and, for a segment, the other segments of its job's plan first: the plan is
    stored whole or not at all (a segment that no longer fits withdraws those stored before it)."""
    choices = core.choices
    assert ctx.group is not None
    stored: list[str] = []
    try:
        for group, sibling in ctx.siblings:
            held = choices.store(sibling, DomainArbiter(choices, core.snapshot, sibling, group, ctx.demand, allowed))
            if held.holder == sibling.holder and held.domain == sibling.domain:
                stored.append(sibling.group_id)  # ours to withdraw; one another replica stored first is not
        return choices.store(res, DomainArbiter(choices, core.snapshot, res, ctx.group, ctx.demand, allowed))
    except BaseException:
        for _, sibling in ctx.siblings:
            choices.land(sibling)
        choices.land(res)
        for group_id in stored:
            choices.forget(group_id)
        raise


def prioritize(core: Core, pod: Pod, candidates: Sequence[str], node_view: NodeView) -> list[tuple[str, int]]:
    return scoring.prioritize(pod, candidates, core.decision_inputs(), node_view)


def scores(core: Core, pod: Pod, candidates: Sequence[str], node_view: NodeView) -> dict[str, int]:
    """``prioritize`` without the candidates that score the minimum (``scoring.weigh``)."""
    return scoring.weigh(pod, candidates, core.decision_inputs(), node_view)
