"""A group ends in the store's view when a member was seen placed and every member is now gone or finished
(webhook.state.pod_index); housekeeping then releases its reservation on that change, with no grace, while a
reservation whose members this replica never saw placed keeps the grace (webhook.engine.housekeeping)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests import builders
from webhook.adapters import embedded
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy
from webhook.engine import housekeeping
from webhook.engine.engine import Engine
from webhook.state.cluster import ClusterStore

RACK = "uuid-a.1"
CD = builders.cd_uid("job")
GROUP = f"cd:{CD}"


def _pod(name: str, node: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    return builders.pod(name, "job", node=node, phase=phase)


def _store() -> ClusterStore:
    return builders.store([*builders.rack("a", RACK, 4), *builders.cd_objects("job", 2)])


# Each step: (event, pod name, node, phase); "relist" replaces every pod with the named ones.
CASES: list[tuple[str, list[tuple[str, str, str | None, str]], bool]] = [
    ("a placed member deleted ends the group",
     [("ADDED", "p0", "a-00", "Running"), ("DELETED", "p0", "a-00", "Running")], True),
    ("a placed member that succeeded ends the group",
     [("ADDED", "p0", "a-00", "Running"), ("MODIFIED", "p0", "a-00", "Succeeded")], True),
    ("a placed member that failed ends the group",
     [("ADDED", "p0", "a-00", "Running"), ("MODIFIED", "p0", "a-00", "Failed")], True),
    ("a member never placed and deleted does not: this replica never saw the group run",
     [("ADDED", "p0", None, "Pending"), ("DELETED", "p0", None, "Pending")], False),
    ("one of two placed members deleted does not",
     [("ADDED", "p0", "a-00", "Running"), ("ADDED", "p1", "a-01", "Running"), ("DELETED", "p0", "a-00", "Running")],
     False),
    ("both placed members deleted does",
     [("ADDED", "p0", "a-00", "Running"), ("ADDED", "p1", "a-01", "Running"), ("DELETED", "p0", "a-00", "Running"),
      ("DELETED", "p1", "a-01", "Running")], True),
    ("a replacement created after the last member went revives the group",
     [("ADDED", "p0", "a-00", "Running"), ("DELETED", "p0", "a-00", "Running"), ("ADDED", "p2", None, "Pending")],
     False),
    ("a pending member left beside a finished one keeps the group alive",
     [("ADDED", "p0", "a-00", "Running"), ("ADDED", "p1", None, "Pending"), ("MODIFIED", "p0", "a-00", "Succeeded")],
     False),
    ("a relist without the placed members ends the group (no DELETED event needed)",
     [("ADDED", "p0", "a-00", "Running"), ("relist", "", None, "")], True),
]


@pytest.mark.parametrize(("steps", "ended"), [(s, e) for _, s, e in CASES], ids=[c[0] for c in CASES])
def test_the_store_says_when_a_group_seen_placed_has_ended(steps: list[tuple[str, str, str | None, str]],
                                                           ended: bool) -> None:
    store = _store()
    for event, name, node, phase in steps:
        if event == "relist":
            store.replace("Pod", [])
        else:
            store.apply("Pod", event, _pod(name, node, phase))
    assert (GROUP in store.snapshot().ended_groups) is ended


def test_a_forgotten_ended_group_is_no_longer_reported_and_a_new_snapshot_says_so() -> None:
    store = _store()
    store.apply("Pod", "ADDED", _pod("p0", "a-00", "Running"))
    store.apply("Pod", "DELETED", _pod("p0", "a-00", "Running"))
    before = store.snapshot()
    store.forget_ended([GROUP, "cd:never-seen"])
    assert GROUP in before.ended_groups and GROUP not in store.snapshot().ended_groups


def _reservation(created_at: float, placed_at: float | None = None) -> Reservation:
    return Reservation(GROUP, "job", "ml", RACK, 2, 4, True, created_at, placed_at)


def _snapshot(ended: bool, pods: list[dict[str, Any]], res: Reservation) -> Any:
    from dataclasses import replace

    snap = builders.snapshot([*builders.rack("a", RACK, 4), *builders.cd_objects("job", 2), *pods],
                             reservations={GROUP: res})
    return replace(snap, ended_groups=frozenset({GROUP}) if ended else frozenset())


RELEASE_CASES: list[tuple[str, bool, list[dict[str, Any]], float, float | None, str | None]] = [
    # (case, ended, pods, now - created, now - placed, expected reason)
    ("an ended group is released one second after its last placement", True, [], 1, 1, housekeeping.ENDED),
    ("a group never seen placed keeps the grace", False, [], 1, 1, None),
    ("... until the grace is over", False, [], housekeeping.GRACE + 1, housekeeping.GRACE + 1, housekeeping.ENDED),
    ("an ended group with a member back (a replacement) is kept", True, [_pod("p2")], 1, 1, None),
    ("a group with no member placed is released after the TTL", False, [_pod("p0")], 601, None,
     "no member placed within 600s"),
]


@pytest.mark.parametrize(("ended", "pods", "age", "since_placed", "reason"), [c[1:] for c in RELEASE_CASES],
                         ids=[c[0] for c in RELEASE_CASES])
def test_housekeeping_releases_an_ended_group_at_once_and_keeps_the_grace_elsewhere(
        ended: bool, pods: list[dict[str, Any]], age: float, since_placed: float | None, reason: str | None) -> None:
    now = 10_000.0
    res = _reservation(now - age, None if since_placed is None else now - since_placed)
    stale = housekeeping.stale_reservations(_snapshot(ended, pods, res), now, Policy())
    assert stale == ([(GROUP, reason)] if reason else [])


def _engine() -> tuple[Engine, embedded.EmbeddedBackend]:
    store = ClusterStore(Policy())
    backend = embedded.EmbeddedBackend(store, [*builders.rack("a", RACK, 4), *builders.cd_objects("job", 2)], "test")
    backend.start()
    return builders.engine(backend, holder="t", clock=lambda: 1000.0), backend


def test_the_engine_releases_a_deleted_group_on_the_next_round_without_waiting_and_forgets_it() -> None:
    engine, _ = _engine()
    pods = [builders.pod(f"p{i}", "job") for i in range(2)]
    for obj in pods:
        engine.store.apply("Pod", "ADDED", obj)
    from webhook.domain.reading import parsing

    passed = engine.filter(parsing.pod(pods[0]), sorted(engine.store.snapshot().nodes)).passed
    for i, obj in enumerate(pods):
        engine.bind("ml", obj["metadata"]["name"], obj["metadata"]["uid"], passed[i])
    assert GROUP in engine.reservations.all()
    for obj in pods:
        engine.store.apply("Pod", "DELETED", obj)

    assert engine.housekeep(prune=False) == [(GROUP, housekeeping.ENDED)]  # the clock never moved
    assert GROUP not in engine.reservations.all() and not engine.store.snapshot().ended_groups


def test_every_change_of_the_store_or_the_reservations_wakes_the_workers_and_readers_never_block() -> None:
    engine, _ = _engine()
    engine.changes.clear()
    engine.store.apply("Pod", "ADDED", _pod("p0"))
    assert engine.changes.is_set()
    engine.changes.clear()
    engine.reservations.reserve(_reservation(1000.0))
    assert engine.changes.is_set()

    # Eight threads feeding the store while housekeeping runs: the listener runs under the store's lock and
    # only sets an event, so nothing deadlocks and every pod is counted.
    def feed(i: int) -> None:
        for j in range(50):
            engine.store.apply("Pod", "ADDED", _pod(f"t{i}-{j}", "a-01", "Running"))
            engine.store.apply("Pod", "DELETED", _pod(f"t{i}-{j}", "a-01", "Running"))

    threads = [threading.Thread(target=feed, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for _ in range(20):
        engine.housekeep(prune=False)
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    members = engine.store.snapshot().members.get(GROUP, ())
    assert [m.pod.name for m in members] == ["p0"]
