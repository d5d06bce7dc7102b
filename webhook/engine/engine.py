"""The engine: the one object the HTTP layer and the service hold.

The views hand it parsed requests; it takes a snapshot and calls the decision function. The first filter
of a group stores the group's reservation (``webhook.engine.choices`` explains how a choice is recorded so
that no domain is promised twice, in one process or across replicas); later filters read it from the
cache. On bind it confirms the reservation, asks the fabric seam to attach GPUs and creates the binding.
It logs one structured line per decision. Adapters come in through the ports of ``webhook.engine.ports``,
so the same engine serves the embedded cluster and a real API server.

The verbs live in their own modules, as functions over the ``Core`` (``webhook.engine.core``); the read
methods at the end give the views what they show, computed by the domain layer, so a view only
translates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.domain.admission import admission_review
from webhook.domain.admission.mutating import MutationResult
from webhook.domain.decisions import preemption
from webhook.domain.decisions.filtering import FilterOutcome
from webhook.domain.model import Node, Pod, Reservation
from webhook.domain.views import figures, inspection
from webhook.engine import bind as bind_verb
from webhook.engine import filter as filter_verb
from webhook.engine import holds as holds_verb
from webhook.engine import housekeeping
from webhook.engine import preempt as preempt_verb
from webhook.engine.bind import BindOutcome
from webhook.engine.core import Core
from webhook.wire.admission import Review


class Engine(Core):
    # -- verbs ----------------------------------------------------------------------------------------

    def filter(self, pod: Pod, candidates: Sequence[str],
               node_view: Mapping[str, Node] | None = None) -> FilterOutcome:
        return filter_verb.filter_pod(self, pod, candidates, node_view)

    def prioritize(self, pod: Pod, candidates: Sequence[str],
                   node_view: Mapping[str, Node] | None = None) -> list[tuple[str, int]]:
        return filter_verb.prioritize(self, pod, candidates, node_view)

    def scores(self, pod: Pod, candidates: Sequence[str],
               node_view: Mapping[str, Node] | None = None) -> dict[str, int]:
        """``prioritize`` without the candidates that score the minimum (``scoring.weigh``)."""
        return filter_verb.scores(self, pod, candidates, node_view)

    def preempt(self, pod: Pod, candidates: Mapping[str, Sequence[str]],
                sent: Mapping[str, Pod]) -> preemption.PreemptOutcome:
        return preempt_verb.preempt(self, pod, candidates, sent)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        return bind_verb.bind(self, namespace, name, uid, node)

    def housekeep(self, prune: bool = True) -> list[tuple[str, str]]:
        """Release reservations whose group ended or that expired with no member placed; with ``prune``,
        drop dead promises too."""
        return housekeeping.housekeep(self, prune)

    def plan_holds(self) -> list[Reservation]:
        """Hold domains for the groups that waited longest, at their earliest start (``webhook.engine.holds``);
        returns the holds made."""
        return holds_verb.plan_holds(self)

    # -- what the views show ----------------------------------------------------------------------------

    def labelled_nodes(self) -> frozenset[str]:
        """The names of the cached nodes that carry a domain label (the extender's NodeNames check)."""
        return self.node_sets.labelled(self.store.snapshot().nodes)

    def proposed(self, now: float) -> dict[str, Reservation]:
        """Choices without a stored reservation (what /inspect and /metrics call proposed)."""
        return dict(self.choices.promised(now))

    def admit(self, review: Review) -> MutationResult:
        """The admission verdict on one AdmissionReview, over the cached catalog and nodes (no API call, nothing
        written: admission has no side effects)."""
        snapshot = self.snapshot()
        return admission_review.admit(review, snapshot.catalog, snapshot.nodes, self.policy)

    def reservation_counts(self, now: float) -> dict[str, int]:
        """Reservations by state: reserved (stored), proposed (chosen, not stored yet)."""
        return {"reserved": len(self.reservations.all()), "proposed": len(self.choices.promised(now))}

    def expired_reservations(self, now: float) -> int:
        """Stored reservations past their TTL that housekeeping has not released yet."""
        return sum(1 for r in self.snapshot().reservations.values() if not self.policy.live(r, now, stored=True))

    def domain_figures(self, now: float) -> dict[str, figures.DomainGpus]:
        snapshot = self.snapshot()
        return figures.domain_gpus(snapshot, self.choices.promised(now), self.policy, now)

    def spare_nodes(self, now: float) -> dict[str, int]:
        """Per domain, the spare nodes live reservations hold there (``figures.spare_nodes``)."""
        inputs = self.decision_inputs(now)
        return figures.spare_nodes(inputs.snapshot, inputs.live)

    def held_gpus(self, now: float) -> dict[str, int]:
        """Per domain, the GPUs holds keep for waiting groups (``figures.held_gpus``)."""
        inputs = self.decision_inputs(now)
        return figures.held_gpus(inputs.snapshot, inputs.live)

    def waiting_groups(self, now: float) -> dict[str, int]:
        """Groups with pods still to place, by why they wait (``figures.WAITING_REASONS``)."""
        return figures.waiting_reasons(self.snapshot(), self.choices.promised(now), self.policy, now)

    def fit_pods(self, now: float) -> dict[str, dict[int, int]]:
        """Per domain, how many pods of 1, 2 and 4 GPUs one new group could be given there now
        (``figures.fit_pods``)."""
        return figures.fit_pods(self.snapshot(), self.choices.promised(now), self.policy, now)

    def inspection(self, now: float) -> dict[str, Any]:
        """The body of /inspect."""
        body = inspection.summarize(self.snapshot(), self.proposed(now), self.policy, now)
        body["caches"] = self.store.sync_state()
        return body
