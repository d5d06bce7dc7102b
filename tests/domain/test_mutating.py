"""``mutating.mutate`` on pods as kube-apiserver sends them, against the demo catalog.

Covered:
- the five additions (group label, required pod affinity, domain node requirement in every term,
  schedulerName, annotations), each checked on the pod the patch produces (jsonpatch + V1Pod);
- JSON Pointer escaping and creation of missing parent maps, merged into one op per parent;
- merging with what the user wrote: existing labels, annotations, affinity lists and terms are kept;
- idempotence: the patched pod gets an empty patch, and a pod missing one piece gets only that piece;
- group identities (ComputeDomain, annotation, shared claim), group size, ``request.namespace``;
- what is allowed with a warning (unknown node, custom scheduler) and what is denied;
- the domain label ``imex-webhook.io/domain`` as topologyKey and node requirement for every group kind,
  and pods an older version mutated on ``nvidia.com/gpu.clique`` (new terms added, old ones kept);
- failing closed: a pod that may be in a group but cannot be resolved (template or claim not cached)
  still goes to the imex scheduler with the ``mutated`` marker and a warning; a bad group size (Unicode
  digits, 5,000 digits, signs, exponents, 0, over the bound) and an empty group annotation are denied;
  huge values give bounded messages; wrong types are a ``WireError``; pods with no claims and no group
  annotation stay untouched;
- the group label value: valid, short, readable when possible, hashed deterministically otherwise.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tests import admission_support as support
from tests import builders
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.domain.admission.mutating import GROUP_ID_ANNOTATION, MutationResult
from webhook.domain.policy import Policy
from webhook.errors import WireError

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
    elsewhere = _mutate(obj, "research")  # the template lives in ml, not in research: not resolved there
    assert (elsewhere.allowed, elsewhere.group_id, elsewhere.reason) == (True, None, "group-deferred")


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


def test_an_unknown_template_alone_sends_the_pod_to_the_imex_scheduler_with_a_warning() -> None:
    obj, ns = _obj("create-unknown-template.json")
    result = _mutate(obj, ns)
    assert (result.allowed, result.outcome, result.reason, result.group_id) == (True, "mutated", "group-deferred",
                                                                                None)
    assert list(result.patch) == [
        {"op": "replace", "path": "/spec/schedulerName", "value": "imex-scheduler"},
        {"op": "add", "path": "/metadata/annotations", "value": {keys.MUTATED_ANNOTATION: mutating.MUTATED_MARKER}},
    ]
    assert "fresh-cd-channel" in result.warnings[0]
    assert "resolves it at scheduling time" in result.warnings[-1]
    assert all(len(w) <= 120 for w in result.warnings)


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
    assert _mutate(obj, ns).reason == "bad-group-size"


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


# -- issue 11 item 2: one project-owned domain label for the affinity, for every group kind -------------

GPU_TEMPLATE = {"kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu", "namespace": "ml", "uid": "rct-gpu"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.nvidia.com"}}]}}}}
SHARED_CHANNEL = {"kind": "ResourceClaim", "metadata": {"name": "shared-channel", "namespace": "ml", "uid": "c1a1m"},
                  "spec": {"devices": {"requests": [{"name": "ch", "exactly": {
                      "deviceClassName": keys.DEFAULT_CHANNEL_DEVICE_CLASSES[1]}}]}}}


def _catalog_snapshot() -> Any:
    return builders.store([*demo.objects(), GPU_TEMPLATE, SHARED_CHANNEL]).snapshot()


def _pod_terms(obj: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = obj["spec"]["affinity"]["podAffinity"]
    terms: list[dict[str, Any]] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    return terms


def _node_expressions(obj: dict[str, Any]) -> list[list[dict[str, Any]]]:
    terms = obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    return [t.get("matchExpressions") or [] for t in terms]


@pytest.mark.parametrize(("case", "fixture", "claims", "group_id"), [
    ("compute-domain template (a clique group)", "create-job-pod-generate-name.json", None, CD8),
    ("annotation (a fabric-zone group: nodes carry only imex-webhook.io/fabric-zone)",
     "create-annotation-group.json", None, "ann:ml/fabric-run-7"),
    ("shared IMEX channel claim", "create-no-labels.json",
     [{"name": "ch", "resourceClaimName": "shared-channel"}], "claim:c1a1m"),
])
def test_every_group_kind_gets_the_project_domain_label_as_topology_key_and_node_requirement(
        case: str, fixture: str, claims: list[dict[str, Any]] | None, group_id: str) -> None:
    obj, ns = _obj(fixture)
    if claims is not None:
        obj["spec"]["resourceClaims"] = claims
    result = _mutate(obj, ns, _catalog_snapshot())
    assert result.group_id == group_id, case
    patched = support.apply(obj, list(result.patch))
    assert [t["topologyKey"] for t in _pod_terms(patched)] == [keys.DOMAIN_LABEL], case
    for expressions in _node_expressions(patched):
        assert {"key": keys.DOMAIN_LABEL, "operator": "Exists"} in expressions, case
        assert all(e["key"] != keys.CLIQUE_LABEL for e in expressions), case


def test_the_topology_key_is_the_domain_label_whatever_domain_labels_are_configured() -> None:
    policy = Policy(domain_labels=("example.com/rack", keys.FABRIC_ZONE_LABEL))
    assert policy.affinity_topology_key == keys.DOMAIN_LABEL == Policy().affinity_topology_key


def _as_old_version_mutated_it(obj: dict[str, Any], ns: str) -> dict[str, Any]:
    """The pod as the previous version patched it: the same five items, on nvidia.com/gpu.clique."""
    patched = support.apply(obj, list(_mutate(obj, ns).patch))
    for term in _pod_terms(patched):
        term["topologyKey"] = keys.CLIQUE_LABEL
    for expressions in _node_expressions(patched):
        for e in expressions:
            if e["key"] == keys.DOMAIN_LABEL:
                e["key"] = keys.CLIQUE_LABEL
    patched["metadata"]["annotations"][keys.MUTATED_ANNOTATION] = "v0.0.9"
    return patched


@pytest.mark.parametrize("fixture", ["create-job-pod-generate-name.json", "create-existing-affinity.json",
                                     "create-existing-pod-affinity.json"])
def test_a_pod_mutated_by_the_old_version_gets_only_the_new_terms_and_keeps_the_old_ones(fixture: str) -> None:
    # Decision: the patch only adds. The old terms stay (on a clique node the two keys hold the same value,
    # so they agree); the new ones are appended, once, and the pod is then stable.
    obj, ns = _obj(fixture)
    old = _as_old_version_mutated_it(obj, ns)
    result = _mutate(old, ns)
    assert result.outcome == "mutated"
    ops = list(result.patch)
    assert all(op["op"] == "add" and op["path"].endswith("/-") for op in ops), ops
    assert {op["path"].split("/")[3] for op in ops} == {"podAffinity", "nodeAffinity"}
    upgraded = support.apply(old, ops)
    keys_after = [t["topologyKey"] for t in _pod_terms(upgraded)]
    assert keys_after.count(keys.CLIQUE_LABEL) >= 1 and keys_after.count(keys.DOMAIN_LABEL) == 1
    for before, after in zip(_node_expressions(old), _node_expressions(upgraded), strict=True):
        if before:
            assert after[: len(before)] == before
            assert after[len(before):] == [{"key": keys.DOMAIN_LABEL, "operator": "Exists"}]
    support.assert_kept_in_domain(upgraded, CD8_LABEL if "generate-name" in fixture else
                                  upgraded["metadata"]["labels"][keys.GROUP_LABEL])
    again = _mutate(upgraded, ns)
    assert (again.patch, again.outcome) == ((), "unchanged")


# -- issue 11 item 3: admission fails closed ------------------------------------------------------------

DEFERRED = [{"op": "replace", "path": "/spec/schedulerName", "value": "imex-scheduler"},
            {"op": "add", "path": "/metadata/annotations/imex-webhook.io~1mutated", "value": mutating.MUTATED_MARKER}]


def _claims_pod(claims: list[dict[str, Any]] | None, annotations: dict[str, str] | None = None,
                scheduler: str | None = "default-scheduler") -> dict[str, Any]:
    obj, _ = _obj("create-job-pod-generate-name.json")
    obj["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": "3", **(annotations or {})}
    if claims is None:
        del obj["spec"]["resourceClaims"]
    else:
        obj["spec"]["resourceClaims"] = claims
    if scheduler is None:
        del obj["spec"]["schedulerName"]
    else:
        obj["spec"]["schedulerName"] = scheduler
    return obj


UNCACHED_TEMPLATE = [{"name": "ch", "resourceClaimTemplateName": "not-cached-yet"}]
UNCACHED_CLAIM = [{"name": "ch", "resourceClaimName": "not-cached-yet"}]
CACHED_GPU = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]


@pytest.mark.parametrize(("case", "obj", "outcome", "reason", "patch", "warned"), [
    ("an uncached template", _claims_pod(UNCACHED_TEMPLATE), "mutated", "group-deferred", DEFERRED, True),
    ("an uncached shared claim", _claims_pod(UNCACHED_CLAIM), "mutated", "group-deferred", DEFERRED, True),
    ("an uncached template next to a cached GPU claim", _claims_pod([*CACHED_GPU, *UNCACHED_TEMPLATE]),
     "mutated", "group-deferred", DEFERRED, True),
    ("an uncached template, schedulerName absent", _claims_pod(UNCACHED_TEMPLATE, scheduler=None),
     "mutated", "group-deferred", [{**DEFERRED[0], "op": "add"}, DEFERRED[1]], True),
    ("an uncached template, a custom scheduler is kept", _claims_pod(UNCACHED_TEMPLATE, scheduler="volcano"),
     "mutated", "group-deferred", DEFERRED[1:], True),
    ("an uncached template, already deferred (reinvocation)",
     _claims_pod(UNCACHED_TEMPLATE, {keys.MUTATED_ANNOTATION: "v0"}, scheduler="imex-scheduler"),
     "unchanged", "group-deferred", [], True),
    ("only a cached claim that makes no group", _claims_pod(CACHED_GPU), "skipped", "not-a-group", [], False),
    ("no claims and no group annotation", _claims_pod(None), "skipped", "not-a-group", [], False),
    ("no claims and no group annotation, a bad size is none of our business",
     _claims_pod(None, {keys.GROUP_SIZE_ANNOTATION: "²"}), "skipped", "not-a-group", [], False),
])
def test_a_pod_that_may_be_in_a_group_but_cannot_be_resolved_still_goes_to_the_imex_scheduler(
        case: str, obj: dict[str, Any], outcome: str, reason: str, patch: list[Any], warned: bool) -> None:
    result = _mutate(copy.deepcopy(obj), "ml", _catalog_snapshot())
    assert (result.allowed, result.outcome, result.reason, result.group_id) == (True, outcome, reason, None), case
    assert list(result.patch) == patch, case
    assert bool(result.warnings) is warned, case
    if reason == "group-deferred":
        assert any("resolves it at scheduling time" in w or "left as is" in w for w in result.warnings), case
        again = _mutate(support.apply(obj, list(result.patch)), "ml", _catalog_snapshot())
        assert (again.allowed, again.patch) == (True, ()), case
    assert all(len(w) <= 256 for w in result.warnings)


def test_a_deferred_pod_gets_the_whole_mutation_once_its_template_is_cached() -> None:
    obj, ns = _obj("create-unknown-template.json")
    deferred = support.apply(obj, list(_mutate(obj, ns).patch))
    cached = builders.store([*demo.objects(), *builders.cd_objects("fresh-cd", 4)]).snapshot()
    template = obj["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    assert ("ml", template) in cached.catalog.templates
    result = _mutate(deferred, ns, cached)
    assert result.outcome == "mutated" and result.group_id == f"cd:{builders.cd_uid('fresh-cd')}"
    support.assert_kept_in_domain(support.apply(deferred, list(result.patch)),
                                  mutating.group_label_value(result.group_id))


BAD_SIZES = ["²", "٣", "9" * 5000, "-1", "+3", "1e3", "0", "100001", "3.0", "eight", "", " ", "0x10", "3 pods"]


@pytest.mark.parametrize("value", BAD_SIZES, ids=lambda v: repr(v[:12]) + (f"..{len(v)}" if len(v) > 12 else ""))
@pytest.mark.parametrize("claims", [None, UNCACHED_TEMPLATE, [{"name": "ch", "resourceClaimTemplateName":
                                                                 demo.template_name("train-8")}]],
                         ids=["annotation-group", "uncached-template", "compute-domain"])
def test_a_bad_group_size_is_denied_naming_the_annotation_the_value_and_what_is_valid(
        value: str, claims: list[dict[str, Any]] | None) -> None:
    annotations = {keys.GROUP_SIZE_ANNOTATION: value}
    if claims is None:
        annotations[keys.GROUP_ANNOTATION] = "run-1"
    result = _mutate(_claims_pod(claims, annotations))
    assert (result.allowed, result.patch, result.outcome, result.reason) == (False, (), "denied", "bad-group-size")
    assert keys.GROUP_SIZE_ANNOTATION in result.message and "100000" in result.message
    assert repr(value[:40]) in result.message
    assert len(result.message) <= 400


@pytest.mark.parametrize(("value", "size"), [("1", "1"), (" 8 ", "8"), ("08", "8"), ("100000", "100000")])
def test_a_valid_group_size_is_accepted(value: str, size: str) -> None:
    result = _mutate(_claims_pod(None, {keys.GROUP_ANNOTATION: "run-1", keys.GROUP_SIZE_ANNOTATION: value}))
    assert result.allowed and result.outcome == "mutated"
    assert [op for op in result.patch if "group-size" in op["path"]] == []  # the user's own annotation is kept


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_group_annotation_that_no_claim_resolves_is_denied(value: str) -> None:
    result = _mutate(_claims_pod(None, {keys.GROUP_ANNOTATION: value}))
    assert (result.allowed, result.reason) == (False, "bad-group-annotation")
    assert keys.GROUP_ANNOTATION in result.message


def test_an_empty_group_annotation_next_to_a_compute_domain_is_ignored_as_before() -> None:
    obj, ns = _obj("create-job-pod-generate-name.json")
    obj["metadata"]["annotations"][keys.GROUP_ANNOTATION] = " "
    assert _mutate(obj, ns).group_id == CD8


@pytest.mark.parametrize(("case", "edit", "allowed"), [
    ("a 100,000-character group annotation", lambda o: o["metadata"]["annotations"].update(
        {keys.GROUP_ANNOTATION: "g" * 100_000}), False),
    ("a 100,000-character group annotation contradicting the ComputeDomain", lambda o: o["metadata"][
        "annotations"].update({keys.GROUP_ANNOTATION: "x" * 100_000}), False),
    ("a 100,000-character group label", lambda o: o["metadata"]["labels"].update(
        {keys.GROUP_LABEL: "l" * 100_000}), False),
    ("a 100,000-character custom scheduler", lambda o: o["spec"].update({"schedulerName": "s" * 100_000}), True),
    ("a 100,000-character unknown nodeName", lambda o: o["spec"].update({"nodeName": "n" * 100_000}), True),
])
def test_huge_values_give_a_bounded_verdict(case: str, edit: Any, allowed: bool) -> None:
    obj, ns = _obj("create-job-pod-generate-name.json")
    if "contradicting" not in case and "annotation" in case:
        del obj["spec"]["resourceClaims"]
    edit(obj)
    result = _mutate(obj, ns)
    assert result.allowed is allowed, case
    assert len(result.message) <= mutating.MESSAGE_MAX and all(len(w) <= 256 for w in result.warnings), case
    if allowed:
        label = support.apply(obj, list(result.patch))["metadata"]["labels"][keys.GROUP_LABEL]
        assert len(label) <= 63 and LABEL_VALUE.match(label), case


@pytest.mark.parametrize(("path", "value", "field"), [
    (("metadata", "annotations"), {keys.GROUP_SIZE_ANNOTATION: 8}, "request.object.metadata.annotations"),
    (("metadata", "annotations"), ["not", "a", "map"], "request.object.metadata.annotations"),
    (("metadata", "labels"), {keys.GROUP_LABEL: None}, "request.object.metadata.labels"),
    (("spec", "resourceClaims"), {"name": "ch"}, "request.object.spec.resourceClaims"),
    (("spec", "schedulerName"), 7, "request.object.spec.schedulerName"),
])
def test_wrong_types_are_a_wire_error_naming_the_field(path: tuple[str, str], value: Any, field: str) -> None:
    obj, ns = _obj("create-job-pod-generate-name.json")
    obj[path[0]][path[1]] = value
    with pytest.raises(WireError) as err:
        _mutate(obj, ns)
    assert err.value.path.startswith(field)


@pytest.mark.parametrize(("obj", "expected"), [
    ({"spec": {"resourceClaims": [{"name": "c"}]}}, True),
    ({"metadata": {"annotations": {keys.GROUP_ANNOTATION: ""}}}, True),
    ({"metadata": {"annotations": {keys.GROUP_SIZE_ANNOTATION: "3"}}, "spec": {"resourceClaims": []}}, False),
    ({"metadata": None, "spec": "nonsense"}, False),
    ([], False),
])
def test_might_be_group_matches_the_webhook_match_conditions_on_any_input(obj: Any, expected: bool) -> None:
    assert mutating.might_be_group(obj) is expected


# --pack-plain-gpu-pods (webhook.domain.placement.plain_pods): a GPU pod in no group goes to the dedicated profile.
PACK = Policy(pack_plain_gpu_pods=True)


def _plain_pod(gpus: int, scheduler: str | None = None, **meta: Any) -> dict[str, Any]:
    pod = builders.pod("notebook", gpus=gpus)
    pod["metadata"].update(meta)
    if scheduler is None:
        pod["spec"].pop("schedulerName", None)
    else:
        pod["spec"]["schedulerName"] = scheduler
    return pod


def _pack(obj: dict[str, Any], snapshot: Any = None) -> MutationResult:
    snap = snapshot or support.demo_snapshot()
    return mutating.mutate(obj, "ml", snap.catalog, snap.nodes, PACK)


@pytest.mark.parametrize(("scheduler", "op"), [(None, "add"), ("default-scheduler", "replace"), ("", "replace")])
def test_a_gpu_pod_in_no_group_goes_to_the_dedicated_profile_when_packing_is_on(scheduler: str | None,
                                                                              op: str) -> None:
    result = _pack(_plain_pod(1, scheduler))
    assert (result.allowed, result.outcome, result.reason, result.group_id) == (True, "mutated", "plain-gpu-pod", None)
    assert {"op": op, "path": "/spec/schedulerName", "value": POLICY.scheduler_name} in result.patch
    assert _paths(result) == ["/spec/schedulerName", "/metadata/annotations/imex-webhook.io~1mutated"]  # only


def test_packing_leaves_a_pod_already_sent_unchanged_and_a_custom_scheduler_alone() -> None:
    sent = _plain_pod(1, POLICY.scheduler_name, annotations={keys.MUTATED_ANNOTATION: mutating.MUTATED_MARKER})
    assert (_pack(sent).outcome, _pack(sent).patch) == ("unchanged", ())
    custom = _pack(_plain_pod(1, "volcano"))
    assert (custom.allowed, custom.patch, custom.outcome, custom.reason) == (True, (), "skipped", "custom-scheduler")


def test_packing_is_off_by_default_and_never_touches_a_pod_without_gpus() -> None:
    assert _mutate(_plain_pod(2)) == MutationResult(True)
    assert _pack(_plain_pod(0)) == MutationResult(True)


def test_packing_leaves_a_pod_a_controller_puts_in_a_group_as_it_is_without_the_setting() -> None:
    from tests import controller_objects as co

    jobset = co.jobset("train", [("workers", 2, 4, co.pod_spec(gpus=4))])
    children = co.jobset_children(jobset)
    pod = next(o for o in children if o["kind"] == "Pod")
    snapshot = builders.snapshot([jobset, *children])
    assert _pack(pod, snapshot) == mutating.mutate(pod, "ml", snapshot.catalog, snapshot.nodes, POLICY)


@pytest.mark.parametrize("gpus", ["1e18", "99999999999999999999999", "0.5"])
def test_packing_an_odd_gpu_quantity_is_a_verdict_not_a_crash(gpus: str) -> None:
    pod = _plain_pod(1)
    pod["spec"]["containers"][0]["resources"] = {"limits": {keys.GPU_RESOURCE: gpus}}
    try:
        result = _pack(pod)
    except WireError as exc:  # named, for the caller to turn into a 400
        assert "nvidia.com/gpu" in str(exc) or "resources" in str(exc)
    else:
        assert result.allowed
