"""Holds that give way (webhook.engine.holds, webhook.domain.jobs.hold_order; docs/SCHEDULER.md, "Holds that give
way"): while a group that needs one domain has waited past --hold-yield-after, no hold is made and the holds
made are let go; they come back once no such group waits; a job that has waited --hold-yield-until holds on,
and none gives way to a group of lower priority. The cluster is test_holds.py's: rack a runs 'short' (30 min)
and 'long' (1 h) since T0, rack b a group with no walltime; nothing has room, so every group here waits."""

from __future__ import annotations

from tests.concurrency import or_error, run_together
from tests.domain.test_holds import T0, _group
from tests.engine.test_holds import A, _cluster, _delete
from webhook.domain.jobs import holds
from webhook.domain.policy import Policy
from webhook.engine.engine import Engine

YIELDING = Policy(max_holds=1, hold_after=600.0, hold_yield_after=1200.0, hold_yield_until=4 * 3600.0)


def _held(engine: Engine) -> list[str]:
    return sorted(r.group_name for r in engine.reservations.all().values() if holds.is_hold(r))


def test_no_hold_is_made_while_a_one_domain_group_has_waited_past_the_threshold_and_one_is_once_it_is_gone() -> None:
    big, small = _group("big", 4, created=T0 - 5000), _group("small", 4, created=T0 - 100)
    engine, backend, _, _ = _cluster(big, small, policy=YIELDING)
    assert engine.plan_holds() == [], "'small' has waited 1300 s: the cluster is behind on one-domain groups"
    assert _held(engine) == []
    _delete(backend, small)
    (hold,) = engine.plan_holds()
    assert (hold.group_name, hold.domain) == ("big", A)


def test_a_hold_made_in_a_lull_is_let_go_once_a_one_domain_group_waits_past_the_threshold() -> None:
    big, small = _group("big", 4, created=T0), _group("small", 4, created=T0 + 600)
    engine, _, clock, _ = _cluster(big, small, policy=YIELDING)
    (hold,) = engine.plan_holds()  # at T0+1200 'small' has waited 600 s
    assert hold.group_name == "big"
    clock.now = T0 + 1801
    assert engine.plan_holds() == [] and _held(engine) == [], "'small' has waited 1201 s: the hold gives way"
    assert hold.group_id not in engine.reservations.all()


def test_a_job_that_has_waited_hold_yield_until_holds_on_whatever_waits() -> None:
    big, small = _group("big", 4, created=T0 + 1200 - 4 * 3600 - 1), _group("small", 4, created=T0 - 100)
    engine, _, _, _ = _cluster(big, small, policy=YIELDING)
    (hold,) = engine.plan_holds()
    assert hold.group_name == "big", "waited past --hold-yield-until: it never starves, whatever else waits"


def test_a_hold_never_gives_way_to_a_group_of_lower_priority() -> None:
    big, small = _group("big", 4, created=T0, priority=100), _group("small", 4, created=T0 - 100)
    engine, _, _, _ = _cluster(big, small, policy=YIELDING)
    (hold,) = engine.plan_holds()
    assert hold.group_name == "big"


def test_holds_that_never_give_way_are_made_whatever_waits() -> None:
    big, small = _group("big", 4, created=T0 - 5000), _group("small", 4, created=T0 - 100)
    never = Policy(max_holds=1, hold_after=600.0, hold_yield_after=0.0)
    engine, _, _, _ = _cluster(big, small, policy=never)
    (hold,) = engine.plan_holds()
    assert hold.group_name == "big"


def test_threads_racing_to_let_a_hold_go_release_it_once_and_none_comes_back_while_the_group_waits() -> None:
    big, small = _group("big", 4, created=T0), _group("small", 4, created=T0 + 600)
    engine, _, clock, _ = _cluster(big, small, policy=YIELDING)
    (hold,) = engine.plan_holds()
    clock.now = T0 + 1801
    made = run_together(6, or_error(lambda _: engine.plan_holds()))
    assert not any(isinstance(m, BaseException) for m in made), made
    assert made == [[]] * 6 and _held(engine) == []
    assert hold.group_id not in engine.reservations.all()
