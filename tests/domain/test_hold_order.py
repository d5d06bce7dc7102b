"""Which holds give way (``webhook.domain.jobs.hold_order``): to due groups of strictly higher priority that
the free slots leave out, lowest priority (then youngest) first, never for age alone (``displaced``); and,
while a group that needs one domain has waited past --hold-yield-after, every hold of a job that has not yet
waited --hold-yield-until, to nobody in particular (``starving``, ``gives_way``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests import builders
from webhook.domain.groups import segments
from webhook.domain.jobs.hold_order import Held, displaced, gives_way, starving
from webhook.domain.jobs.holds import Waiting
from webhook.domain.model import Demand, Group, GroupKind, Segment
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing


def _w(name: str, priority: int, since: float) -> Waiting:
    group = Group(f"ann:ml/{name}", GroupKind.ANNOTATION, "ml", name, None, False)
    return Waiting(group, 4, Demand(4), priority, since, parsing.pod(builders.pod(f"{name}-0")))


def _held(name: str, priority: int, since: float) -> Held:
    return (_w(name, priority, since), ())


CASES = [
    ("a free slot takes the higher group without displacing anyone", [("low", 0, 1.0)], [("high", 9, 5.0)], 2, []),
    ("a higher group displaces the only hold", [("low", 0, 1.0)], [("high", 9, 5.0)], 1, ["low"]),
    ("an older group of the same priority displaces nothing", [("young", 0, 5.0)], [("old", 0, 1.0)], 1, []),
    ("a lower group displaces nothing", [("high", 9, 5.0)], [("low", 0, 1.0)], 1, []),
    ("the lowest hold goes first", [("mid", 5, 1.0), ("low", 1, 2.0)], [("high", 9, 9.0)], 2, ["low"]),
    ("at one priority the youngest hold goes first", [("a", 1, 1.0), ("b", 1, 2.0)], [("high", 9, 9.0)], 2, ["b"]),
    ("two higher groups displace two holds", [("a", 1, 1.0), ("b", 2, 2.0)], [("x", 9, 9.0), ("y", 8, 9.0)], 2,
     ["a", "b"]),
    ("a higher group lower than every hold displaces nothing", [("a", 5, 1.0)], [("x", 5, 0.0)], 1, []),
    ("no holds, nothing to displace", [], [("x", 9, 0.0)], 1, []),
    ("holds off: nothing displaced", [("a", 1, 1.0)], [], 0, []),
]


@pytest.mark.parametrize(("held", "due", "slots", "gone"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_hold_gives_way_only_to_a_due_group_of_higher_priority(
        held: list[tuple[str, int, float]], due: list[tuple[str, int, float]], slots: int, gone: list[str]) -> None:
    out = displaced([_held(*h) for h in held], [_w(*d) for d in due], slots)
    assert [entry.group.name for entry, _ in out] == gone


YIELDING = Policy(max_holds=1, hold_yield_after=1200.0, hold_yield_until=4 * 3600.0)
NOW = 100_000.0


def _segment(name: str, priority: int, since: float) -> Waiting:
    """The first segment of a job of two segments of 18 pods."""
    job = f"ann:ml/{name}"
    entry = _w(name, priority, since)
    seg = Segment(job, name, 0, 2, 18, 36)
    return replace(entry, group=replace(entry.group, id=segments.segment_id(job, 0), segment=seg))


STARVING = [
    ("a one-domain group past the threshold", [_w("small", 0, NOW - 1500)], (), YIELDING, ["small"]),
    ("at the threshold it is not yet", [_w("small", 0, NOW - 1200)], (), YIELDING, []),
    ("a job in segments is not: holds are for such jobs", [_segment("wide", 0, NOW - 9000)], (), YIELDING, []),
    ("a group whose job holds is not", [_w("held", 0, NOW - 9000)], ("ann:ml/held",), YIELDING, []),
    ("holds that never give way find none", [_w("small", 0, NOW - 9000)], (), replace(YIELDING, hold_yield_after=0),
     []),
    ("in wait order, every one past the threshold", [_w("a", 5, NOW - 1300), _w("b", 0, NOW - 5000),
                                                     _w("c", 0, NOW - 60)], (), YIELDING, ["a", "b"]),
]


@pytest.mark.parametrize(("order", "held", "policy", "names"), [c[1:] for c in STARVING], ids=[c[0] for c in STARVING])
def test_holds_give_way_to_one_domain_groups_that_waited_past_the_threshold(
        order: list[Waiting], held: tuple[str, ...], policy: Policy, names: list[str]) -> None:
    assert [w.group.name for w in starving(order, held, NOW, policy)] == names


GIVES_WAY = [
    ("a held job gives way to a group of its priority", _segment("wide", 0, NOW - 3600), [_w("s", 0, NOW - 1500)],
     "s"),
    ("and to one of higher priority", _segment("wide", 0, NOW - 3600), [_w("s", 9, NOW - 1500)], "s"),
    ("not to one of lower priority", _segment("wide", 5, NOW - 3600), [_w("s", 0, NOW - 1500)], None),
    ("the first of its priority or above, in wait order", _segment("wide", 5, NOW - 3600),
     [_w("low", 0, NOW - 9000), _w("high", 7, NOW - 1500)], "high"),
    ("a job that waited past --hold-yield-until holds on", _segment("wide", 0, NOW - 4 * 3600 - 1),
     [_w("s", 9, NOW - 1500)], None),
    ("at --hold-yield-until it still gives way", _segment("wide", 0, NOW - 4 * 3600), [_w("s", 0, NOW - 1500)], "s"),
    ("a held one-domain job never gives way to itself", _w("big", 0, NOW - 3600), [_w("big", 0, NOW - 3600)], None),
    ("nobody waits: nothing to give way to", _segment("wide", 0, NOW - 3600), [], None),
]


@pytest.mark.parametrize(("entry", "hungry", "to"), [c[1:] for c in GIVES_WAY], ids=[c[0] for c in GIVES_WAY])
def test_a_held_job_gives_way_until_it_has_waited_long_enough_never_to_a_lower_priority(
        entry: Waiting, hungry: list[Waiting], to: str | None) -> None:
    found = gives_way(entry, hungry, NOW, YIELDING)
    assert (found.group.name if found is not None else None) == to
