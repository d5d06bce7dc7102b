"""POST /mutate through ``app.test_client()`` with AdmissionReviews exactly as kube-apiserver sends them.

Covered:
- every Pod CREATE fixture: HTTP 200, ``admission.k8s.io/v1`` AdmissionReview, ``uid`` echoed; the base64
  JSON Patch applied with ``jsonpatch`` gives a ``V1Pod`` kept in one domain, and posting that pod again
  gives no patch fields at all;
- UPDATE, DELETE and pods/status reviews are allowed with no patch; ``dryRun`` true and false answer alike;
- denials are a 200 with ``allowed: false`` and a ``status`` telling the user what to fix;
- malformed reviews get a 400 JSON error naming the field; our own failure admits the pod with a warning
  and counts in /metrics; decisions are counted by outcome and logged as one structured line each.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests import admission_support as support
from webhook.adapters import demo
from webhook.domain import admission_review, keys, mutating

CREATES = support.fixture_names("create-")
DENIED = {"create-two-compute-domains.json", "create-annotation-contradicts.json",
          "create-pinned-outside-domain.json"}
NO_GROUP = {"create-plain-pod.json", "create-unknown-template.json"}


@pytest.fixture
def client(demo_app: Flask) -> FlaskClient:
    return demo_app.test_client()


def _post(client: FlaskClient, body: Any) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = client.post("/mutate", data=data, content_type="application/json")
    assert reply.content_type == "application/json"
    return reply.status_code, reply.get_json()


def _again(client: FlaskClient, review: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    review["request"]["uid"] = "reinvocation-" + review["request"]["uid"]
    review["request"]["object"] = obj
    status, body = _post(client, review)
    assert status == 200
    response: dict[str, Any] = body["response"]
    return response


@pytest.mark.parametrize("fixture", sorted(set(CREATES) - DENIED - NO_GROUP))
def test_a_group_pod_create_is_patched_into_one_domain_and_then_left_alone(client: FlaskClient,
                                                                           fixture: str) -> None:
    review = support.review(fixture)
    status, body = _post(client, review)
    assert status == 200
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    response = body["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    patched = support.apply(review["request"]["object"], patch)
    group_id = patched["metadata"]["annotations"][mutating.GROUP_ID_ANNOTATION]
    scheduler = "volcano" if "custom-scheduler" in fixture else support.SCHEDULER
    support.assert_kept_in_domain(patched, mutating.group_label_value(group_id), scheduler)
    assert all(len(w) <= 120 for w in response.get("warnings", []))
    again = _again(client, review, patched)
    assert again == {"uid": review["request"]["uid"], "allowed": True, **(
        {"warnings": response["warnings"]} if "warnings" in response else {})}


def test_a_job_pod_with_generate_name_gets_the_compute_domain_group(client: FlaskClient) -> None:
    review = support.review("create-job-pod-generate-name.json")
    assert "name" not in review["request"] and "uid" not in review["request"]["object"]["metadata"]
    _, body = _post(client, review)
    patched = support.apply(review["request"]["object"], admission_review.decode_patch(body["response"]))
    cd = demo.uid("cd", "ml", "train-8")
    assert patched["metadata"]["annotations"][mutating.GROUP_ID_ANNOTATION] == f"cd:{cd}"
    assert patched["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] == "8"
    assert patched["spec"]["schedulerName"] == "imex-scheduler"


@pytest.mark.parametrize("fixture", sorted(NO_GROUP))
def test_a_pod_without_a_known_group_is_allowed_without_patch_fields(client: FlaskClient, fixture: str) -> None:
    _, body = _post(client, support.review(fixture))
    response = body["response"]
    assert response["allowed"] is True
    assert "patch" not in response and "patchType" not in response


def test_an_unknown_template_is_reported_as_a_warning(client: FlaskClient) -> None:
    _, body = _post(client, support.review("create-unknown-template.json"))
    assert any("fresh-cd-channel" in w for w in body["response"]["warnings"])


@pytest.mark.parametrize("fixture", ["update-pod.json", "delete-pod.json", "update-pod-status.json"])
def test_updates_deletes_and_status_writes_are_allowed_unchanged(client: FlaskClient, fixture: str) -> None:
    review = support.review(fixture)
    status, body = _post(client, review)
    assert status == 200
    assert body["response"] == {"uid": review["request"]["uid"], "allowed": True}


@pytest.mark.parametrize("fixture", sorted(DENIED))
def test_contradictions_are_denied_in_a_200_reply_that_says_what_to_fix(client: FlaskClient, fixture: str) -> None:
    review = support.review(fixture)
    status, body = _post(client, review)
    assert status == 200
    response = body["response"]
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is False
    assert "patch" not in response
    assert response["status"]["code"] == 400 and response["status"]["reason"] == "BadRequest"
    assert any(word in response["status"]["message"] for word in ("remove", "a pod can join only one"))


def test_dry_run_true_and_false_get_the_same_answer(client: FlaskClient) -> None:
    answers = []
    for dry_run in (True, False):
        review = support.review("create-dry-run.json")
        review["request"]["dryRun"] = dry_run
        answers.append(_post(client, review))
    assert answers[0] == answers[1]


@pytest.mark.parametrize(("body", "field"), [
    (b"{not json", None),
    (b"[]", None),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}, "apiVersion"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}, "kind"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
      "request": {"operation": "CREATE", "resource": {"group": "", "version": "v1", "resource": "pods"}}},
     "request.uid"),
])
def test_a_malformed_review_gets_a_400_json_error_naming_the_field(client: FlaskClient, body: Any,
                                                                   field: str | None) -> None:
    status, reply = _post(client, body)
    assert status == 400 and reply["status"] == 400 and "mutate" in reply["error"]
    assert reply.get("field") == field


def test_an_internal_failure_admits_the_pod_with_a_warning_and_is_counted(
        client: FlaskClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_: Any) -> mutating.MutationResult:
        raise RuntimeError("cache exploded")

    monkeypatch.setattr(admission_review, "admit", broken)
    review = support.review("create-job-pod-generate-name.json")
    with caplog.at_level(logging.ERROR, logger="webhook.http.admission"):
        status, body = _post(client, review)
    assert status == 200
    assert body["response"]["allowed"] is True and "patch" not in body["response"]
    assert "RuntimeError" in body["response"]["warnings"][0]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'imex_webhook_internal_errors_total{verb="mutate"} 1.0' in metrics
    assert 'imex_webhook_decisions_total{outcome="error",reason="internal",verb="mutate"} 1.0' in metrics
    assert "cache exploded" in caplog.text


def test_decisions_are_counted_by_outcome_and_timed(client: FlaskClient) -> None:
    for fixture in ("create-job-pod-generate-name.json", "create-plain-pod.json", "create-two-compute-domains.json",
                    "delete-pod.json"):
        _post(client, support.review(fixture))
    metrics = client.get("/metrics").get_data(as_text=True)
    for outcome, reason in (("mutated", "patched"), ("skipped", "not-a-group"), ("denied", "conflicting-group"),
                            ("skipped", "not-pod-create")):
        assert f'imex_webhook_decisions_total{{outcome="{outcome}",reason="{reason}",verb="mutate"}} 1.0' in metrics
    assert 'imex_webhook_request_duration_seconds_count{verb="mutate"} 4.0' in metrics
    assert 'imex_webhook_requests_total{code="200",verb="mutate"} 4.0' in metrics


def test_each_pod_create_decision_is_logged_as_one_structured_line(client: FlaskClient,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="imex_webhook.decisions"):
        _post(client, support.review("create-job-pod-generate-name.json"))
    records = [r for r in caplog.records if r.name == "imex_webhook.decisions"]
    assert len(records) == 1
    decision = records[0].decision  # type: ignore[attr-defined]
    assert decision["verb"] == "mutate" and decision["pod"] == "ml/train-8-3-*"
    assert decision["group"] == f"cd:{demo.uid('cd', 'ml', 'train-8')}"
    assert (decision["outcome"], decision["reason"], decision["dry_run"]) == ("mutated", "patched", False)
