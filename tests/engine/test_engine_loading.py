"""A replica whose caches are still loading neither decides nor cleans up.

Until every initial list has arrived a replica can see a group's reservation without its pods: a choice
made then would ignore other groups' capacity, and housekeeping would release a running group's
reservation as "every member finished" (found by the seeded chaos runs: a restarted replica with its pod
list delayed by a 500). The verbs answer an error the scheduler retries; housekeeping waits."""

from __future__ import annotations

import pytest

from tests import builders
from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain.model import Pod, Reservation
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine
from webhook.errors import DecisionError
from webhook.state.cluster import ClusterStore


class NotListedYet:
    """A reservation store whose initial list has not arrived (``synced`` as the watch-fed stores have)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner
        self.synced = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def _engine(now: float = 5000.0) -> tuple[Engine, ClusterStore]:
    store = ClusterStore(Policy())
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    backend.start()
    return builders.engine(backend, holder="test", clock=lambda: now), store


def _pod(engine: Engine, name: str) -> Pod:
    pod = parsing.pod(demo.pod(name, "train-8", 4))
    embedded.put_pod(engine.store, pod)
    return pod


def test_a_loaded_engine_says_nothing_is_loading() -> None:
    engine, _ = _engine()
    assert engine.loading() is None


@pytest.mark.parametrize("kinds", [["Pod"], ["Node", "Pod"], ["ResourceSlice"]])
def test_filter_and_bind_refuse_while_a_kind_is_not_listed_and_name_it(kinds: list[str]) -> None:
    engine, store = _engine()
    pod = _pod(engine, "train-8-0")
    for kind in kinds:
        store.mark_synced(kind, False)  # as a relist from scratch after a restart
    with pytest.raises(DecisionError, match="still loading") as caught:
        engine.filter(pod, sorted(store.snapshot().nodes))
    assert all(kind in str(caught.value) for kind in kinds) and "retries" in str(caught.value)
    with pytest.raises(DecisionError, match="still loading"):
        engine.bind(pod.namespace, pod.name, pod.uid, sorted(store.snapshot().nodes)[0])
    assert engine.reservations.all() == {}  # nothing chosen, nothing stored
    for kind in kinds:
        store.mark_synced(kind)
    assert engine.filter(pod, sorted(store.snapshot().nodes)).passed


def test_an_unlisted_reservation_store_counts_as_loading() -> None:
    engine, store = _engine()
    engine.reservations = NotListedYet(engine.reservations)  # type: ignore[assignment]
    pod = _pod(engine, "train-8-0")
    with pytest.raises(DecisionError, match="DomainReservation not listed yet"):
        engine.filter(pod, sorted(store.snapshot().nodes))


def test_housekeeping_keeps_a_running_groups_reservation_while_pods_are_not_listed() -> None:
    engine, store = _engine(now=5000.0)
    # A group whose members the cache does not know (the pod list has not arrived), placed long ago.
    gone = Reservation(group_id="ann:ml/job", group_name="job", namespace="ml", domain=demo.clique_value("gb200-c"),
                       size=2, gpus_per_pod=4, one_pod_per_node=False, created_at=1000.0,
                       placed_at=1000.0)
    engine.reservations.reserve(gone)
    store.mark_synced("Pod", False)
    assert engine.housekeep() == []
    assert "ann:ml/job" in engine.reservations.all()
    store.mark_synced("Pod")
    assert [g for g, _ in engine.housekeep()] == ["ann:ml/job"]  # listed, and really gone: released
