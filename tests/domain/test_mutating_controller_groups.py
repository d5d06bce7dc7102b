"""``mutating.mutate`` on pods the workload controllers create (docs/GROUPS.md): they are patched into one
domain under their controller's group, a pod two sources put in different groups is admitted with a
warning naming both, a pod whose PodGroup is not cached yet goes to the imex scheduler unlabelled, an
unusable count is denied with a message naming it, and a LeaderWorkerSet leader admitted before and after
LWS's own pod webhook labels it gets the same group (no conflicting reinvocation)."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests import admission_support as support
from tests import builders
from tests import controller_objects as co
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.domain.admission.mutating import GROUP_ID_ANNOTATION, MutationResult
from webhook.domain.policy import Policy

POLICY = Policy()
GPU = co.pod_spec(claim_template=co.GPU_TEMPLATE)
Obj = dict[str, Any]


def _mutate(obj: Obj, objects: list[Obj]) -> MutationResult:
    snap = builders.snapshot([*builders.rack("a", "aaaa-1111.7", 4), co.gpu_claim_template(), *objects])
    return mutating.mutate(copy.deepcopy(obj), co.NS, snap.catalog, snap.nodes, POLICY)


def _patched(obj: Obj, result: MutationResult) -> Obj:
    return support.apply(obj, json.loads(json.dumps(list(result.patch))))


def _jobset() -> tuple[Obj, Obj]:
    js = co.jobset("train", [("workers", 2, 4, GPU)])
    return js, next(o for o in co.jobset_children(js) if o["kind"] == "Pod")


def test_a_jobset_pod_is_patched_into_one_domain_with_the_jobsets_size() -> None:
    js, pod = _jobset()
    result = _mutate(pod, [js])
    assert (result.allowed, result.outcome, result.group_id, result.warnings) == \
        (True, "mutated", "jobset:ml/train", ())
    patched = _patched(pod, result)
    support.assert_kept_in_domain(patched, mutating.group_label_value("jobset:ml/train"))
    annotations = patched["metadata"]["annotations"]
    assert (annotations[GROUP_ID_ANNOTATION], annotations[keys.GROUP_SIZE_ANNOTATION]) == ("jobset:ml/train", "8")
    assert annotations[keys.JOBSET_NAME_LABEL] == "train"  # the controller's own marks are left as they were
    assert _mutate(patched, [js]).patch == ()


def test_a_pod_two_sources_put_in_different_groups_is_admitted_with_a_warning_naming_both() -> None:
    js, pod = _jobset()
    pod["metadata"]["labels"][keys.KUEUE_GROUP_NAME_LABEL] = "other"
    pod["metadata"]["annotations"][keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION] = "3"
    result = _mutate(pod, [js])
    assert result.allowed and result.group_id == "jobset:ml/train"
    (warning,) = result.warnings
    assert "JobSet 'train' (8 pods)" in warning and "Kueue pod group 'other' (3 pods)" in warning
    assert len(warning) <= 256


def test_a_pod_whose_pod_group_is_not_cached_yet_goes_to_the_imex_scheduler_unlabelled() -> None:
    pod = co.pod_in_group("p", "pg", GPU)
    result = _mutate(pod, [])
    assert (result.allowed, result.reason, result.group_id) == (True, "group-deferred", None)
    patched = _patched(pod, result)
    assert patched["spec"]["schedulerName"] == "imex-scheduler"
    assert keys.GROUP_LABEL not in (patched["metadata"].get("labels") or {})
    assert any("PodGroup 'pg'" in w for w in result.warnings)
    # Once the PodGroup is known the pod is resolved, and its group decides the patch.
    later = _mutate(patched, [co.pod_group_object("pg", {"gang": {"minCount": 2}})])
    assert later.group_id == "podgroup:ml/pg"


def test_an_unusable_kueue_count_is_denied_naming_the_annotation() -> None:
    pod = co.kueue_pods("grp", 3, GPU, total_text="three")[0]
    result = _mutate(pod, [])
    assert (result.allowed, result.reason) == (False, "conflicting-group")
    assert keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION in result.message and "'three'" in result.message


def test_a_leader_admitted_before_lws_labels_it_is_not_mutated_again_after() -> None:
    before = co.lws_pods("vllm", 2, 3, GPU, labelled=False)[0]
    first = _mutate(before, [])
    assert first.outcome == "mutated" and first.group_id and first.group_id.startswith("lws:")
    after_ours = _patched(before, first)
    # LWS's pod webhook runs next and adds group-index and group-key; ours is invoked again (IfNeeded).
    labelled = co.lws_pods("vllm", 2, 3, GPU)[0]["metadata"]["labels"]
    after_ours["metadata"]["labels"] |= labelled
    again = _mutate(after_ours, [])
    assert (again.allowed, again.outcome, again.patch) == (True, "unchanged", ())
    worker = _mutate(co.lws_pods("vllm", 2, 3, GPU)[2], [])
    assert worker.group_id == first.group_id


def test_a_controllers_pod_without_claims_or_group_annotation_is_not_looked_at() -> None:
    job = co.pytorchjob("pt", 1, 1, co.pod_spec(gpus=4))
    pod = co.pytorchjob_pods(job)[0]
    result = _mutate(pod, [job])
    assert (result.allowed, result.outcome, result.patch) == (True, "skipped", ())
