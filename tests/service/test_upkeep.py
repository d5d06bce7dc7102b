"""The worker that acts on cache changes (webhook.service.upkeep): a group whose pods are deleted is released
and a group refused for its domain is retried on those changes alone, with the timed round an hour away;
a failing pass does not stop it; stop() ends it."""

from __future__ import annotations

import threading

from tests import builders
from tests.engine.test_requeue import Kept
from tests.kubefake import eventually
from webhook.adapters import embedded
from webhook.domain.model import Pod, Reservation
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine
from webhook.engine.requeue import Requeuer
from webhook.service.upkeep import Upkeep
from webhook.state.cluster import ClusterStore

RACK = "uuid-a.1"
HOUR = 3600.0


def _engine() -> Engine:
    store = ClusterStore(Policy())
    objects = [*builders.rack("a", RACK, 2), *builders.cd_objects("first", 2), *builders.cd_objects("second", 2)]
    backend = embedded.EmbeddedBackend(store, objects, "test")
    backend.start()
    return builders.engine(backend, holder="t")


def _group(engine: Engine, job: str) -> list[Pod]:
    pods = []
    for i in range(2):
        obj = builders.pod(f"{job}-{i}", job)
        engine.store.apply("Pod", "ADDED", obj)
        pods.append(parsing.pod(obj))
    return pods


def test_a_deleted_group_is_released_and_the_group_waiting_for_its_domain_retried_on_the_change_alone() -> None:
    engine, kept = _engine(), Kept()
    first = _group(engine, "first")
    passed = engine.filter(first[0], ["a-00", "a-01"]).passed
    for pod, node in zip(first, passed, strict=True):
        engine.bind("ml", pod.name, pod.uid, node)
    second = _group(engine, "second")
    assert not engine.filter(second[0], ["a-00", "a-01"]).passed, "the rack is the first group's"
    upkeep = Upkeep(engine, HOUR, Requeuer(engine, kept)).start()
    try:
        for pod in first:
            engine.store.apply("Pod", "DELETED", builders.pod(pod.name, "first"))
        eventually(lambda: kept.pods == ["second-0", "second-1"], what="the waiting group retried")
        assert [r.group_name for r in engine.reservations.all().values()] == [], "the first group's domain freed"
    finally:
        upkeep.stop()


class Failing:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls = 0
        self.done = threading.Event()

    def housekeep(self, prune: bool = True) -> list[tuple[str, str]]:
        self.calls += 1
        if self.calls >= 3:
            self.done.set()
        raise RuntimeError("a bug in one pass")


def test_a_pass_that_raises_does_not_stop_the_worker_and_stop_ends_it() -> None:
    engine = _engine()
    failing = Failing(engine)
    engine.housekeep = failing.housekeep  # type: ignore[method-assign]
    upkeep = Upkeep(engine, HOUR, None).start()
    for i in range(3):
        engine.reservations.reserve(Reservation(f"ann:ml/g{i}", f"g{i}", "ml", RACK, 1, 4, False, 1.0))
        eventually(lambda i=i: failing.calls > i, what=f"pass {i + 1}")
    assert failing.done.is_set()
    upkeep.stop()
    assert not upkeep._thread.is_alive()
