"""POST /mutate through the real TLS server (``imex-webhook serve`` in a subprocess, embedded demo
cluster) with the AdmissionReview fixtures exactly as kube-apiserver sends them: group pods are patched
into one domain and the patched pod gets no patch back; contradictions are denied in a 200 reply; other
operations pass unchanged; malformed reviews get a 400 JSON error."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests import admission_support as support
from tests import serving
from webhook.domain import keys, mutating

CREATES = support.fixture_names("create-")
DENIED = {"create-two-compute-domains.json", "create-annotation-contradicts.json",
          "create-pinned-outside-domain.json"}
NO_GROUP = {"create-plain-pod.json", "create-unknown-template.json"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.serve(tmp_path_factory.mktemp("mutate")) as s:
        yield s


def _mutate(served: serving.Served, body: Any) -> dict[str, Any]:
    reply = served.post("/mutate", body)
    assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/json"
    answer: dict[str, Any] = reply.json()
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert answer["response"]["uid"] == body["request"]["uid"]
    return answer["response"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("fixture", sorted(set(CREATES) - DENIED - NO_GROUP))
def test_group_pods_are_patched_into_one_domain_and_left_alone_after(served: serving.Served, fixture: str) -> None:
    review = support.review(fixture)
    response = _mutate(served, review)
    assert response["allowed"] and response["patchType"] == "JSONPatch"
    patched = support.apply(review["request"]["object"], json.loads(base64.b64decode(response["patch"])))
    label = mutating.group_label_value(patched["metadata"]["annotations"][keys.GROUP_ID_ANNOTATION])
    support.assert_kept_in_domain(patched, label, "volcano" if "custom-scheduler" in fixture else support.SCHEDULER)
    review["request"]["object"] = patched
    again = _mutate(served, review)
    assert "patch" not in again and "patchType" not in again and again["allowed"]


@pytest.mark.parametrize("fixture", sorted(DENIED))
def test_contradictions_are_denied_with_a_message(served: serving.Served, fixture: str) -> None:
    response = _mutate(served, support.review(fixture))
    assert response["allowed"] is False and response["status"]["message"] and "patch" not in response


@pytest.mark.parametrize("fixture", [*sorted(NO_GROUP), "update-pod.json", "delete-pod.json",
                                     "update-pod-status.json"])
def test_everything_else_is_allowed_without_a_patch(served: serving.Served, fixture: str) -> None:
    response = _mutate(served, support.review(fixture))
    assert response["allowed"] and "patch" not in response


@pytest.mark.parametrize(("payload", "field"), [
    (b"not json", None),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}',
     "apiVersion"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE", '
     b'"resource": {"group": "", "version": "v1", "resource": "pods"}}}',
     "request.uid"),
])
def test_malformed_reviews_get_a_400_json_error(served: serving.Served, payload: bytes, field: str | None) -> None:
    reply = served.post("/mutate", data=payload)
    assert reply.status_code == 400 and reply.json()["status"] == 400
    if field:
        assert reply.json()["field"] == field


def test_mutations_are_counted_in_metrics(served: serving.Served) -> None:
    _mutate(served, support.review("create-dry-run.json"))
    assert 'imex_webhook_decisions_total{outcome="mutated"' in served.get("/metrics").text
