"""Runs the pure decisions against the current state and carries out what they decide.

The views hand it parsed requests; it takes a snapshot and calls the decision function. The first filter
of a group stores the group's reservation (``webhook.state.reservations`` explains how a choice is
recorded so that no domain is promised twice, in one process or across replicas); later filters read it
from the cache. On bind it confirms the reservation, asks the fabric seam to attach GPUs and creates the
binding. It logs one structured line per decision. Adapters come in through small protocols, so the
same engine serves the embedded cluster and a real API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Protocol

from webhook.domain import binding, capacity, filtering, grouping, placement, preemption, scoring
from webhook.domain.model import Demand, Group, Node, Pod, Reservation, Snapshot
from webhook.domain.placement import members_summary
from webhook.domain.policy import Policy
from webhook.errors import DecisionError, StoreConflict
from webhook.state.cluster import ClusterStore
from webhook.state.events import EventSink, Reporter, sink_of
from webhook.state.node_sets import NodeSets
from webhook.state.reservations import DomainFull, ReservationStore

log = logging.getLogger("imex_webhook.decisions")

# Domain choices one first pod makes when other replicas keep filling the domain it chose.
CHOOSE_ATTEMPTS = 5


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


class _Lazy(Mapping[str, Reservation]):
    """The promises without a stored reservation, computed on first use: a later pod's filter finds its
    group's stored reservation first and never pays for them."""

    def __init__(self, build: Callable[[], Mapping[str, Reservation]]) -> None:
        self._build = build
        self._data: Mapping[str, Reservation] | None = None

    def _get(self) -> Mapping[str, Reservation]:
        if self._data is None:
            self._data = self._build()
        return self._data

    def __getitem__(self, key: str) -> Reservation:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


class ProposalView:
    """What /inspect and /metrics call proposed: choices without a stored reservation."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def view(self, now: float) -> dict[str, Reservation]:
        return dict(self._engine.promised(now))

    def forget(self, group_id: str) -> None:
        self._engine.forget(group_id)


@dataclass(frozen=True, slots=True)
class _Arbiter:
    """``reservations.Arbiter`` for one choice: is a promise live, does the domain still fit the group."""

    engine: Engine
    proposal: Reservation
    group: Group
    need: Demand
    allowed: Set[str] | None  # the candidate nodes of the filter that chose (None: the whole domain)
    # The cluster the choice was made for, when not the current one: once a preemption's victims are gone.
    after: Snapshot | None = None

    def live(self, promise: Reservation) -> bool:
        return self.engine.live(promise, self.engine.clock())

    def fits(self, promises: Mapping[str, Reservation]) -> bool:
        engine, res = self.engine, self.proposal
        now = engine.clock()
        snapshot = self.after if self.after is not None else engine.snapshot()
        others = filtering.live_reservations(snapshot, engine.promised(now), engine.policy, now)
        others.update(promises)  # the domain's ledger as the store just read it wins over our cache
        others.pop(res.group_id, None)
        _, placed, _ = members_summary(snapshot.members.get(res.group_id, ()))
        remaining = max(res.size - placed, 1)
        return placement.still_fits(res.domain, self.group, self.need, remaining, snapshot, others, self.allowed)


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
        # Kubernetes Events about pods and ComputeDomains (webhook.state.events); never blocks, never raises.
        self.events: EventSink = events or sink_of(binder)
        self._report = Reporter(self.events, policy)
        self.node_sets = NodeSets()  # what filters derive from the nodes, once per node generation
        self._snapshot: tuple[Snapshot, Mapping[str, Reservation], Snapshot] | None = None

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

    def _require_loaded(self) -> None:
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

    def _inputs(self) -> tuple[object, ...]:
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

    def _store(self, res: Reservation, arbiter: _Arbiter) -> Reservation:
        current = self.reservations.all().get(res.group_id)
        if current is not None and current.version and current.expired(self.clock(), self.policy.reservation_ttl):
            # Expired but not yet released by housekeeping: the filter no longer follows it; replace it.
            try:
                self.reservations.release(res.group_id)
            except StoreConflict as exc:
                raise DecisionError(f"the expired reservation of group {res.namespace}/{res.group_name} is "
                                    f"changing ({exc}); the scheduler retries") from exc
        return self.reservations.reserve(res, arbiter)

    # -- verbs ----------------------------------------------------------------------------------------

    def _filter(self, pod: Pod, candidates: Sequence[str],
                node_view: Mapping[str, Node] | None) -> tuple[filtering.FilterOutcome, tuple[object, ...]]:
        now = self.clock()
        inputs = self._inputs()
        result = filtering.filter_nodes(pod, candidates, self.snapshot(), self.policy,
                                        _Lazy(lambda: self.promised(now)), now, node_view, self.holder, self.node_sets)
        return result, inputs

    def filter(self, pod: Pod, candidates: Sequence[str],
               node_view: Mapping[str, Node] | None = None) -> filtering.FilterOutcome:
        self._require_loaded()
        result, inputs = self._filter(pod, candidates, node_view)
        ctx = result.context
        if ctx is not None and ctx.reservation is not None and not ctx.reservation.version:
            try:
                result = self._filter_first(pod, candidates, node_view, result, inputs)
            except DecisionError as exc:
                _decision_log("filter", pod.ref, group=ctx.group.id if ctx.group else None, outcome="error",
                              reason=str(exc))
                raise
        ctx = result.context
        if ctx is not None:
            group = ctx.group
            if result.outcome == "no-domain":
                self._report.no_domain(pod, ctx, self.store.snapshot().catalog)
            _decision_log(
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
                if inputs is None or any(a is not b for a, b in zip(self._inputs(), inputs, strict=True)):
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
                stored = self._store(res, _Arbiter(self, res, ctx.group, ctx.demand, allowed))
            except DomainFull as exc:
                log.info("choosing again for group %s: %s", what, exc)
                inputs = None
                continue
            finally:
                self._land(res)
            if stored.domain == res.domain:
                self._report.reserved(pod, ctx.group, stored, self.store.snapshot().catalog)
                return result
            # Another replica reserved the group first: its domain holds; filter against it.
            return self._filter(pod, candidates, node_view)[0]
        raise DecisionError(f"could not reserve a domain for group {what}: other replicas "
                            f"promised each domain chosen to other groups first ({CHOOSE_ATTEMPTS} tries); "
                            "the scheduler retries")

    def prioritize(self, pod: Pod, candidates: Sequence[str],
                   node_view: Mapping[str, Node] | None = None) -> list[tuple[str, int]]:
        now = self.clock()
        return scoring.prioritize(pod, candidates, self.snapshot(), self.policy, _Lazy(lambda: self.promised(now)),
                                  now, node_view)

    def scores(self, pod: Pod, candidates: Sequence[str],
               node_view: Mapping[str, Node] | None = None) -> dict[str, int]:
        """``prioritize`` without the candidates that score the minimum (``scoring.weigh``)."""
        now = self.clock()
        return scoring.weigh(pod, candidates, self.snapshot(), self.policy, _Lazy(lambda: self.promised(now)), now,
                             node_view)

    def preempt(self, pod: Pod, candidates: Mapping[str, Sequence[str]],
                sent: Mapping[str, Pod]) -> preemption.PreemptOutcome:
        """``candidates``: node -> victim UIDs; ``sent``: victims the scheduler sent whole (no node cache).
        The caches' copy of a victim wins: it is what our accounting counted.

        A domain chosen for a group with no reservation (the cluster as it will be once the victims are
        gone) is stored as the group's reservation before anything is evicted. kube-scheduler preempts
        for one pod at a time, each with its own candidates; without the record, the next member could
        choose another domain, and the group would evict pods in two domains and fit in neither (seen
        with the real scheduler). If the record cannot be made, nothing is evicted this cycle."""
        self._require_loaded()
        now = self.clock()
        victims = {}
        for uids in candidates.values():
            for uid in uids:
                known = self.store.pod_by_uid(uid) or sent.get(uid)
                if known is not None:
                    victims[uid] = known
        snapshot = self.snapshot()
        result = preemption.preempt(pod, candidates, victims, snapshot, self.policy,
                                    _Lazy(lambda: self.promised(now)), now, self.holder)
        ctx = result.context
        if (result.reason_class == "chosen-after-eviction" and ctx is not None and ctx.group is not None
                and ctx.reservation is not None and not ctx.reservation.version):
            result = self._reserve_for_preemption(pod, candidates, victims, snapshot, result)
            ctx = result.context
        if ctx is not None:
            _decision_log("preempt", pod.ref, group=ctx.group.id if ctx.group else None, domain=ctx.domain,
                          outcome=result.outcome, kept=len(result.kept), dropped=len(result.dropped),
                          reason=ctx.reason)
        return result

    def _reserve_for_preemption(self, pod: Pod, candidates: Mapping[str, Sequence[str]], victims: Mapping[str, Pod],
                                snapshot: Snapshot, result: preemption.PreemptOutcome) -> preemption.PreemptOutcome:
        ctx = result.context
        assert ctx is not None and ctx.group is not None and ctx.reservation is not None
        res = replace(ctx.reservation, created_at=self.clock(), holder=self.holder)
        after = preemption.without_victims(snapshot, candidates, victims, self.policy)
        with self._choosing:
            self._fly(res)
        try:
            stored = self._store(res, _Arbiter(self, res, ctx.group, ctx.demand, None, after))
        except (DomainFull, DecisionError, StoreConflict) as exc:
            why = f"could not reserve domain {res.domain} for group {res.namespace}/{res.group_name} before " \
                  f"evicting pods ({exc}); nothing is evicted now, the scheduler retries"
            log.info("%s", why)
            return preemption.PreemptOutcome((), dict.fromkeys(candidates, why), replace(ctx, reason=why),
                                             "none-kept", "reserve-failed")
        finally:
            self._land(res)
        if stored.domain == res.domain:
            self._report.reserved(pod, ctx.group, stored, snapshot.catalog)
            return result
        # Another replica reserved the group elsewhere first: preempt only inside that domain.
        now = self.clock()
        return preemption.preempt(pod, candidates, victims, self.snapshot(), self.policy,
                                  _Lazy(lambda: self.promised(now)), now, self.holder)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        now = self.clock()
        deadline = now + self.bind_budget
        ref = f"{namespace}/{name}"
        try:
            self._require_loaded()
            pod = self.store.pod(namespace, name) or self.binder.read_pod(namespace, name)
            snapshot = self.snapshot()
            plan = binding.plan(pod, uid, node, snapshot, self.policy, _Lazy(lambda: self.promised(now)), now,
                                self.holder)
            assert pod is not None
            if plan.already_bound:
                _decision_log("bind", ref, node=node, outcome="already-bound")
                return BindOutcome("already-bound", snapshot.nodes[node].domain if node in snapshot.nodes else None, 0)
            domain = None
            if plan.reservation is not None:
                # Stored by the group's first filter: bind only confirms it (no API call).
                stored = plan.reservation if plan.reservation.version else self._reserve_at_bind(pod, plan.reservation)
                domain = stored.domain
            attached = 0
            if plan.needs_fabric:
                attached = plan.attach_gpus or (plan.attachment.gpus if plan.attachment else 0)
                self._report.attach_started(pod, node, attached, snapshot)
                try:
                    self.attacher.attach(pod, snapshot.nodes[node], attached, deadline)
                except DecisionError as exc:
                    self._report.attach_done(pod, node, attached, snapshot.catalog, failure=str(exc))
                    raise
                self._report.attach_done(pod, node, attached, snapshot.catalog)
            self.binder.bind(pod, node)
            if plan.reservation is not None:
                self._placed(plan.reservation.group_id, now)
        except DecisionError as exc:
            _decision_log("bind", ref, node=node, outcome="error", reason=str(exc))
            raise
        _decision_log("bind", ref, node=node, outcome="bound", domain=domain, group=plan.group_name,
                      attached=attached)
        return BindOutcome("bound", domain, attached)

    def _reserve_at_bind(self, pod: Pod, proposal: Reservation) -> Reservation:
        """No reservation stored (the filter ran on an older version, or its store failed and the scheduler
        bound anyway): record the node's domain, with the same capacity checks as a filter's choice."""
        snapshot = self.snapshot()
        group = grouping.resolve(pod, snapshot.catalog, self.policy).group
        assert group is not None
        arbiter = _Arbiter(self, proposal, group, capacity.demand(pod, snapshot.catalog, self.policy), None)
        what = f"group {proposal.namespace}/{proposal.group_name}"
        full = (f"domain {proposal.domain} has no room left for {what}: its capacity was promised to other "
                "groups; the scheduler retries")
        with self._choosing:
            if not arbiter.fits({}):
                raise DecisionError(full)
            self._fly(proposal)
        try:
            stored = self._store(proposal, arbiter)
        except DomainFull as exc:
            raise DecisionError(full) from exc
        finally:
            self._land(proposal)
        if stored.domain != proposal.domain:
            raise DecisionError(f"{what} was reserved in domain {stored.domain} by "
                                f"{stored.holder or 'another replica'}; the scheduler retries inside that domain")
        self._report.reserved(pod, group, stored, snapshot.catalog)
        return stored

    def _placed(self, group_id: str, now: float) -> None:
        try:
            self.reservations.placed(group_id, now)
        except StoreConflict as exc:
            # The binding exists; only the expiry clock was not refreshed. The next bind refreshes it.
            log.warning("could not record placement for %s: %s", group_id, exc)

    def housekeep(self) -> list[tuple[str, str]]:
        """Release reservations whose group is gone or that expired with no member placed; drop dead promises.
        Nothing while the caches are loading: a group whose pods are not listed yet looks gone."""
        why = self.loading()
        if why is not None:
            log.info("housekeeping waits: %s", why)
            return []
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
            self._report.released(snapshot.reservations[group_id], why, snapshot, now)
        dropped = self.reservations.prune(lambda p: self.live(p, self.clock()))
        if dropped:
            log.info("dropped %d dead domain promises", dropped)
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
