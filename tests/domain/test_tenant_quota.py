"""What a namespace can hold is bounded by what it may run (webhook.domain.placement.quotas, docs/SCHEDULER.md).

Capacity held for members not created yet, spare nodes and the rest of an exclusive group's domain is
bounded by the namespace's GPU ResourceQuota (hard minus used) where one bounds every pod, else by
``--max-reserved-gpus-per-namespace`` (a number, or a share of the domains' GPUs, never less than the
largest domain). A group-size annotation may lower the size a controller declares, never raise it; a job
is never cut into more segments than the domains can hold. Hostile ResourceQuota objects are clear errors.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.decisions import filtering
from webhook.domain.groups import grouping
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import resolution
from webhook.domain.model import Reservation
from webhook.domain.placement import quotas
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import WireError

POLICY = Policy()
NOW = 1000.0


def _racks(count: int, nodes: int = 4) -> list[dict[str, Any]]:
    return [n for r in range(count) for n in builders.rack(f"r{r}", f"rack{r:03d}-1111.7", nodes)]


def _quota(namespace: str, hard: Any, used: Any = None, key: str = "requests.nvidia.com/gpu",
           name: str = "gpu", **spec: Any) -> dict[str, Any]:
    status = {"hard": {key: hard}, "used": {key: used}} if used is not None else {}
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": {key: hard}, **spec}, "status": status}


def _group_pod(name: str, size: int, namespace: str = "ml", group: str = "job", **extra: str) -> dict[str, Any]:
    return builders.pod(name, annotations={keys.GROUP_ANNOTATION: group, keys.GROUP_SIZE_ANNOTATION: str(size),
                                           **extra}, namespace=namespace)


def _context(objects: list[dict[str, Any]], pod: dict[str, Any], policy: Policy = POLICY,
             reservations: dict[str, Reservation] | None = None) -> resolution.Context:
    snap = builders.snapshot([*objects, pod], reservations, policy=policy)
    ctx = resolution.resolve(parsing.pod(pod), DecisionInputs(snap, policy, NOW))
    assert ctx is not None
    return ctx


# -- The case: one pod holding the cluster -------------------------------------------------------------

def test_one_pod_cannot_reserve_every_domain_with_a_large_group_and_segments() -> None:
    # 10 racks of 16 GPUs; one 4-GPU pod says its group has 40 pods in segments of 4: every rack for one pod.
    pod = _group_pod("hog-0", 40, namespace="evil", **{keys.SEGMENT_SIZE_ANNOTATION: "4",
                                                       keys.COMPLETION_INDEX: "0"})
    ctx = _context(_racks(10), pod)
    assert ctx.domain is None and ctx.proposal is None and not ctx.siblings
    assert "namespace evil may hold at most 80 GPUs for pods it has not created" in ctx.reason
    assert "--max-reserved-gpus-per-namespace 50% of the 160 GPUs in NVLink domains" in ctx.reason
    assert "would hold 156" in ctx.reason


def test_the_same_job_is_placed_once_its_pods_exist() -> None:
    pods = [_group_pod(f"big-{i}", 40, namespace="ml", **{keys.SEGMENT_SIZE_ANNOTATION: "4",
                                                          keys.COMPLETION_INDEX: str(i)}) for i in range(40)]
    ctx = _context([*_racks(10), *pods[1:]], pods[0])
    assert ctx.domain is not None and len(ctx.siblings) == 9


# -- ResourceQuota ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("size", "placed"), [(4, True), (5, False)])
def test_a_gpu_quota_bounds_what_a_group_holds_for_pods_not_created(size: int, placed: bool) -> None:
    # hard 16, used 4 (the pod being placed): 12 more GPUs, three more 4-GPU members.
    ctx = _context([*_racks(2, 8), _quota("ml", "16", "4")], _group_pod("job-0", size))
    assert (ctx.domain is not None) is placed
    if not placed:
        assert "(ResourceQuota ml/gpu: requests.nvidia.com/gpu hard 16, used 4)" in ctx.reason
        assert "may hold at most 12 GPUs" in ctx.reason and "would hold 16" in ctx.reason


def test_members_that_exist_hold_nothing_more_even_with_the_quota_spent() -> None:
    pods = [_group_pod(f"job-{i}", 4) for i in range(4)]
    ctx = _context([*_racks(2), _quota("ml", "16", "16"), *pods[1:]], pods[0])
    assert ctx.domain is not None


def test_the_namespaces_other_reservations_count_and_other_namespaces_do_not() -> None:
    held = Reservation(group_id="ann:ml/other", group_name="other", namespace="ml", domain="rack000-1111.7",
                       size=3, gpus_per_pod=4, one_pod_per_node=False, created_at=NOW - 5, version="1")
    theirs = Reservation(group_id="ann:nlp/x", group_name="x", namespace="nlp", domain="rack000-1111.7",
                         size=2, gpus_per_pod=4, one_pod_per_node=False, created_at=NOW - 5, version="1")
    objects = [*_racks(2), _quota("ml", "16", "4")]
    ours = _context(objects, _group_pod("job-0", 2), reservations={held.group_id: held})
    assert ours.domain is None and "its other groups hold 12 already" in ours.reason
    assert _context(objects, _group_pod("job-0", 2), reservations={theirs.group_id: theirs}).domain is not None


def test_the_tightest_line_of_the_namespaces_quotas_counts() -> None:
    objects = [*_racks(2), _quota("ml", "100", "0"), _quota("ml", "8", "4", name="tight"),
               _quota("nlp", "0", "0")]
    ctx = _context(objects, _group_pod("job-0", 3))
    assert ctx.domain is None and "ResourceQuota ml/tight" in ctx.reason


def test_a_dra_gpu_class_quota_counts_like_the_device_plugins() -> None:
    key = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
    ctx = _context([*_racks(2), _quota("ml", "8", "4", key=key)], _group_pod("job-0", 3))
    assert ctx.domain is None and key in ctx.reason


def test_a_scoped_quota_says_nothing_of_every_pod_and_the_setting_counts_instead() -> None:
    scoped = _quota("ml", "0", "0", scopes=["BestEffort"])
    ctx = _context([*_racks(2), scoped], _group_pod("job-0", 4))
    assert ctx.domain is not None


def test_spare_nodes_count_as_held() -> None:
    pod = _group_pod("job-0", 2, **{keys.SPARE_NODES_ANNOTATION: "2"})
    ctx = _context([*_racks(2), _quota("ml", "12", "4")], pod)
    assert ctx.domain is None and "would hold 12" in ctx.reason


def test_an_exclusive_group_holds_its_whole_domain() -> None:
    cd = builders.cd_objects("solo", 1)
    cd[0]["metadata"]["annotations"] = {keys.EXCLUSIVE_ANNOTATION: "true"}
    pod = builders.pod("solo-0", cd="solo")
    refused = _context([*_racks(2), *cd, _quota("ml", "12", "4")], pod)  # the rack's other 12 GPUs: 8 allowed
    assert refused.domain is None and "would hold 12" in refused.reason
    assert _context([*_racks(2), *cd, _quota("ml", "16", "4")], pod).domain is not None


# -- The operator's setting ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "size", "placed", "named"), [
    (Policy(max_reserved_gpus=8), 3, True, ""),
    (Policy(max_reserved_gpus=8), 4, False, "--max-reserved-gpus-per-namespace 8)"),
    (Policy(max_reserved_share=0.25), 9, True, ""),  # a quarter of 8 racks' 128 GPUs: 8 absent members
    (Policy(max_reserved_share=0.25), 10, False, "25% of the 128 GPUs"),
    (Policy(max_reserved_share=0.0), 5, True, ""),  # never less than the largest domain: one rack's 16
    (Policy(max_reserved_share=0.0), 6, False, "raised to the largest domain's 16"),
])
def test_without_a_quota_the_setting_bounds_it(policy: Policy, size: int, placed: bool, named: str) -> None:
    # Segments of 4 pods (a rack each), so that the job's size alone is the question.
    pod = _group_pod("job-0", size, **{keys.SEGMENT_SIZE_ANNOTATION: "4", keys.COMPLETION_INDEX: "0"})
    ctx = _context(_racks(8), pod, policy)
    assert (ctx.domain is not None) is placed, ctx.reason
    assert named in ctx.reason


# -- Sizes a controller declares ---------------------------------------------------------------------------------

def _job_pod(parallelism: int, size: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    job = {"kind": "Job", "metadata": {"name": "train", "namespace": "ml", "uid": "job-uid"},
           "spec": {"parallelism": parallelism}}
    pod = _group_pod("train-0", int(size))
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "train", "uid": "job-uid", "controller": True,
                                           "apiVersion": "batch/v1"}]
    return [job], pod


@pytest.mark.parametrize(("parallelism", "size", "problem"), [(8, "8", False), (8, "4", False), (8, "9", True),
                                                              (1, "100000", True)])
def test_an_annotation_may_lower_a_jobs_parallelism_never_raise_it(parallelism: int, size: str,
                                                                  problem: bool) -> None:
    objects, pod = _job_pod(parallelism, size)
    res = grouping.resolve(parsing.pod(pod), builders.snapshot(objects).catalog, POLICY)
    assert bool(res.problems) is problem
    if problem:
        assert f"{keys.GROUP_SIZE_ANNOTATION}={size} is larger than Job ml/train's parallelism ({parallelism})" \
            in res.problems[0]


def test_an_annotation_may_not_raise_a_compute_domains_num_nodes() -> None:
    pod = builders.pod("train-0", cd="train", annotations={keys.GROUP_SIZE_ANNOTATION: "9"})
    res = grouping.resolve(parsing.pod(pod), builders.snapshot(builders.cd_objects("train", 8)).catalog, POLICY)
    assert len(res.problems) == 1 and "ComputeDomain ml/train's numNodes (8)" in res.problems[0]


# -- Segments bounded by the domains -------------------------------------------------------------------------------

@pytest.mark.parametrize(("size", "per", "refused", "most"), [(40, "4", False, 10), (41, "4", True, 10),
                                                             (100, "2", True, 20)])
def test_a_job_is_never_cut_into_more_segments_than_the_domains_hold(size: int, per: str, refused: bool,
                                                                     most: int) -> None:
    pod = _group_pod("seg-0", size, **{keys.SEGMENT_SIZE_ANNOTATION: per, keys.COMPLETION_INDEX: "0"})
    ctx = _context(_racks(10), pod, Policy(max_reserved_gpus=10**9))
    assert (ctx.domain is None) is refused
    if refused:
        assert f"the cluster's 10 NVLink domains hold at most {most} segments of {per} pods" in ctx.reason


def test_the_largest_segment_count_is_refused_at_once_on_5000_nodes() -> None:
    objects = _racks(278, 18)  # 5,004 nodes in 278 racks, the cluster
    pod = _group_pod("seg-0", 100_000, **{keys.SEGMENT_SIZE_ANNOTATION: "5", keys.COMPLETION_INDEX: "0"})
    snap = builders.snapshot([*objects, pod])
    started = time.process_time()
    out = filtering.filter_nodes(parsing.pod(pod), sorted(snap.nodes), DecisionInputs(snap, POLICY, NOW))
    spent = time.process_time() - started
    assert out.outcome == "no-domain" and not out.passed
    assert spent < 30, spent  # a ceiling for a busy machine, not the target: imex-webhook bench measures it


# -- Hostile ResourceQuota objects -------------------------------------------------------------------------------

@pytest.mark.parametrize(("case", "obj", "error"), [
    ("a hard value past 2^63-1", _quota("ml", "1e400"), "out of range"),
    ("a fraction of a GPU", _quota("ml", "0.5"), "whole non-negative count"),
    ("a negative used", _quota("ml", "4", "-1"), "whole non-negative count"),
    ("a number as a list", _quota("ml", ["4"]), "not a Kubernetes quantity"),
    ("spec as a string", {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "ml"}, "spec": "x"},
     "must be objects"),
    ("hard as a list", {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "ml"},
                        "spec": {"hard": [1]}}, "must be objects"),
    ("no name", {"kind": "ResourceQuota", "metadata": {"namespace": "ml"},
                 "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}}, "needs a namespace and a name"),
    ("not an object", [], "expected an object"),
])
def test_a_hostile_quota_is_a_wire_error_naming_the_field(case: str, obj: Any, error: str) -> None:
    with pytest.raises(WireError, match=error):
        quotas.resource_quota(obj, POLICY)


def test_quotas_without_gpu_lines_or_with_scopes_are_not_ours() -> None:
    assert quotas.resource_quota(_quota("ml", "10", key="requests.cpu"), POLICY) is None
    assert quotas.resource_quota(_quota("ml", "10", scopeSelector={"matchExpressions": []}), POLICY) is None
    parsed = quotas.resource_quota(_quota("ml", "16"), POLICY)
    assert parsed is not None and parsed.lines == (("requests.nvidia.com/gpu", 16, 0),)  # no status yet: none used


def test_the_store_keeps_each_namespaces_quotas_and_forgets_deleted_ones() -> None:
    store = builders.store([*_racks(1), _quota("ml", "16", "4"), _quota("ml", "8", "0", name="b"),
                            _quota("nlp", "10", key="requests.cpu")])
    assert [q.name for q in store.snapshot().gpu_quotas["ml"]] == ["b", "gpu"]
    assert "nlp" not in store.snapshot().gpu_quotas
    store.replace("ResourceQuota", [])
    assert store.snapshot().gpu_quotas == {}
