"""``admission_review``: the AdmissionReview v1 envelope around ``mutating``.

Covered: malformed reviews raise ``WireError`` naming the field; only Pod CREATE without a subresource
is looked at (UPDATE, DELETE, pods/status and other resources are allowed unchanged); ``dryRun`` does
not change the verdict; the reply echoes the uid, carries a base64 JSON Patch with ``patchType`` only
when there is one, a ``status`` only on denial, and warnings; an internal failure denies a pod that may
belong to a group (code 500) and admits any other.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests import admission_support as support
from webhook.domain.admission import admission_review
from webhook.domain.admission.mutating import MutationResult
from webhook.domain.policy import Policy
from webhook.errors import WireError
from webhook.wire import admission

POLICY = Policy()


def _admit(body: dict[str, Any]) -> tuple[admission.Review, MutationResult]:
    review = admission.parse(body)
    snap = support.demo_snapshot()
    return review, admission_review.admit(review, snap.catalog, snap.nodes, POLICY)


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return body


def _set(body: dict[str, Any], value: Any, *path: str) -> dict[str, Any]:
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return body


REVIEW = "create-job-pod-generate-name.json"


@pytest.mark.parametrize(("body", "field"), [
    ([], ""),
    (_set(support.review(REVIEW), "admission.k8s.io/v1beta1", "apiVersion"), "apiVersion"),
    (_without(support.review(REVIEW), "apiVersion"), "apiVersion"),
    (_set(support.review(REVIEW), "AdmissionResponse", "kind"), "kind"),
    (_without(support.review(REVIEW), "request"), "request"),
    (_set(support.review(REVIEW), None, "request"), "request"),
    (_without(support.review(REVIEW), "request", "uid"), "request.uid"),
    (_set(support.review(REVIEW), "", "request", "uid"), "request.uid"),
    (_set(support.review(REVIEW), 42, "request", "uid"), "request.uid"),
    (_without(support.review(REVIEW), "request", "operation"), "request.operation"),
    (_without(support.review(REVIEW), "request", "resource"), "request.resource"),
    (_set(support.review(REVIEW), "yes", "request", "dryRun"), "request.dryRun"),
    (_set(support.review(REVIEW), ["pod"], "request", "object"), "request.object"),
    (_set(support.review(REVIEW), 7, "request", "namespace"), "request.namespace"),
])
def test_a_malformed_review_is_a_wire_error_naming_the_field(body: Any, field: str) -> None:
    with pytest.raises(WireError) as err:
        admission.parse(body)
    assert err.value.path == field


def test_a_pod_create_without_its_object_is_a_wire_error() -> None:
    body = _set(support.review(REVIEW), None, "request", "object")
    with pytest.raises(WireError) as err:
        _admit(body)
    assert err.value.path == "request.object"


def test_a_malformed_pod_names_the_field_under_request_object() -> None:
    body = _set(support.review(REVIEW), "not-a-list", "request", "object", "spec", "resourceClaims")
    with pytest.raises(WireError) as err:
        _admit(body)
    assert err.value.path == "request.object.spec.resourceClaims"


@pytest.mark.parametrize("fixture", ["update-pod.json", "delete-pod.json", "update-pod-status.json"])
def test_anything_but_a_pod_create_is_allowed_unchanged(fixture: str) -> None:
    review, result = _admit(support.review(fixture))
    assert not review.is_pod_create
    assert result == MutationResult(True, reason="not-pod-create")
    reply = admission_review.respond(review.uid, result)["response"]
    assert reply == {"uid": review.uid, "allowed": True}


def test_a_create_of_another_resource_or_subresource_is_not_a_pod_create() -> None:
    body = support.review(REVIEW)
    body["request"]["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
    assert not admission.parse(body).is_pod_create
    body = support.review(REVIEW)
    body["request"]["subResource"] = "binding"
    assert not admission.parse(body).is_pod_create


def test_dry_run_gives_the_same_verdict_and_patch() -> None:
    wet = support.review(REVIEW)
    dry = _set(support.review(REVIEW), True, "request", "dryRun")
    (wet_review, wet_result), (dry_review, dry_result) = _admit(wet), _admit(dry)
    assert (wet_review.dry_run, dry_review.dry_run) == (False, True)
    assert wet_result == dry_result


def test_the_reply_echoes_the_uid_and_carries_a_base64_json_patch() -> None:
    review, result = _admit(support.review(REVIEW))
    reply = admission_review.respond(review.uid, result)
    assert (reply["apiVersion"], reply["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    response = reply["response"]
    assert response["uid"] == "7c2d5e1a-9b3f-4d6e-8a21-3f5c7b9d1e02"
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == list(result.patch)
    assert admission.decode_patch(response) == list(result.patch)
    assert "status" not in response and "warnings" not in response


def test_a_denial_carries_a_status_with_code_reason_and_message_and_no_patch() -> None:
    review, result = _admit(support.review("create-two-compute-domains.json"))
    response = admission_review.respond(review.uid, result)["response"]
    assert response["allowed"] is False
    assert "patch" not in response and "patchType" not in response
    status = response["status"]
    assert (status["code"], status["reason"], status["status"]) == (400, "BadRequest", "Failure")
    assert "ComputeDomains" in status["message"]


def test_warnings_are_returned_with_the_patch() -> None:
    review, result = _admit(support.review("create-pinned-unknown-node.json"))
    response = admission_review.respond(review.uid, result)["response"]
    assert response["patchType"] == "JSONPatch"
    assert response["warnings"] == list(result.warnings) and len(result.warnings) == 1


def test_an_internal_error_denies_a_possible_group_pod_with_a_short_message_and_code_500() -> None:
    review = admission.parse(support.review(REVIEW))
    result = admission_review.internal_error(review, RuntimeError("boom"))
    assert (result.allowed, result.patch, result.outcome, result.reason) == (False, (), "error", "internal")
    assert "RuntimeError" in result.message and len(result.message) <= 200
    status = admission_review.respond(review.uid, result)["response"]["status"]
    assert (status["code"], status["reason"]) == (500, "InternalError")


@pytest.mark.parametrize("fixture", ["create-plain-pod.json", "update-pod.json", "delete-pod.json"])
def test_an_internal_error_on_a_pod_that_cannot_be_in_a_group_admits_it(fixture: str) -> None:
    review = admission.parse(support.review(fixture))
    result = admission_review.internal_error(review, RuntimeError("boom"))
    assert (result.allowed, result.patch, result.outcome, result.reason) == (True, (), "error", "internal")


@pytest.mark.parametrize(("fixture", "ref"), [
    (REVIEW, "ml/train-8-3-*"),
    ("create-dry-run.json", "ml/train-8-debug"),
    ("delete-pod.json", "ml/train-8-0"),
])
def test_the_pod_reference_for_logs_shows_generate_name_before_the_name_exists(fixture: str, ref: str) -> None:
    assert admission.parse(support.review(fixture)).pod_ref == ref


def test_decode_patch_is_empty_without_a_patch() -> None:
    assert admission.decode_patch({"uid": "u", "allowed": True}) == []
