"""POST /mutate through ``app.test_client()`` with AdmissionReviews exactly as kube-apiserver sends them.

Covered:
- every Pod CREATE fixture: HTTP 200, ``admission.k8s.io/v1`` AdmissionReview, ``uid`` echoed; the base64
  JSON Patch applied with ``jsonpatch`` gives a ``V1Pod`` kept in one domain, and posting that pod again
  gives no patch fields at all;
- UPDATE, DELETE and pods/status reviews are allowed with no patch; ``dryRun`` true and false answer alike;
- denials are a 200 with ``allowed: false`` and a ``status`` telling the user what to fix;
- a pod whose template is not cached yet is still sent to the imex scheduler, marked and warned; a bad
  group size is denied; hostile bodies (deep nesting, huge strings, wrong types) get a denial or a 400
  JSON error, never a 500;
- malformed reviews get a 400 JSON error naming the field; our own failure denies a pod that may be in
  a group (never admits it unmodified), admits any other, and counts in /metrics; decisions are counted
  by outcome and logged as one structured line each.
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
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.admission import admission_review, mutating
from webhook.wire import admission

CREATES = support.fixture_names("create-")
DENIED = {"create-two-compute-domains.json", "create-annotation-contradicts.json",
          "create-pinned-outside-domain.json"}
NO_GROUP = {"create-plain-pod.json"}
DEFERRED = {"create-unknown-template.json"}


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


@pytest.mark.parametrize("fixture", sorted(set(CREATES) - DENIED - NO_GROUP - DEFERRED))
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
    patched = support.apply(review["request"]["object"], admission.decode_patch(body["response"]))
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


def test_an_unknown_template_sends_the_pod_to_the_imex_scheduler_with_a_warning(client: FlaskClient) -> None:
    review = support.review("create-unknown-template.json")
    _, body = _post(client, review)
    response = body["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    assert any("fresh-cd-channel" in w for w in response["warnings"])
    assert any("resolves it at scheduling time" in w for w in response["warnings"])
    patched = support.apply(review["request"]["object"], admission.decode_patch(response))
    assert patched["spec"]["schedulerName"] == "imex-scheduler"
    assert patched["metadata"]["annotations"][keys.MUTATED_ANNOTATION] == mutating.MUTATED_MARKER
    again = _again(client, review, patched)
    assert "patch" not in again and again["allowed"] is True
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'imex_webhook_decisions_total{outcome="mutated",reason="group-deferred",verb="mutate"} 1.0' in metrics
    assert 'imex_webhook_decisions_total{outcome="unchanged",reason="group-deferred",verb="mutate"} 1.0' in metrics


@pytest.mark.parametrize("value", ["²", "9" * 5000, "-1", "1e3"], ids=["superscript", "5000-digits", "-1", "1e3"])
def test_a_bad_group_size_is_denied_in_a_200_reply_naming_the_annotation(client: FlaskClient, value: str) -> None:
    review = support.review("create-annotation-group.json")
    review["request"]["object"]["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] = value
    status, body = _post(client, review)
    assert status == 200
    response = body["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 400
    message = response["status"]["message"]
    assert keys.GROUP_SIZE_ANNOTATION in message and repr(value[:40]) in message and "100000" in message
    assert len(message) < 400


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def _hostile(edit: Any) -> bytes:
    review = support.review("create-job-pod-generate-name.json")
    edit(review["request"]["object"])
    return json.dumps(review).encode()


HOSTILE = [
    ("nesting deeper than the JSON parser allows",
     b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": ' + b'{"a": ' * 3000
     + b"1" + b"}" * 3001),
    ("deep nesting in an ignored field", _hostile(lambda o: o["spec"].update(overhead=_nested(900)))),
    ("deep nesting in the affinity", _hostile(lambda o: o["spec"].update(
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [_nested(900)]}]}}}))),
    ("a 1 MiB group annotation", _hostile(lambda o: o["metadata"]["annotations"].update(
        {keys.GROUP_ANNOTATION: "g" * 2**20}))),
    ("a 1 MiB group size", _hostile(lambda o: o["metadata"]["annotations"].update(
        {keys.GROUP_SIZE_ANNOTATION: "9" * 2**20}))),
    ("a 1 MiB label that names another group", _hostile(lambda o: o["metadata"]["labels"].update(
        {keys.GROUP_LABEL: "l" * 2**20}))),
    ("an annotation that is a number", _hostile(lambda o: o["metadata"]["annotations"].update(
        {keys.GROUP_SIZE_ANNOTATION: 8}))),
    ("annotations that are a list", _hostile(lambda o: o["metadata"].update(annotations=["a"]))),
    ("a claim that is a string", _hostile(lambda o: o["spec"].update(resourceClaims=["imex-channel"]))),
    ("node selector terms that are strings", _hostile(lambda o: o["spec"].update(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": ["x"]}}}))),
    ("pod affinity that is a number", _hostile(lambda o: o["spec"].update(affinity={"podAffinity": 3}))),
    ("a metadata that is a list", _hostile(lambda o: o.update(metadata=[1]))),
    ("a quantity that overflows", _hostile(lambda o: o["spec"]["containers"][0]["resources"]["limits"].update(
        {"nvidia.com/gpu": "1e999"}))),
]


@pytest.mark.parametrize("body", [b for _, b in HOSTILE], ids=[i for i, _ in HOSTILE])
def test_hostile_reviews_get_a_verdict_or_a_400_json_error_never_a_500(client: FlaskClient, body: bytes) -> None:
    status, reply = _post(client, body)
    assert status in (200, 400), reply
    if status == 400:
        assert reply["status"] == 400 and "mutate" in reply["error"]
    else:
        response = reply["response"]
        assert len(response.get("status", {}).get("message", "")) <= mutating.MESSAGE_MAX
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'imex_webhook_internal_errors_total{verb="mutate"} 1.0' not in metrics


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


@pytest.mark.parametrize("where", ["admit", "mutate", "snapshot"])
def test_an_internal_failure_denies_a_group_pod_never_admits_it_unmodified_and_is_counted(
        client: FlaskClient, demo_app: Flask, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        where: str) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("cache exploded")

    if where == "snapshot":
        monkeypatch.setattr(demo_app.extensions["imex"].engine, "snapshot", broken)
    else:
        monkeypatch.setattr(admission_review if where == "admit" else mutating, where, broken)
    review = support.review("create-job-pod-generate-name.json")
    with caplog.at_level(logging.ERROR, logger="webhook.http.admission"):
        status, body = _post(client, review)
    assert status == 200
    response = body["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 500 and response["status"]["reason"] == "InternalError"
    assert "RuntimeError" in response["status"]["message"] and len(response["status"]["message"]) <= 200
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'imex_webhook_internal_errors_total{verb="mutate"} 1.0' in metrics
    assert 'imex_webhook_decisions_total{outcome="error",reason="internal",verb="mutate"} 1.0' in metrics
    assert "cache exploded" in caplog.text


def test_an_internal_failure_on_a_pod_with_no_claims_and_no_group_annotation_admits_it(
        client: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> mutating.MutationResult:
        raise RuntimeError("cache exploded")

    monkeypatch.setattr(admission_review, "admit", broken)
    review = support.review("create-plain-pod.json")
    status, body = _post(client, review)
    assert (status, body["response"]) == (200, {"uid": review["request"]["uid"], "allowed": True})
    assert 'imex_webhook_internal_errors_total{verb="mutate"} 1.0' in client.get("/metrics").get_data(as_text=True)


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
