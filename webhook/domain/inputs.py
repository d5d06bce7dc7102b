"""What every decision reads, built once per request: one frozen value the verbs share.

The filter, prioritize, preempt and bind decisions and the retry of refused groups all read the same
things: the cluster as one snapshot, the promises this process and the other replicas made that are not
stored yet, the policy, the time, who decides (the replica's holder name), what the filter derives once per
node generation, and the segments this process gave members without a rank that the cache does not show
yet. ``webhook.engine.core.Core.decision_inputs`` builds the value; a test builds it from plain data.

Which reservation or promise still holds capacity is one rule (``Policy.live``), applied here once per value
(``DecisionInputs.live``) and by ``live_reservations`` for callers that hold the parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Protocol

from webhook.domain.model import Node, Reservation, Snapshot
from webhook.domain.policy import Policy


class NodeSets(Protocol):
    """What the filter derives from the cache's nodes alone: computed per call
    (``webhook.domain.placement.candidates.DERIVED``) or once per node generation (``webhook.state.node_sets``)."""

    def labelled(self, nodes: Mapping[str, Node]) -> frozenset[str]:
        """The names of the nodes of ``nodes`` that are in some domain."""
        ...

    def outside(self, nodes: Mapping[str, Node], domain: str) -> Mapping[str, str]:
        """``OUTSIDE_DOMAIN`` for every node of ``nodes`` in another domain than ``domain``, in ``nodes``' order."""
        ...


def live_reservations(snapshot: Snapshot, promises: Mapping[str, Reservation], policy: Policy,
                      now: float) -> dict[str, Reservation]:
    """Every group's promise that still holds: stored ones, then the promises not stored yet."""
    out = {g: r for g, r in promises.items() if policy.live(r, now, stored=False)}
    out.update({g: r for g, r in snapshot.reservations.items() if policy.live(r, now, stored=True)})
    return out


@dataclass(frozen=True)
class DecisionInputs:
    """``promises``: choices not stored as reservations yet (this process's in flight, the ledgers' of other
    replicas), by group id; read lazily by the engine, so pass a mapping that computes on first use.
    ``sets``: None computes the node sets per call. ``given``: pod uid -> segment id."""

    snapshot: Snapshot
    policy: Policy
    now: float
    promises: Mapping[str, Reservation] = field(default_factory=dict)
    holder: str = ""
    sets: NodeSets | None = None
    given: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def live(self) -> Mapping[str, Reservation]:
        """Every group's reservation or promise that still holds capacity, by group id."""
        return MappingProxyType(live_reservations(self.snapshot, self.promises, self.policy, self.now))

    def reservation(self, group_id: str) -> Reservation | None:
        """The group's stored reservation while it lives, else its live promise, else None."""
        stored = self.snapshot.reservations.get(group_id)
        if stored is not None and self.policy.live(stored, self.now, stored=True):
            return stored
        proposed = self.promises.get(group_id)
        if proposed is not None and self.policy.live(proposed, self.now, stored=False):
            return proposed
        return None

    def at(self, snapshot: Snapshot) -> DecisionInputs:
        """The same inputs over another snapshot (the cluster once a preemption's victims are gone)."""
        return DecisionInputs(snapshot, self.policy, self.now, self.promises, self.holder, self.sets, self.given)
