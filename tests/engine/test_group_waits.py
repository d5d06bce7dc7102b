"""imex_webhook_group_wait_seconds through the engine (webhook.engine.waits): the bind of a group's last member
reports the group's wait, from its earliest member's creation, once, however many threads bind its last
members at once and however often the scheduler retries a bind; a job in segments is reported once, as
multi-domain, when its last segment runs whole; a pod without a creation time is not reported. The
histogram is read back with Prometheus' own text parser."""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests import builders
from tests.domain.test_holds import T0, _group
from tests.engine.test_holds import A, B, Clock, _pod
from webhook.adapters.embedded import EmbeddedBackend
from webhook.domain.groups import waits
from webhook.domain.policy import Policy
from webhook.engine.engine import Engine
from webhook.http.metrics import WAIT_BUCKETS, Metrics


class Waits:
    """The WaitObserver port, remembering what it was told (from any thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.told: list[tuple[str, float]] = []

    def group_waited(self, size_class: str, seconds: float) -> None:
        with self.lock:
            self.told.append((size_class, seconds))


class Gate:
    """A binder whose binds all wait for one another: every thread has shown its pod bound (the store's
    ``assume_bound``) before any finds out whether its group is whole, so each finds it whole."""

    def __init__(self, binder: Any, parties: int) -> None:
        self.binder = binder
        self.barrier = threading.Barrier(parties)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.binder, name)

    def bind(self, pod: Any, node: str) -> None:
        self.barrier.wait(30)
        self.binder.bind(pod, node)


def _engine(*groups: list[dict[str, Any]], observer: Any = None, gate: int = 0) -> tuple[Engine, Clock]:
    """``gate``: binds wait for that many of them to arrive (``Gate``)."""
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 4)]
    for more in groups:
        objects.extend(more)
    policy = Policy()
    backend = EmbeddedBackend(builders.store(objects, policy), [], "test")
    clock = Clock(T0 + 600)
    binder = Gate(backend.binder, gate) if gate else backend.binder
    engine = Engine(backend.store, backend.reservations, binder, policy, holder="r1", clock=clock, waits=observer)
    return engine, clock


def _place(engine: Engine, objects: list[dict[str, Any]], names: list[str]) -> list[str]:
    """Filter each pod in turn (the first one reserves the domain); the node each is to bind to."""
    nodes, taken = sorted(engine.snapshot().nodes), []
    for name in names:
        result = engine.filter(_pod(objects, name), nodes)
        assert result.passed, result.failed
        taken.append(next(n for n in result.passed if n not in taken))
    return taken


def _bind(engine: Engine, objects: list[dict[str, Any]], name: str, node: str) -> None:
    engine.bind("ml", name, _pod(objects, name).uid, node)


def test_the_bind_of_the_last_member_reports_the_wait_from_the_earliest_creation_by_size_class() -> None:
    team = _group("team", 3, created=T0)
    team[-1]["metadata"]["creationTimestamp"] = "2027-01-15T08:01:40Z"  # created 100 s after the others
    observer = Waits()
    engine, clock = _engine(team, observer=observer)
    names = [f"team-{i}" for i in range(3)]
    for name, node in zip(names[:2], _place(engine, team, names[:2]), strict=True):
        _bind(engine, team, name, node)
    assert observer.told == [], "two of three members run: the group does not yet"
    clock.now = T0 + 900
    (node,) = _place(engine, team, names[2:])
    _bind(engine, team, "team-2", node)
    assert observer.told == [("2-4", 900.0)]
    _bind(engine, team, "team-2", node)  # the scheduler retries a bind that timed out: already bound
    assert observer.told == [("2-4", 900.0)]


def test_threads_binding_a_groups_last_members_at_once_report_its_wait_once() -> None:
    """Every member's bind is under way at once, each past the point where it shows its pod bound: each of
    the four threads finds the group whole, and one reports it."""
    crew = _group("crew", 4, created=T0)
    observer = Waits()
    engine, _ = _engine(crew, observer=observer, gate=4)
    names = [f"crew-{i}" for i in range(4)]
    nodes = _place(engine, crew, names)
    threads = [threading.Thread(target=_bind, args=(engine, crew, name, node))
               for name, node in zip(names, nodes, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(1 for n in nodes if engine.snapshot().used_gpus.get(n)) == 4, "every member bound"
    assert observer.told == [("2-4", 600.0)]


def test_a_group_with_a_member_without_a_creation_time_is_not_reported() -> None:
    pair = _group("pair", 2, created=T0)
    del pair[-1]["metadata"]["creationTimestamp"]
    observer = Waits()
    engine, _ = _engine(pair, observer=observer)
    names = ["pair-0", "pair-1"]
    for name, node in zip(names, _place(engine, pair, names), strict=True):
        _bind(engine, pair, name, node)
    assert engine.snapshot().members and observer.told == []


def test_a_job_in_segments_is_reported_once_as_multi_domain_when_its_last_segment_runs_whole() -> None:
    wide = _group("wide", 6, created=T0, segment=4)  # 4 pods in rack a or b, 2 in the other
    observer = Waits()
    engine, _ = _engine(wide, observer=observer)
    names = [f"wide-{i}" for i in range(6)]
    nodes = _place(engine, wide, names)
    for name, node in zip(names, nodes, strict=True):
        assert observer.told == [], f"{name} not bound yet"
        _bind(engine, wide, name, node)
    assert {engine.snapshot().nodes[n].domain for n in nodes} == {A, B}
    assert observer.told == [("multi-domain", 600.0)]


def test_the_histogram_reads_back_with_prometheus_own_parser_every_class_from_the_start() -> None:
    metrics = Metrics()
    engine, _ = _engine(_group("solo", 1, created=T0), observer=metrics)
    (node,) = _place(engine, _group("solo", 1, created=T0), ["solo-0"])
    _bind(engine, _group("solo", 1, created=T0), "solo-0", node)
    text = generate_latest(metrics.registry).decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "imex_webhook_group_wait_seconds"]
    assert family.type == "histogram"
    counts = {s.labels["size_class"]: s.value for s in family.samples if s.name.endswith("_count")}
    assert counts == {c: (1.0 if c == "1" else 0.0) for c in waits.CLASSES}
    buckets = {float(s.labels["le"]): s.value for s in family.samples
               if s.name.endswith("_bucket") and s.labels["size_class"] == "1"}
    assert sorted(buckets) == [*map(float, WAIT_BUCKETS), float("inf")]
    assert buckets[300.0] == 0.0 and buckets[600.0] == 1.0, "waited 600 s: in the 600 s bucket and above"
    (total,) = [s.value for s in family.samples if s.name.endswith("_sum") and s.labels["size_class"] == "1"]
    assert total == 600.0
