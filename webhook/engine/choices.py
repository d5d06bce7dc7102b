"""How the engine judges a domain choice while the reservation store records it, and the views of the
choices that have no stored reservation yet (``webhook.state.reservations`` explains the protocol)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from webhook.domain import filtering, placement
from webhook.domain.model import Demand, Group, Reservation, Snapshot
from webhook.domain.placement import members_summary

if TYPE_CHECKING:
    from webhook.engine.engine import Engine


class Lazy(Mapping[str, Reservation]):
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
class DomainArbiter:
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
