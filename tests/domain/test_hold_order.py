"""Which holds give way (``webhook.domain.jobs.hold_order.displaced``): only to due groups of strictly higher
priority that the free slots leave out, lowest priority (then youngest) first; never for age alone."""

from __future__ import annotations

import pytest

from tests import builders
from webhook.domain.jobs.hold_order import Held, displaced
from webhook.domain.jobs.holds import Waiting
from webhook.domain.model import Demand, Group, GroupKind
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
