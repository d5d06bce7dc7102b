"""Groups from Kubernetes' gang scheduling and the workload controllers (docs/GROUPS.md), resolved from
pods and objects shaped as each controller release makes them (``tests.controller_objects``): identity,
size, who is a member, the order between the sources, and what a hostile count becomes."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from tests import controller_objects as co
from webhook.domain import keys
from webhook.domain.groups import grouping
from webhook.domain.model import GroupKind, GroupResolution
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.domain.reading.workload_refs import lws_group_key

POLICY = Policy()
GPU = co.pod_spec(claim_template=co.GPU_TEMPLATE)  # a DRA GPU claim, as GB200 pods ask for GPUs
PLUGIN_GPU = co.pod_spec(gpus=4)
NO_GPU = co.pod_spec()
Obj = dict[str, Any]


def _resolve(pod: Obj, objects: list[Obj]) -> GroupResolution:
    snap = builders.snapshot([co.gpu_claim_template(), *objects])
    return grouping.resolve(parsing.pod(pod), snap.catalog, POLICY)


def _pods(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] == "Pod"]


def _group_id(pod: Obj, objects: list[Obj]) -> str | None:
    group = _resolve(pod, objects).group
    return group.id if group else None


def _named(objects: list[Obj], prefix: str) -> Obj:
    return next(o for o in _pods(objects) if o["metadata"]["name"].startswith(prefix))


def _jobset_case(exclusive: str | None = None) -> tuple[Obj, list[Obj]]:
    js = co.jobset("train", [("driver", 1, 1, NO_GPU), ("workers", 2, 4, GPU)], exclusive=exclusive)
    return js, co.jobset_children(js)


def _case(name: str) -> tuple[Obj, list[Obj]]:
    """(a member pod, every object the cluster holds) for each controller, as it makes them."""
    if name == "jobset":
        js, children = _jobset_case()
        return _named(children, "train-workers-1-2"), [js, *children]
    if name == "jobset-exclusive":
        js, children = _jobset_case("nvidia.com/gpu.clique")
        return _named(children, "train-workers-1-2"), [js, *children]
    if name == "lws-worker":
        return co.lws_pods("vllm", 1, 4, GPU)[2], []
    if name == "lws-leader-before-lws-webhook":
        return co.lws_pods("vllm", 1, 4, GPU, labelled=False)[0], []
    if name == "pytorchjob":
        job = co.pytorchjob("pt", 1, 3, PLUGIN_GPU)
        return _named(co.pytorchjob_pods(job), "pt-worker-2"), [job]
    if name == "mpijob":
        job = co.mpijob("nvb", 2, GPU, NO_GPU)
        return _named(co.mpijob_pods(job), "nvb-worker-1"), [job]
    if name == "kueue":
        return co.kueue_pods("grp", 3, GPU)[1], []
    if name == "podgroup-1.37":
        objects = co.gang_job("gang", 6, GPU, min_count=4)
        return _pods(objects)[5], objects
    if name == "podgroup-1.36":
        pg = co.pod_group_object("pg", {"gang": {"minCount": 5}}, version="v1alpha2")
        return co.pod_in_group("p", "pg", GPU), [pg]
    if name == "workload-1.35":
        wl = co.workload_1_35("wl", [("workers", 8), ("driver", None)])
        return co.pod_in_workload("p", "wl", "workers", GPU, replica_key="r1"), [wl]
    raise AssertionError(name)


LWS_KEY = lws_group_key("ml", "vllm-1")


@pytest.mark.parametrize(("case", "group_id", "kind", "name", "size", "source"), [
    ("jobset", "jobset:ml/train", GroupKind.JOBSET, "train", 8, "jobSet.replicas"),
    ("jobset-exclusive", "jobset:ml/train/workers/1", GroupKind.JOBSET, "train-workers-1", 4, "jobSet.parallelism"),
    ("lws-worker", f"lws:ml/{LWS_KEY}", GroupKind.LEADER_WORKER_SET, "vllm-1", 4, "lws.size"),
    ("lws-leader-before-lws-webhook", f"lws:ml/{LWS_KEY}", GroupKind.LEADER_WORKER_SET, "vllm-1", 4, "lws.size"),
    ("pytorchjob", "kubeflow:ml/pytorchjob.pt", GroupKind.TRAINING_JOB, "pt", 4, "trainingJob.replicas"),
    ("mpijob", "kubeflow:ml/mpijob.nvb", GroupKind.TRAINING_JOB, "nvb", 2, "trainingJob.replicas"),
    ("kueue", "kueue:ml/grp", GroupKind.KUEUE, "grp", 3, "kueue.totalCount"),
    ("podgroup-1.36", "podgroup:ml/pg", GroupKind.POD_GROUP, "pg", 5, "podGroup.minCount"),
    ("workload-1.35", "workload:ml/wl/workers/r1", GroupKind.POD_GROUP, "wl/workers", 8, "workload.minCount"),
])
def test_each_controller_makes_a_group_of_its_own_size(case: str, group_id: str, kind: GroupKind, name: str,
                                                       size: int, source: str) -> None:
    pod, objects = _case(case)
    res = _resolve(pod, objects)
    assert res.group is not None, case
    assert (res.group.id, res.group.kind, res.group.name, res.size, res.size_source) == \
        (group_id, kind, name, size, source), case
    assert (res.problems, res.warnings, res.pending) == ((), (), False), case
    assert res.group.compute_domain is None and not res.group.one_pod_per_node


def test_the_1_37_job_controllers_gang_is_sized_by_min_count_not_parallelism() -> None:
    pod, objects = _case("podgroup-1.37")
    res = _resolve(pod, objects)
    pod_group = pod["spec"]["schedulingGroup"]["podGroupName"]
    assert res.group is not None and res.group.id == f"podgroup:ml/{pod_group}"
    assert (res.size, res.size_source) == (4, "podGroup.minCount")


def test_every_pod_of_a_controller_group_resolves_to_the_same_group() -> None:
    js, children = _jobset_case()
    lws = co.lws_pods("vllm", 0, 3, GPU) + co.lws_pods("vllm", 0, 3, GPU, labelled=False)
    ids = {_group_id(p, [js]) for p in _pods(children) if "workers" in p["metadata"]["name"]}
    assert ids == {"jobset:ml/train"}
    assert len({_group_id(p, []) for p in lws}) == 1


@pytest.mark.parametrize(("case", "pod"), [
    ("a JobSet's driver without GPUs", lambda: _named(_jobset_case()[1], "train-driver")),
    ("an MPI launcher without GPUs", lambda: _named(co.mpijob_pods(co.mpijob("nvb", 2, GPU, NO_GPU)), "nvb-launcher")),
    ("a Kueue pod asking for no GPU", lambda: co.kueue_pods("grp", 2, NO_GPU)[0]),
])
def test_pods_that_ask_for_no_gpu_are_not_members(case: str, pod: Any) -> None:
    objects = [*_jobset_case()[1], co.mpijob("nvb", 2, GPU, NO_GPU)]
    assert _resolve(pod(), objects).group is None, case


def test_a_launcher_that_runs_as_a_worker_with_gpus_is_a_member_and_counted() -> None:
    job = co.mpijob("nvb", 2, GPU, GPU)
    res = _resolve(_named(co.mpijob_pods(job), "nvb-launcher"), [job])
    assert res.group is not None and (res.group.id, res.size) == ("kubeflow:ml/mpijob.nvb", 3)


def test_a_basic_pod_group_is_no_group() -> None:
    pg = co.pod_group_object("pg", {"basic": {}})
    assert _resolve(co.pod_in_group("p", "pg", GPU), [pg]).group is None


def test_a_pod_group_not_cached_yet_makes_the_resolution_wait() -> None:
    res = _resolve(co.pod_in_group("p", "pg", GPU), [])
    assert (res.group, res.pending) == (None, True)
    assert "PodGroup 'pg'" in res.warnings[0] and "not known yet" in res.warnings[0]


def test_a_workload_pod_group_of_the_basic_policy_or_unknown_is_no_group_or_waits() -> None:
    wl = co.workload_1_35("wl", [("driver", None)])
    assert _resolve(co.pod_in_workload("p", "wl", "driver", GPU), [wl]).group is None
    res = _resolve(co.pod_in_workload("p", "wl", "missing", GPU), [wl])
    assert res.pending and "Workload 'wl'" in res.warnings[0]


def test_a_controller_object_not_cached_yet_leaves_the_size_unknown_and_says_so() -> None:
    children = _jobset_case()[1]
    res = _resolve(_named(children, "train-workers-0"), [])
    assert res.group is not None and (res.group.id, res.size, res.size_source) == ("jobset:ml/train", None, "unknown")
    assert "JobSet 'train' is not known yet" in res.warnings[0] and not res.pending


def test_an_exclusive_jobsets_job_falls_back_to_the_child_jobs_parallelism() -> None:
    children = _jobset_case("nvidia.com/gpu.clique")[1]
    res = _resolve(_named(children, "train-workers-1"), [c for c in children if c["kind"] == "Job"])
    assert res.group is not None and (res.size, res.size_source) == (4, "job.parallelism")


def test_the_group_size_annotation_wins_over_the_controllers_count() -> None:
    pod = co.kueue_pods("grp", 3, GPU)[0]
    pod["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] = "2"
    res = _resolve(pod, [])
    assert (res.size, res.size_source, res.problems) == (2, "annotation", ())


def test_a_pod_whose_claim_is_not_cached_yet_waits_for_it_before_any_controller_group() -> None:
    pod = co.kueue_pods("grp", 3, co.pod_spec(claim_template="created-later"))[0]
    res = _resolve(pod, [])
    assert res.group is None and "created-later" in res.warnings[0]


# -- the order between the sources --------------------------------------------------------------------------

def _mpijob_in_cd(num_nodes: int, workers: int = 2) -> tuple[Obj, list[Obj]]:
    """NVIDIA's nvbandwidth example: an MPIJob whose workers join a ComputeDomain, the launcher does not."""
    job = co.mpijob("nvb", workers, co.pod_spec(cd="nvb-cd"), NO_GPU)
    return _named(co.mpijob_pods(job), "nvb-worker-0"), [job, *builders.cd_objects("nvb-cd", num_nodes)]


def test_a_compute_domain_of_unknown_size_takes_the_controllers_count_of_its_pods() -> None:
    pod, objects = _mpijob_in_cd(0)
    res = _resolve(pod, objects)
    assert res.group is not None and res.group.kind is GroupKind.COMPUTE_DOMAIN
    assert (res.size, res.size_source, res.warnings) == (2, "trainingJob.replicas", ())


def test_a_compute_domain_counts_only_the_controllers_pods_that_join_it() -> None:
    spec = co.pod_spec(cd="a-cd")
    js = co.jobset("two", [("a", 1, 3, spec), ("b", 1, 5, co.pod_spec(cd="b-cd")), ("driver", 1, 1, NO_GPU)])
    objects = [js, *builders.cd_objects("a-cd", 0), *builders.cd_objects("b-cd", 0)]
    res = _resolve(_named(co.jobset_children(js), "two-a-0"), objects)
    assert res.group is not None and res.group.name == "a-cd"
    assert (res.size, res.size_source) == (3, "jobSet.replicas")


def test_numnodes_wins_over_the_controller_and_a_different_count_is_a_warning_naming_both() -> None:
    pod, objects = _mpijob_in_cd(4)
    res = _resolve(pod, objects)
    assert (res.size, res.size_source) == (4, "computeDomain.numNodes")
    (warning,) = res.warnings
    assert "ComputeDomain 'nvb-cd' (4 pods)" in warning and "MPIJob 'nvb' (2 pods)" in warning


def test_numnodes_that_agrees_with_the_controller_gives_no_warning() -> None:
    pod, objects = _mpijob_in_cd(2)
    assert _resolve(pod, objects).warnings == ()


def test_the_group_annotation_wins_over_a_controller_and_agrees_by_name() -> None:
    js, children = _jobset_case()
    pod = _named(children, "train-workers-0")
    pod["metadata"]["annotations"][keys.GROUP_ANNOTATION] = "train"
    res = _resolve(pod, [js])
    assert res.group is not None and (res.group.id, res.size, res.size_source) == ("ann:ml/train", 8, "jobSet.replicas")
    assert res.warnings == ()
    pod["metadata"]["annotations"][keys.GROUP_ANNOTATION] = "experiment-7"
    pod["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] = "16"
    (warning,) = _resolve(pod, [js]).warnings
    assert "'experiment-7'" in warning and "JobSet 'train' (8 pods)" in warning


def test_a_gang_pod_group_wins_over_the_jobset_and_kueue_and_warns_about_both() -> None:
    js, children = _jobset_case()
    pod = _named(children, "train-workers-0")
    pod["spec"]["schedulingGroup"] = {"podGroupName": "pg"}
    pod["metadata"]["labels"] |= {keys.KUEUE_GROUP_NAME_LABEL: "q"}
    pod["metadata"]["annotations"] |= {keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION: "4"}
    res = _resolve(pod, [js, co.pod_group_object("pg", {"gang": {"minCount": 4}})])
    assert res.group is not None and res.group.id == "podgroup:ml/pg"
    assert len(res.warnings) == 1 and "JobSet 'train' (8 pods)" in res.warnings[0]  # Kueue agrees: 4 pods


def test_a_leaderworkerset_wins_over_the_kueue_group_its_integration_adds_later() -> None:
    pod = co.lws_pods("vllm", 0, 4, GPU)[1]
    admitted = _resolve(pod, [])
    pod["metadata"]["labels"] |= {keys.KUEUE_GROUP_NAME_LABEL: "vllm-0-3f2a1", "kueue.x-k8s.io/managed": "true"}
    pod["metadata"]["annotations"] |= {keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION: "4"}
    later = _resolve(pod, [])
    assert admitted.group == later.group and later.warnings == ()


def test_without_any_source_a_gpu_pod_is_in_no_group() -> None:
    assert _resolve(builders.pod("p", gpus=4), []).group is None


# -- hostile counts: a problem of the group, never an exception ----------------------------------------------

@pytest.mark.parametrize("text", ["abc", "-1", "0", "1000000000000", "²", "4.0", " ", "9" * 60])
def test_an_unusable_kueue_count_is_a_problem_naming_the_annotation(text: str) -> None:
    res = _resolve(co.kueue_pods("grp", 1, GPU, total_text=text)[0], [])
    assert res.group is not None and res.size is None
    (problem,) = res.problems
    assert keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION in problem and "from 1 to" in problem


def test_an_unusable_lws_size_is_a_problem() -> None:
    pod = co.lws_pods("vllm", 0, 2, GPU)[1]
    pod["metadata"]["annotations"][keys.LWS_SIZE_ANNOTATION] = "100001"
    (problem,) = _resolve(pod, []).problems
    assert keys.LWS_SIZE_ANNOTATION in problem


@pytest.mark.parametrize(("replicas", "parallelism", "said"), [
    ("3", 1, "not a whole number"), (-1, 1, "from 0 to"), (10**12, 1, "from 0 to"), (True, 1, "not a whole number"),
    (2, 2**31, "from 0 to"), (1000, 1000, "1000000 pods"), (3.5, 1, "not a whole number"),
])
def test_an_unusable_jobset_count_is_a_problem_naming_it(replicas: Any, parallelism: Any, said: str) -> None:
    js = co.jobset("train", [("workers", 1, 1, GPU)])
    pod = _named(co.jobset_children(js), "train-workers-0")
    rjob = js["spec"]["replicatedJobs"][0]
    rjob["replicas"], rjob["template"]["spec"]["parallelism"] = replicas, parallelism
    rjob["template"]["spec"].pop("completions")
    res = _resolve(pod, [js])
    assert res.group is not None and res.size is None
    (problem,) = res.problems
    assert "JobSet 'train'" in problem and said in problem


@pytest.mark.parametrize("min_count", [0, -5, "4", 2**40, None])
def test_an_unusable_gang_min_count_is_a_problem(min_count: Any) -> None:
    pg = co.pod_group_object("pg", {"gang": {} if min_count is None else {"minCount": min_count}})
    res = _resolve(co.pod_in_group("p", "pg", GPU), [pg])
    assert res.group is not None and res.size is None and "minCount" in res.problems[0]


def test_overlong_foreign_labels_on_an_unvalidated_pod_name_no_group() -> None:
    pod = co.kueue_pods("grp", 2, GPU)[0]
    pod["metadata"]["labels"][keys.KUEUE_GROUP_NAME_LABEL] = "g" * 100_000
    parsed = parsing.pod(pod, validated=False)
    assert grouping.resolve(parsed, builders.snapshot([co.gpu_claim_template()]).catalog, POLICY).group is None
