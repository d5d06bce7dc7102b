"""Parsing the gang API's and the controllers' objects (docs/GROUPS.md): the shapes each release writes,
other API groups' objects of the same kind ignored, wrong types a ``WireError`` naming the field, unusable
counts kept as the object's problem, and deep or huge input handled without an exception of another kind."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests import controller_objects as co
from webhook.domain.model import GangGroup
from webhook.domain.reading import parsing, workload_parsing
from webhook.errors import WireError

GPU = co.pod_spec(claim_template=co.GPU_TEMPLATE)


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(levels):
        node = {"x": node}
    return node


def test_a_jobset_counts_child_jobs_and_active_pods_per_replicated_job() -> None:
    js = co.jobset("train", [("driver", 1, 1, co.pod_spec()), ("workers", 3, 4, GPU)])
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["completions"] = 2  # fewer completions than parallelism
    parsed = workload_parsing.jobset(js)
    assert parsed is not None and parsed.problem is None
    assert [(p.name, p.replicas, p.pods_each, p.template.gpus, len(p.template.claims)) for p in parsed.parts] == \
        [("driver", 1, 1, 0, 0), ("workers", 3, 2, 0, 1)]


def test_defaults_apply_when_counts_are_left_out() -> None:
    js = co.jobset("train", [("workers", 1, 1, GPU)])
    rjob = js["spec"]["replicatedJobs"][0]
    del rjob["replicas"], rjob["template"]["spec"]["parallelism"], rjob["template"]["spec"]["completions"]
    (part,) = workload_parsing.jobset(js).parts  # type: ignore[union-attr]
    assert (part.replicas, part.pods_each) == (1, 1)
    mpi = co.mpijob("m", 2, GPU, co.pod_spec())
    del mpi["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"]
    parts = {p.name: p.replicas for p in workload_parsing.training_job(mpi, "MPIJob").parts}  # type: ignore[union-attr]
    assert parts == {"Launcher": 1, "Worker": 0}  # as mpi-operator defaults them


@pytest.mark.parametrize(("obj", "kind"), [
    ({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "pg"},
      "spec": {"minMember": 4}}, "PodGroup"),
    ({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "pg"},
      "spec": {"minMember": 4}}, "PodGroup"),
    ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "w"},
      "spec": {"podSets": []}}, "Workload"),
])
def test_the_same_kind_of_another_api_group_is_none_of_ours(obj: dict[str, Any], kind: str) -> None:
    parse = workload_parsing.pod_group if kind == "PodGroup" else workload_parsing.gang_workload
    assert parse(obj) is None


def test_pod_groups_of_every_served_version_read_alike() -> None:
    for version in ("v1alpha2", "v1alpha3", "v1beta1"):
        pg = co.pod_group_object("pg", {"gang": {"minCount": 3}}, version=version)
        assert workload_parsing.pod_group(pg) == GangGroup("ml", "pg", gang=True, min_count=3)
    basic = workload_parsing.pod_group(co.pod_group_object("pg", {"basic": {}}))
    assert basic is not None and not basic.gang


@pytest.mark.parametrize(("parse", "mutate", "field"), [
    (workload_parsing.jobset, lambda o: o["spec"].update(replicatedJobs="x"), "JobSet.spec.replicatedJobs"),
    (workload_parsing.jobset, lambda o: o["spec"]["replicatedJobs"][0].update(template=[[[]]]),
     "JobSet.spec.replicatedJobs[0].template"),
    (workload_parsing.jobset, lambda o: o["metadata"].pop("name"), "JobSet.metadata.name"),
    (workload_parsing.jobset, lambda o: o["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
     ["containers"][0].update(resources={"limits": {"nvidia.com/gpu": "1e400"}}), "nvidia.com/gpu"),
    (workload_parsing.jobset, lambda o: o["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
     .update(resourceClaims=[{"name": 7}]), "resourceClaims[0].name"),
    (workload_parsing.jobset, lambda o: o["metadata"].update(name="n" * 100_000), "JobSet.metadata.name"),
])
def test_wrong_types_are_a_wire_error_naming_the_field(parse: Any, mutate: Any, field: str) -> None:
    js = co.jobset("train", [("workers", 1, 1, GPU)])
    mutate(js)
    with pytest.raises(WireError) as caught:
        parse(js)
    assert field in str(caught.value)


def test_deep_nesting_where_nothing_is_read_costs_nothing_and_where_something_is_read_is_an_error() -> None:
    js = co.jobset("train", [("workers", 1, 1, GPU)])
    js["spec"]["extra"] = _deep(100_000)
    assert workload_parsing.jobset(js) is not None
    js["spec"]["replicatedJobs"] = [_deep(100_000)]
    parsed = workload_parsing.jobset(js)  # a replicated job of unknown shape: no name, no template, defaults
    assert parsed is not None and parsed.parts[0].template.gpus == 0


def test_a_pod_group_with_a_wrong_policy_type_is_an_error() -> None:
    pg = co.pod_group_object("pg", {"gang": "four"})
    with pytest.raises(WireError, match=r"schedulingPolicy\.gang"):
        workload_parsing.pod_group(pg)


@pytest.mark.parametrize(("spec", "field"), [
    ({"schedulingGroup": "pg"}, "spec.schedulingGroup"),
    ({"schedulingGroup": {"podGroupName": 5}}, "spec.schedulingGroup.podGroupName"),
    ({"workloadRef": {"name": "w" * 300, "podGroup": "g"}}, "spec.workloadRef.name"),
])
def test_a_pods_gang_reference_of_the_wrong_shape_is_a_wire_error(spec: dict[str, Any], field: str) -> None:
    pod = co.pod_in_group("p", "pg", GPU)
    pod["spec"] = {**copy.deepcopy(GPU), **spec}
    with pytest.raises(WireError) as caught:
        parsing.pod(pod)
    assert field in str(caught.value)


def test_a_pod_of_no_controller_carries_no_refs_and_one_of_a_controller_only_a_few_strings() -> None:
    assert parsing.pod(co.pod_in_group("p", "pg", GPU)).workload is not None
    plain = co.kueue_pods("grp", 1, GPU)[0]
    plain["metadata"]["labels"] = {"app": "x"}
    plain["metadata"]["annotations"] = {}
    assert parsing.pod(plain).workload is None
    refs = parsing.pod(co.kueue_pods("grp", 2, GPU)[0]).workload
    assert refs is not None and (refs.kueue_group, refs.kueue_total) == ("grp", "2")
    huge = co.kueue_pods("grp", 2, GPU, total_text="9" * 10_000)[0]
    assert len(parsing.pod(huge).workload.kueue_total or "") == 64  # type: ignore[union-attr]
