"""The bind verb: confirm the group's reservation, attach fabric GPUs when the node needs them, create the
binding, through the ``Binder`` and ``Attacher`` ports (``webhook.engine.ports``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webhook.domain.decisions import binding
from webhook.domain.model import Pod, Reservation, Snapshot
from webhook.domain.placement import plain_pods
from webhook.engine import waits
from webhook.engine.choices import DomainArbiter
from webhook.engine.core import Core
from webhook.engine.decision_log import decision_log, log
from webhook.errors import DecisionError, DomainFull, StoreConflict

RETRIES = "; the scheduler retries"


@dataclass(frozen=True, slots=True)
class BindOutcome:
    outcome: str  # bound | already-bound
    domain: str | None
    attached: int


def bind(core: Core, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
    now = core.clock()
    deadline = now + core.bind_budget
    ref = f"{namespace}/{name}"
    try:
        core.require_loaded()
        pod = core.store.pod(namespace, name) or core.binder.read_pod(namespace, name)
        inputs = core.decision_inputs(now)
        snapshot = inputs.snapshot
        plan = binding.plan(pod, uid, node, inputs)
        assert pod is not None
        if plan.already_bound:
            decision_log("bind", ref, node=node, outcome="already-bound")
            return BindOutcome("already-bound", snapshot.nodes[node].domain if node in snapshot.nodes else None, 0)
        domain = None
        if plan.reservation is not None:
            # Stored by the group's first filter: bind only confirms it (no API call).
            stored = plan.reservation if plan.reservation.version else _reserve_at_bind(core, pod, plan)
            domain = stored.domain
        attached = 0
        if plan.needs_fabric:
            attached = plan.attach_gpus or (plan.attachment.gpus if plan.attachment else 0)
            core.report.attach_started(pod, node, attached, snapshot)
            try:
                core.attacher.attach(pod, snapshot.nodes[node], attached, deadline)
            except DecisionError as exc:
                failure = exc if core.clock() < deadline else DecisionError(_spent(str(exc), core.bind_budget))
                core.report.attach_done(pod, node, attached, snapshot.catalog, failure=str(failure))
                if failure is exc:
                    raise
                raise failure from exc
            core.report.attach_done(pod, node, attached, snapshot.catalog)
        # Counted on the node before the API call, so that a filter meanwhile sees its GPUs taken; a pod in no
        # group is checked against the node once more, under the same lock: another pod may have been bound
        # there since its filter (docs/SCHEDULER.md, "GPU pods outside any group").
        taken = core.store.assume_bound(pod, node, _room_for(pod, node) if plan.group is None else None)
        if taken is not None:
            raise DecisionError(f"node {node} has no room left for pod {pod.ref}: {taken} (a pod was bound there "
                                "since this one's filter); the scheduler retries")
        try:
            core.binder.bind(pod, node)
        except BaseException:
            core.store.withdraw_bound(pod, node)
            raise
        if plan.reservation is not None and plan.reservation.placement_due(now):
            _placed(core, plan.reservation.group_id, now)
        # After the binding: the bound pod shows in the snapshot (assumed), so the last member finds its job whole.
        waits.report(core.waits, core.waits_reported, pod, plan, core.snapshot().members, core.clock())
    except DecisionError as exc:
        decision_log("bind", ref, node=node, outcome="error", reason=str(exc))
        raise
    decision_log("bind", ref, node=node, outcome="bound", domain=domain, group=plan.group_name, attached=attached)
    return BindOutcome("bound", domain, attached)


def _spent(reason: str, budget: float) -> str:
    """``reason`` naming the budget, before what the scheduler does next: an operator reading "did not
    answer in time" learns which limit (``--bind-budget``) it ran into."""
    head, retries, tail = reason.partition(RETRIES)
    return f"{head}; bind budget {budget:g} s spent{retries}{tail}"


def _room_for(pod: Pod, node: str) -> Callable[[Snapshot], str | None] | None:
    """Why ``node`` cannot take ``pod``'s device-plugin GPUs now (None: it can); None for a pod asking none."""
    if not plain_pods.asks_gpus(pod):
        return None

    def short(snapshot: Snapshot) -> str | None:
        found = snapshot.nodes.get(node)
        return None if found is None else plain_pods.never(pod, found) or plain_pods.short(pod, found, snapshot)

    return short


def _reserve_at_bind(core: Core, pod: Pod, plan: binding.BindPlan) -> Reservation:
    """No reservation stored (the filter ran on an older version, or its store failed and the scheduler
    bound anyway): record the node's domain, with the same capacity checks as a filter's choice."""
    proposal, group, need = plan.reservation, plan.group, plan.demand
    assert proposal is not None and group is not None and need is not None  # a plan with a reservation has them
    snapshot = core.snapshot()
    arbiter = DomainArbiter(core.choices, core.snapshot, proposal, group, need, None)
    what = f"group {proposal.namespace}/{proposal.group_name}"
    full = (f"domain {proposal.domain} has no room left for {what}: its capacity was promised to other "
            "groups; the scheduler retries")

    def room() -> None:
        if not arbiter.fits({}):
            raise DecisionError(full)

    try:
        stored = core.choices.record(proposal, arbiter, admit=room)
    except DomainFull as exc:
        raise DecisionError(full) from exc
    if stored.domain != proposal.domain:
        raise DecisionError(f"{what} was reserved in domain {stored.domain} by "
                            f"{stored.holder or 'another replica'}; the scheduler retries inside that domain")
    core.report.reserved(pod, group, stored, snapshot.catalog)
    return stored


def _placed(core: Core, group_id: str, now: float) -> None:
    try:
        core.reservations.placed(group_id, now)
    except StoreConflict as exc:
        # The binding exists; only the expiry clock was not refreshed. The next bind refreshes it.
        log.warning("could not record placement for %s: %s", group_id, exc)
