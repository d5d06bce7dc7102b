"""The extender verbs through the real TLS server (``imex-webhook serve`` in a subprocess, embedded demo
cluster), with bodies exactly as kube-scheduler sends them: Go field names, ``null`` for absent values,
both nodeCacheCapable modes; malformed bodies get a 400 JSON error, never HTML, never a 500.

Also the acceptance scenario of issue 2: an 8-pod ComputeDomain job is filtered to one clique, a 20-pod
job gets "no domain can host 20 pods", a GPU pod in no group passes where it fits and is packed, and
/inspect shows the reservation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import serving
from webhook.demo import cluster as demo


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.serve(tmp_path_factory.mktemp("serve")) as s:
        yield s


def _member(template: dict[str, Any], name: str, cd: str) -> dict[str, Any]:
    body = copy.deepcopy(template)
    fresh = demo.pod(name, cd, 4)
    body["Pod"]["metadata"].update(name=name, uid=fresh["metadata"]["uid"])
    body["Pod"]["spec"]["resourceClaims"] = fresh["spec"]["resourceClaims"]
    return body


def _domains(names: list[str]) -> set[str]:
    by_name = {n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu.clique") for n in demo.nodes()}
    return {by_name[n] for n in names}


def test_an_eight_pod_compute_domain_job_is_kept_in_one_clique_and_reserved(served: serving.Served) -> None:
    template = serving.fixture("extender/filter-names-train-8.json")
    session = served.session()
    placed = []
    for i in range(8):
        body = _member(template, f"train-8-{i}", "train-8")
        reply = served.post("/filter", body, session=session)
        assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/json"
        result = reply.json()
        assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
        assert result["Error"] == "" and result["Nodes"] is None
        assert len(_domains(result["NodeNames"])) == 1, result["NodeNames"]
        assert set(result["FailedAndUnresolvableNodes"]) | set(result["NodeNames"]) == set(body["NodeNames"])
        scores = served.post("/prioritize", body, session=session).json()
        assert all(set(s) == {"Host", "Score"} and 0 <= s["Score"] <= 10 for s in scores)
        best = max(result["NodeNames"], key=lambda n: next(s["Score"] for s in scores if s["Host"] == n))
        bind = {"PodName": body["Pod"]["metadata"]["name"], "PodNamespace": "ml",
                "PodUID": body["Pod"]["metadata"]["uid"], "Node": best}
        assert served.post("/bind", bind, session=session).json() == {"Error": ""}
        placed.append(best)
    assert len(set(placed)) == 8 and _domains(placed) == {demo.clique_value("gb200-c")}
    inspect = served.get("/inspect").json()
    (reservation,) = [r for r in inspect["reservations"] if r["name"] == "ml/train-8"]
    assert reservation["state"] == "reserved" and reservation["domain"] == demo.clique_value("gb200-c")
    (group,) = [g for g in inspect["groups"] if g["group"] == reservation["group"]]
    assert group["placed"] == 8


def test_binding_the_same_pod_again_is_success_and_elsewhere_is_an_error(served: serving.Served) -> None:
    inspect = served.get("/inspect").json()
    (group,) = [g for g in inspect["groups"] if g["group"].startswith("cd:") and g["placed"] == 8]
    first = group["pods"][0]
    name = first["pod"].split("/")[1]
    args = {"PodName": name, "PodNamespace": "ml", "PodUID": demo.uid("pod", "ml", name), "Node": first["node"]}
    assert served.post("/bind", args).json() == {"Error": ""}
    other = {**args, "Node": "gb200-b-00"}
    reply = served.post("/bind", other)
    assert reply.status_code == 200 and "already bound to node" in reply.json()["Error"]


def test_a_twenty_pod_job_gets_a_reason_naming_its_size(served: serving.Served) -> None:
    body = _member(serving.fixture("extender/filter-names-train-8.json"), "train-20-0", "train-20")
    result = served.post("/filter", body).json()
    assert result["NodeNames"] == [] and result["Error"] == ""
    reasons = set(result["FailedAndUnresolvableNodes"].values())
    assert len(reasons) == 1 and "no domain can host 20 pods" in reasons.pop()


def test_a_gpu_pod_outside_any_group_passes_the_nodes_with_room_and_is_packed(served: serving.Served) -> None:
    body = serving.fixture("extender/filter-names-plain.json")  # one nvidia.com/gpu, no claims, no group
    result = served.post("/filter", body).json()
    assert result["Error"] == "" and result["Nodes"] is None and result["FailedAndUnresolvableNodes"] == {}
    failed = result["FailedNodes"]
    assert failed and set(failed.values()) == {"pod needs 1 nvidia.com/gpu; node has 0 free"}  # the running job's
    assert sorted(result["NodeNames"] + list(failed)) == sorted(body["NodeNames"])
    passed = {**body, "NodeNames": result["NodeNames"]}
    scores = {s["Host"]: s["Score"] for s in served.post("/prioritize", passed).json()}
    assert set(scores) == set(result["NodeNames"]) and all(0 <= v <= 10 for v in scores.values())
    best = {n for n, v in scores.items() if v == max(scores.values())}
    # Beside the running ComputeDomain (its rack is in use), never on a composable node's one local GPU.
    assert not any(n.startswith("fab-") for n in best) and max(scores.values()) >= 5, scores


def test_full_nodelist_mode_is_answered_with_a_nodelist(served: serving.Served) -> None:
    body = _member(serving.fixture("extender/filter-nodelist-train-8.json"), "train-4-0", "train-4")
    result = served.post("/filter", body).json()
    assert result["NodeNames"] is None and result["Error"] == ""
    items = result["Nodes"]["items"]
    assert items and len(_domains([n["metadata"]["name"] for n in items])) == 1
    sent = {n["metadata"]["name"]: n for n in body["Nodes"]["items"]}
    assert all(item == sent[item["metadata"]["name"]] for item in items)  # echoed unchanged
    scores = served.post("/prioritize", body).json()
    assert len(scores) == len(body["Nodes"]["items"])


@pytest.mark.parametrize(("payload", "field"), [
    (b"{not json", None),
    (b"[]", None),
    (b'{"Nodes": null, "NodeNames": ["a"]}', "Pod"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": "a"}', "NodeNames"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": null}', "NodeNames"),
    (b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": 3}}, "NodeNames": []}', "Pod.spec.containers"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {}}]}, "NodeNames": null}',
     "Nodes.items[0].metadata.name"),
])
@pytest.mark.parametrize("verb", ["/filter", "/prioritize"])
def test_malformed_requests_get_a_400_json_error_naming_the_field(served: serving.Served, verb: str,
                                                                  payload: bytes, field: str | None) -> None:
    reply = served.post(verb, data=payload)
    assert reply.status_code == 400 and reply.headers["Content-Type"] == "application/json"
    assert reply.json()["status"] == 400 and reply.json().get("field") == field


def test_a_malformed_bind_names_the_missing_field(served: serving.Served) -> None:
    reply = served.post("/bind", {"PodName": "x", "PodNamespace": "ml", "PodUID": "u", "Node": None})
    assert reply.status_code == 400 and reply.json()["field"] == "Node"


def test_binding_a_pod_nobody_filtered_reports_it_in_error(served: serving.Served) -> None:
    reply = served.post("/bind", {"PodName": "ghost", "PodNamespace": "ml", "PodUID": "u", "Node": "gb200-a-05"})
    assert reply.status_code == 200 and "not found" in reply.json()["Error"]


def test_unknown_paths_and_methods_answer_in_json(served: serving.Served) -> None:
    assert served.get("/nope").json()["status"] == 404
    reply = served.get("/filter")
    assert reply.status_code == 405 and reply.json()["status"] == 405


def test_health_readiness_and_metrics(served: serving.Served) -> None:
    assert served.get("/healthz").json() == {"status": "ok"}
    ready = served.get("/readyz").json()
    assert ready["ready"] and ready["checks"]["cluster"]["ok"] and ready["checks"]["tls"]["ok"]
    text = served.get("/metrics").text
    assert 'imex_webhook_requests_total{code="200",verb="filter"}' in text
    assert 'imex_webhook_cache_synced{kind="Pod"} 1.0' in text
    assert "imex_webhook_request_duration_seconds_bucket" in text
    assert 'imex_webhook_decisions_total{outcome="no-domain",reason="no-domain",verb="filter"}' in text


def test_the_server_logs_one_structured_line_per_decision(served: serving.Served) -> None:
    lines = [line for line in served.output().splitlines() if "imex_webhook.decisions" in line]
    assert any("verb=filter" in line and "domain=" in line and "outcome=placed" in line for line in lines)
    assert any("verb=bind" in line and "outcome=bound" in line for line in lines)


def test_a_body_over_the_limit_is_refused_in_json(tmp_path: Path) -> None:
    with serving.serve(tmp_path, "--max-body", "1000") as small:
        reply = small.post("/filter", serving.fixture("extender/filter-nodelist-train-8.json"))
        assert reply.status_code == 413 and reply.json()["status"] == 413
