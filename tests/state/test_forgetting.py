"""Bounded memory in embedded mode: pods learnt from the scheduler's requests and left unbound are
forgotten once no request has named them for the pod TTL; bound pods, re-named pods and the pods of the
loaded files are kept. An injected clock stands in for time."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

import pytest

from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state.cluster import ClusterStore
from webhook.state.forgetting import Forgetting

TTL = 600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_keys_expire_oldest_first_after_the_ttl_unless_named_again() -> None:
    clock = Clock()
    keys: Forgetting[str] = Forgetting(10.0, clock)
    keys.named("a")
    clock.now += 4
    keys.named("b")
    keys.named("c")
    clock.now += 5
    keys.named("a")  # named again: lives 10 s from now
    clock.now += 1
    assert keys.expired() == []  # b, c are 6 s old
    clock.now += 4
    assert keys.expired(limit=1) == ["b"]
    assert keys.expired() == ["c"]
    assert len(keys) == 1 and "a" in keys
    keys.drop("a")
    assert len(keys) == 0 and keys.expired() == []


def test_a_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Forgetting(0.0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def backend(clock: Clock) -> embedded.EmbeddedBackend:
    b = embedded.EmbeddedBackend(ClusterStore(Policy()), demo.objects(), "demo", pod_ttl=TTL, clock=clock)
    b.start()
    return b


def _pod(name: str, **kw: Any) -> Any:
    return parsing.pod(demo.pod(name, None, 1, namespace="research", **kw))


def test_a_noted_pod_is_forgotten_after_the_ttl(backend: embedded.EmbeddedBackend, clock: Clock) -> None:
    backend.note_pod(_pod("lone"))
    assert backend.store.pod("research", "lone") is not None
    clock.now += TTL - 1
    assert backend.forget_expired() == 0
    assert backend.store.pod("research", "lone") is not None
    clock.now += 1
    assert backend.forget_expired() == 1
    assert backend.store.pod("research", "lone") is None
    assert backend.noted() == 0 and backend.forgotten == 1


def test_a_pod_named_again_is_kept(backend: embedded.EmbeddedBackend, clock: Clock) -> None:
    backend.note_pod(_pod("retried"))
    clock.now += TTL - 1
    backend.note_pod(_pod("retried"))  # the scheduler's next attempt
    clock.now += TTL - 1
    assert backend.forget_expired() == 0
    assert backend.store.pod("research", "retried") is not None
    clock.now += 1
    assert backend.forget_expired() == 1


def test_a_pod_bound_since_it_was_noted_is_kept(backend: embedded.EmbeddedBackend, clock: Clock) -> None:
    pod = _pod("placed")
    backend.note_pod(pod)
    backend.binder.bind(pod, "hgx-00")
    clock.now += 10 * TTL
    assert backend.forget_expired() == 0
    kept = backend.store.pod("research", "placed")
    assert kept is not None and kept.node_name == "hgx-00"
    assert backend.noted() == 0


def test_a_pod_noted_already_bound_is_not_tracked(backend: embedded.EmbeddedBackend, clock: Clock) -> None:
    backend.note_pod(_pod("running", node="hgx-01", phase="Running"))
    assert backend.noted() == 0
    clock.now += 10 * TTL
    assert backend.forget_expired() == 0
    assert backend.store.pod("research", "running") is not None


def test_pods_of_the_loaded_cluster_are_kept(clock: Clock) -> None:
    pending = demo.pod("from-file", None, 1, namespace="research")
    b = embedded.EmbeddedBackend(ClusterStore(Policy()), [*demo.objects(), pending], "files", pod_ttl=TTL,
                                 clock=clock)
    b.start()
    b.note_pod(parsing.pod(pending))  # the scheduler asks about it too
    clock.now += 10 * TTL
    assert b.forget_expired() == 0
    assert b.store.pod("research", "from-file") is not None


def test_requests_forget_expired_pods_a_few_at_a_time(backend: embedded.EmbeddedBackend, clock: Clock) -> None:
    """No sweeper thread: each request forgets up to FORGET_PER_NOTE expired pods, more than it adds."""
    for i in range(20):
        backend.note_pod(_pod(f"old-{i}"))
    clock.now += TTL
    before = backend.store.raw_counts()["Pod"]
    backend.note_pod(_pod("new-0"))
    assert backend.store.raw_counts()["Pod"] == before + 1 - embedded.FORGET_PER_NOTE
    for i in range(1, 5):
        backend.note_pod(_pod(f"new-{i}"))
    assert backend.noted() == 5  # the 20 old ones are gone, the 5 new ones tracked
    assert all(backend.store.pod("research", f"old-{i}") is None for i in range(20))


def test_the_ttl_comes_from_serve_pod_ttl() -> None:
    from webhook.service import settings

    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    assert settings.from_args(parser.parse_args(["--pod-ttl", "2.5"])).cluster.pod_ttl == 2.5
    assert settings.from_args(parser.parse_args([])).cluster.pod_ttl == embedded.DEFAULT_POD_TTL
    backend = embedded.EmbeddedBackend(ClusterStore(Policy()), demo.objects(), "the built-in demo topology", 2.5)
    assert backend.pod_ttl == 2.5
    for bad in ("0", "-3", "inf", "nan"):
        with pytest.raises(settings.SettingsError, match="--pod-ttl"):
            settings.from_args(parser.parse_args(["--pod-ttl", bad]))


def test_a_finished_pod_is_forgotten_after_the_ttl_like_an_unbound_one() -> None:
    clock = Clock()
    backend = embedded.EmbeddedBackend(ClusterStore(Policy()), demo.objects(), "demo", pod_ttl=TTL, clock=clock)
    backend.start()
    running = parsing.pod(demo.pod("done-0", None, 1, node="hgx-00", phase="Running"))
    backend.note_pod(running)
    backend.note_pod(replace(running, terminated=True))
    assert backend.noted() == 1
    clock.now += TTL + 1
    assert backend.forget_expired() == 1 and backend.store.pod(running.namespace, "done-0") is None
