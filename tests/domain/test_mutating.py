"""``mutating.mutate`` on pods as kube-apiserver sends them, against the demo catalog.

Covered:
- the five additions (group label, required pod affinity, domain node requirement in every term,
  schedulerName, annotations), each checked on the pod the patch produces (jsonpatch + V1Pod);
- JSON Pointer escaping and creation of missing parent maps, merged into one op per parent;
- merging with what the user wrote: existing labels, annotations, affinity lists and terms are kept;
- idempotence: the patched pod gets an empty patch, and a pod missing one piece gets only that piece;
- group identities (ComputeDomain, annotation, shared claim), group size, ``request.namespace``;
- what is allowed with a warning (unknown template, unknown node, custom scheduler) and what is denied;
- the group label value: valid, short, readable when possible, hashed deterministically otherwise.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tests import admission_support as support
from tests import builders
from webhook.adapters import demo
from webhook.domain import keys, mutating
from webhook.domain.mutating import GROUP_ID_ANNOTATION, MutationResult
from webhook.domain.policy import Policy

POLICY = Policy()
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
CD8 = f"cd:{demo.uid('cd', 'ml', 'train-8')}"
CD8_LABEL = mutating.group_label_value(CD8)
LABEL_PATH = "/metadata/labels/imex-webhook.io~1group"


def _obj(fixture: str) -> tuple[dict[str, Any], str]:
    request = support.review(fixture)["request"]
    return request["object"], request["namespace"]


def _mutate(obj: dict[str, Any], namespace: str = "ml", snapshot: Any = None) -> MutationResult:
    snap = snapshot or support.demo_snapshot()
    return mutating.mutate(obj, namespace, snap.catalog, snap.nodes, POLICY)


def _paths(result: MutationResult) -> list[str]:
    return [op["path"] for op in result.patch]


def test_a_job_pod_with_a_compute_domain_template_is_kept_in_one_domain() -> None:
    obj, ns = _obj("create-job-pod-generate-name.json")
    result = _mutate(obj, ns)
    assert (result.allowed, result.outcome, result.group_id, result.warnings) == (True, "mutated", CD8, ())
    pod = support.assert_kept_in_domain(support.apply(obj, list(result.patch)), CD8_LABEL)
    assert pod.metadata.annotations[GROUP_ID_ANNOTATION] == CD8
    assert pod.metadata.annotations[keys.GROUP_SIZE_ANNOTATION] == "8"
    assert keys.GROUP_ANNOTATION not in pod.metadata.annotations
    assert pod.metadata.labels["batch.kubernetes.io/job-name"] == "train-8"
    assert pod.metadata.owner_references[0].kind == "Job"
    assert pod.spec.tolerations[0].key == "node.kubernetes.io/not-ready"


def test_label_and_annotation_keys_are_escaped_in_json_pointers() -> None:
    obj, ns = _obj("create-dry-run.json")
    paths = _paths(_mutate(obj, ns))
    assert LABEL_PATH in paths
    assert "/metadata/annotations/imex-webhook.io~1group-id" in paths
    assert "/metadata/annotations/imex-webhook.io~1mutated" in paths
    assert all("/" not in p.split("/metadata/annotations/")[-1] for p in paths if "/annotations/" in p)


def test_keys_are_added_one_by_one_to_existing_maps_and_user_keys_survive() -> None:
    obj, ns = _obj("create-dry-run.json")
    patched = support.apply(obj, list(_mutate(obj, ns).patch))
    assert patched["metadata"]["labels"]["team.example.com/owner"] == "alice"
    assert patched["metadata"]["annotations"]["example.com/a~b"] == "tilde"
    assert set(patched["metadata"]["annotations"]) >= set(obj["metadata"]["annotations"])


def test_missing_label_and_annotation_maps_are_created_whole_in_one_op_each() -> None:
    obj, ns = _obj("create-no-labels.json")
    result = _mutate(obj, ns)
    adds = {op["path"]: op["value"] for op in result.patch}
    elastic = f"cd:{demo.uid('cd', 'ml', 'elastic')}"
    assert adds["/metadata/labels"] == {keys.GROUP_LABEL: mutating.group_label_value(elastic)}
    # The elastic ComputeDomain has numNodes 0: the size is unknown, so no size annotation.
    assert adds["/metadata/annotations"] == {GROUP_ID_ANNOTATION: elastic,
                                             keys.MUTATED_ANNOTATION: mutating.MUTATED_MARKER}
    support.assert_kept_in_domain(support.apply(obj, list(result.patch)), mutating.group_label_value(elastic))


def test_every_node_selector_term_gets_the_domain_requirement_and_keeps_its_own() -> None:
    obj, ns = _obj("create-existing-affinity.json")
    before = support.v1pod(obj).spec.affinity
    result = _mutate(obj, ns)
    assert "/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution" in _paths(result)
    cd16 = mutating.group_label_value(f"cd:{demo.uid('cd', 'ml', 'train-16')}")
    after = support.assert_kept_in_domain(support.apply(obj, list(result.patch)), cd16).spec.affinity
    old_terms = before.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    new_terms = after.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert len(new_terms) == len(old_terms) == 3  # no term added: terms are ORed
    for old, new in zip(old_terms, new_terms, strict=True):
        assert set(support.expressions(old)) < set(support.expressions(new))
        assert new.match_fields == old.match_fields
    assert after.node_affinity.preferred_during_scheduling_ignored_during_execution == \
        before.node_affinity.preferred_during_scheduling_ignored_during_execution
    assert after.pod_anti_affinity == before.pod_anti_affinity
    assert after.pod_affinity.preferred_during_scheduling_ignored_during_execution == \
        before.pod_affinity.preferred_during_scheduling_ignored_during_execution


def test_a_match_fields_only_term_gets_a_match_expressions_list() -> None:
    obj, ns = _obj("create-existing-affinity.json")
    ops = {op["path"]: op["value"] for op in _mutate(obj, ns).patch}
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    assert ops[f"{base}/0/matchExpressions/-"] == {"key": support.TOPOLOGY_KEY, "operator": "Exists"}
    assert ops[f"{base}/2/matchExpressions"] == [{"key": support.TOPOLOGY_KEY, "operator": "Exists"}]


def test_an_existing_required_pod_affinity_list_is_appended_to_not_rewritten() -> None:
    obj, ns = _obj("create-existing-pod-affinity.json")
    result = _mutate(obj, ns)
    assert "/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/-" in _paths(result)
    patched = support.apply(obj, list(result.patch))
    terms = patched["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0] == obj["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert len(terms) == 2


def test_an_empty_node_selector_term_is_left_alone_because_it_selects_no_node() -> None:
    obj, ns = _obj("create-existing-affinity.json")
    terms = obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"].append({})
    patched = support.apply(obj, list(_mutate(obj, ns).patch))
    assert patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][3] == {}


@pytest.mark.parametrize(("current", "op", "warned"), [
    (None, "add", False), ("default-scheduler", "replace", False), ("", "replace", False),
    ("imex-scheduler", None, False), ("volcano", None, True),
])
def test_scheduler_name_is_set_only_over_the_default(current: str | None, op: str | None, warned: bool) -> None:
    obj, ns = _obj("create-job-pod-generate-name.json")
    if current is None:
        del obj["spec"]["schedulerName"]
    else:
        obj["spec"]["schedulerName"] = current
    result = _mutate(obj, ns)
    ops = [o["op"] for o in result.patch if o["path"] == "/spec/schedulerName"]
    assert ops == ([op] if op else [])
    assert any("schedulerName" in w for w in result.warnings) is warned
    assert all(len(w) <= 120 for w in result.warnings)


def test_a_custom_scheduler_still_gets_the_affinity_that_keeps_the_group_together() -> None:
    obj, ns = _obj("create-custom-scheduler.json")
    result = _mutate(obj, ns)
    label = mutating.group_label_value(f"cd:{demo.uid('cd', 'ml', 'train-20')}")
    support.assert_kept_in_domain(support.apply(obj, list(result.patch)), label, scheduler="volcano")
    assert result.warnings == ("spec.schedulerName 'volcano' left as is: only 'imex-scheduler' reserves a domain "
                               "for the whole group",)


def test_an_annotation_group_keeps_the_users_annotations_and_is_labelled_readably() -> None:
    obj, ns = _obj("create-annotation-group.json")
    result = _mutate(obj, ns)
    assert result.group_id == "ann:ml/fabric-run-7"
    patched = support.apply(obj, list(result.patch))
    support.assert_kept_in_domain(patched, "ann.ml.fabric-run-7")
    assert patched["metadata"]["annotations"][keys.GROUP_ANNOTATION] == "fabric-run-7"
    assert patched["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] == "3"
    assert [op for op in result.patch if "group-size" in op["path"]] == []


def test_the_size_of_a_job_group_is_recorded_from_the_jobs_parallelism() -> None:
    job = {"kind": "Job", "metadata": {"name": "trainer", "namespace": "ml", "uid": "job-uid"},
           "spec": {"parallelism": 6}}
    snap = builders.store([*demo.objects(), job]).snapshot()
    obj, ns = _obj("create-annotation-group.json")
    del obj["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "trainer",
                                           "uid": "job-uid", "controller": True}]
    patched = support.apply(obj, list(_mutate(obj, ns, snap).patch))
    assert patched["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] == "6"


def test_a_shared_channel_claim_makes_a_group_by_its_uid() -> None:
    claim = {"kind": "ResourceClaim", "metadata": {"name": "shared-channel", "namespace": "ml", "uid": "c1a1m"},
             "spec": {"devices": {"requests": [{"name": "ch", "exactly": {
                 "deviceClassName": keys.DEFAULT_CHANNEL_DEVICE_CLASSES[1]}}]}}}
    snap = builders.store([*demo.objects(), claim]).snapshot()
    obj, ns = _obj("create-no-labels.json")
    obj["spec"]["resourceClaims"] = [{"name": "ch", "resourceClaimName": "shared-channel"}]
    result = _mutate(obj, ns, snap)
    assert result.group_id == "claim:c1a1m"
    support.assert_kept_in_domain(support.apply(obj, list(result.patch)), "claim.c1a1m")


def test_the_request_namespace_is_used_because_metadata_namespace_is_empty_on_create() -> None:
    obj, _ = _obj("create-job-pod-generate-name.json")
    assert "namespace" not in obj["metadata"]
    assert _mutate(obj, "ml").group_id == CD8
    elsewhere = _mutate(obj, "research")  # the template lives in ml, not in research
    assert (elsewhere.allowed, elsewhere.patch, elsewhere.reason) == (True, (), "group-unknown")


@pytest.mark.parametrize("fixture", support.fixture_names("create-"))
def test_the_patched_pod_gets_no_patch_the_second_time(fixture: str) -> None:
    obj, ns = _obj(fixture)
    first = _mutate(obj, ns)
    again = _mutate(support.apply(obj, list(first.patch)), ns)
    assert (again.patch, again.allowed) == ((), first.allowed)
    if first.outcome == "mutated":
        assert again.outcome == "unchanged"


@pytest.mark.parametrize(("removed", "expected_path"), [
    (("spec", "affinity", "podAffinity"), "/spec/affinity/podAffinity"),
    (("spec", "affinity", "nodeAffinity"), "/spec/affinity/nodeAffinity"),
    (("metadata", "labels", keys.GROUP_LABEL), LABEL_PATH),
    (("metadata", "annotations", keys.MUTATED_ANNOTATION), "/metadata/annotations/imex-webhook.io~1mutated"),
])
def test_a_pod_missing_one_piece_of_the_mutation_gets_only_that_piece(removed: tuple[str, ...],
                                                                     expected_path: str) -> None:
    obj, ns = _obj("create-job-pod-generate-name.json")
    patched = support.apply(obj, list(_mutate(obj, ns).patch))
    parent = patched
    for key in removed[:-1]:
        parent = parent[key]
    del parent[removed[-1]]
    assert _paths(_mutate(patched, ns)) == [expected_path]


def test_the_pod_given_to_mutate_is_not_changed() -> None:
    for fixture in support.fixture_names("create-"):
        obj, ns = _obj(fixture)
        before = copy.deepcopy(obj)
        _mutate(obj, ns)
        assert obj == before, fixture


def test_a_plain_pod_is_admitted_without_a_patch() -> None:
    obj, ns = _obj("create-plain-pod.json")
    assert _mutate(obj, ns) == MutationResult(True, reason="not-a-group")


def test_an_unknown_template_alone_is_admitted_unchanged_with_a_warning() -> None:
    obj, ns = _obj("create-unknown-template.json")
    result = _mutate(obj, ns)
    assert (result.allowed, result.patch, result.outcome, result.reason) == (True, (), "skipped", "group-unknown")
    assert len(result.warnings) == 1 and "fresh-cd-channel" in result.warnings[0]


def test_an_unknown_template_next_to_a_known_group_is_mutated_with_a_warning() -> None:
    obj, ns = _obj("create-job-pod-generate-name.json")
    obj["spec"]["resourceClaims"].append({"name": "extra", "resourceClaimTemplateName": "not-cached-yet"})
    result = _mutate(obj, ns)
    assert (result.allowed, result.outcome, result.group_id) == (True, "mutated", CD8)
    assert len(result.warnings) == 1 and "not-cached-yet" in result.warnings[0]


@pytest.mark.parametrize(("fixture", "reason", "hint"), [
    ("create-two-compute-domains.json", "conflicting-group", "2 different ComputeDomains"),
    ("create-annotation-contradicts.json", "conflicting-group", "remove the annotation"),
    ("create-pinned-outside-domain.json", "pinned-outside-domain", "remove spec.nodeName"),
])
def test_contradictions_only_the_user_can_resolve_are_denied(fixture: str, reason: str, hint: str) -> None:
    obj, ns = _obj(fixture)
    result = _mutate(obj, ns)
    assert (result.allowed, result.patch, result.outcome, result.reason) == (False, (), "denied", reason)
    assert hint in result.message


def test_a_group_label_naming_another_group_is_denied_not_overwritten() -> None:
    obj, ns = _obj("create-dry-run.json")
    obj["metadata"]["labels"][keys.GROUP_LABEL] = "cd.someone-else"
    result = _mutate(obj, ns)
    assert (result.allowed, result.reason) == (False, "label-conflict")
    assert CD8_LABEL in result.message


def test_a_group_label_the_user_wrote_with_the_right_value_is_kept() -> None:
    obj, ns = _obj("create-dry-run.json")
    obj["metadata"]["labels"][keys.GROUP_LABEL] = CD8_LABEL
    result = _mutate(obj, ns)
    assert result.allowed and LABEL_PATH not in _paths(result)


def test_a_size_annotation_that_is_not_a_number_is_denied() -> None:
    obj, ns = _obj("create-annotation-group.json")
    obj["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] = "eight"
    assert _mutate(obj, ns).reason == "conflicting-group"


@pytest.mark.parametrize(("node", "warned"), [("gb200-a-03", False), ("gb300-x-07", True)])
def test_a_pinned_pod_on_a_domain_node_or_an_unknown_node_is_mutated(node: str, warned: bool) -> None:
    obj, ns = _obj("create-pinned-unknown-node.json")
    obj["spec"]["nodeName"] = node
    result = _mutate(obj, ns)
    assert (result.allowed, result.outcome) == (True, "mutated")
    assert bool(result.warnings) is warned
    assert all(len(w) <= 120 for w in result.warnings)


@pytest.mark.parametrize(("group_id", "expected"), [
    (CD8, CD8.replace(":", ".")),
    ("ann:ml/fabric-run-7", "ann.ml.fabric-run-7"),
    ("ann:ml/v1.2", "ann.ml.v1.2"),
    ("claim:ml/shared", "claim.ml.shared"),
])
def test_short_plain_identities_give_readable_label_values(group_id: str, expected: str) -> None:
    assert mutating.group_label_value(group_id) == expected


@pytest.mark.parametrize("group_id", [
    "ann:ml/" + "x" * 80, "ann:ml/a b", "ann:ml/a/b", "ann:ml/-dash", "ann:ml/under_score", "ann:ml/ümlaut",
    "claim:ml.x/y", "ann:ml/", "odd", ":", "ann:ml/" + "é" * 70,
])
def test_other_identities_are_hashed_into_valid_distinct_label_values(group_id: str) -> None:
    value = mutating.group_label_value(group_id)
    assert len(value) <= 63 and LABEL_VALUE.match(value), value
    assert "_" in value and value == mutating.group_label_value(group_id)


def test_identities_that_a_naive_mapping_would_merge_get_different_label_values() -> None:
    ids = ["ann:ml/a.b", "ann:ml/a/b", "ann:ml/a_b", "ann:ml/a-b", "ann:ml.a/b", "claim:a.b", "claim:a/b",
           "ann:ml/" + "x" * 80, "ann:ml/" + "x" * 81]
    assert len({mutating.group_label_value(i) for i in ids}) == len(ids)
