"""What every verb works with: the caches, the stores and seams of ``webhook.engine.ports``, the policy, the
choose-and-record machinery (``webhook.engine.choices``) and the snapshot all of them read.

The verbs (``filter``, ``bind``, ``preempt``, ``housekeeping``, ``requeue``) are functions over a ``Core``;
``webhook.engine.engine.Engine`` is the ``Core`` with the verbs as methods, the one object the HTTP layer
and the service hold. Every collaborator comes in through the constructor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from webhook.domain.groups import segments
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Reservation, Snapshot
from webhook.domain.policy import Policy
from webhook.engine.choices import Choices
from webhook.engine.events import LogEvents, Reporter
from webhook.engine.health_watch import HealthWatch
from webhook.engine.ports import Attacher, Binder, EventSink, NoFabric, NoWaitObserver, ReservationStore, WaitObserver
from webhook.engine.refusals import Refusals
from webhook.engine.segment_labels import SegmentLabels
from webhook.engine.waits import Reported
from webhook.errors import DecisionError
from webhook.state.cluster import ClusterStore
from webhook.state.node_sets import NodeSets


class Core:
    def __init__(self, store: ClusterStore, reservations: ReservationStore, binder: Binder, policy: Policy, *,
                 attacher: Attacher | None = None, events: EventSink | None = None, holder: str = "",
                 bind_budget: float = 20.0, clock: Callable[[], float] = time.time,
                 waits: WaitObserver | None = None) -> None:
        self.store = store
        self.reservations = reservations
        self.binder = binder
        self.attacher: Attacher = attacher if attacher is not None else NoFabric()
        self.policy = policy
        self.holder = holder
        self.bind_budget = bind_budget
        self.clock = clock
        self.choices = Choices(reservations, policy, holder, clock)
        # Kubernetes Events about pods and ComputeDomains (webhook.engine.events); never blocks, never raises.
        self.events: EventSink = events if events is not None else LogEvents()
        self.report = Reporter(self.events, policy)
        # How long each group waited to run whole, counted once per job by its last bind (webhook.engine.waits).
        self.waits: WaitObserver = waits if waits is not None else NoWaitObserver()
        self.waits_reported = Reported()
        self.node_sets = NodeSets()  # what filters derive from the nodes, once per node generation
        self.health_watch = HealthWatch()  # running groups whose domain changes health (housekeeping)
        self._snapshot: tuple[Snapshot, Mapping[str, Reservation], Snapshot] | None = None
        # Groups the filter refused, for the retry once capacity returns (webhook.engine.requeue); every
        # change of the caches, and every refusal, wakes the workers that act on it.
        self.refusals = Refusals()
        self.segment_labels = SegmentLabels(binder, store, clock)  # members without a rank (segment_assignment)
        self.changes = threading.Event()
        store.subscribe(self.changes.set)
        reservations.subscribe(self.changes.set)

    def snapshot(self) -> Snapshot:
        base, reservations = self.store.snapshot(), self.reservations.all()
        last = self._snapshot
        if last is not None and last[0] is base and last[1] is reservations:
            return last[2]  # neither changed since: the same snapshot, not another copy per request
        if (last is None or last[1] is not reservations) and self.store.set_split_jobs(segments.split_jobs(
                reservations.values())):
            base = self.store.snapshot()  # the split jobs' pods now belong to their segments
        snapshot = replace(base, reservations=reservations)
        self._snapshot = (base, reservations, snapshot)
        return snapshot

    def loading(self) -> str | None:
        """Why the caches cannot be trusted yet, or None. Until every initial list has arrived a replica
        sees reservations without their members (or members without their reservations): a choice would
        ignore other groups' capacity and housekeeping would release live groups' reservations."""
        waiting = sorted(kind for kind, synced in self.store.sync_state().items() if not synced)
        if not self.reservations.synced:
            waiting.append("DomainReservation")
        if not waiting:
            return None
        return (f"the extender's caches are still loading ({', '.join(waiting)} not listed yet); "
                "the scheduler retries")

    def require_loaded(self) -> None:
        why = self.loading()
        if why is not None:
            raise DecisionError(why)

    def decision_inputs(self, now: float | None = None) -> DecisionInputs:
        """What every verb's decision reads, at ``now`` (the clock's time by default), built once per call."""
        now = self.clock() if now is None else now
        return DecisionInputs(self.snapshot(), self.policy, now, self.choices.lazy(now), self.holder, self.node_sets,
                              self.segment_labels.given())

    def fingerprint(self) -> tuple[object, ...]:
        """What a filter decision depends on, by identity: equal tuples mean an equal decision."""
        return (self.store.snapshot(), self.reservations.all(), self.reservations.promises(),
                self.choices.in_flight)
