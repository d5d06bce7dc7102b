"""``serve --pack-plain-gpu-pods`` through the real TLS server (docs/SCHEDULER.md, "GPU pods outside any
group"): AdmissionReviews as kube-apiserver sends them; a GPU pod in no group is sent to the dedicated profile,
the same patch for concurrent callers; its filter and prioritize answers on the wire; odd GPU quantities get a
verdict or a 400 that names the field, never a 500."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests import admission_support as support
from tests import builders, serving
from webhook.domain import keys
from webhook.domain.policy import Policy

RACK = "aaaa-1111.7"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    tmp = tmp_path_factory.mktemp("plain")
    objects = [*builders.rack("a", RACK, 3), *builders.rack("b", "bbbb-2222.7", 3),
               builders.pod("running", gpus=4, node="a-00", phase="Running", namespace="other")]
    cluster = Path(tmp) / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}), encoding="utf-8")
    with serving.serve(tmp, "--cluster", str(cluster), "--pack-plain-gpu-pods") as s:
        yield s


def _pod(name: str, gpus: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                     "resources": {"limits": {keys.GPU_RESOURCE: gpus}}}],
                     "schedulerName": "default-scheduler", "restartPolicy": "Never"}}


def _review(pod: dict[str, Any]) -> dict[str, Any]:
    return support.review_of(pod, "ml", "alice")


def _response(served: serving.Served, pod: dict[str, Any]) -> dict[str, Any]:
    reply = served.post("/mutate", _review(pod))
    assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/json"
    response: dict[str, Any] = reply.json()["response"]
    return response


def test_a_gpu_pod_in_no_group_is_sent_to_the_dedicated_profile_the_same_way_for_every_caller(
        served: serving.Served) -> None:
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: _response(served, _pod("notebook", "1")), range(16)))
    patches = {base64.b64decode(r["patch"]) for r in responses}
    assert len(patches) == 1 and all(r["allowed"] for r in responses)
    ops = json.loads(patches.pop())
    assert {"op": "replace", "path": "/spec/schedulerName", "value": Policy().scheduler_name} in ops
    assert [op["path"] for op in ops] == ["/spec/schedulerName", "/metadata/annotations"]


def test_the_extender_packs_it_beside_the_running_pod(served: serving.Served) -> None:
    pod = {**_pod("notebook", "1"), "spec": {**_pod("notebook", "1")["spec"], "schedulerName": "imex-scheduler"}}
    pod["metadata"]["uid"] = str(uuid.uuid4())
    names = ["a-00", "a-01", "a-02", "b-00", "b-01", "b-02"]
    result = served.post("/filter", {"Pod": pod, "Nodes": None, "NodeNames": names}).json()
    assert result["Error"] == "" and result["FailedNodes"] == {"a-00": "pod needs 1 nvidia.com/gpu; node has 0 free"}
    scores = {s["Host"]: s["Score"] for s in served.post("/prioritize", {
        "Pod": pod, "Nodes": None, "NodeNames": result["NodeNames"]}).json()}
    assert min(scores["a-01"], scores["a-02"]) > max(scores["b-00"], scores["b-01"], scores["b-02"]) > 0, scores


@pytest.mark.parametrize("gpus", ["1e400", "9" * 5000, "-1", "one", ""])
def test_an_odd_gpu_quantity_gets_a_verdict_or_a_named_400_never_a_500(served: serving.Served, gpus: str) -> None:
    reply = served.post("/mutate", _review(_pod("odd", gpus)))
    assert reply.status_code in (200, 400) and reply.headers["Content-Type"] == "application/json", reply.text[:200]
    if reply.status_code == 400:
        assert "nvidia.com/gpu" in reply.text or "resources" in reply.text, reply.text[:300]
