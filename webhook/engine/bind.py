"""The bind verb: confirm the group's reservation, attach fabric GPUs when the node needs them, create the
binding. Also the two seams it goes through: the ``Binder`` (the API server, or the embedded cluster) and
the fabric ``Attacher`` (``webhook.state.attacher``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from webhook.domain import binding, capacity, grouping
from webhook.domain.model import Node, Pod, Reservation
from webhook.errors import DecisionError, StoreConflict
from webhook.engine.decision_log import decision_log, log
from webhook.engine.choices import DomainArbiter
from webhook.state.reservations import DomainFull

if TYPE_CHECKING:
    from webhook.engine.engine import Engine



class Binder(Protocol):
    def read_pod(self, namespace: str, name: str) -> Pod | None:
        """A fresh read for a pod the cache does not have (the bind path may call the API)."""
        ...

    def bind(self, pod: Pod, node: str) -> None:
        """Create the binding (UID precondition); raise DecisionError with the reason on failure."""
        ...


class Attacher(Protocol):
    """The fabric seam: attach ``gpus`` fabric GPUs to ``node`` for ``pod`` before it binds."""

    def attach(self, pod: Pod, node: Node, gpus: int, deadline: float) -> None:
        ...


class NoFabric:
    """No fabric manager configured: a pod that needs attached GPUs cannot bind."""

    def attach(self, pod: Pod, node: Node, gpus: int, deadline: float) -> None:
        raise DecisionError(
            f"pod {pod.ref} needs {gpus} fabric GPUs attached to node {node.name}, but no fabric manager "
            "is configured (serve --fabric)"
        )


@dataclass(frozen=True, slots=True)
class BindOutcome:
    outcome: str  # bound | already-bound
    domain: str | None
    attached: int


def bind(engine: Engine, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
    now = engine.clock()
    deadline = now + engine.bind_budget
    ref = f"{namespace}/{name}"
    try:
        engine.require_loaded()
        pod = engine.store.pod(namespace, name) or engine.binder.read_pod(namespace, name)
        snapshot = engine.snapshot()
        plan = binding.plan(pod, uid, node, snapshot, engine.policy, engine.lazy_promised(now), now, engine.holder)
        assert pod is not None
        if plan.already_bound:
            decision_log("bind", ref, node=node, outcome="already-bound")
            return BindOutcome("already-bound", snapshot.nodes[node].domain if node in snapshot.nodes else None, 0)
        domain = None
        if plan.reservation is not None:
            # Stored by the group's first filter: bind only confirms it (no API call).
            stored = plan.reservation if plan.reservation.version else _reserve_at_bind(engine, pod, plan.reservation)
            domain = stored.domain
        attached = 0
        if plan.needs_fabric:
            attached = plan.attach_gpus or (plan.attachment.gpus if plan.attachment else 0)
            engine.report.attach_started(pod, node, attached, snapshot)
            try:
                engine.attacher.attach(pod, snapshot.nodes[node], attached, deadline)
            except DecisionError as exc:
                engine.report.attach_done(pod, node, attached, snapshot.catalog, failure=str(exc))
                raise
            engine.report.attach_done(pod, node, attached, snapshot.catalog)
        engine.binder.bind(pod, node)
        if plan.reservation is not None:
            _placed(engine, plan.reservation.group_id, now)
    except DecisionError as exc:
        decision_log("bind", ref, node=node, outcome="error", reason=str(exc))
        raise
    decision_log("bind", ref, node=node, outcome="bound", domain=domain, group=plan.group_name, attached=attached)
    return BindOutcome("bound", domain, attached)


def _reserve_at_bind(engine: Engine, pod: Pod, proposal: Reservation) -> Reservation:
    """No reservation stored (the filter ran on an older version, or its store failed and the scheduler
    bound anyway): record the node's domain, with the same capacity checks as a filter's choice."""
    snapshot = engine.snapshot()
    group = grouping.resolve(pod, snapshot.catalog, engine.policy).group
    assert group is not None
    arbiter = DomainArbiter(engine, proposal, group, capacity.demand(pod, snapshot.catalog, engine.policy), None)
    what = f"group {proposal.namespace}/{proposal.group_name}"
    full = (f"domain {proposal.domain} has no room left for {what}: its capacity was promised to other "
            "groups; the scheduler retries")

    def room() -> None:
        if not arbiter.fits({}):
            raise DecisionError(full)

    try:
        stored = engine.record(proposal, arbiter, admit=room)
    except DomainFull as exc:
        raise DecisionError(full) from exc
    if stored.domain != proposal.domain:
        raise DecisionError(f"{what} was reserved in domain {stored.domain} by "
                            f"{stored.holder or 'another replica'}; the scheduler retries inside that domain")
    engine.report.reserved(pod, group, stored, snapshot.catalog)
    return stored


def _placed(engine: Engine, group_id: str, now: float) -> None:
    try:
        engine.reservations.placed(group_id, now)
    except StoreConflict as exc:
        # The binding exists; only the expiry clock was not refreshed. The next bind refreshes it.
        log.warning("could not record placement for %s: %s", group_id, exc)
