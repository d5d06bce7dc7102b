"""Jobs larger than one NVLink domain (webhook.domain.groups.segments, segment_plan): a member's segment from its
rank, and the plan that puts every segment wholly in one domain, in as few domains as possible, under one
network block, before anything is reserved."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders, controller_objects
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.domain.groups import grouping, segments
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import resolution, segment_plan
from webhook.domain.model import Demand, Reservation, Snapshot
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing

BLOCK = "network.example.com/block"
SPINE = "network.example.com/spine"


def _cd(name: str, size: int, per: str | None) -> list[dict[str, Any]]:
    objs = builders.cd_objects(name, size)
    if per is not None:
        objs[0]["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: per}
    return objs


def _pod(name: str, index: int | None, job: str = "job", **annotations: str) -> dict[str, Any]:
    extra = dict(annotations)
    if index is not None:
        extra[segments.COMPLETION_INDEX] = str(index)
    return builders.pod(name, job, annotations=extra)


def _rack(prefix: str, count: int, **labels: str) -> list[dict[str, Any]]:
    nodes = builders.rack(prefix, f"{prefix}{prefix}{prefix}{prefix}-1111.7", count)
    for n in nodes:
        n["metadata"]["labels"].update(labels)
    return nodes


@pytest.mark.parametrize(("raw", "expected"), [("3", 3), (" 18 ", 18), ("0", None), ("-2", None), ("x", None),
                                               ("1" * 7, None), ("²", None)])
def test_the_segment_size_annotation_is_a_positive_whole_number(raw: str, expected: int | None) -> None:
    assert segments.parse(raw) == expected


@pytest.mark.parametrize(("size", "per", "index", "segment", "pods"), [
    (6, "3", 0, 0, 3), (6, "3", 5, 1, 3), (7, "3", 6, 2, 1), (7, "3", 3, 1, 3),
])
def test_a_member_belongs_to_the_segment_of_its_rank(size: int, per: str, index: int, segment: int,
                                                     pods: int) -> None:
    snap = builders.snapshot(_cd("job", size, per))
    resolution = grouping.resolve(parsing.pod(_pod("job-x", index)), snap.catalog, Policy())
    group = resolution.group
    assert not resolution.problems and group is not None and group.segment is not None
    assert (group.segment.index, resolution.size, group.segment.count) == (segment, pods, -(-size // int(per)))
    assert group.id == f"cd:{builders.cd_uid('job')}#s{segment}" and group.name == f"job#s{segment}"
    assert segments.job_of(group.id) == f"cd:{builders.cd_uid('job')}"


@pytest.mark.parametrize(("size", "per", "index", "label", "problem"), [
    (6, "3", 9, None, "rank 9 is beyond the job's 6 pods"),
    (6, "lots", 0, None, "imex-webhook.io/segment-size='lots' is not a segment size"),
    (6, "3", None, "2", "label imex-webhook.io/segment='2' names no segment of the job's 2 (0 to 1)"),
    (6, "3", None, "-1", "label imex-webhook.io/segment='-1' names no segment"),
    (6, "3", None, "9" * 60, "names no segment"),
], ids=["rank beyond the job", "unusable annotation", "label beyond the job", "negative label", "huge label"])
def test_a_pod_that_cannot_be_given_its_segment_is_refused_with_the_reason(size: int, per: str, index: int | None,
                                                                           label: str | None, problem: str) -> None:
    snap = builders.snapshot(_cd("job", size, per))
    pod = _pod("job-x", index)
    if label is not None:
        pod["metadata"]["labels"] = {keys.SEGMENT_LABEL: label}
    resolution = grouping.resolve(parsing.pod(pod), snap.catalog, Policy())
    assert any(problem in p for p in resolution.problems), resolution.problems


def test_a_member_without_a_rank_is_a_member_of_the_whole_job_until_it_is_given_a_segment() -> None:
    snap = builders.snapshot(_cd("job", 6, "3"))
    resolution = grouping.resolve(parsing.pod(_pod("job-x", None)), snap.catalog, Policy())
    group = resolution.group
    assert not resolution.problems and group is not None
    assert (group.id, group.segment, group.unassigned_per, resolution.size) == (
        f"cd:{builders.cd_uid('job')}", None, 3, 6)


def test_a_member_without_a_rank_belongs_to_the_segment_its_label_names() -> None:
    snap = builders.snapshot(_cd("job", 7, "3"))
    pod = _pod("job-x", None)
    pod["metadata"]["labels"] = {keys.SEGMENT_LABEL: "2"}
    resolution = grouping.resolve(parsing.pod(pod), snap.catalog, Policy())
    group = resolution.group
    assert not resolution.problems and group is not None and group.segment is not None
    assert (group.segment.index, resolution.size, group.unassigned_per) == (2, 1, 0)


def test_a_rank_outweighs_a_segment_label() -> None:
    snap = builders.snapshot(_cd("job", 6, "3"))
    pod = _pod("job-x", 4)
    pod["metadata"]["labels"] = {keys.SEGMENT_LABEL: "0"}
    group = grouping.resolve(parsing.pod(pod), snap.catalog, Policy()).group
    assert group is not None and group.segment is not None and group.segment.index == 1


def test_a_job_that_fits_one_segment_is_one_group_as_before() -> None:
    snap = builders.snapshot(_cd("job", 4, "18"))
    resolution = grouping.resolve(parsing.pod(_pod("job-0", 0)), snap.catalog, Policy())
    assert resolution.group is not None and resolution.group.segment is None and resolution.size == 4


def _plan(nodes: list[dict[str, Any]], size: int, per: int, policy: Policy | None = None,
          reservations: dict[str, Reservation] | None = None, index: int = 0) -> segment_plan.Plan:
    policy = policy or Policy()
    snap = builders.snapshot([*nodes, *_cd("job", size, str(per))], policy=policy)
    resolution = grouping.resolve(parsing.pod(_pod("job-x", index * per)), snap.catalog, policy)
    assert resolution.group is not None
    return segment_plan.plan(resolution.group, Demand(4), snap, reservations or {}, None, policy)


def _racks(plan: segment_plan.Plan) -> list[str]:
    assert plan.domains is not None, plan.reason
    return [plan.domains[i][:1] for i in sorted(plan.domains)]


@pytest.mark.parametrize(("racks", "size", "per", "expected"), [
    ({"a": 4, "b": 4, "c": 2}, 6, 3, ["a", "b"]),  # one segment per rack; the 2-node rack takes none
    ({"a": 4, "b": 2}, 6, 2, ["a", "a", "b"]),  # a rack takes two segments
    ({"a": 6, "b": 2, "c": 2, "d": 2}, 6, 2, ["a", "a", "a"]),  # fewest domains: one
    ({"a": 5, "b": 3, "c": 8}, 14, 4, ["c", "c", "a", "b"]),  # most room first, the rest best fit
    ({"a": 3, "b": 3, "c": 3}, 7, 3, ["a", "b", "c"]),  # 3 + 3 + the last pod alone in a segment of 1
])
def test_segments_go_whole_into_as_few_domains_as_possible(racks: dict[str, int], size: int, per: int,
                                                           expected: list[str]) -> None:
    nodes = [n for prefix, count in racks.items() for n in _rack(prefix, count)]
    assert _racks(_plan(nodes, size, per)) == expected


def test_a_job_too_large_for_every_domain_together_gets_no_plan_and_the_reason_says_so() -> None:
    plan = _plan([*_rack("a", 4), *_rack("b", 2)], 9, 3)
    assert plan.domains is None and plan.resolvable_later
    assert "3 segments still to place need 9 pods" in plan.reason
    assert "largest free room in one domain: 4" in plan.reason


def test_all_segments_stay_under_one_block_of_the_lowest_level_that_fits() -> None:
    policy = Policy(block_labels=(BLOCK, SPINE))
    nodes = [*_rack("a", 3, **{BLOCK: "x", SPINE: "s"}), *_rack("b", 3, **{BLOCK: "y", SPINE: "s"}),
             *_rack("c", 2, **{BLOCK: "y", SPINE: "s"}), *_rack("d", 4, **{BLOCK: "z", SPINE: "t"})]
    # 2 segments of 3: block y (b + c) cannot take two; x alone cannot; the spine s can (a + b).
    plan = _plan(nodes, 6, 3, policy)
    assert _racks(plan) == ["a", "b"] and f"under {SPINE}=s" in plan.reason
    # 2 segments of 2: block z (d, 4 nodes) holds both in one domain.
    assert _racks(_plan(nodes, 4, 2, policy)) == ["d", "d"]


def test_a_job_no_block_can_hold_is_refused_naming_the_levels() -> None:
    policy = Policy(block_labels=(BLOCK,))
    nodes = [*_rack("a", 3, **{BLOCK: "x"}), *_rack("b", 3, **{BLOCK: "y"})]
    plan = _plan(nodes, 6, 3, policy)
    assert plan.domains is None and f"under any one value of {BLOCK}" in plan.reason


def test_segments_already_reserved_keep_their_domains_and_their_block() -> None:
    policy = Policy(block_labels=(BLOCK,))
    nodes = [*_rack("a", 6, **{BLOCK: "x"}), *_rack("b", 3, **{BLOCK: "y"}), *_rack("c", 3, **{BLOCK: "y"})]
    job = f"cd:{builders.cd_uid('job')}"
    reserved = {f"{job}#s0": Reservation(f"{job}#s0", "job#s0", "ml", "bbbb-1111.7", 3, 4, True, 0.0)}
    plan = _plan(nodes, 6, 3, policy, reserved, index=1)
    assert plan.domains == {0: "bbbb-1111.7", 1: "cccc-1111.7"}  # block y, though rack a would take both


def test_healthy_domains_are_planned_first() -> None:
    nodes = [*_rack("a", 6), *_rack("b", 3), *_rack("c", 3)]
    nodes[0]["metadata"]["labels"][keys.HEALTH_LABEL] = "degraded"
    assert _racks(_plan(nodes, 6, 3)) == ["b", "c"]
    assert _racks(_plan(nodes, 6, 3, Policy(fabric_health="allow"))) == ["a", "a"]


def _context(snap: Snapshot, index: int, policy: Policy | None = None) -> resolution.Context:
    ctx = resolution.resolve(parsing.pod(_pod(f"job-{index}", index)), DecisionInputs(snap, policy or Policy(), 100.0))
    assert ctx is not None
    return ctx


def test_the_first_filter_of_a_segment_proposes_every_segment_of_the_plan() -> None:
    # The job's pods exist, as its controller creates them together: the plan holds no room for absent ones.
    pods = [_pod(f"job-{i}", i) for i in range(6)]
    snap = builders.snapshot([*_rack("a", 4), *_rack("b", 4), *_cd("job", 6, "3"), *pods])
    ctx = _context(snap, 4)  # rank 4: segment 1
    assert ctx.proposal is not None and ctx.group is not None and ctx.group.segment is not None
    assert ctx.group.segment.index == 1 and ctx.proposal.size == 3
    (sibling_group, sibling), = ctx.siblings
    assert sibling_group.segment is not None and sibling_group.segment.index == 0
    assert {ctx.proposal.domain, sibling.domain} == {"aaaa-1111.7", "bbbb-1111.7"}


def test_a_node_running_a_member_of_another_segment_takes_no_second_one() -> None:
    group = grouping.resolve(parsing.pod(_pod("job-0", 0)), builders.snapshot(_cd("job", 6, "3")).catalog,
                             Policy()).group
    assert group is not None
    assert segments.runs_member(group, frozenset({segments.segment_id(segments.job_of(group.id), 1)}))
    assert not segments.runs_member(group, frozenset({"cd:other#s1"}))


@pytest.mark.parametrize(("size", "per", "rank", "problem"), [
    (100_000, "1", "0", "cuts 100000 pods into 100000 segments; at most 20000 are planned"),
    (6, "3", "1e3", "job-completion-index='1e3' is not an index"),
    (6, "3", "9" * 40, "is not an index"),
], ids=["too many segments", "a rank that is not an index", "a huge rank"])
def test_hostile_segment_requests_get_a_clear_problem(size: int, per: str, rank: str, problem: str) -> None:
    snap = builders.snapshot(_cd("job", size, per))
    pod = builders.pod("job-x", "job", annotations={segments.COMPLETION_INDEX: rank})
    resolution = grouping.resolve(parsing.pod(pod), snap.catalog, Policy())
    assert any(problem in p for p in resolution.problems), resolution.problems


def test_admission_labels_each_segment_apart_writes_the_jobs_size_and_admits_a_pod_without_rank_to_the_job() -> None:
    snap = builders.snapshot(_cd("job", 6, "3"))
    job = f"cd:{builders.cd_uid('job')}"

    def admit(index: int | None) -> mutating.MutationResult:
        return mutating.mutate(_pod("job-x", index), "ml", snap.catalog, snap.nodes, Policy())

    first, fourth = admit(0), admit(3)
    added = [{op["path"]: op.get("value") for op in r.patch} for r in (first, fourth)]
    assert [r.group_id for r in (first, fourth)] == [f"{job}#s0", f"{job}#s1"]
    assert all(a["/metadata/annotations/imex-webhook.io~1group-size"] == "6" for a in added)
    terms = [str(a) for a in added]
    assert mutating.group_label_value(f"{job}#s0") in terms[0] and mutating.group_label_value(f"{job}#s1") in terms[1]
    unranked = admit(None)
    assert unranked.allowed and unranked.group_id == job
    ops = {op["path"]: op.get("value") for op in unranked.patch}
    assert ops["/metadata/labels/imex-webhook.io~1group"] == mutating.group_label_value(job)
    assert "podAffinity" not in str(ops), "the extender keeps it in its segment, not a pod affinity"
    assert any("gives the pod a segment of job job when it is scheduled" in w for w in unranked.warnings)


def _ranks(objects: list[dict[str, Any]]) -> list[int | None]:
    snap = builders.snapshot(objects)
    pods = [o for o in objects if o["kind"] == "Pod"]
    return [segments.rank(parsing.pod(p), snap.catalog)[0] for p in pods]


def test_a_jobset_members_rank_counts_the_replicated_jobs_before_its_own() -> None:
    spec = controller_objects.pod_spec(gpus=4)
    js = controller_objects.jobset("js", [("driver", 1, 1, spec), ("workers", 2, 3, spec)])
    assert _ranks([js, *controller_objects.jobset_children(js)]) == list(range(7))


def test_a_training_jobs_master_takes_rank_zero_and_the_workers_follow() -> None:
    job = controller_objects.pytorchjob("pt", 1, 4, controller_objects.pod_spec(gpus=4))
    assert _ranks([job, *controller_objects.pytorchjob_pods(job)]) == list(range(5))


def test_a_leaderworkerset_members_rank_is_its_worker_index() -> None:
    assert _ranks(controller_objects.lws_pods("lws", 0, 4, controller_objects.pod_spec(gpus=4))) == [0, 1, 2, 3]


def test_a_jobset_not_cached_yet_gives_no_rank_and_says_why() -> None:
    spec = controller_objects.pod_spec(gpus=4)
    js = controller_objects.jobset("js", [("workers", 1, 2, spec)])
    pod = next(o for o in controller_objects.jobset_children(js) if o["kind"] == "Pod")
    rank, problem = segments.rank(parsing.pod(pod), builders.snapshot([]).catalog)
    assert rank is None and problem is not None and "JobSet" in problem and "not known yet" in problem
