"""One odd object never freezes a cache, and a stalled watch is not ready (issue 12, item 2).

Against the fake API server over real HTTP: objects that do not parse (fabric slots of "1e309", a
wrong-typed field) or that raise something no parser foresaw (RecursionError, OverflowError...) are
skipped and counted by kind in ``imex_webhook_cache_rejected_objects``, both in the first list and as
later events; odd objects that do parse (a superscript group size, a 100,000-deep inventory annotation)
are cached; the backend becomes ready, no relist happens, and a later pod bound elsewhere still reaches
the cache. A sink that raises on one event does not stop its watch. A watch that makes no progress for
longer than ``stall_timeout`` turns ``/readyz`` false with a reason naming the kind, and ready again once
it recovers, while quiet watches that stay open are never counted as stalled (also with an injected
clock); ``serve --watch-stall-timeout`` sets the bound of every watch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from tests import builders
from tests.adapters.kube.conftest import FAST, Connect
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend, connect
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.http.app import create_app
from webhook.service import assembly
from webhook.service.settings import Settings, SettingsError, from_args
from webhook.state.cluster import ClusterStore

CLIQUE = demo.clique_value("gb200-a")


def _odd(suffix: str) -> list[tuple[str, dict[str, Any]]]:
    superscript = builders.pod(f"superscript{suffix}", gpus=1, annotations={keys.GROUP_SIZE_ANNOTATION: "²"})
    huge = builders.node(f"huge-slots{suffix}", zone="z")
    huge["metadata"]["annotations"][keys.FABRIC_SLOTS_ANNOTATION] = "1e309"
    deep = builders.node(f"deep{suffix}", domain=CLIQUE)
    deep["metadata"]["annotations"][keys.INVENTORY_ANNOTATION] = "[" * 100_000 + "]" * 100_000
    typed = builders.pod(f"typed{suffix}", gpus=1)
    typed["spec"]["nodeName"] = 5
    return [("pods", superscript), ("nodes", huge), ("nodes", deep), ("pods", typed)]


def _app(backend: KubeBackend) -> Flask:
    store = backend.store
    engine = builders.engine(backend, store.policy, holder="test")
    return create_app(engine, backend)


def _rejected_metric(app: Flask, kind: str) -> float:
    text = app.test_client().get("/metrics").get_data(as_text=True)
    sample = f'imex_webhook_cache_rejected_objects{{kind="{kind}"}} '
    line = next(li for li in text.splitlines() if li.startswith(sample))
    return float(line.split()[-1])


def test_odd_objects_at_start_up_and_later_are_skipped_counted_and_the_watch_goes_on(
        fake: KubeFake, connect_backend: Connect) -> None:
    fake.create("nodes", builders.node("good", gpus=8, domain=CLIQUE))
    for plural, obj in _odd("-early"):
        fake.create(plural, obj)

    backend = connect_backend()  # becomes ready with the odd objects present
    app = _app(backend)
    assert app.test_client().get("/readyz").json["ready"]  # type: ignore[index]
    store = backend.store
    assert store.rejected_counts()["Node"] == 1 and store.rejected_counts()["Pod"] == 1
    assert {"good", "deep-early"} <= set(store.snapshot().nodes)
    assert store.pod("ml", "superscript-early") is not None and store.pod("ml", "typed-early") is None

    for plural, obj in _odd("-late"):
        fake.create(plural, obj)
    fake.create("pods", builders.pod("bound-elsewhere", gpus=4, node="good"))
    eventually(lambda: store.pod("ml", "bound-elsewhere") is not None, what="a later event reaches the cache")
    eventually(lambda: store.rejected_counts()["Pod"] == 2 and store.rejected_counts()["Node"] == 2,
               what="the late odd objects counted")
    assert store.snapshot().used_gpus.get("good") == 4
    assert "deep-late" in store.snapshot().nodes and store.pod("ml", "superscript-late") is not None
    assert fake.requests("list", "pods") == 1 and fake.requests("list", "nodes") == 1  # no relist
    assert _rejected_metric(app, "Node") == 2 and _rejected_metric(app, "Pod") == 2
    assert _rejected_metric(app, "Job") == 0
    assert app.test_client().get("/readyz").json["ready"]  # type: ignore[index]


@pytest.mark.parametrize("error", [RecursionError("maximum recursion depth exceeded"),
                                   OverflowError("cannot convert float infinity to integer"),
                                   TypeError("unhashable type: 'dict'")], ids=lambda e: type(e).__name__)
def test_an_unforeseen_exception_from_a_parser_never_stops_the_watch(
        fake: KubeFake, connect_backend: Connect, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    real_node, real_pod = parsing.node, parsing.pod

    def node(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj["metadata"]["name"].startswith("odd"):
            raise error
        return real_node(obj, *args, **kwargs)

    def pod(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj["metadata"]["name"].startswith("odd"):
            raise error
        return real_pod(obj, *args, **kwargs)

    monkeypatch.setattr(parsing, "node", node)
    monkeypatch.setattr(parsing, "pod", pod)
    fake.create("nodes", builders.node("good", gpus=8, domain=CLIQUE))
    fake.create("nodes", builders.node("odd-early"))
    fake.create("pods", builders.pod("odd-early"))

    backend = connect_backend()
    store = backend.store
    fake.create("nodes", builders.node("odd-late"))
    fake.create("pods", builders.pod("odd-late"))
    fake.create("pods", builders.pod("bound-elsewhere", gpus=4, node="good"))
    eventually(lambda: store.pod("ml", "bound-elsewhere") is not None, what="a later event reaches the cache")
    eventually(lambda: store.rejected_counts()["Node"] == 2, what="late node counted")
    assert store.rejected_counts()["Pod"] == 2 and set(store.snapshot().nodes) == {"good"}
    assert fake.requests("list", "pods") == 1 and fake.requests("list", "nodes") == 1
    assert backend.ready() == (True, "caches synced")


def test_a_sink_that_raises_on_one_event_does_not_stop_the_watch(
        fake: KubeFake, connect_backend: Connect, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = connect_backend()
    real = ClusterStore.apply

    def apply(self: ClusterStore, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        if obj["metadata"]["name"] == "boom":
            raise RuntimeError("a bug in the sink")
        real(self, kind, event, obj)

    monkeypatch.setattr(ClusterStore, "apply", apply)
    fake.create("pods", builders.pod("boom", gpus=1))
    fake.create("pods", builders.pod("after", gpus=1))
    eventually(lambda: backend.store.pod("ml", "after") is not None, what="the event after the failing one")
    assert backend.store.pod("ml", "boom") is None
    assert fake.requests("list", "pods") == 1 and fake.watches("pods") == 1


def test_a_stalled_watch_turns_readyz_false_with_the_kind_and_recovers(
        fake: KubeFake, connect_backend: Connect) -> None:
    backend = connect_backend(watch=WatchSettings(absent_recheck=FAST.absent_recheck, stall_timeout=0.5))
    app = _app(backend)
    time.sleep(1.0)  # twice the bound with no event at all: quiet open watches are not stalled
    assert backend.ready() == (True, "caches synced")

    # The pod watch ends; the next watch request is held for 3 s before its 410: no list, no watch, no
    # progress for longer than the bound.
    fake.delay("get", "pods", 3.0)
    fake.expire_watches("pods", as_status=True)
    answer = eventually(lambda: (r := app.test_client().get("/readyz")).status_code == 503 and r.json,
                        what="/readyz false while the pod watch is stalled")
    detail = answer["checks"]["cluster"]["detail"]  # type: ignore[index]
    assert answer["ready"] is False  # type: ignore[index]
    assert "Pod watch has made no progress for" in detail and "more than 0.5s" in detail
    assert "Node" not in detail  # the other watches are idle but healthy

    eventually(lambda: app.test_client().get("/readyz").status_code == 200,
               what="ready again after the relist")
    assert fake.requests("list", "pods") == 2
    fake.create("pods", builders.pod("after", gpus=1))
    eventually(lambda: backend.store.pod("ml", "after") is not None, what="the new watch works")


def test_the_stall_rule_with_an_injected_clock(fake: KubeFake, kubeconfig: Path) -> None:
    now = [1000.0]
    settings = WatchSettings(stall_timeout=30, timeout=60, clock=lambda: now[0])
    backend = connect(str(kubeconfig), False, ClusterStore(Policy()), "clocked", 5.0, watch=settings)
    watcher = next(w for w in backend._watchers if w.kind == "Pod")
    try:
        now[0] += 301  # constructed, never started: no progress since
        assert watcher.stalled() == "the Pod watch has made no progress for 301s (more than 30s)"
        backend.start()
        eventually(lambda: backend.ready()[0], what="synced (the clock stands still)")
        eventually(lambda: all(w._open_until is not None for w in backend._watchers), what="every watch open")
        now[0] += 60 + 29  # quiet past the bound, but the watch is open within its deadline (60 s + WATCH_SLACK)
        assert watcher.stalled() is None and backend.ready() == (True, "caches synced")
        now[0] += 2  # past the open watch's deadline with nothing received: stalled
        assert "the Pod watch has made no progress for 91s" in backend.ready()[1]
        fake.create("pods", builders.pod("wakes-it", gpus=1))  # an event is progress
        eventually(lambda: watcher.stalled() is None, what="the pod watch progressed")
        assert "the Pod watch" not in backend.ready()[1] and "Node watch" in backend.ready()[1]  # others idle
    finally:
        backend.stop()


def test_the_stall_bound_is_a_serve_flag_and_reaches_every_watch(kubeconfig: Path) -> None:
    from webhook import cli

    def settings(*extra: str) -> Settings:
        return from_args(cli.parser().parse_args(["serve", "--kubeconfig", str(kubeconfig), *extra]))

    assert settings().cluster.watch_stall_timeout == 300.0
    chosen = settings("--watch-stall-timeout", "42")
    assert chosen.cluster.watch_stall_timeout == 42.0
    with pytest.raises(SettingsError, match="--watch-stall-timeout"):
        settings("--watch-stall-timeout", "0")
    backend = assembly.build_backend(chosen, ClusterStore(Policy()))
    assert isinstance(backend, KubeBackend)
    try:
        assert {w._settings.stall_timeout for w in backend._watchers} == {42.0}
    finally:
        backend.stop()
