"""A pod the extender binds counts on its node before the watch shows the binding (webhook.state.assumed).

Through the fake API server with its binding events held back (a watch behind the writes), as in fabric mode,
where kube-scheduler leaves ``nvidia.com/gpu`` to the extender: the next GPU pod is not sent to the bound
pod's node, also while the binding's API call is still in flight; a refused binding is taken back; a stale
event without the node does not undo it; the watch's event confirms it and a deleted pod leaves nothing.
"""

from __future__ import annotations

import threading

import pytest

from tests import builders
from tests.adapters.kube.conftest import Connect
from tests.concurrency import run_together
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend
from webhook.domain import keys
from webhook.domain.model import Pod
from webhook.engine.engine import Engine
from webhook.errors import DecisionError

RACK = "aaaa-1111.7"
NODES = ["n1", "n2"]


@pytest.fixture
def cluster(fake: KubeFake, connect_backend: Connect) -> tuple[KubeBackend, Engine]:
    for name in NODES:
        fake.create("nodes", builders.node(name, gpus=4, domain=RACK))
    for i in range(4):
        fake.create("pods", builders.pod(f"p{i}", gpus=4))
    backend = connect_backend()
    eventually(lambda: all(backend.store.pod("ml", f"p{i}") for i in range(4)), what="pods cached")
    fake.hold_binding_events()
    return backend, builders.engine(backend, holder="replica-a")


def _pod(backend: KubeBackend, name: str) -> Pod:
    pod = backend.store.pod("ml", name)
    assert pod is not None
    return pod


def _passed(engine: Engine, pod: Pod) -> tuple[str, ...]:
    return engine.filter(pod, NODES).passed


def _show_bindings(fake: KubeFake) -> None:
    """The watch catches up: every bound pod's event arrives."""
    fake.hold_binding_events(False)
    for obj in fake.items("pods"):
        if obj["spec"].get("nodeName"):
            fake.replace("pods", obj)


def test_a_bound_pods_gpus_are_taken_before_the_watch_shows_the_binding(
        fake: KubeFake, cluster: tuple[KubeBackend, Engine]) -> None:
    backend, engine = cluster
    first = _pod(backend, "p0")
    assert engine.bind("ml", "p0", first.uid, "n1").outcome == "bound"
    assert fake.get("pods", "ml", "p0")["spec"]["nodeName"] == "n1"  # bound, and the watch has not said so

    second = engine.filter(_pod(backend, "p1"), NODES)
    assert second.passed == ("n2",)
    assert second.failed["n1"] == "pod needs 4 nvidia.com/gpu; node has 0 free"
    assert backend.store.assumed_bindings == 1

    _show_bindings(fake)
    eventually(lambda: backend.store.assumed_bindings == 0, what="the watch confirms the binding")
    assert _pod(backend, "p0").node_name == "n1" and _passed(engine, _pod(backend, "p1")) == ("n2",)


def test_a_filter_while_the_binding_call_is_in_flight_already_counts_it(
        fake: KubeFake, cluster: tuple[KubeBackend, Engine]) -> None:
    backend, engine = cluster
    release = threading.Event()
    original = backend.binder.bind

    def slow_bind(pod: Pod, node: str) -> None:  # the API call, held until the filter below has run
        release.wait(30.0)
        original(pod, node)

    backend.binder.bind = slow_bind  # type: ignore[method-assign]
    first = _pod(backend, "p0")
    outcome: list[str] = []
    binding = threading.Thread(target=lambda: outcome.append(engine.bind("ml", "p0", first.uid, "n1").outcome))
    binding.start()
    eventually(lambda: backend.store.assumed_bindings == 1, what="the bind verb counts the pod on n1")
    assert _passed(engine, _pod(backend, "p1")) == ("n2",)
    release.set()
    binding.join(60.0)
    assert outcome == ["bound"]


def test_a_refused_binding_is_taken_back_and_the_node_passes_again(
        fake: KubeFake, cluster: tuple[KubeBackend, Engine]) -> None:
    backend, engine = cluster
    fake.fail("post", "pods", 500, "InternalError", "etcdserver: request timed out", subresource="binding", times=1)
    first = _pod(backend, "p0")
    with pytest.raises(DecisionError, match="request timed out"):
        engine.bind("ml", "p0", first.uid, "n1")

    assert backend.store.assumed_bindings == 0 and _pod(backend, "p0").node_name is None
    assert _passed(engine, _pod(backend, "p1")) == tuple(NODES)
    assert engine.bind("ml", "p0", first.uid, "n1").outcome == "bound"  # the scheduler's retry


def test_a_stale_event_without_the_node_does_not_undo_the_binding(
        fake: KubeFake, cluster: tuple[KubeBackend, Engine]) -> None:
    backend, engine = cluster
    stale = fake.get("pods", "ml", "p0")
    first = _pod(backend, "p0")
    engine.bind("ml", "p0", first.uid, "n1")
    # An annotation written before the binding, its event delivered after the bind verb ran: the pod without a
    # node (sent at the current version, so that the fake emits it as it was).
    stale["metadata"].setdefault("annotations", {})[keys.COMPLETION_INDEX] = "0"
    stale["metadata"]["resourceVersion"] = fake.get("pods", "ml", "p0")["metadata"]["resourceVersion"]
    fake.hold_binding_events(False)
    fake.replace("pods", {**stale, "spec": {k: v for k, v in stale["spec"].items() if k != "nodeName"}})
    eventually(lambda: _pod(backend, "p0").rank == "0", what="the stale event arrives")

    assert _pod(backend, "p0").node_name == "n1" and backend.store.assumed_bindings == 1
    assert _passed(engine, _pod(backend, "p1")) == ("n2",)


def test_a_pod_deleted_before_the_watch_showed_its_binding_leaves_nothing_behind(
        fake: KubeFake, cluster: tuple[KubeBackend, Engine]) -> None:
    backend, engine = cluster
    first = _pod(backend, "p0")
    engine.bind("ml", "p0", first.uid, "n1")
    fake.delete("pods", "ml", "p0")

    eventually(lambda: backend.store.pod("ml", "p0") is None, what="the deletion arrives")
    assert backend.store.assumed_bindings == 0
    assert _passed(engine, _pod(backend, "p1")) == tuple(NODES)


def test_concurrent_binds_and_filters_never_send_two_pods_to_one_nodes_gpus(
        fake: KubeFake, cluster: tuple[KubeBackend, Engine]) -> None:
    """Four pods, two nodes of one pod's room each, every binding behind the watch: in the order kube-scheduler
    runs them (a pod's filter after the previous pod's bind has begun), at most one pod per node."""
    backend, engine = cluster
    pods = [_pod(backend, f"p{i}") for i in range(4)]
    started = threading.Semaphore(0)
    original = backend.binder.bind

    def announced_bind(pod: Pod, node: str) -> None:
        started.release()
        original(pod, node)

    backend.binder.bind = announced_bind  # type: ignore[method-assign]
    chosen: list[str | None] = []
    threads = []
    for pod in pods:
        passed = _passed(engine, pod)
        chosen.append(passed[0] if passed else None)
        if passed:
            t = threading.Thread(target=engine.bind, args=("ml", pod.name, pod.uid, passed[0]))
            t.start()
            threads.append(t)
            started.acquire(timeout=30.0)
    for t in threads:
        t.join(30.0)

    assert sorted(n for n in chosen if n) == NODES and chosen.count(None) == 2
    waiting = [p for p, n in zip(pods, chosen, strict=True) if n is None]
    assert run_together(len(waiting), lambda i: _passed(engine, waiting[i])) == [()] * len(waiting)
    assert backend.store.assumed_bindings == 2  # the watch has shown neither binding


def test_a_bind_to_a_node_another_pod_took_since_the_filter_is_refused_before_any_api_call(
        fake: KubeFake, cluster: tuple[KubeBackend, Engine]) -> None:
    """kube-scheduler runs the next pod's filter while the previous pod's binding starts: both filters can pass
    n1. The second bind finds n1 taken, asks the API server nothing, and the scheduler's retry goes to n2."""
    backend, engine = cluster
    first, second = _pod(backend, "p0"), _pod(backend, "p1")
    assert _passed(engine, first) == _passed(engine, second) == tuple(NODES)
    engine.bind("ml", "p0", first.uid, "n1")

    with pytest.raises(DecisionError) as refused:
        engine.bind("ml", "p1", second.uid, "n1")
    assert str(refused.value) == ("node n1 has no room left for pod ml/p1: pod needs 4 nvidia.com/gpu; node has 0 "
                                  "free (a pod was bound there since this one's filter); the scheduler retries")
    assert [b["name"] for b in fake.bindings()] == ["p0"] and backend.store.assumed_bindings == 1
    assert _pod(backend, "p1").node_name is None
    assert _passed(engine, second) == ("n2",)
    assert engine.bind("ml", "p1", second.uid, "n2").outcome == "bound"


def test_racing_binds_to_one_nodes_last_gpus_bind_exactly_one(
        fake: KubeFake, cluster: tuple[KubeBackend, Engine]) -> None:
    backend, engine = cluster
    pods = [_pod(backend, f"p{i}") for i in range(4)]

    def bind(i: int) -> str:
        try:
            return engine.bind("ml", pods[i].name, pods[i].uid, "n1").outcome
        except DecisionError as exc:
            return str(exc)

    outcomes = run_together(4, bind)
    assert outcomes.count("bound") == 1
    assert all("node has 0 free" in o for o in outcomes if o != "bound")
    assert len(fake.bindings()) == 1 and backend.store.assumed_bindings == 1
    _show_bindings(fake)
    eventually(lambda: backend.store.assumed_bindings == 0, what="the watch confirms the one binding")
    assert backend.store.snapshot().used_gpus == {"n1": 4}
