"""A member without a rank is given a segment (webhook.domain.jobs.segment_assignment): the first segment in
index order with fewer members than pods, counting the segments this process gave and the cache does not
show yet, the pod's own earlier segment kept, and a clear reason when the job has every member already."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.groups import segments
from webhook.domain.jobs import segment_assignment
from webhook.domain.model import Group, Pod, Snapshot
from webhook.domain.reading import parsing

JOB = f"cd:{builders.cd_uid('job')}"


def _cluster(labelled: dict[int, int], size: int = 7, per: int = 3,
             finished: int = 0) -> tuple[Snapshot, Group]:
    """A job of ``size`` pods in segments of ``per``; ``labelled``: segment -> members labelled into it."""
    cd = builders.cd_objects("job", size)
    cd[0]["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: str(per)}
    pods = []
    for index, count in labelled.items():
        for k in range(count):
            pod = builders.pod(f"job-s{index}-{k}", "job", phase="Succeeded" if k < finished else "Pending")
            pod["metadata"]["labels"] = {keys.SEGMENT_LABEL: str(index)}
            pods.append(pod)
    snap = builders.snapshot([*cd, *pods])
    return snap, Group(JOB, "cd", "ml", "job", builders.cd_uid("job"), True, unassigned_per=per)


def _new_pod(name: str = "job-new") -> Pod:
    return parsing.pod(builders.pod(name, "job"))


def _index(found: Group | None) -> int | None:
    return found.segment.index if found is not None and found.segment is not None else None


@pytest.mark.parametrize(("labelled", "given", "expected"), [
    ({}, {}, 0),
    ({0: 2}, {}, 0),
    ({0: 3}, {}, 1),
    ({0: 3, 1: 3}, {}, 2),  # the last segment holds the one pod left of 7
    ({0: 2}, {"other-uid": f"{JOB}#s0"}, 1),  # a segment given a moment ago counts before the cache shows it
    ({0: 3, 1: 1}, {"u1": f"{JOB}#s1", "u2": f"{JOB}#s1"}, 2),
    ({}, {"x": "cd:another-job#s0"}, 0),  # another job's segments count for that job only
], ids=["empty job", "room in the first", "first full", "last segment smaller", "given counts",
        "two given fill a segment", "other job ignored"])
def test_the_first_segment_with_room_is_given(labelled: dict[int, int], given: dict[str, str],
                                              expected: int) -> None:
    snap, group = _cluster(labelled)
    found, why = segment_assignment.choose(group, 7, _new_pod(), snap, given)
    assert _index(found) == expected, why
    assert found is not None and found.id == segments.segment_id(JOB, expected) and found.unassigned_per == 0
    assert f"given segment {expected} of 3" in why


def test_a_pod_keeps_the_segment_it_was_given_while_the_cache_does_not_show_it() -> None:
    snap, group = _cluster({0: 1})
    pod = _new_pod()
    found, why = segment_assignment.choose(group, 7, pod, snap, {pod.uid: f"{JOB}#s2"})
    assert _index(found) == 2 and "given before" in why


def test_finished_members_leave_their_place_to_a_replacement() -> None:
    snap, group = _cluster({0: 3, 1: 3}, finished=1)
    assert _index(segment_assignment.choose(group, 7, _new_pod(), snap, {})[0]) == 0


def test_a_pod_beyond_the_jobs_size_is_told_so() -> None:
    snap, group = _cluster({0: 3, 1: 3, 2: 1})
    found, why = segment_assignment.choose(group, 7, _new_pod(), snap, {})
    assert found is None
    assert why.startswith("every segment of job ml/job (3 of 3 pods, 7 in all) has its members already")


def test_a_member_counted_in_the_cache_and_in_the_record_counts_once() -> None:
    snap, group = _cluster({0: 2})
    member = next(m for m in snap.members[f"{JOB}#s0"])
    given = {member.pod.uid: f"{JOB}#s0"}  # the watch brought the label back; the record still has it
    assert _index(segment_assignment.choose(group, 7, _new_pod(), snap, given)[0]) == 0


def test_a_pod_already_counted_in_a_segment_is_not_counted_against_itself() -> None:
    snap, group = _cluster({0: 3})
    member = next(m for m in snap.members[f"{JOB}#s0"])
    again = replace(member.pod, labels={})  # its filter again, with its label not yet in what the caller holds
    assert _index(segment_assignment.choose(group, 7, again, snap, {})[0]) == 0


def _labelled_pod(name: str, index: int, node: str | None = None, rank: int | None = None) -> dict[str, object]:
    pod = builders.pod(name, "job", node=node)
    pod["metadata"]["labels"] = {keys.SEGMENT_LABEL: str(index)}
    if rank is not None:
        pod["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": str(rank)}
    return pod


def _segment_zero(snap: Snapshot) -> Group:
    job = Group(JOB, "cd", "ml", "job", builders.cd_uid("job"), True)
    found, _, _ = segments.job_segment(job, 7, 3, 0)
    return found


@pytest.mark.parametrize(("others", "me", "given", "expected"), [
    ([("job-a", None, None), ("job-b", None, None)], "job-c", {}, False),  # 2 others: room for the third
    ([("job-a", None, None), ("job-b", None, None), ("job-c", None, None)], "job-d", {}, True),
    ([("job-a", None, None), ("job-b", None, None), ("job-d", None, None)], "job-c", {}, False),  # d is behind c
    ([("job-a", None, None), ("job-x", "n1", None), ("job-y", "n2", None)], "job-c", {}, True),  # bound: ahead
    ([("job-a", None, None), ("job-x", None, 1), ("job-y", None, 2)], "job-c", {}, True),  # ranked: ahead
    ([("job-a", None, None), ("job-b", None, None)], "job-c", {"u9": f"{JOB}#s0"}, True),  # given here: ahead
    ([("job-a", None, None), ("job-b", None, None), ("job-d", None, None)], "job-z", {"me": f"{JOB}#s0"}, False),
], ids=["room left", "named last of four", "named before the fourth", "two bound ahead", "two ranked ahead",
        "one given here ahead", "given here itself"])
def test_a_member_labelled_into_a_full_segment_is_the_excess_only_when_enough_are_ahead_of_it(
        others: list[tuple[str, str | None, int | None]], me: str, given: dict[str, str], expected: bool) -> None:
    cd = builders.cd_objects("job", 7)
    cd[0]["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: "3"}
    pods = [_labelled_pod(name, 0, node, rank) for name, node, rank in others]
    mine = _labelled_pod(me, 0)
    mine["metadata"]["uid"] = "me"
    snap = builders.snapshot([*cd, *pods, mine])
    pod = parsing.pod(mine)
    assert segment_assignment.excess(_segment_zero(snap), pod, snap, given) is expected


def test_a_bound_or_ranked_member_is_never_the_excess() -> None:
    cd = builders.cd_objects("job", 7)
    cd[0]["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: "3"}
    others = [_labelled_pod(f"job-{c}", 0) for c in "abc"]
    bound, ranked = _labelled_pod("job-y", 0, node="n1"), _labelled_pod("job-z", 0, rank=2)
    snap = builders.snapshot([*cd, *others, bound, ranked])
    group = _segment_zero(snap)
    assert not segment_assignment.excess(group, parsing.pod(bound), snap, {})
    assert not segment_assignment.excess(group, parsing.pod(ranked), snap, {})
