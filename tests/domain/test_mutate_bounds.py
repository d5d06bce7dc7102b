"""What a pod can make ``/mutate`` answer is bounded by us, not by what the pod carries.

kube-apiserver presents no client certificate, so anyone who may create a pod decides what ``/mutate``
reads. The patch adds the domain requirement to every required nodeSelectorTerm (one op each), so the
terms are bounded (``MAX_NODE_SELECTOR_TERMS``: more are denied with the bound in the message); the
warnings are bounded (``WARNINGS_MAX``, the last one saying how many more); and annotations whose values
we cannot read (group name, exclusive-domain) are denied before any work, with the value and what is valid.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests import admission_support as support
from tests import builders
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.domain.admission.mutating import MAX_NODE_SELECTOR_TERMS, WARNING_MAX, WARNINGS_MAX, MutationResult
from webhook.domain.policy import Policy

POLICY = Policy()
TERMS_PATH = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/"


def _mutate(obj: dict[str, Any], namespace: str = "ml") -> MutationResult:
    snap = support.demo_snapshot()
    return mutating.mutate(obj, namespace, snap.catalog, snap.nodes, POLICY)


def _group_pod_with_terms(count: int) -> dict[str, Any]:
    pod = builders.pod("train-8-0", cd="train-8")
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [f"z{i}"]}]} for i in range(count)]
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}
    return pod


def test_a_group_pod_with_the_most_terms_accepted_gets_one_op_per_term() -> None:
    result = _mutate(_group_pod_with_terms(MAX_NODE_SELECTOR_TERMS))
    assert result.allowed and result.outcome == "mutated"
    term_ops = [op for op in result.patch if op["path"].startswith(TERMS_PATH)]
    assert len(term_ops) == MAX_NODE_SELECTOR_TERMS
    assert len(json.dumps(list(result.patch))) < 16 * 1024


@pytest.mark.parametrize("count", [MAX_NODE_SELECTOR_TERMS + 1, 157_000])
def test_a_group_pod_with_more_terms_is_denied_naming_the_count_and_the_bound(count: int) -> None:
    result = _mutate(_group_pod_with_terms(count))
    assert (result.allowed, result.reason, result.patch) == (False, "too-many-node-terms", ())
    assert f"has {count} nodeSelectorTerms" in result.message
    assert f"at most {MAX_NODE_SELECTOR_TERMS}" in result.message
    assert len(result.message) <= mutating.MESSAGE_MAX


def test_a_pod_in_no_group_keeps_its_terms_whatever_their_number() -> None:
    # Terms matter only where we add to them: a plain pod passes untouched, as before.
    pod = _group_pod_with_terms(MAX_NODE_SELECTOR_TERMS + 1)
    del pod["spec"]["resourceClaims"]
    pod["spec"]["containers"][0]["resources"].pop("claims")
    result = _mutate(pod)
    assert result.allowed and result.patch == ()


def test_warnings_are_bounded_and_the_last_says_how_many_more() -> None:
    pod = builders.pod("p")
    pod["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimTemplateName": f"late-{i}"} for i in range(200)]
    result = _mutate(pod)
    assert result.allowed
    assert len(result.warnings) == WARNINGS_MAX
    assert result.warnings[-1] == f"and {200 - WARNINGS_MAX + 2} more warnings"
    assert all(len(w) <= WARNING_MAX for w in result.warnings)


@pytest.mark.parametrize(("case", "annotations", "reason", "names"), [
    ("a group name with a space", {keys.GROUP_ANNOTATION: "my job"}, "bad-group-annotation", "'my job'"),
    ("a group name of 64 characters", {keys.GROUP_ANNOTATION: "g" * 64}, "bad-group-annotation", "at most 63"),
    ("a group name with a bidirectional override", {keys.GROUP_ANNOTATION: "a\u202eb"}, "bad-group-annotation",
     "\\u202e"),
    ("a group name of 100,000 characters", {keys.GROUP_ANNOTATION: "x" * 100_000}, "bad-group-annotation",
     "at most 63"),
    ("exclusive-domain spelled yes", {keys.EXCLUSIVE_ANNOTATION: "yes"}, "bad-exclusive-domain", "'yes'"),
    ("exclusive-domain in capitals", {keys.EXCLUSIVE_ANNOTATION: "TRUE"}, "bad-exclusive-domain", "lower case"),
])
def test_annotations_we_cannot_read_are_denied_before_any_work(case: str, annotations: dict[str, str],
                                                                reason: str, names: str) -> None:
    result = _mutate(builders.pod("train-8-0", cd="train-8", annotations=annotations))
    assert (result.allowed, result.reason, result.patch) == (False, reason, ()), case
    assert names in result.message, case
    assert len(result.message) <= mutating.MESSAGE_MAX, case


@pytest.mark.parametrize("value", ["true", "false"])
def test_exclusive_domain_true_and_false_are_accepted(value: str) -> None:
    result = _mutate(builders.pod("train-8-0", cd="train-8", annotations={keys.EXCLUSIVE_ANNOTATION: value}))
    assert result.allowed and result.outcome == "mutated"


def test_the_denial_does_not_depend_on_the_order_of_the_pods_fields() -> None:
    pod = _group_pod_with_terms(MAX_NODE_SELECTOR_TERMS + 1)
    reordered = {key: copy.deepcopy(pod[key]) for key in reversed(list(pod))}
    assert _mutate(reordered).reason == _mutate(pod).reason == "too-many-node-terms"
