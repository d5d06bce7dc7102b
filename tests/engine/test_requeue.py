"""Retrying the groups the filter refused (webhook.engine.requeue), on the embedded store with a nudger that
keeps what it is asked: a refused group is retried once when capacity returns and never while the same
inputs would refuse it again; a failed retry is tried again; after a restart every waiting group counts as
refused once; the pass's budget; the memory bound; and request threads refusing while the worker runs."""

from __future__ import annotations

import threading

import pytest

from tests import builders
from tests.concurrency import run_together
from webhook.adapters import embedded
from webhook.domain import requeue
from webhook.domain.model import Pod, Reservation
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine import refusals as refusals_state
from webhook.engine import requeue as requeue_state
from webhook.engine.engine import Engine
from webhook.engine.refusals import Refusals
from webhook.engine.requeue import Requeuer
from webhook.errors import DecisionError
from webhook.state.cluster import ClusterStore

RACK = "uuid-a.1"


class Kept:
    """A Nudger that records each pod it is asked to retry; ``fail`` makes the next calls raise."""

    def __init__(self) -> None:
        self.pods: list[str] = []
        self.messages: list[str] = []
        self.fail = 0
        self._lock = threading.Lock()

    def nudge(self, pod: Pod, message: str, now: float) -> None:
        with self._lock:
            if self.fail:
                self.fail -= 1
                raise DecisionError(f"could not update pod {pod.ref}: 500")
            self.pods.append(pod.name)
            self.messages.append(message)


def _engine(nodes: int = 2, jobs: tuple[str, ...] = ("job",)) -> Engine:
    store = ClusterStore(Policy())
    objects = [*builders.rack("a", RACK, nodes)] + [o for j in jobs for o in builders.cd_objects(j, nodes)]
    backend = embedded.EmbeddedBackend(store, objects, "test")
    backend.start()
    return builders.engine(backend, holder="t", clock=lambda: 1000.0)


def _orphan(engine: Engine, size: int = 2) -> Reservation:
    """A reservation of the whole rack for a group none of whose pods exist (left by a replica that died)."""
    return engine.reservations.reserve(Reservation("ann:ml/orphan", "orphan", "ml", RACK, size, 4, False, 1000.0))


def _waiting(engine: Engine, job: str = "job", pods: int = 2) -> list[Pod]:
    out = []
    for i in range(pods):
        obj = builders.pod(f"{job}-{i}", job)
        engine.store.apply("Pod", "ADDED", obj)
        out.append(parsing.pod(obj))
    return out


def _refuse(engine: Engine, pod: Pod) -> None:
    assert not engine.filter(pod, sorted(engine.store.snapshot().nodes)).passed


def _requeuer(engine: Engine) -> tuple[Requeuer, Kept]:
    """The first pass after start-up counts waiting groups as refused; tests that do not test that skip it."""
    kept = Kept()
    engine.refusals.seeded = True
    return Requeuer(engine, kept), kept


def _refused_behind_an_orphan() -> tuple[Engine, Requeuer, Kept, Reservation, list[Pod]]:
    """Group "job" (2 pods) refused: the orphan holds the whole rack."""
    engine = _engine()
    requeuer, kept = _requeuer(engine)
    orphan = _orphan(engine)
    pods = _waiting(engine)
    _refuse(engine, pods[0])
    return engine, requeuer, kept, orphan, pods


def test_a_refused_group_is_retried_once_when_the_reservation_holding_its_domain_goes() -> None:
    engine, requeuer, kept, orphan, _ = _refused_behind_an_orphan()

    assert requeuer.run() == [] and kept.pods == [], "the same inputs refuse again: no retry"
    engine.reservations.release(orphan.group_id)
    retried = requeuer.run()

    assert [p.name for p in retried] == kept.pods == ["job-0", "job-1"]
    assert all(f"domain {RACK} can host group job now" in m for m in kept.messages)
    assert requeuer.run() == [], "one retry per refusal, however many passes follow"


def test_a_group_refused_again_after_its_retry_is_retried_again_only_when_the_state_changes() -> None:
    engine, requeuer, kept, orphan, pods = _refused_behind_an_orphan()
    engine.reservations.release(orphan.group_id)
    assert len(requeuer.run()) == 2

    # The scheduler comes back, but meanwhile another group took the rack: refused again, nothing to retry.
    orphan = _orphan(engine)
    _refuse(engine, pods[1])
    assert requeuer.run() == []
    engine.reservations.release(orphan.group_id)
    assert [p.name for p in requeuer.run()] == ["job-0", "job-1"]
    assert len(kept.pods) == 4


def test_a_retry_that_failed_is_made_again_on_the_next_pass() -> None:
    engine, requeuer, kept, orphan, _ = _refused_behind_an_orphan()
    engine.reservations.release(orphan.group_id)
    kept.fail = 2

    assert requeuer.run() == [], "the API server failed both updates"
    assert [p.name for p in requeuer.run()] == ["job-0", "job-1"]


def test_a_group_that_was_placed_or_deleted_meanwhile_is_forgotten() -> None:
    engine, requeuer, _, orphan, pods = _refused_behind_an_orphan()
    for pod in pods:
        engine.store.apply("Pod", "DELETED", builders.pod(pod.name, "job"))
    engine.reservations.release(orphan.group_id)

    assert requeuer.run() == [] and len(engine.refusals) == 0


def test_after_a_restart_each_group_waiting_in_our_scheduler_is_retried_once_if_it_fits() -> None:
    engine, kept = _engine(jobs=("job", "other")), Kept()
    _waiting(engine, "job")
    plain = builders.pod("plain-0", None)  # the default scheduler's pod: not ours to retry
    engine.store.apply("Pod", "ADDED", plain)

    requeuer = Requeuer(engine, kept)
    assert [p.name for p in requeuer.run()] == ["job-0", "job-1"]
    assert requeuer.run() == []


def test_one_pass_updates_at_most_its_budget_and_leaves_whole_groups_due(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requeue_state, "MAX_NUDGES", 3)
    engine = _engine(nodes=4, jobs=("a", "b"))
    requeuer, _ = _requeuer(engine)
    orphan = _orphan(engine, size=4)
    waiting = _waiting(engine, "a", 2) + _waiting(engine, "b", 2)
    _refuse(engine, waiting[0])
    _refuse(engine, waiting[2])
    engine.reservations.release(orphan.group_id)

    assert [p.name for p in requeuer.run()] == ["a-0", "a-1"], "group b does not fit what is left: next pass"
    assert [p.name for p in requeuer.run()] == ["b-0", "b-1"]


def test_refusals_are_bounded_and_the_oldest_is_forgotten_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refusals_state, "MAX_WAITING", 3)
    refusals = Refusals()
    for i in range(5):
        refusals.refused(f"g{i}", ("n",), None)
    refusals.refused("g2", ("n",), None)  # refused again: now the newest
    assert [g for g, _ in refusals.due()] == ["g3", "g4", "g2"]


def test_request_threads_refusing_while_the_worker_passes_lose_nothing_and_raise_nothing() -> None:
    engine = _engine(nodes=2, jobs=tuple(f"j{i}" for i in range(8)))
    requeuer, kept = _requeuer(engine)
    orphan = _orphan(engine)
    groups = [_waiting(engine, f"j{i}", 2) for i in range(8)]

    def refuse_or_pass(i: int) -> None:
        if i == len(groups):  # the worker, passing while the eight request threads refuse
            for _ in range(20):
                assert requeuer.run() == [], "nothing fits while the orphan holds the rack"
            return
        for _ in range(20):
            _refuse(engine, groups[i][0])

    run_together(len(groups) + 1, refuse_or_pass)
    assert len(engine.refusals) == 8

    engine.reservations.release(orphan.group_id)
    retried = requeuer.run()
    assert sorted({p.name.split("-")[0] for p in retried}) == [f"j{i}" for i in range(8)]
    assert len(retried) == 16 and len(set(kept.pods)) == 16


def test_the_message_names_the_domain_and_the_group() -> None:
    assert requeue.message("train", "rack-1", "2026-01-01T00:00:00.000Z") == (
        "domain rack-1 can host group train now (capacity returned at 2026-01-01T00:00:00.000Z); "
        "kube-scheduler retries this pod")
    assert requeue.message("train", None, "t").startswith("a domain can host group train")
