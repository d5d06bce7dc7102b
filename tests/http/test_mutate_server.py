"""POST /mutate through the real TLS server (``imex-webhook serve`` in a subprocess, embedded demo
cluster) with the AdmissionReview fixtures exactly as kube-apiserver sends them: group pods are patched
into one domain (topologyKey imex-webhook.io/domain) and the patched pod gets no patch back; a pod whose
template is not cached yet still goes to the imex scheduler; contradictions and bad group sizes are
denied in a 200 reply; other operations pass unchanged; malformed and hostile reviews get a 400 JSON
error or a verdict, never a 500."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests import admission_support as support
from tests import serving
from webhook.domain import keys
from webhook.domain.admission import mutating

CREATES = support.fixture_names("create-")
DENIED = {"create-two-compute-domains.json", "create-annotation-contradicts.json",
          "create-pinned-outside-domain.json"}
NO_GROUP = {"create-plain-pod.json"}
DEFERRED = {"create-unknown-template.json"}


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


@pytest.mark.parametrize("fixture", sorted(set(CREATES) - DENIED - NO_GROUP - DEFERRED))
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


def test_a_pod_whose_template_is_not_cached_yet_goes_to_the_imex_scheduler(served: serving.Served) -> None:
    review = support.review("create-unknown-template.json")
    response = _mutate(served, review)
    assert response["allowed"] and response["patchType"] == "JSONPatch"
    patched = support.apply(review["request"]["object"], json.loads(base64.b64decode(response["patch"])))
    assert patched["spec"]["schedulerName"] == support.SCHEDULER
    assert keys.MUTATED_ANNOTATION in patched["metadata"]["annotations"]
    assert any("scheduling time" in w for w in response["warnings"])
    review["request"]["object"] = patched
    assert "patch" not in _mutate(served, review)


def test_the_pod_affinity_uses_the_project_domain_label(served: serving.Served) -> None:
    review = support.review("create-annotation-group.json")  # an annotation group may land in a fabric zone
    patched = support.apply(review["request"]["object"],
                            json.loads(base64.b64decode(_mutate(served, review)["patch"])))
    terms = patched["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["topologyKey"] for t in terms] == [keys.DOMAIN_LABEL]


@pytest.mark.parametrize("value", ["²", "9" * 5000, "-1", "1e3"], ids=["superscript", "5000-digits", "-1", "1e3"])
def test_a_bad_group_size_is_denied(served: serving.Served, value: str) -> None:
    review = support.review("create-annotation-group.json")
    review["request"]["object"]["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] = value
    response = _mutate(served, review)
    assert response["allowed"] is False and "patch" not in response
    assert keys.GROUP_SIZE_ANNOTATION in response["status"]["message"]
    assert repr(value[:40]) in response["status"]["message"]


@pytest.mark.parametrize(("case", "edit"), [
    ("a 1 MiB group annotation", lambda o: o["metadata"]["annotations"].update({keys.GROUP_ANNOTATION: "g" * 2**20})),
    ("a group size that is a number", lambda o: o["metadata"]["annotations"].update(
        {keys.GROUP_SIZE_ANNOTATION: 8})),
    ("a claim that is a string", lambda o: o["spec"].update(resourceClaims=["imex-channel"])),
    ("an overflowing quantity", lambda o: o["spec"]["containers"][0]["resources"]["limits"].update(
        {"nvidia.com/gpu": "1e999"})),
    ("deep nesting", lambda o: o["spec"].update(overhead=json.loads('{"a": ' * 900 + "1" + "}" * 900))),
])
def test_hostile_reviews_get_a_verdict_or_a_400_json_error_never_a_500(served: serving.Served, case: str,
                                                                       edit: Any) -> None:
    review = support.review("create-annotation-group.json")
    edit(review["request"]["object"])
    reply = served.post("/mutate", review)
    assert reply.status_code in (200, 400), case
    assert reply.headers["Content-Type"] == "application/json", case
    if reply.status_code == 200:
        assert reply.json()["response"]["uid"] == review["request"]["uid"], case


def test_mutations_are_counted_in_metrics(served: serving.Served) -> None:
    _mutate(served, support.review("create-dry-run.json"))
    assert 'imex_webhook_decisions_total{outcome="mutated"' in served.get("/metrics").text
