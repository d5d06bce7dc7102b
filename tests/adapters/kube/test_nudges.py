"""The retry of a refused pod on the (fake) API server: one condition of the pod's status, merged by type
through ``pods/status`` (webhook.adapters.kube.nudges).

Covered: the condition is added and replaced by type, the scheduler's and the kubelet's conditions stay,
the pod's spec and metadata are untouched, every retry is a new resourceVersion; a pod that is gone is no
error; a pod re-created under the same name is refused by the UID precondition; RBAC refusals and server
errors name the pod and the permission; eight threads retrying pods at once; and a whole service in
Kubernetes mode retries a group it refused once the reservation holding its domain is deleted.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests import builders
from tests.adapters.kube.conftest import Connect
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend
from webhook.adapters.kube.nudges import PodNudger
from webhook.domain import requeue
from webhook.domain.model import Pod, Reservation
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine
from webhook.engine.requeue import Requeuer
from webhook.errors import DecisionError
from webhook.wire.domain_reservation import reservation_name, reservation_object


def _pod(fake: KubeFake, name: str, **kwargs: object) -> Pod:
    created = fake.create("pods", builders.pod(name, gpus=4, **kwargs))  # type: ignore[arg-type]
    return parsing.pod(created)


def _conditions(fake: KubeFake, name: str) -> dict[str, dict[str, str]]:
    pod = fake.get("pods", "ml", name)
    return {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}


def test_a_retry_adds_our_condition_and_keeps_everyone_elses(fake: KubeFake, backend: KubeBackend) -> None:
    pod = _pod(fake, "p1")
    fake.patch("pods", "ml", "p1", {"status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes"}]}})
    before = fake.get("pods", "ml", "p1")
    nudger = PodNudger(backend._api)

    nudger.nudge(pod, "domain x can host group g now", 1_700_000_000.0)
    first = fake.get("pods", "ml", "p1")
    nudger.nudge(pod, "domain y can host group g now", 1_700_000_001.5)
    second = fake.get("pods", "ml", "p1")

    conditions = _conditions(fake, "p1")
    assert set(conditions) == {"PodScheduled", requeue.CONDITION}
    ours = conditions[requeue.CONDITION]
    assert ours == {"type": requeue.CONDITION, "status": "True", "reason": requeue.REASON,
                    "message": "domain y can host group g now", "lastTransitionTime": "2023-11-14T22:13:21Z"}
    assert conditions["PodScheduled"]["reason"] == "Unschedulable"
    assert first["spec"] == second["spec"] == before["spec"]
    assert first["metadata"]["labels"] == before["metadata"]["labels"]
    versions = [int(o["metadata"]["resourceVersion"]) for o in (before, first, second)]
    assert versions == sorted(set(versions)), "every retry is an update the scheduler sees"


def test_a_pod_that_is_gone_is_no_error_and_a_recreated_one_is_not_touched(fake: KubeFake,
                                                                         backend: KubeBackend) -> None:
    nudger = PodNudger(backend._api)
    gone = parsing.pod(builders.pod("never-created", gpus=4))
    nudger.nudge(gone, "m", 1.0)  # 404: nothing to retry

    old = _pod(fake, "p1")
    fake.delete("pods", "ml", "p1")
    fake.create("pods", builders.pod("p1", gpus=4) | {"metadata": {**builders.pod("p1")["metadata"],
                                                                     "uid": "another-uid"}})
    with pytest.raises(DecisionError, match="ml/p1"):
        nudger.nudge(old, "m", 1.0)
    assert requeue.CONDITION not in _conditions(fake, "p1")


@pytest.mark.parametrize(("status", "reason", "expected"), [
    (403, "Forbidden", 'needs verb "patch" on "pods/status"'),
    (500, "InternalError", "500 InternalError"),
    (429, "TooManyRequests", "429 TooManyRequests"),
])
def test_api_errors_name_the_pod_and_what_to_do(fake: KubeFake, backend: KubeBackend, status: int, reason: str,
                                                expected: str) -> None:
    pod = _pod(fake, "p1")
    fake.fail("patch", "pods", status, reason, "no", subresource="status")
    with pytest.raises(DecisionError, match="pod ml/p1") as failed:
        PodNudger(backend._api).nudge(pod, "m", 1.0)
    assert expected in str(failed.value)


def test_eight_threads_retrying_pods_at_once_each_get_their_condition(fake: KubeFake, backend: KubeBackend) -> None:
    pods = [_pod(fake, f"p{i}") for i in range(16)]
    nudger = PodNudger(backend._api)
    errors: list[BaseException] = []

    def run(mine: list[Pod]) -> None:
        try:
            for pod in mine:
                nudger.nudge(pod, f"retry {pod.name}", 5.0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(pods[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert all(_conditions(fake, p.name)[requeue.CONDITION]["message"] == f"retry {p.name}" for p in pods)


def _orphaned_rack(fake: KubeFake) -> tuple[Reservation, list[dict[str, Any]]]:
    """Rack a (2 nodes) held by a reservation whose group has no pods; ComputeDomain job "job" waiting."""
    rack = "uuid-a.1"
    for obj in [*builders.rack("a", rack, 2), *builders.cd_objects("job", 2)]:
        fake.create(obj["kind"].lower() + "s", obj, keep_uid=True)
    orphan = Reservation("ann:ml/orphan", "orphan", "ml", rack, 2, 4, False, 1000.0, holder="gone")
    fake.create("domainreservations", reservation_object(orphan, "gone"))
    return orphan, [fake.create("pods", builders.pod(f"job-{i}", "job")) for i in range(2)]


def _loaded(backend: KubeBackend, orphan: Reservation) -> Engine:
    engine = builders.engine(backend, holder="t", clock=lambda: 1000.0)
    # Both pods of the waiting job, not only its group: the watch may deliver the second pod a moment later.
    eventually(lambda: engine.loading() is None
               and [len(m) for m in backend.store.snapshot().members.values()] == [2]
               and orphan.group_id in backend.reservations.all(), what="caches loaded")
    return engine


def test_a_service_in_kubernetes_mode_retries_the_group_it_refused_once_the_reservation_is_deleted(
        fake: KubeFake, backend: KubeBackend) -> None:
    orphan, pods = _orphaned_rack(fake)
    engine = _loaded(backend, orphan)
    first = parsing.pod(pods[0])
    assert not engine.filter(first, ["a-00", "a-01"]).passed, "the orphan holds the rack"
    requeuer = Requeuer(engine, PodNudger(backend._api))
    engine.refusals.seeded = True  # started long ago: only the refusal above counts
    assert requeuer.run() == [], "nothing changed since the refusal: no retry"

    fake.delete("domainreservations", None, reservation_name(orphan.group_id))
    eventually(lambda: orphan.group_id not in backend.reservations.all(), what="the deletion seen")
    retried = requeuer.run()

    assert [p.name for p in retried] == ["job-0", "job-1"]
    for pod in pods:
        condition = _conditions(fake, pod["metadata"]["name"])[requeue.CONDITION]
        assert condition["reason"] == requeue.REASON and "domain uuid-a.1 can host group job" in condition["message"]
    assert requeuer.run() == [], "one retry per refusal"


def test_two_replicas_each_retry_from_their_own_cache_and_a_failing_api_server_delays_the_retry_only(
        fake: KubeFake, connect_backend: Connect) -> None:
    orphan, pods = _orphaned_rack(fake)
    a, b = connect_backend("replica-a"), connect_backend("replica-b")
    engine_a, engine_b = _loaded(a, orphan), _loaded(b, orphan)
    assert not engine_a.filter(parsing.pod(pods[0]), ["a-00", "a-01"]).passed
    engine_b.refusals.seeded = True  # replica B refused nothing, and started before the pods
    requeuers = [Requeuer(engine_a, PodNudger(a._api)), Requeuer(engine_b, PodNudger(b._api))]
    engine_a.refusals.seeded = True

    fake.delete("domainreservations", None, reservation_name(orphan.group_id))
    for backend in (a, b):
        eventually(lambda backend=backend: orphan.group_id not in backend.reservations.all(), what="deletion seen")
    fake.fail("patch", "pods", 500, "InternalError", "etcd is unavailable", subresource="status", times=2)
    assert requeuers[0].run() == [], "both updates failed: nothing counts as retried"
    assert requeuers[1].run() == [], "replica B refused nothing: it has nothing to retry"

    assert [p.name for p in requeuers[0].run()] == ["job-0", "job-1"], "the API server is back: retried"
    assert requeuers[0].run() == requeuers[1].run() == []
    for pod in pods:
        assert requeue.CONDITION in _conditions(fake, pod["metadata"]["name"])
