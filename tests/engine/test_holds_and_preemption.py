"""Holds beside priorities (docs/SCHEDULER.md, "Holds and backfill"): a held group of higher priority still
preempts as any group does, and only in the domain held for it; a hold keeps its room from a younger group of
higher priority as any reservation does, until that group has waited --hold-after: then it heads the waiting
order and the hold gives way to it."""

from __future__ import annotations

from tests.domain.test_holds import T0, _group
from tests.engine.test_holds import A, _cluster, _pod
from webhook.domain.model import Pod


def _victims(engine: object, names: list[str]) -> dict[str, list[str]]:
    snap = engine.snapshot()  # type: ignore[attr-defined]
    by_node: dict[str, list[str]] = {}
    for members in snap.members.values():
        for m in members:
            if m.pod.node_name and m.pod.name.split("-")[0] in names:
                by_node.setdefault(m.pod.node_name, []).append(m.pod.uid)
    return by_node


def test_a_held_group_of_higher_priority_preempts_only_in_its_held_domain() -> None:
    big = _group("big", 4, created=T0, priority=1000)
    engine, _, _, _ = _cluster(big)
    (hold,) = engine.plan_holds()
    assert hold.domain == A
    candidates = _victims(engine, ["short", "long", "endless"])  # the scheduler offers victims in both racks
    sent: dict[str, Pod] = {}
    outcome = engine.preempt(_pod(big, "big-0"), candidates, sent)
    assert set(outcome.kept) == {"a-00", "a-01", "a-02", "a-03"}, outcome
    assert engine.reservations.all()[hold.group_id].domain == A  # the hold stands; nothing moved


def test_a_hold_counts_like_any_reservation_against_a_younger_group_of_higher_priority_until_it_is_due() -> None:
    big = _group("big", 4, created=T0)
    engine, backend, clock, _ = _cluster(big)
    (hold,) = engine.plan_holds()
    urgent = _group("urgent", 4, created=T0 + 1150, priority=1000)  # comes after the hold was made
    for obj in urgent:
        backend.store.apply(obj["kind"], "ADDED", obj)
    refused = engine.preempt(_pod(urgent, "urgent-0"), _victims(engine, ["short", "long"]), {})
    assert not refused.kept, "rack a's room is the hold's, as it would be a reservation's"
    assert engine.plan_holds() == [] and hold.group_id in engine.reservations.all()  # not due yet
    clock.now = T0 + 1150 + 600  # --hold-after later, it heads the order: big's hold gives way to it
    (again,) = engine.plan_holds()
    assert (again.group_name, again.domain) == ("urgent", A) and hold.group_id not in engine.reservations.all()
    assert engine.preempt(_pod(urgent, "urgent-0"), _victims(engine, ["short", "long"]), {}).kept
