"""A group's wait to run whole (webhook.domain.groups.waits): the simulator's size classes, and the wait of a
job once every member is bound, from its earliest member's creation; none while a member waits or when a
member's creation time is unknown."""

from __future__ import annotations

from dataclasses import replace

import pytest

from webhook.domain.groups import segments, waits
from webhook.domain.model import Demand, Group, GroupKind, Member, Pod, Segment

T0 = 1_800_000_000.0


@pytest.mark.parametrize(("pods", "multi_domain", "expected"), [
    (1, False, "1"), (2, False, "2-4"), (4, False, "2-4"), (5, False, "5-8"), (8, False, "5-8"),
    (9, False, "9-16"), (16, False, "9-16"), (17, False, "17+"), (18, False, "17+"), (500, False, "17+"),
    (36, True, "multi-domain"), (4, True, "multi-domain"),
])
def test_a_job_falls_in_the_simulators_size_class_and_a_job_over_several_domains_in_its_own(
        pods: int, multi_domain: bool, expected: str) -> None:
    assert waits.size_class(pods, multi_domain) == expected


def test_the_classes_are_the_simulators_and_the_multi_domain_one() -> None:
    assert waits.CLASSES == ("1", "2-4", "5-8", "9-16", "17+", "multi-domain")


def _pod(name: str, created: float | None, node: str | None = None, terminated: bool = False) -> Pod:
    return Pod(namespace="ml", name=name, uid=f"uid-{name}", node_name=node, terminated=terminated, gpu_limit=4,
               claims=(), annotations={}, labels={}, created_at=created)


def _members(*pods: Pod) -> tuple[Member, ...]:
    return tuple(Member(p, Demand(4)) for p in pods)


GROUP = Group(id="cd:uid-g", kind=GroupKind.COMPUTE_DOMAIN, namespace="ml", name="g", compute_domain="uid-g",
              one_pod_per_node=True)


@pytest.mark.parametrize(("case", "pods", "expected"), [
    ("every member bound", [("p0", T0, "n0"), ("p1", T0 + 30, "n1")], T0 + 100 - T0),
    ("a member still waits", [("p0", T0, "n0"), ("p1", T0 + 30, None)], None),
    ("one member of two known", [("p0", T0, "n0")], None),
    ("a member's creation unknown", [("p0", None, "n0"), ("p1", T0 + 30, "n1")], None),
    ("the earliest member created last in the list", [("p0", T0 + 50, "n0"), ("p1", T0 + 10, "n1")], 90.0),
])
def test_a_group_has_a_wait_only_once_every_member_is_bound_and_every_creation_is_known(
        case: str, pods: list[tuple[str, float | None, str | None]], expected: float | None) -> None:
    members = {GROUP.id: _members(*(_pod(n, c, node) for n, c, node in pods))}
    found = waits.whole(GROUP, 2, members, T0 + 100)
    assert (found.seconds if found else None) == expected, case
    if found is not None:
        assert found.size_class == "2-4" and found.key[0] == GROUP.id


def test_a_finished_member_neither_counts_as_bound_nor_for_the_earliest_creation() -> None:
    members = {GROUP.id: _members(_pod("p0", T0 - 500, "n0", terminated=True), _pod("p1", T0, "n1"),
                                  _pod("p2", T0 + 10, "n2"))}
    found = waits.whole(GROUP, 2, members, T0 + 60)
    assert found is not None and (found.seconds, found.key) == (60.0, (GROUP.id, T0))
    assert waits.whole(GROUP, 3, members, T0 + 60) is None


def test_a_job_in_segments_waits_until_its_last_segment_runs_whole_and_is_multi_domain() -> None:
    seg = Segment(job_id=GROUP.id, job_name="g", index=0, count=2, size=2, job_size=3)
    first = replace(GROUP, id=segments.segment_id(GROUP.id, 0), segment=seg)
    second = segments.sibling(first, seg, 1)
    members = {first.id: _members(_pod("p0", T0, "a0"), _pod("p1", T0 + 5, "a1")),
               second.id: _members(_pod("p2", T0 + 9, None))}
    assert waits.whole(first, 2, members, T0 + 70) is None, "segment 1 still waits"
    members[second.id] = _members(_pod("p2", T0 + 9, "b0"))
    found = waits.whole(second, 1, members, T0 + 70)
    assert found is not None and (found.size_class, found.seconds, found.key) == ("multi-domain", 70.0,
                                                                                  (GROUP.id, T0))
    assert waits.whole(first, 2, members, T0 + 71) == replace(found, seconds=71.0), "either segment: one job"


def test_a_pod_outside_any_group_waits_from_its_own_creation_and_not_without_one() -> None:
    found = waits.single(_pod("p", T0, "n0"), T0 + 12)
    assert found is not None and (found.size_class, found.seconds) == ("1", 12.0)
    assert waits.single(_pod("p", None, "n0"), T0 + 12) is None
