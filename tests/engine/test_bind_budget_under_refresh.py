"""``--bind-budget`` holds while a background refresh of the fabric inventory is in flight (issue 38, item 7).

A bind that attaches fabric GPUs reads the free blocks of its zone. It used to wait for the feed's
refresh to finish first, without its deadline: /bind took 8-20 s with a 3 s budget. Here the refresh is
held for 20 s (``busy_fabric.Held``), or the whole simulator is slow or hangs, and a bind with a 3 s
budget must answer before 6 s: bound when the fabric answers it, else an Error that says what it waited
for, with nothing left composed and no live attachment holding the node's slots. The bounds are far above
the budget (a busy machine) and far below the held refresh, so only a bind that waits for it fails them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.concurrency import run_together
from tests.engine.busy_fabric import BOUND, BUDGET, HELD, Held, Rig, start
from webhook.domain.placement import capacity
from webhook.engine.bind import BindOutcome
from webhook.errors import DecisionError
from webhook.wire.fabric_attachment import Block, Phase


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from start()


def passing() -> Held:
    """Holds nothing; tells the test when the refresh has started reading."""
    held = Held()
    held.opened.set()
    return held


@dataclass(frozen=True)
class Busy:
    """What the fabric is doing while the bind runs, and what the bind must answer."""

    faults: dict[str, Any] = field(default_factory=dict)  # the simulator's, for every request
    held: bool = False  # the refresh's own reads are held HELD s
    reason: tuple[str, ...] = ()  # the Error says all of these; () means the pod binds


BUSY = {
    "the refresh is held and the fabric answers the bind at once": Busy(held=True),
    "every Redfish request takes 2.5 s": Busy(
        {"latency_s": 2.5},
        reason=("free GPU blocks of fabric zone pool", "did not answer", "bind budget 3 s spent",
                "the scheduler retries")),
    "the fabric hangs, the refresh with it": Busy(
        {"hang": True, "hang_cap_s": HELD},
        reason=("free GPU blocks of fabric zone pool", "did not answer", "bind budget 3 s spent",
                "the scheduler retries")),
}


@pytest.mark.parametrize("busy", BUSY.values(), ids=BUSY.keys())
def test_a_bind_answers_within_its_budget_whatever_the_background_refresh_is_doing(rig: Rig, busy: Busy) -> None:
    held = rig.hold(Held() if busy.held else passing())
    if busy.faults:
        rig.sim.faults(**busy.faults)
    rig.refresh_in_background(held)

    took, result = rig.bind("f")

    assert took < BOUND, f"/bind took {took:.1f}s with a {BUDGET:g}s budget: {result}"
    if not busy.reason:
        assert isinstance(result, BindOutcome) and result.outcome == "bound", result
        assert len(rig.composed()["f"]) == 2
        return
    assert isinstance(result, DecisionError), result
    for words in busy.reason:
        assert words in str(result)


def test_a_bind_that_ran_out_of_budget_leaves_nothing_composed_and_no_live_attachment(rig: Rig) -> None:
    rig.sim.faults(latency_s=2.5)
    rig.refresh_in_background(rig.hold(passing()))

    took, result = rig.bind("f")

    assert took < BOUND and isinstance(result, DecisionError), (took, result)
    rig.sim.faults(latency_s=0)
    assert rig.composed() == {}
    att = rig.attachment("f")
    assert att is None or (att.phase is Phase.FAILED and not att.blocks), att
    # Holding no slots, it pins the pod to no node: the scheduler's retry may go elsewhere.
    assert capacity.own_attachment(rig.pods["f"].uid, rig.engine.snapshot()) is None
    _, retried = rig.bind("f")
    assert isinstance(retried, BindOutcome) and retried.outcome == "bound", retried
    assert len(rig.composed()["f"]) == 2


def test_two_binds_during_a_held_refresh_both_bind_with_blocks_of_their_own(rig: Rig) -> None:
    rig.refresh_in_background(rig.hold(Held()))

    results = run_together(2, lambda i: rig.bind(("f", "g")[i]), timeout=HELD + 10)

    for took, result in results:
        assert took < BOUND, f"/bind took {took:.1f}s with a {BUDGET:g}s budget: {result}"
        assert isinstance(result, BindOutcome) and result.outcome == "bound", result
    composed = rig.composed()
    assert len(composed["f"]) == 2 and len(composed["g"]) == 2
    assert not set(composed["f"]) & set(composed["g"])


def test_a_refresh_that_read_before_the_bind_composed_and_ends_before_its_deadline_does_not_bring_the_blocks_back(
        rig: Rig) -> None:
    # Between the bind's read and its compose, a refresh reads every block while all are free; it hands its
    # result in after the compose, while the bind waits for the node agent.
    held = rig.hold(Held(after="ResourceBlocks"))
    attach = rig.fabric.attach

    def refresh_around_the_compose(system: str, block_ids: list[str], deadline: float) -> list[Block]:
        rig.refresh_in_background(held)
        composed = attach(system, block_ids, deadline)
        held.opened.set()
        rig.refreshes[-1].join(BUDGET)
        return composed

    rig.fabric.attach = refresh_around_the_compose  # type: ignore[method-assign]

    took, result = rig.bind("f")

    assert took < BOUND and isinstance(result, BindOutcome), (took, result)
    assert not rig.refreshes[-1].is_alive() and not rig.refresh_errors
    assert rig.fabric.free_per_zone() == {"pool": 4}
    _, second = rig.bind("g")
    assert isinstance(second, BindOutcome) and second.outcome == "bound", second
    assert not set(rig.composed()["f"]) & set(rig.composed()["g"])


def test_a_refresh_that_fails_midway_keeps_the_last_inventory_and_a_bind_still_binds(rig: Rig) -> None:
    before = rig.fabric.inventory.discovery()
    rig.hold(Held(fail_at=3)).opened.set()
    rig.refresh_in_background()
    rig.refreshes[-1].join(HELD)

    assert [str(e) for e in rig.refresh_errors] and "HTTP 503" in str(rig.refresh_errors[0])
    assert "HTTP 503" in rig.fabric.inventory.last_refresh_error
    assert rig.fabric.inventory.discovery() == before
    took, result = rig.bind("f")
    assert took < BOUND and isinstance(result, BindOutcome) and result.outcome == "bound", (took, result)
