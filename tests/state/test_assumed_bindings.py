"""Bindings this replica sent, shown on their nodes until the watch tells the truth (webhook.state.assumed):
each way an assumption ends, and the events that must not end it."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from webhook.domain.model import Pod
from webhook.domain.reading import parsing
from webhook.state.cluster import ClusterStore

A = "aaaa-1111.7"


def _store() -> ClusterStore:
    store = builders.store(builders.rack("a", A, 2))
    store.apply("Pod", "ADDED", builders.pod("p", gpus=3))
    return store


def _cached(store: ClusterStore) -> Pod:
    pod = store.pod("ml", "p")
    assert pod is not None
    return pod


def _other_uid(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["uid"] = "uid-of-a-new-pod"
    return obj


def test_an_assumed_pod_holds_its_gpus_on_the_node() -> None:
    store = _store()
    store.assume_bound(_cached(store), "a-00")
    assert store.snapshot().used_gpus == {"a-00": 3} and store.assumed_bindings == 1


def test_a_pod_the_watch_has_not_brought_yet_is_held_as_the_bind_verb_read_it() -> None:
    store = builders.store(builders.rack("a", A, 1))
    store.assume_bound(parsing.pod(builders.pod("q", gpus=2)), "a-00")
    assert store.snapshot().used_gpus == {"a-00": 2}
    store.apply("Pod", "ADDED", builders.pod("q", gpus=2))  # its creation, delivered late
    assert store.snapshot().used_gpus == {"a-00": 2}


# (the event that arrives after the bind verb assumed p on a-00, what the store then holds, assumptions left)
ENDINGS = [
    ("MODIFIED", builders.pod("p", gpus=3), "a-00", 1),  # written before the binding: no node yet
    ("MODIFIED", builders.pod("p", gpus=3, node="a-00", phase="Running"), "a-00", 0),  # the binding itself
    ("MODIFIED", builders.pod("p", gpus=3, node="a-01", phase="Running"), "a-01", 0),  # the API server's word
    ("DELETED", builders.pod("p", gpus=3), None, 0),
    ("ADDED", _other_uid(builders.pod("p", gpus=3)), None, 0),  # a new pod under the same name, unbound
]


@pytest.mark.parametrize(("event", "obj", "node", "left"), ENDINGS,
                         ids=["stale-event", "confirmed", "bound-elsewhere", "deleted", "re-created"])
def test_an_assumption_ends_only_when_the_watch_says_something_newer(
        event: str, obj: dict[str, Any], node: str | None, left: int) -> None:
    store = _store()
    store.assume_bound(_cached(store), "a-00")
    store.apply("Pod", event, obj)
    pod = store.pod("ml", "p")
    assert (pod.node_name if pod else None) == node and store.assumed_bindings == left


def test_a_relist_without_the_pod_leaves_no_assumption() -> None:
    store = _store()
    store.assume_bound(_cached(store), "a-00")
    store.replace("Pod", [])
    assert store.assumed_bindings == 0 and store.snapshot().used_gpus == {}


def test_a_withdrawn_binding_frees_the_node_unless_the_watch_showed_it_bound() -> None:
    store = _store()
    pod = _cached(store)
    store.assume_bound(pod, "a-00")
    store.withdraw_bound(pod, "a-00")
    assert _cached(store).node_name is None and store.snapshot().used_gpus == {}

    store.assume_bound(pod, "a-01")
    store.apply("Pod", "MODIFIED", builders.pod("p", gpus=3, node="a-01"))  # the call timed out, yet it bound
    store.withdraw_bound(pod, "a-01")
    assert _cached(store).node_name == "a-01" and store.snapshot().used_gpus == {"a-01": 3}


def test_a_pod_already_bound_is_not_assumed_again() -> None:
    store = builders.store(builders.rack("a", A, 2))
    store.apply("Pod", "ADDED", builders.pod("p", gpus=3, node="a-01"))
    store.assume_bound(_cached(store), "a-00")
    assert _cached(store).node_name == "a-01" and store.assumed_bindings == 0


def test_withdrawing_another_pods_binding_changes_nothing() -> None:
    store = _store()
    pod = _cached(store)
    store.assume_bound(pod, "a-00")
    store.withdraw_bound(pod, "a-01")  # not the node assumed
    store.withdraw_bound(parsing.pod(_other_uid(builders.pod("p", gpus=3))), "a-00")  # not the pod assumed
    assert _cached(store).node_name == "a-00" and store.assumed_bindings == 1
