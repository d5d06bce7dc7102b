"""Runs the pure decisions against the current state and carries out what they decide.

The views hand it parsed requests; it takes a snapshot, calls the decision function, remembers a new
domain choice, and on bind stores the reservation, asks the fabric seam to attach GPUs and creates the
binding. It logs one structured line per decision. Adapters come in through small protocols, so the
same engine serves the embedded cluster and a real API server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from webhook.domain import binding, filtering, scoring
from webhook.domain.errors import DecisionError, StoreConflict
from webhook.domain.model import Node, Pod, Reservation, Snapshot
from webhook.domain.placement import members_summary
from webhook.domain.policy import Policy
from webhook.state.cluster import ClusterStore
from webhook.state.reservations import Proposals, ReservationStore

log = logging.getLogger("imex_webhook.decisions")


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


def _decision_log(verb: str, pod: str, **fields: Any) -> None:
    if log.isEnabledFor(logging.INFO):
        log.info("decision", extra={"decision": {"verb": verb, "pod": pod, **fields}})


class Engine:
    def __init__(self, store: ClusterStore, reservations: ReservationStore, binder: Binder, policy: Policy,
                 attacher: Attacher | None = None, holder: str = "", bind_budget: float = 20.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.reservations = reservations
        self.binder = binder
        self.attacher: Attacher = attacher or NoFabric()
        self.policy = policy
        self.holder = holder
        self.bind_budget = bind_budget
        self.clock = clock
        self.proposals = Proposals(policy.proposal_ttl)

    def snapshot(self) -> Snapshot:
        return replace(self.store.snapshot(), reservations=self.reservations.all())

    def filter(self, pod: Pod, candidates: Sequence[str],
               node_view: Mapping[str, Node] | None = None) -> filtering.FilterOutcome:
        now = self.clock()
        result = filtering.filter_nodes(pod, candidates, self.snapshot(), self.policy,
                                        self.proposals.view(now), now, node_view, self.holder)
        ctx = result.context
        if ctx is not None and ctx.proposal is not None:
            self.proposals.remember(ctx.proposal)
        if ctx is not None:
            group = ctx.group
            _decision_log(
                "filter", pod.ref, group=group.id if group else None, domain=ctx.domain,
                outcome=result.outcome, passed=len(result.passed), failed=len(result.failed),
                unresolvable=len(result.unresolvable), reason=ctx.reason,
            )
        return result

    def prioritize(self, pod: Pod, candidates: Sequence[str],
                   node_view: Mapping[str, Node] | None = None) -> list[tuple[str, int]]:
        now = self.clock()
        return scoring.prioritize(pod, candidates, self.snapshot(), self.policy, self.proposals.view(now),
                                  now, node_view)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        now = self.clock()
        deadline = now + self.bind_budget
        ref = f"{namespace}/{name}"
        try:
            pod = self.store.pod(namespace, name) or self.binder.read_pod(namespace, name)
            snapshot = self.snapshot()
            plan = binding.plan(pod, uid, node, snapshot, self.policy, self.proposals.view(now), now, self.holder)
            assert pod is not None
            if plan.already_bound:
                _decision_log("bind", ref, node=node, outcome="already-bound")
                return BindOutcome("already-bound", snapshot.nodes[node].domain if node in snapshot.nodes else None, 0)
            domain = None
            if plan.reservation is not None:
                stored = self._reserve(plan.reservation)
                domain = stored.domain
            attached = 0
            if plan.needs_fabric:
                attached = plan.attach_gpus or (plan.attachment.gpus if plan.attachment else 0)
                self.attacher.attach(pod, snapshot.nodes[node], attached, deadline)
            self.binder.bind(pod, node)
            if plan.reservation is not None:
                self._placed(plan.reservation.group_id, now)
        except DecisionError as exc:
            _decision_log("bind", ref, node=node, outcome="error", reason=str(exc))
            raise
        _decision_log("bind", ref, node=node, outcome="bound", domain=domain, group=plan.group_name,
                      attached=attached)
        return BindOutcome("bound", domain, attached)

    def _reserve(self, proposal: Reservation) -> Reservation:
        stored = self.reservations.ensure(proposal)
        if stored.domain != proposal.domain:
            # Another replica (or an earlier bind) reserved a different domain first: it wins, we retry there.
            self.proposals.forget(proposal.group_id)
            raise DecisionError(
                f"group {proposal.namespace}/{proposal.group_name} was reserved in domain {stored.domain} "
                f"by {stored.holder or 'another replica'}; the scheduler retries inside that domain"
            )
        self.proposals.forget(proposal.group_id)
        return stored

    def _placed(self, group_id: str, now: float) -> None:
        try:
            self.reservations.placed(group_id, now)
        except StoreConflict as exc:
            # The binding exists; only the expiry clock was not refreshed. The next bind refreshes it.
            log.warning("could not record placement for %s: %s", group_id, exc)

    def housekeep(self) -> list[tuple[str, str]]:
        """Release reservations whose group is gone or that expired with no member placed."""
        now = self.clock()
        snapshot = self.snapshot()
        released = []
        for group_id, why in stale_reservations(snapshot, now, self.policy.reservation_ttl):
            try:
                self.reservations.release(group_id)
            except StoreConflict as exc:
                log.info("reservation %s changed while releasing it (%s); checked again next round", group_id, exc)
                continue
            released.append((group_id, why))
            _decision_log("release", group_id, reason=why)
        return released


def stale_reservations(snapshot: Snapshot, now: float, ttl: float) -> list[tuple[str, str]]:
    out = []
    for group_id, res in sorted(snapshot.reservations.items()):
        seen, placed, _ = members_summary(snapshot.members.get(group_id, ()))
        if placed == 0 and res.expired(now, ttl):
            out.append((group_id, f"no member placed within {ttl:.0f}s"))
        elif seen == 0 and now - (res.placed_at or res.created_at) > 30:
            # A bound member shows up in the caches within moments; 30 s of nothing means the group ended.
            out.append((group_id, "every member of the group has finished or was deleted"))
    return out
