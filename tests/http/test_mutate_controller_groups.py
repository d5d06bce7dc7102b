"""POST /mutate through the real TLS server (``imex-webhook serve --cluster FILE``, embedded cluster holding a
JobSet, an MPIJob and a ComputeDomain as their controllers write them, docs/GROUPS.md): a JobSet's pod is
patched under the JobSet's group, the MPIJob worker of a sizeless ComputeDomain gets the MPIJob's count,
a pod two sources put in different groups gets a warning naming both in the AdmissionReview, an unusable
Kueue count is denied in a 200 reply, and concurrent reviews of one group all get the same patch."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests import admission_support as support
from tests import builders, serving
from tests import controller_objects as co
from webhook.domain import keys
from webhook.domain.admission import mutating

GPU = co.pod_spec(claim_template=co.GPU_TEMPLATE)
JOBSET = co.jobset("train", [("workers", 2, 4, GPU)])
MPIJOB = co.mpijob("nvb", 2, co.pod_spec(cd="nvb-cd"), co.pod_spec())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    tmp = tmp_path_factory.mktemp("controllers")
    objects = [*builders.rack("a", "aaaa-1111.7", 8), co.gpu_claim_template(), JOBSET, MPIJOB,
               *builders.cd_objects("nvb-cd", 0)]
    cluster = Path(tmp) / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}), encoding="utf-8")
    with serving.serve(tmp, "--cluster", str(cluster)) as s:
        yield s


def _review(pod: dict[str, Any]) -> dict[str, Any]:
    return support.review_of(pod, co.NS, "system:serviceaccount:kube-system:job-controller")


def _mutate(served: serving.Served, pod: dict[str, Any]) -> dict[str, Any]:
    reply = served.post("/mutate", _review(pod))
    assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/json"
    response: dict[str, Any] = reply.json()["response"]
    return response


def _patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    return support.apply(pod, json.loads(base64.b64decode(response["patch"])))


def _jobset_pod(index: int = 0) -> dict[str, Any]:
    return [o for o in co.jobset_children(JOBSET) if o["kind"] == "Pod"][index]


def test_a_jobset_pod_is_patched_under_the_jobsets_group(served: serving.Served) -> None:
    pod = _jobset_pod()
    response = _mutate(served, pod)
    assert response["allowed"] and "warnings" not in response
    patched = _patched(pod, response)
    support.assert_kept_in_domain(patched, mutating.group_label_value("jobset:ml/train"))
    assert patched["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] == "8"


def test_an_mpijob_worker_in_a_sizeless_compute_domain_gets_the_mpijobs_count(served: serving.Served) -> None:
    worker = next(p for p in co.mpijob_pods(MPIJOB) if "worker" in p["metadata"]["name"])
    patched = _patched(worker, _mutate(served, worker))
    assert patched["metadata"]["annotations"][keys.GROUP_SIZE_ANNOTATION] == "2"
    assert patched["metadata"]["annotations"][keys.GROUP_ID_ANNOTATION].startswith("cd:")


def test_a_pod_in_two_groups_gets_a_warning_naming_both(served: serving.Served) -> None:
    pod = _jobset_pod()
    pod["metadata"]["labels"][keys.KUEUE_GROUP_NAME_LABEL] = "batch-7"
    pod["metadata"]["annotations"][keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION] = "5"
    response = _mutate(served, pod)
    assert response["allowed"]
    (warning,) = response["warnings"]
    assert "JobSet 'train' (8 pods)" in warning and "Kueue pod group 'batch-7' (5 pods)" in warning


def test_an_unusable_count_is_denied_in_a_200_reply(served: serving.Served) -> None:
    response = _mutate(served, co.kueue_pods("grp", 2, GPU, total_text="1e3")[0])
    assert response["allowed"] is False and "patch" not in response
    assert keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION in response["status"]["message"]


def test_concurrent_reviews_of_one_group_get_the_same_patch(served: serving.Served) -> None:
    pods = [o for o in co.jobset_children(JOBSET) if o["kind"] == "Pod"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda p: _mutate(served, p), pods))
    labels = {_patched(p, r)["metadata"]["labels"][keys.GROUP_LABEL] for p, r in zip(pods, responses, strict=True)}
    assert labels == {mutating.group_label_value("jobset:ml/train")}
