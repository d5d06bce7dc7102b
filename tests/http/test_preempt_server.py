"""POST /preempt through the real TLS server (embedded demo cluster), with bodies exactly as kube-scheduler's
``ProcessPreemption`` sends them: ``NodeNameToMetaVictims`` (UIDs) when nodeCacheCapable, else
``NodeNameToVictims`` with whole pods, the other map ``null``; the reply is always ``NodeNameToMetaVictims``.
A group pod keeps only candidates inside its group's domain; malformed or hostile bodies get a 400 JSON
error naming the field, never a 500."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests import serving
from webhook.demo import cluster as demo

PLAIN = serving.fixture("extender/filter-names-plain.json")["Pod"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.serve(tmp_path_factory.mktemp("serve")) as s:
        yield s


def _group_pod(name: str, cd: str) -> dict[str, Any]:
    pod: dict[str, Any] = copy.deepcopy(serving.fixture("extender/preempt-meta-train-4.json")["Pod"])
    fresh = demo.pod(name, cd, 4)
    pod["metadata"].update(name=name, uid=fresh["metadata"]["uid"])
    pod["spec"]["resourceClaims"] = fresh["spec"]["resourceClaims"]
    return pod


def _victim(name: str, node: str, namespace: str = "batch") -> dict[str, Any]:
    """A victim as the scheduler's cache holds it: a running, bound, lower-priority pod."""
    pod = demo.pod(name, None, 4, node=node, phase="Running", namespace=namespace)
    pod["spec"]["priority"] = 0
    return pod


def test_a_group_pod_keeps_only_candidates_in_its_domain_with_victims_unchanged(served: serving.Served) -> None:
    body = serving.fixture("extender/preempt-meta-train-4.json")
    reply = served.post("/preempt", body)
    assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/json"
    # train-4 fits now, best in the 9-tray clique C; rack B, rack A's trays held by ComputeDomain
    # inference-2, the HGX node outside any domain and a node we do not know are all dropped.
    assert reply.json() == {"NodeNameToMetaVictims": {"gb200-c-03": body["NodeNameToMetaVictims"]["gb200-c-03"]}}


def test_a_pod_outside_any_group_keeps_every_candidate(served: serving.Served) -> None:
    victims = {"gb200-b-16": {"Pods": [{"UID": demo.uid("pod", "research", "notebook-0")}], "NumPDBViolations": 0},
               "no-such-node": {"Pods": [{"UID": "u-1"}, {"UID": "u-2"}], "NumPDBViolations": 3}}
    reply = served.post("/preempt", {"Pod": PLAIN, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})
    assert reply.status_code == 200 and reply.json() == {"NodeNameToMetaVictims": victims}


def test_without_the_node_cache_whole_victims_are_answered_by_uid(served: serving.Served) -> None:
    sent: dict[str, dict[str, Any]] = {
        node: {"Pods": [_victim(f"low-{node}", node), _victim(f"low2-{node}", node)], "NumPDBViolations": 1}
        for node in ("gb200-a-05", "gb200-b-05", "gb200-c-05", "hgx-02")}
    body = {"Pod": _group_pod("train-16-0", "train-16"), "NodeNameToVictims": sent, "NodeNameToMetaVictims": None}
    reply = served.post("/preempt", body)
    assert reply.status_code == 200
    kept = reply.json()["NodeNameToMetaVictims"]
    # 16 one-per-node pods fit only in an 18-tray rack; the group gets one domain, so one candidate stays.
    (node,) = kept
    assert node in ("gb200-a-05", "gb200-b-05")
    uids = [p["metadata"]["uid"] for p in sent[node]["Pods"]]
    assert kept[node] == {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 1}

    plain = served.post("/preempt", {**body, "Pod": PLAIN}).json()["NodeNameToMetaVictims"]
    assert set(plain) == set(sent)
    assert plain["hgx-02"]["Pods"] == [{"UID": p["metadata"]["uid"]} for p in sent["hgx-02"]["Pods"]]


def test_a_group_no_domain_can_host_evicts_nothing(served: serving.Served) -> None:
    body = serving.fixture("extender/preempt-meta-train-4.json")
    reply = served.post("/preempt", {**body, "Pod": _group_pod("train-20-0", "train-20")})
    assert reply.status_code == 200 and reply.json() == {"NodeNameToMetaVictims": {}}


def test_a_huge_candidate_map_is_answered(served: serving.Served) -> None:
    victims = {f"node-{i:05d}": {"Pods": [{"UID": f"uid-{i}"}], "NumPDBViolations": 0} for i in range(20_000)}
    plain = served.post("/preempt", {"Pod": PLAIN, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})
    assert plain.status_code == 200 and plain.json() == {"NodeNameToMetaVictims": victims}
    group = served.post("/preempt", {"Pod": _group_pod("train-4-1", "train-4"), "NodeNameToVictims": None,
                                     "NodeNameToMetaVictims": victims})
    assert group.status_code == 200 and group.json() == {"NodeNameToMetaVictims": {}}  # nodes we do not know


def _top(**fields: Any) -> bytes:
    return json.dumps({"Pod": PLAIN, **fields}).encode()


def _meta(entry: Any) -> bytes:
    return _top(NodeNameToVictims=None, NodeNameToMetaVictims={"n1": entry})


def _full(pods: Any) -> bytes:
    return _top(NodeNameToVictims={"n1": {"Pods": pods, "NumPDBViolations": 0}}, NodeNameToMetaVictims=None)


def _count(value: Any) -> bytes:
    return _meta({"Pods": [{"UID": "u"}], "NumPDBViolations": value})


META = "NodeNameToMetaVictims.n1"
FULL = "NodeNameToVictims.n1.Pods[0]"
# Deeper than 254 levels, a body is refused as a whole (tests/http/test_input_limits.py); within them, the
# field is named.
NESTED = {"UID": json.loads("[" * 200 + "]" * 200)}
INFINITE_GPUS = {"metadata": {"uid": "u"},
                 "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1e999"}}}]}}

HOSTILE = [
    pytest.param(b"{not json", None, id="not json"),
    pytest.param(b"[]", None, id="not an object"),
    pytest.param(b'{"Pod": ' + b"[" * 5000 + b"]" * 5000 + b"}", None, id="nested past the parser's limit"),
    pytest.param(b'{"NodeNameToVictims": null, "NodeNameToMetaVictims": {}}', "Pod", id="no pod"),
    pytest.param(b'{"Pod": "p", "NodeNameToMetaVictims": {}}', "Pod", id="pod of the wrong type"),
    pytest.param(_top(NodeNameToVictims=None, NodeNameToMetaVictims=None), "NodeNameToMetaVictims",
                 id="both maps null"),
    pytest.param(_top(NodeNameToMetaVictims=[{"n1": {}}]), "NodeNameToMetaVictims", id="map as a list"),
    pytest.param(_top(NodeNameToVictims="n1"), "NodeNameToVictims", id="full map as a string"),
    pytest.param(_meta(None), META, id="null victims"),
    pytest.param(_meta([{"UID": "u"}]), META, id="victims as a list"),
    pytest.param(_meta({"Pods": {"UID": "u"}, "NumPDBViolations": 0}), f"{META}.Pods", id="pods not a list"),
    pytest.param(_meta({"Pods": [None], "NumPDBViolations": 0}), f"{META}.Pods[0]", id="null meta pod"),
    pytest.param(_meta({"Pods": [{"uid": "u"}]}), f"{META}.Pods[0].UID", id="lowercase uid key"),
    pytest.param(_meta({"Pods": [{"UID": 7}]}), f"{META}.Pods[0].UID", id="uid a number"),
    pytest.param(_meta({"Pods": [{"UID": ""}]}), f"{META}.Pods[0].UID", id="uid empty"),
    pytest.param(_meta({"Pods": [NESTED]}), f"{META}.Pods[0].UID", id="uid deeply nested"),
    pytest.param(_count("1"), f"{META}.NumPDBViolations", id="violations a string"),
    pytest.param(_count(True), f"{META}.NumPDBViolations", id="violations a boolean"),
    pytest.param(_count(1.5), f"{META}.NumPDBViolations", id="violations a fraction"),
    pytest.param(_count(-1), f"{META}.NumPDBViolations", id="violations negative"),
    pytest.param(_count(2**63), f"{META}.NumPDBViolations", id="violations past int64"),
    pytest.param(_count(2**70), f"{META}.NumPDBViolations", id="violations past uint64"),
    pytest.param(_full([{"metadata": {"name": "v"}}]), f"{FULL}.metadata.uid", id="whole victim without uid"),
    pytest.param(_full([{}]), FULL, id="whole victim empty"),
    pytest.param(_full([{"metadata": {"uid": "u"}, "spec": {"containers": 3}}]), f"{FULL}.spec.containers",
                 id="whole victim malformed"),
    pytest.param(_full([INFINITE_GPUS]), f"{FULL}.spec.containers[0].resources.limits[nvidia.com/gpu]",
                 id="whole victim overflowing quantity"),
]


@pytest.mark.parametrize(("payload", "field"), HOSTILE)
def test_malformed_and_hostile_requests_get_a_400_json_error_naming_the_field(
        served: serving.Served, payload: bytes, field: str | None) -> None:
    reply = served.post("/preempt", data=payload)
    assert reply.status_code == 400 and reply.headers["Content-Type"] == "application/json"
    assert reply.json()["status"] == 400 and reply.json().get("field") == field
    assert reply.json()["error"].startswith("malformed preempt request")


def test_a_huge_node_name_is_cut_short_in_the_error(served: serving.Served) -> None:
    name = "n" * 100_000
    body = {"Pod": PLAIN, "NodeNameToVictims": None, "NodeNameToMetaVictims": {name: {"Pods": 1}}}
    reply = served.post("/preempt", body)
    assert reply.status_code == 400 and len(reply.content) < 2_000
    assert reply.json()["field"] == f"NodeNameToMetaVictims.{'n' * 253}....Pods"


def test_preempt_is_counted_timed_and_logged_like_the_other_verbs(served: serving.Served) -> None:
    served.post("/preempt", serving.fixture("extender/preempt-meta-train-4.json"))
    text = served.get("/metrics").text
    assert 'imex_webhook_requests_total{code="200",verb="preempt"}' in text
    assert 'imex_webhook_requests_total{code="400",verb="preempt"}' in text
    assert 'imex_webhook_request_duration_seconds_count{verb="preempt"}' in text
    assert 'imex_webhook_decisions_total{outcome="kept",reason="chosen",verb="preempt"}' in text
    assert 'imex_webhook_decisions_total{outcome="pass-through",reason="not-a-group",verb="preempt"}' in text
    lines = [line for line in served.output().splitlines() if "imex_webhook.decisions" in line]
    assert any("verb=preempt" in line and "outcome=kept" in line and "domain=" in line for line in lines)


def test_our_own_failure_accepts_no_candidate_and_is_counted(demo_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: no Error field exists in the reply, so a 200 with an empty map is how we say no."""
    def broken(*_: Any) -> Any:
        raise RuntimeError("cache exploded")

    monkeypatch.setattr(demo_app.extensions["imex"].engine, "snapshot", broken)
    client = demo_app.test_client()
    reply = client.post("/preempt", data=json.dumps(serving.fixture("extender/preempt-meta-train-4.json")),
                        content_type="application/json")
    assert reply.status_code == 200 and reply.get_json() == {"NodeNameToMetaVictims": {}}
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'imex_webhook_internal_errors_total{verb="preempt"} 1.0' in metrics
