"""Runs the pure decisions against the current state and carries out what they decide.

The views hand it parsed requests; it takes a snapshot and calls the decision function. The first filter
of a group stores the group's reservation (``webhook.state.reservations`` explains how a choice is
recorded so that no domain is promised twice, in one process or across replicas); later filters read it
from the cache. On bind it confirms the reservation, asks the fabric seam to attach GPUs and creates the
binding. It logs one structured line per decision. Adapters come in through small protocols, so the
same engine serves the embedded cluster and a real API server.

This module holds the choice of a group's domain (filter, prioritize) and the promises in flight; the
other verbs are ``webhook.engine.bind``, ``webhook.engine.preempt`` and ``webhook.engine.housekeeping``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from webhook.domain import filtering, preemption, scoring
from webhook.domain.model import Node, Pod, Reservation, Snapshot
from webhook.domain.policy import Policy
from webhook.errors import DecisionError, StoreConflict
from webhook.engine import bind as bind_verb
from webhook.engine import housekeeping
from webhook.engine import preempt as preempt_verb
from webhook.engine.bind import Attacher, Binder, BindOutcome, NoFabric
from webhook.state.cluster import ClusterStore
from webhook.engine.decision_log import decision_log, log
from webhook.engine.events import EventSink, Reporter, sink_of
from webhook.state.node_sets import NodeSets
from webhook.engine.choices import DomainArbiter, Lazy, ProposalView
from webhook.engine.requeue import Refusals
from webhook.state.reservations import DomainFull, ReservationStore

# Domain choices one first pod makes when other replicas keep filling the domain it chose.
CHOOSE_ATTEMPTS = 5


class Engine:
    def __init__(self, store: ClusterStore, reservations: ReservationStore, binder: Binder, policy: Policy,
                 attacher: Attacher | None = None, holder: str = "", bind_budget: float = 20.0,
                 clock: Callable[[], float] = time.time, events: EventSink | None = None) -> None:
        self.store = store
        self.reservations = reservations
        self.binder = binder
        self.attacher: Attacher = attacher or NoFabric()
        self.policy = policy
        self.holder = holder
        self.bind_budget = bind_budget
        self.clock = clock
        # Choose-and-record: held while a first pod reads what is promised, chooses and records its choice
        # in _in_flight (never across an API call). Readers take _in_flight without it (replaced, not changed).
        self._choosing = threading.Lock()
        self._in_flight: Mapping[str, Reservation] = MappingProxyType({})
        self.proposals = ProposalView(self)
        # Kubernetes Events about pods and ComputeDomains (webhook.engine.events); never blocks, never raises.
        self.events: EventSink = events or sink_of(binder)
        self.report = Reporter(self.events, policy)
        self.node_sets = NodeSets()  # what filters derive from the nodes, once per node generation
        self._snapshot: tuple[Snapshot, Mapping[str, Reservation], Snapshot] | None = None
        # Groups the filter refused, for the retry once capacity returns (webhook.engine.requeue); every
        # change of the caches, and every refusal, wakes the workers that act on it.
        self.refusals = Refusals()
        self.changes = threading.Event()
        store.subscribe(self.changes.set)
        reservations.subscribe(self.changes.set)

    def snapshot(self) -> Snapshot:
        base, reservations = self.store.snapshot(), self.reservations.all()
        last = self._snapshot
        if last is not None and last[0] is base and last[1] is reservations:
            return last[2]  # neither changed since: the same snapshot, not another copy per request
        snapshot = replace(base, reservations=reservations)
        self._snapshot = (base, reservations, snapshot)
        return snapshot

    def loading(self) -> str | None:
        """Why the caches cannot be trusted yet, or None. Until every initial list has arrived a replica
        sees reservations without their members (or members without their reservations): a choice would
        ignore other groups' capacity and housekeeping would release live groups' reservations."""
        waiting = sorted(kind for kind, synced in self.store.sync_state().items() if not synced)
        if not getattr(self.reservations, "synced", True):
            waiting.append("DomainReservation")
        if not waiting:
            return None
        return (f"the extender's caches are still loading ({', '.join(waiting)} not listed yet); "
                "the scheduler retries")

    def require_loaded(self) -> None:
        why = self.loading()
        if why is not None:
            raise DecisionError(why)

    # -- promises -------------------------------------------------------------------------------------

    def live(self, promise: Reservation, now: float) -> bool:
        """A promise holds capacity while its group's reservation names its domain, or, before the
        reservation exists, for ``proposal_ttl`` (webhook.state.reservations)."""
        stored = self.reservations.all().get(promise.group_id)
        if stored is not None:
            return stored.domain == promise.domain and not stored.expired(now, self.policy.reservation_ttl)
        return now - promise.created_at <= self.policy.proposal_ttl

    def promised(self, now: float) -> Mapping[str, Reservation]:
        """Choices without a stored reservation: live ledger promises (another replica between its two
        writes, or one whose create failed), then this process's choices being stored."""
        stored = self.reservations.all()
        out: dict[str, Reservation] = {}
        for ledger in self.reservations.promises().values():
            for group_id, promise in ledger.items():
                if group_id in stored or now - promise.created_at > self.policy.proposal_ttl:
                    continue
                if group_id not in out or promise.created_at > out[group_id].created_at:
                    out[group_id] = promise
        out.update(self._in_flight)
        return out

    def inputs(self) -> tuple[object, ...]:
        """What a filter decision depends on, by identity: equal tuples mean an equal decision."""
        return self.store.snapshot(), self.reservations.all(), self.reservations.promises(), self._in_flight

    def _fly(self, res: Reservation) -> None:
        self._in_flight = MappingProxyType({**self._in_flight, res.group_id: res})

    def _land(self, res: Reservation) -> None:
        with self._choosing:
            if self._in_flight.get(res.group_id) is res:
                self._in_flight = MappingProxyType({g: r for g, r in self._in_flight.items() if g != res.group_id})

    def forget(self, group_id: str) -> None:
        """Drop the group's reservation and choice, so that its next filter chooses again (bench, tests)."""
        with self._choosing:
            self._in_flight = MappingProxyType({g: r for g, r in self._in_flight.items() if g != group_id})
        if group_id in self.reservations.all():
            self.reservations.release(group_id)

    def _store(self, res: Reservation, arbiter: DomainArbiter) -> Reservation:
        current = self.reservations.all().get(res.group_id)
        if current is not None and current.version and current.expired(self.clock(), self.policy.reservation_ttl):
            # Expired but not yet released by housekeeping: the filter no longer follows it; replace it.
            try:
                self.reservations.release(res.group_id)
            except StoreConflict as exc:
                raise DecisionError(f"the expired reservation of group {res.namespace}/{res.group_name} is "
                                    f"changing ({exc}); the scheduler retries") from exc
        return self.reservations.reserve(res, arbiter)

    def record(self, res: Reservation, arbiter: DomainArbiter,
               admit: Callable[[], None] | None = None) -> Reservation:
        """Store ``res`` as a choice in flight: ``admit`` (raising to refuse) runs under the choosing lock
        first, and the choice counts as promised in this process until the store answers."""
        with self._choosing:
            if admit is not None:
                admit()
            self._fly(res)
        try:
            return self._store(res, arbiter)
        finally:
            self._land(res)

    def lazy_promised(self, now: float) -> Mapping[str, Reservation]:
        return Lazy(lambda: self.promised(now))

    # -- verbs ----------------------------------------------------------------------------------------

    def _filter(self, pod: Pod, candidates: Sequence[str],
                node_view: Mapping[str, Node] | None) -> tuple[filtering.FilterOutcome, tuple[object, ...]]:
        now = self.clock()
        inputs = self.inputs()
        result = filtering.filter_nodes(pod, candidates, self.snapshot(), self.policy,
                                        self.lazy_promised(now), now, node_view, self.holder, self.node_sets)
        return result, inputs

    def filter(self, pod: Pod, candidates: Sequence[str],
               node_view: Mapping[str, Node] | None = None) -> filtering.FilterOutcome:
        self.require_loaded()
        result, inputs = self._filter(pod, candidates, node_view)
        ctx = result.context
        if ctx is not None and ctx.reservation is not None and not ctx.reservation.version:
            try:
                result = self._filter_first(pod, candidates, node_view, result, inputs)
            except DecisionError as exc:
                decision_log("filter", pod.ref, group=ctx.group.id if ctx.group else None, outcome="error",
                              reason=str(exc))
                raise
        ctx = result.context
        if ctx is not None:
            group = ctx.group
            if group is not None and not result.passed:
                self.refusals.refused(group.id, tuple(candidates), inputs)
                self.changes.set()
            if result.outcome == "no-domain":
                self.report.no_domain(pod, ctx, self.store.snapshot().catalog)
            decision_log(
                "filter", pod.ref, group=group.id if group else None, domain=ctx.domain,
                outcome=result.outcome, passed=len(result.passed), failed=len(result.failed),
                unresolvable=len(result.unresolvable), reason=ctx.reason,
            )
        return result

    def _filter_first(self, pod: Pod, candidates: Sequence[str], node_view: Mapping[str, Node] | None,
                      result: filtering.FilterOutcome, inputs: tuple[object, ...] | None) -> filtering.FilterOutcome:
        """The group has no stored reservation: choose under the lock, store, and filter against what holds."""
        allowed = frozenset(candidates)
        what = "of this pod"
        for _ in range(CHOOSE_ATTEMPTS):
            with self._choosing:
                now = self.clock()
                if inputs is None or any(a is not b for a, b in zip(self.inputs(), inputs, strict=True)):
                    result, inputs = self._filter(pod, candidates, node_view)  # something changed: choose again
                ctx = result.context
                res = ctx.reservation if ctx is not None else None
                if ctx is None or ctx.group is None or res is None or res.version:
                    return result  # stored meanwhile (another thread, the watch), or no domain now
                if ctx.proposal is None and now - res.created_at > self.policy.proposal_ttl / 2:
                    res = replace(res, created_at=now, holder=self.holder)  # renew an old promise first
                self._fly(res)
            what = f"{res.namespace}/{res.group_name}"
            try:
                stored = self._store(res, DomainArbiter(self, res, ctx.group, ctx.demand, allowed))
            except DomainFull as exc:
                log.info("choosing again for group %s: %s", what, exc)
                inputs = None
                continue
            finally:
                self._land(res)
            if stored.domain == res.domain:
                self.report.reserved(pod, ctx.group, stored, self.store.snapshot().catalog)
                return result
            # Another replica reserved the group first: its domain holds; filter against it.
            return self._filter(pod, candidates, node_view)[0]
        raise DecisionError(f"could not reserve a domain for group {what}: other replicas "
                            f"promised each domain chosen to other groups first ({CHOOSE_ATTEMPTS} tries); "
                            "the scheduler retries")

    def prioritize(self, pod: Pod, candidates: Sequence[str],
                   node_view: Mapping[str, Node] | None = None) -> list[tuple[str, int]]:
        now = self.clock()
        return scoring.prioritize(pod, candidates, self.snapshot(), self.policy, self.lazy_promised(now),
                                  now, node_view)

    def scores(self, pod: Pod, candidates: Sequence[str],
               node_view: Mapping[str, Node] | None = None) -> dict[str, int]:
        """``prioritize`` without the candidates that score the minimum (``scoring.weigh``)."""
        now = self.clock()
        return scoring.weigh(pod, candidates, self.snapshot(), self.policy, self.lazy_promised(now), now,
                             node_view)

    def preempt(self, pod: Pod, candidates: Mapping[str, Sequence[str]],
                sent: Mapping[str, Pod]) -> preemption.PreemptOutcome:
        return preempt_verb.preempt(self, pod, candidates, sent)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        return bind_verb.bind(self, namespace, name, uid, node)

    def housekeep(self, prune: bool = True) -> list[tuple[str, str]]:
        """Release reservations whose group ended or that expired with no member placed; with ``prune``,
        drop dead promises too."""
        return housekeeping.housekeep(self, prune)
