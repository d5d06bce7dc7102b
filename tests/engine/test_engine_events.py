"""What the engine reports for Kubernetes Events (webhook.engine.events), on the embedded store with a sink
that keeps what it is given: a group's first filter reports DomainReserved on the pod and its
ComputeDomain; a group no domain can host reports NoDomainFits with the very reason the extender gives
the scheduler; housekeeping reports ReservationExpired or ReservationReleased; a fabric attach reports
its start (not when a bind continues one), its success or its failure. A sink that fails, or a broken
cluster object, never fails a decision; embedded mode writes the occurrences to the decision log."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import pytest

from tests import builders
from tests.concurrency import run_together
from webhook.adapters import embedded
from webhook.demo import cluster as demo
from webhook.domain.model import Node, Pod
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine import occurrences
from webhook.engine.engine import Engine
from webhook.engine.events import LogEvents
from webhook.engine.occurrences import Occurrence
from webhook.errors import DecisionError
from webhook.state.cluster import ClusterStore
from webhook.wire.fabric_attachment import Attachment, Phase


class Kept:
    def __init__(self) -> None:
        self.items: list[Occurrence] = []
        self._lock = threading.Lock()

    def record(self, occurrence: Occurrence) -> None:
        with self._lock:
            self.items.append(occurrence)

    def dropped(self) -> Mapping[str, int]:
        return {}

    def seen(self) -> list[tuple[str, str, str]]:
        """(reason, kind, name) of each occurrence, in order."""
        return [(o.reason.name, o.regarding.kind, o.regarding.name) for o in self.items]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _demo_engine(sink: Kept, clock: Clock) -> Engine:
    store = ClusterStore(Policy())
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    backend.start()
    return builders.engine(backend, holder="test", clock=clock, events=sink)


def _submit(engine: Engine, name: str, cd: str, gpus: int = 4) -> tuple[Pod, tuple[str, ...]]:
    pod = parsing.pod(demo.pod(name, cd, gpus))
    embedded.put_pod(engine.store, pod)
    return pod, engine.filter(pod, sorted(engine.store.snapshot().nodes)).passed


def test_the_first_filter_of_a_group_reports_domain_reserved_on_the_pod_and_its_compute_domain() -> None:
    sink, clock = Kept(), Clock()
    engine = _demo_engine(sink, clock)
    _submit(engine, "train-8-0", "train-8")
    _submit(engine, "train-8-1", "train-8")  # follows the stored reservation: nothing new happened

    assert sink.seen() == [("DomainReserved", "Pod", "train-8-0"), ("DomainReserved", "ComputeDomain", "train-8")]
    on_pod, on_cd = sink.items
    cd_uid = demo.uid("cd", "ml", "train-8")
    assert on_pod.reason.type == "Normal" and on_pod.reason.action == "ReserveDomain"
    assert on_pod.regarding == occurrences.ObjectRef("v1", "Pod", "ml", "train-8-0", demo.uid("pod", "ml", "train-8-0"))
    assert on_pod.related == on_cd.regarding == occurrences.ObjectRef("resource.nvidia.com/v1beta1", "ComputeDomain",
                                                                      "ml", "train-8", cd_uid)
    assert on_cd.related is None  # every member's occurrence on the ComputeDomain is one series
    assert demo.clique_value("gb200-c") in on_pod.note and "ml/train-8 (8 pods, 4 GPUs each)" in on_pod.note


def test_a_group_no_domain_can_host_reports_no_domain_fits_with_the_extenders_reason() -> None:
    sink = Kept()
    store = builders.store([*builders.rack("a", "dom-a", 2), *builders.cd_objects("huge", 6)])
    backend = embedded.EmbeddedBackend(store, [], "test")
    engine = builders.engine(backend, events=sink)
    pod = parsing.pod(builders.pod("huge-0", cd="huge"))
    embedded.put_pod(store, pod)

    result = engine.filter(pod, ["a-00", "a-01"])
    engine.filter(pod, ["a-00", "a-01"])  # the scheduler retries: the recorder's series absorb repeats

    assert result.outcome == "no-domain"
    extender_reasons = set(result.failed.values()) | set(result.unresolvable.values())
    assert sink.seen() == [("NoDomainFits", "Pod", "huge-0"), ("NoDomainFits", "ComputeDomain", "huge")] * 2
    assert {o.note for o in sink.items} == extender_reasons and all(o.reason.type == "Warning" for o in sink.items)


def test_housekeeping_reports_an_expired_reservation_on_the_compute_domain_and_the_waiting_pods() -> None:
    sink, clock = Kept(), Clock()
    engine = _demo_engine(sink, clock)
    _submit(engine, "train-4-0", "train-4")
    _submit(engine, "train-4-1", "train-4")
    sink.items.clear()
    clock.now += Policy().reservation_ttl + 1

    released = engine.housekeep()

    assert [g for g, _ in released] == [f"cd:{demo.uid('cd', 'ml', 'train-4')}"]
    assert sorted(sink.seen()) == [("ReservationExpired", "ComputeDomain", "train-4"),
                                   ("ReservationExpired", "Pod", "train-4-0"),
                                   ("ReservationExpired", "Pod", "train-4-1")]
    assert all(o.reason.type == "Warning" and "chooses a domain again" in o.note for o in sink.items)


def test_housekeeping_reports_the_release_of_a_group_that_ended() -> None:
    sink, clock = Kept(), Clock()
    engine = _demo_engine(sink, clock)
    _, passed = _submit(engine, "train-4-0", "train-4")
    engine.bind("ml", "train-4-0", demo.uid("pod", "ml", "train-4-0"), passed[0])
    engine.store.apply("Pod", "DELETED", demo.pod("train-4-0", "train-4", 4))
    sink.items.clear()
    clock.now += 31

    engine.housekeep()

    assert sink.seen() == [("ReservationReleased", "ComputeDomain", "train-4")]
    assert sink.items[0].reason.type == "Normal" and "every member of the group has finished" in sink.items[0].note


class Attaching:
    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.calls = 0

    def attach(self, pod: Pod, node: Node, gpus: int, deadline: float) -> None:
        self.calls += 1
        if self.fail:
            raise DecisionError(self.fail)


def _fabric_engine(sink: Kept, attacher: object) -> tuple[Engine, Pod]:
    store = builders.store([builders.node("f", 1, zone="pool", slots=4), *builders.cd_objects("job", 1)],
                           fabric_free={"pool": 4})
    backend = embedded.EmbeddedBackend(store, [], "test")
    engine = builders.engine(backend, attacher=attacher,  # type: ignore[arg-type]
                    events=sink)
    pod = parsing.pod(builders.pod("job-0", cd="job", gpus=3))
    embedded.put_pod(store, pod)
    assert engine.filter(pod, ["f"]).passed == ("f",)
    sink.items.clear()
    return engine, pod


def test_a_fabric_attach_reports_its_start_and_its_success() -> None:
    sink = Kept()
    engine, pod = _fabric_engine(sink, Attaching())
    engine.bind("ml", "job-0", pod.uid, "f")
    assert sink.seen() == [("FabricAttachStarted", "Pod", "job-0"), ("FabricAttachStarted", "ComputeDomain", "job"),
                           ("FabricAttached", "Pod", "job-0"), ("FabricAttached", "ComputeDomain", "job")]
    assert "attaching 2 fabric GPUs to node f" in sink.items[0].note


@pytest.mark.parametrize("attacher, why", [
    (Attaching("fabric zone pool has 1 free GPU blocks, pod ml/job-0 needs 2"), "has 1 free GPU blocks"),
    (None, "no fabric manager is configured"),  # the engine's own NoFabric
])
def test_a_failed_fabric_attach_reports_a_warning_with_the_reason(attacher: Attaching | None, why: str) -> None:
    sink = Kept()
    engine, pod = _fabric_engine(sink, attacher)
    with pytest.raises(DecisionError):
        engine.bind("ml", "job-0", pod.uid, "f")
    assert [r for r, kind, _ in sink.seen() if kind == "Pod"] == ["FabricAttachStarted", "FabricAttachFailed"]
    failed = sink.items[-1]
    assert failed.reason.type == "Warning" and why in failed.note


def test_a_bind_that_continues_an_attach_in_progress_does_not_report_a_new_start() -> None:
    sink = Kept()
    engine, pod = _fabric_engine(sink, Attaching())
    engine.store.put_attachment(Attachment(name="fa-x", node="f", pod_namespace="ml", pod_name="job-0", pod_uid=pod.uid,
                                           zone="pool", gpus=2, system="s", phase=Phase.COMPOSING))
    engine.bind("ml", "job-0", pod.uid, "f")
    assert [r for r, kind, _ in sink.seen() if kind == "Pod"] == ["FabricAttached"]


class Exploding:
    def record(self, occurrence: Occurrence) -> None:
        raise RuntimeError("sink exploded")

    def dropped(self) -> Mapping[str, int]:
        return {}


def test_a_sink_that_raises_never_fails_a_decision(caplog: pytest.LogCaptureFixture) -> None:
    engine = _demo_engine(Kept(), Clock())
    engine.report.sink = Exploding()
    _, passed = _submit(engine, "train-8-0", "train-8")
    assert passed
    assert "could not report the reservation" in caplog.text


def test_embedded_mode_writes_occurrences_to_the_decision_log(caplog: pytest.LogCaptureFixture) -> None:
    store = ClusterStore(Policy())
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    backend.start()
    engine = builders.engine(backend)
    assert isinstance(engine.events, LogEvents) and engine.events.dropped() == {}
    with caplog.at_level(logging.INFO, logger="imex_webhook.decisions"):
        _submit(engine, "train-8-0", "train-8")
    lines = [r.decision for r in caplog.records if r.name == "imex_webhook.decisions.events"]  # type: ignore[attr-defined]
    assert [(d["reason"], d["object"], d["type"]) for d in lines] == [
        ("DomainReserved", "Pod ml/train-8-0", "Normal"), ("DomainReserved", "ComputeDomain ml/train-8", "Normal")]


def test_the_engine_reports_to_the_sink_its_backend_names_else_to_the_decision_log() -> None:
    store = ClusterStore(Policy())
    backend = embedded.EmbeddedBackend(store, demo.objects(), "the built-in demo topology")
    sink = Kept()
    assert builders.engine(backend, events=sink).events is sink
    assert backend.events is None
    assert isinstance(builders.engine(backend, events=backend.events).events,
                      LogEvents)


def test_concurrent_first_filters_of_many_groups_each_report_their_reservation() -> None:
    sink, clock = Kept(), Clock()
    engine = _demo_engine(sink, clock)
    groups = [("train-4", 4), ("train-8", 8)]
    run_together(len(groups), lambda i: _submit(engine, f"{groups[i][0]}-0", groups[i][0]))
    on_domains = sorted(name for reason, kind, name in sink.seen()
                        if (reason, kind) == ("DomainReserved", "ComputeDomain"))
    stored = sorted(res.group_name for res in engine.reservations.all().values())
    assert on_domains == stored == sorted(cd for cd, _ in groups)
