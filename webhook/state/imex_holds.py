"""Which ComputeDomains hold which nodes through allocated ResourceClaims (docs/SCHEDULER.md, "What a domain
can take").

The DRA driver lets one ComputeDomain use a node at a time. Its node label says so only once the channel is
prepared, after the pod bound; members we placed say so from the moment they bind. An allocated claim says
so earlier and for pods we never saw placed: a workload channel allocated by the scheduler for a pod still
binding, or the IMEX daemon's ``daemon-0`` that outlives its workload until the daemon pod goes. Kept
incrementally as claims change, so snapshots copy a small table instead of scanning every claim.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from webhook.domain.model import ClaimSpec
from webhook.domain.placement.node_constraints import UNKNOWN_HOLDER
from webhook.state.frozen_views import FrozenView


def holder(claim: ClaimSpec) -> str:
    """The ComputeDomain UID the claim's devices belong to, else the claim itself."""
    return claim.compute_domain or claim.daemon_for or f"{UNKNOWN_HOLDER}{claim.namespace}/{claim.name}"


class ImexHolds:
    """Not thread-safe on its own: the store calls it under its lock."""

    def __init__(self) -> None:
        self._by_node: dict[str, Counter[str]] = defaultdict(Counter)
        self._view: FrozenView[str, Counter[str], frozenset[str]] = FrozenView(frozenset)

    def changed(self, old: ClaimSpec | None, new: ClaimSpec | None) -> None:
        for claim, sign in ((old, -1), (new, 1)):
            if claim is None:
                continue
            who = holder(claim)
            for node in claim.imex_nodes:
                self._view.touch(node)
                counts = self._by_node[node]
                counts[who] += sign
                if counts[who] <= 0:
                    del counts[who]
                if not counts:
                    del self._by_node[node]

    def view(self) -> dict[str, frozenset[str]]:
        """Per node, the holders; the same dict until a claim changes it (snapshots keep it, never change it)."""
        return self._view.view(self._by_node)
