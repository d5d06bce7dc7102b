"""The Event recorder (webhook.adapters.kube.events) against the wire-level fake API server, which here
refuses Events as kube-apiserver's events validation does (tests/adapters/kube/event_rules.py), and whose stored
Events must pass Kubernetes 1.34's OpenAPI schema and the official client's model.

Covered: the object's shape field by field; repeats patching one Event's series and a new Event after
six minutes; the per-object rate limit; an Event gone before its series update is created again; 500,
429 and timeouts tried three times, then dropped and counted; refusals not retried; many threads
recording at once; hostile input (huge notes, odd and long names, things that are not occurrences); a
hung API server that fills the queue while the extender's filters return at once; the whole story of a
ComputeDomain as ``kubectl describe`` lists it, through a Kubernetes-mode backend and the engine; the
RBAC the recorder needs; the drop counter in /metrics; and the Events section of docs/OPERATING.md."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml
from kubernetes.client import ApiClient
from prometheus_client import generate_latest

from tests import builders
from tests.adapters.kube import event_rules
from tests.adapters.kube.conftest import Connect
from tests.concurrency import run_together
from tests.kubefake import KINDS, KubeFake, eventually
from webhook.adapters import embedded
from webhook.adapters.kube.api import MERGE_PATCH, Api, ApiError, call_timeout, load_configuration
from webhook.adapters.kube.event_series import BURST, CACHE_SIZE, REFILL, SERIES_WINDOW, Correlator
from webhook.adapters.kube.events import MAX_QUEUED, NOTE_BYTES, TRIES, EventRecorder, name_prefix
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine import occurrences
from webhook.engine.occurrences import NO_DOMAIN_FITS, NORMAL, ObjectRef, Occurrence, Reason
from webhook.http.cluster_metrics import ClusterMetrics
from webhook.http.metrics import Metrics
from webhook.wire.kinds import EVENTS

ROOT = Path(__file__).parents[3]
POD = ObjectRef("v1", "Pod", "ml", "train-0", "uid-train-0")
CD = ObjectRef("resource.nvidia.com/v1beta1", "ComputeDomain", "ml", "train", "uid-cd-train")
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def refused(kube_fake: KubeFake) -> list[str]:
    return event_rules.enforce(kube_fake)


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[Api]:
    client = Api(ApiClient(load_configuration(str(kubeconfig), False)), call_timeout(2.0))
    yield client
    client.close()


Make = Callable[..., EventRecorder]


@pytest.fixture
def make(api: Api) -> Iterator[Make]:
    made: list[EventRecorder] = []

    def make_recorder(**options: Any) -> EventRecorder:
        options.setdefault("pause", 0.01)
        recorder = EventRecorder(options.pop("api", api), options.pop("instance", "replica-a/7"), **options)
        recorder.start()
        made.append(recorder)
        return recorder

    yield make_recorder
    for recorder in made:
        recorder.stop(10)


def stored(fake: KubeFake) -> list[dict[str, Any]]:
    found = fake.items("events")
    for event in found:
        assert event_rules.shape_problems(event) == []
    return found


def occ(note: str = "no domain has room for group ml/train", regarding: ObjectRef = POD,
        related: ObjectRef | None = CD, reason: Reason = NO_DOMAIN_FITS) -> Occurrence:
    return Occurrence(reason, note, regarding, related)


def test_an_occurrence_becomes_an_event_shaped_as_the_api_server_validates_it(kube_fake: KubeFake, make: Make,
                                                                             refused: list[str]) -> None:
    recorder = make(clock=Clock(T0 + 0.123456))
    recorder.record(occ())
    assert recorder.sync()

    (event,) = stored(kube_fake)
    assert refused == []
    assert re.fullmatch(r"train-0\.[0-9a-f]{16}", event["metadata"].pop("name"))
    assert {k: v for k, v in event["metadata"].items() if k == "namespace"} == {"namespace": "ml"}
    assert {k: v for k, v in event.items() if k != "metadata"} == {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "eventTime": "2026-01-01T00:00:00.123456Z",
        "reportingController": "imex-webhook.io/extender", "reportingInstance": "replica-a/7",
        "action": "ReserveDomain", "reason": "NoDomainFits", "type": "Warning",
        "note": "no domain has room for group ml/train",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "train-0", "uid": "uid-train-0"},
        "related": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "namespace": "ml",
                    "name": "train", "uid": "uid-cd-train"},
    }


def test_the_fake_refuses_what_kube_apiserver_refuses(kube_fake: KubeFake, api: Api, refused: list[str]) -> None:
    """The rules are live: an Event over the note limit, and a change to an immutable field, get 422."""
    good = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x.1", "namespace": "ml"},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "a.io/b", "reportingInstance": "i",
            "action": "A", "reason": "R", "type": "Normal", "note": "é" * 513,
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "x"}}
    with pytest.raises(ApiError) as exc:
        api.call("POST", EVENTS.path("ml"), body=good)
    assert exc.value.status == 422 and "note" in refused[-1]
    api.call("POST", EVENTS.path("ml"), body=dict(good, note="é" * 512))
    with pytest.raises(ApiError) as exc:
        api.call("PATCH", EVENTS.path("ml", "x.1"), body={"note": "changed"}, content_type=MERGE_PATCH)
    assert exc.value.status == 422 and "immutable" in refused[-1]
    with pytest.raises(ApiError) as exc:
        api.call("PATCH", EVENTS.path("ml", "x.1"), content_type=MERGE_PATCH,
                 body={"series": {"count": 1, "lastObservedTime": good["eventTime"]}})
    assert exc.value.status == 422 and "at least 2" in refused[-1]


def test_repeats_within_six_minutes_patch_one_event_and_a_later_one_is_a_new_event(
        kube_fake: KubeFake, make: Make, refused: list[str]) -> None:
    clock = Clock()
    recorder = make(clock=clock)
    recorder.record(occ())
    clock.now += 60
    recorder.record(occ(note="a different note joins the series; the first note stays"))
    clock.now += 60
    recorder.record(occ())
    assert recorder.sync()

    (event,) = stored(kube_fake)
    assert event["series"] == {"count": 3, "lastObservedTime": "2026-01-01T00:02:00.000000Z"}
    assert event["note"] == "no domain has room for group ml/train"
    assert kube_fake.requests("create", "events") == 1 and kube_fake.requests("update", "events") == 2

    clock.now += SERIES_WINDOW + 1
    recorder.record(occ())
    assert recorder.sync()
    first, second = sorted(stored(kube_fake), key=lambda e: e["eventTime"])
    assert first["series"]["count"] == 3 and "series" not in second
    assert second["eventTime"] == "2026-01-01T00:08:01.000000Z" and refused == []


def test_the_rate_limit_drops_new_events_past_25_per_object_and_counts_them(kube_fake: KubeFake, make: Make,
                                                                           refused: list[str]) -> None:
    clock = Clock()
    recorder = make(clock=clock)
    for i in range(BURST + 5):
        recorder.record(occ(reason=Reason(f"Reason{i}", NORMAL, "Act")))
    recorder.record(occ(regarding=CD, related=None))  # another object: its own bucket
    assert recorder.sync()
    assert len(stored(kube_fake)) == BURST + 1
    assert recorder.dropped()["rate-limited"] == 5

    clock.now += REFILL
    recorder.record(occ(reason=Reason("AfterFiveMinutes", NORMAL, "Act")))
    assert recorder.sync()
    assert len(stored(kube_fake)) == BURST + 2 and recorder.dropped()["rate-limited"] == 5 and refused == []


def test_an_event_gone_before_its_series_update_is_created_again_with_the_series(
        kube_fake: KubeFake, make: Make, refused: list[str]) -> None:
    clock = Clock()
    recorder = make(clock=clock)
    recorder.record(occ())
    assert recorder.sync()
    (event,) = stored(kube_fake)
    kube_fake.delete("events", "ml", event["metadata"]["name"])  # the API server's Event TTL
    clock.now += 5
    recorder.record(occ())
    assert recorder.sync()
    (again,) = stored(kube_fake)
    assert again["metadata"]["name"] == event["metadata"]["name"] and again["eventTime"] == event["eventTime"]
    assert again["series"]["count"] == 2 and refused == []


class Fault:
    """The matching requests are answered with ``status`` (or held ``hold`` seconds, then served) while
    ``left`` lasts; each one seen is counted."""

    def __init__(self, fake: KubeFake, method: str, status: int = 0, reason: str = "", times: int = 10**9,
                 hold: float = 0.0, release: asyncio.Event | None = None) -> None:
        self.left, self.seen, self.holding = times, 0, 0
        resource = KINDS["events"].resource

        async def intercept(request: kmock.Request) -> Any:
            if request.resource != resource or request.method.upper() != method:
                return None
            self.seen += 1
            if self.left <= 0:
                return None
            self.left -= 1
            if hold or release is not None:
                self.holding += 1
                try:
                    if release is not None:
                        await release.wait()
                    else:
                        await asyncio.sleep(hold)
                finally:
                    self.holding -= 1
                return None
            return await fake.emulator._render_error(kmock.KubernetesError(
                status=status, reason=reason, details={}, message=f"injected {status} {reason}"))

        fake._call(fake.emulator.interceptors.append, intercept)


@pytest.mark.parametrize("status, reason", [(500, "InternalError"), (429, "TooManyRequests"),
                                            (503, "ServiceUnavailable")])
def test_a_failing_api_server_is_tried_three_times_then_the_event_is_dropped_and_counted(
        kube_fake: KubeFake, make: Make, status: int, reason: str) -> None:
    fault = Fault(kube_fake, "POST", status, reason)
    recorder = make()
    recorder.record(occ())
    assert recorder.sync()
    assert fault.seen == TRIES and stored(kube_fake) == []
    assert recorder.dropped() == {"queue-full": 0, "rate-limited": 0, "rejected": 0, "unavailable": 1}


def test_a_failure_that_passes_within_the_tries_loses_nothing(kube_fake: KubeFake, make: Make) -> None:
    fault = Fault(kube_fake, "POST", 500, "InternalError", times=TRIES - 1)
    recorder = make()
    recorder.record(occ())
    assert recorder.sync()
    assert fault.seen == TRIES and len(stored(kube_fake)) == 1 and sum(recorder.dropped().values()) == 0


def test_a_create_that_timed_out_but_landed_is_not_written_twice(kube_fake: KubeFake, kubeconfig: Path) -> None:
    impatient = Api(ApiClient(load_configuration(str(kubeconfig), False)), (1.0, 0.3))
    recorder = EventRecorder(impatient, "replica-a/7", pause=0.05)
    recorder.start()
    try:
        Fault(kube_fake, "POST", hold=1.0, times=1)
        recorder.record(occ())
        assert recorder.sync()
        eventually(lambda: len(kube_fake.items("events")) == 1, what="the retried create")
        time.sleep(1.2)  # the held request is served meanwhile: AlreadyExists, nothing more
        assert len(stored(kube_fake)) == 1 and sum(recorder.dropped().values()) == 0
    finally:
        recorder.stop(5)
        impatient.close()


@pytest.mark.parametrize("status, reason", [(403, "Forbidden"), (422, "Invalid"), (404, "NotFound")])
def test_a_refusal_is_not_tried_again(kube_fake: KubeFake, make: Make, status: int, reason: str) -> None:
    fault = Fault(kube_fake, "POST", status, reason)
    recorder = make()
    recorder.record(occ())
    recorder.record(occ(regarding=CD, related=None))
    assert recorder.sync()
    assert fault.seen == 2 and recorder.dropped()["rejected"] == 2


def test_many_threads_recording_at_once_lose_no_occurrence(kube_fake: KubeFake, make: Make, refused: list[str]) -> None:
    recorder = make(correlator=Correlator(burst=10_000))
    pods = [ObjectRef("v1", "Pod", "ml", f"p-{i}", f"uid-{i}") for i in range(4)]
    threads, per_thread = 8, 16

    def emit(n: int) -> None:
        for i in range(per_thread):
            recorder.record(occ(regarding=pods[(n + i) % len(pods)], reason=occurrences.REASONS[i % 2]))

    run_together(threads, emit)
    assert recorder.sync(60)
    found = stored(kube_fake)
    assert len(found) == len(pods) * 2 and refused == []
    assert sum(e.get("series", {}).get("count", 1) for e in found) == threads * per_thread
    assert sum(recorder.dropped().values()) == 0


def test_a_huge_note_is_cut_to_the_api_limit_on_a_character_boundary(kube_fake: KubeFake, make: Make,
                                                                     refused: list[str]) -> None:
    recorder = make()
    recorder.record(occ(note="domaine réservé 🚀 " * 2000))
    recorder.record(occ(regarding=CD, related=None, note="x" * 10**6))
    assert recorder.sync()
    notes = sorted(e["note"] for e in stored(kube_fake))
    assert refused == [] and len(notes) == 2
    for note in notes:
        assert len(note.encode("utf-8")) <= NOTE_BYTES and note.endswith("...")
    assert notes[0].startswith("domaine réservé 🚀 ")


@pytest.mark.parametrize("name", ["Weird_Name/With Spaces..and**stars", "-.-", "ÄÖÜ", "a" * 300, "x." * 200, ""])
def test_an_odd_or_long_object_name_still_makes_a_valid_event_name(kube_fake: KubeFake, make: Make,
                                                                   refused: list[str], name: str) -> None:
    recorder = make()
    recorder.record(occ(regarding=ObjectRef("v1", "Pod", "ml", name, "u"), related=None,
                        reason=Reason("R" * 500, "Warning", "A" * 500)))
    assert recorder.sync()
    (event,) = stored(kube_fake)
    assert refused == [] and event["regarding"]["name"] == name
    assert len(event["metadata"]["name"]) <= 253 and len(event["reason"]) == len(event["action"]) == 128


def test_names_are_prefixes_of_dns_subdomains() -> None:
    assert name_prefix("train-8-0") == "train-8-0"
    assert name_prefix("Weird_Name/x") == "weird-name-x"
    assert name_prefix("..") == "object"
    assert len(name_prefix("a." * 300)) <= 253 - 17


def test_what_is_not_an_occurrence_is_ignored_and_later_events_still_go_out(kube_fake: KubeFake, make: Make,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    recorder = make()
    for junk in ({"reason": "x"}, "text", 42):
        recorder.record(junk)  # type: ignore[arg-type]
    broken = Occurrence(NO_DOMAIN_FITS, None, POD)  # type: ignore[arg-type]
    recorder.record(broken)
    recorder.record(occ())
    assert recorder.sync()
    assert len(stored(kube_fake)) == 1 and "recording an Event failed" in caplog.text


def test_a_hung_api_server_fills_the_queue_and_never_holds_up_the_extenders_filter(
        kube_fake: KubeFake, kubeconfig: Path) -> None:
    release = asyncio.Event()
    hold = Fault(kube_fake, "POST", release=release)
    patient = Api(ApiClient(load_configuration(str(kubeconfig), False)), call_timeout(60.0))  # reads wait 36 s
    recorder = EventRecorder(patient, "replica-a/7", queue_size=8)
    recorder.start()
    store = builders.store([*builders.rack("a", "dom-a", 2), *builders.cd_objects("huge", 6)])
    backend = embedded.EmbeddedBackend(store, [], "test")
    engine = builders.engine(backend, events=recorder)
    pod = parsing.pod(builders.pod("huge-0", cd="huge"))
    embedded.put_pod(store, pod)
    try:
        recorder.record(occ(regarding=CD, related=None))
        eventually(lambda: hold.holding == 1, what="the recorder's first write held by the API server")
        filters = 200
        for _ in range(filters):
            assert engine.filter(pod, ["a-00", "a-01"]).outcome == "no-domain"
        # Every filter returned while the recorder's write was still held: two occurrences each (the pod
        # and its ComputeDomain), of which the queue took 8 and counted the rest as dropped.
        assert hold.holding == 1
        assert recorder.dropped()["queue-full"] == filters * 2 - 8
    finally:
        kube_fake._call(release.set)
        assert recorder.sync(30)
        recorder.stop(10)
        patient.close()
    assert len(stored(kube_fake)) == 3  # the first, then NoDomainFits on the pod and the ComputeDomain


def _seed(fake: KubeFake) -> None:
    nodes = [dict(n, apiVersion="v1") for n in builders.rack("a", "dom-a", 2)]
    fake.seed([*nodes, *builders.cd_objects("job", 2), *builders.cd_objects("huge", 6),
               builders.pod("job-0", cd="job"), builders.pod("job-1", cd="job"), builders.pod("huge-0", cd="huge")])


def describe(fake: KubeFake, kind: str, name: str) -> list[tuple[str, str, int]]:
    """The Events section of ``kubectl describe``: (type, reason, count) of the object's Events, oldest first."""
    found = [e for e in stored(fake) if (e["regarding"]["kind"], e["regarding"]["name"]) == (kind, name)]
    return [(e["type"], e["reason"], e.get("series", {}).get("count", 1))
            for e in sorted(found, key=lambda e: e["eventTime"])]


def test_kubectl_describe_computedomain_tells_the_story(kube_fake: KubeFake, connect_backend: Connect,
                                                        refused: list[str]) -> None:
    _seed(kube_fake)
    backend = connect_backend("replica-a")
    clock = Clock(time.time())
    engine = builders.engine(backend, holder="replica-a", clock=clock,
                    events=backend.events)
    assert engine.events is backend.events
    eventually(lambda: backend.store.pod("ml", "huge-0") and backend.store.pod("ml", "job-1"), what="pods cached")

    for name in ("job-0", "job-1"):
        pod = backend.store.pod("ml", name)
        assert pod is not None and engine.filter(pod, ["a-00", "a-01"]).passed
    huge = backend.store.pod("ml", "huge-0")
    assert huge is not None
    for _ in range(5):
        reason = next(iter(engine.filter(huge, ["a-00", "a-01"]).unresolvable.values()))
    eventually(lambda: engine.reservations.all(), what="the reservation in the cache")
    clock.now += Policy().reservation_ttl + 1
    assert [g for g, _ in engine.housekeep()] == [f"cd:{builders.cd_uid('job')}"]
    assert backend.events.sync()

    assert describe(kube_fake, "ComputeDomain", "job") == [("Normal", "DomainReserved", 1),
                                                            ("Warning", "ReservationExpired", 1)]
    assert describe(kube_fake, "Pod", "job-0") == [("Normal", "DomainReserved", 1),
                                                    ("Warning", "ReservationExpired", 1)]
    assert describe(kube_fake, "Pod", "job-1") == [("Warning", "ReservationExpired", 1)]
    assert describe(kube_fake, "ComputeDomain", "huge") == [("Warning", "NoDomainFits", 5)]
    assert describe(kube_fake, "Pod", "huge-0") == [("Warning", "NoDomainFits", 5)]
    (no_room,) = [e for e in kube_fake.items("events") if e["regarding"]["name"] == "huge-0"]
    assert no_room["note"] == reason and no_room["reportingInstance"] == "replica-a"
    assert refused == []
    # Everything the recorder did, the webhook's ClusterRole allows.
    verbs = {"create": kube_fake.requests("create", "events") > 0, "patch": kube_fake.requests("update", "events") > 0}
    assert verbs == {"create": True, "patch": True}
    (role,) = [d for d in yaml.safe_load_all((ROOT / "manifests" / "rbac-webhook.yaml").read_text())
               if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "imex-webhook"]
    for verb in verbs:
        assert any("events.k8s.io" in r["apiGroups"] and "events" in r["resources"] and verb in r["verbs"]
                   for r in role["rules"]), verb


def test_the_drop_counter_is_exported_for_every_reason(make: Make) -> None:
    recorder = make(queue_size=1)
    recorder.stop(5)  # nothing takes from the queue any more: the second occurrence finds it full
    recorder.record(occ())
    recorder.record(occ())
    store = builders.store([])
    backend = embedded.EmbeddedBackend(store, [], "test")
    engine = builders.engine(backend, events=recorder)
    metrics = Metrics()
    metrics.registry.register(ClusterMetrics(engine, backend.watch_health))
    text = generate_latest(metrics.registry).decode()
    assert 'imex_webhook_events_dropped_total{reason="queue-full"} 1.0' in text
    for reason in occurrences.DROP_REASONS:
        assert f'imex_webhook_events_dropped_total{{reason="{reason}"}}' in text


def test_the_operating_guide_lists_every_reason_and_the_limits() -> None:
    text = (ROOT / "docs" / "OPERATING.md").read_text()
    section = text[text.index("\n## Events\n"):]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    for reason in occurrences.REASONS:
        row = next((line for line in section.splitlines() if line.startswith(f"| `{reason.name}`")), "")
        assert reason.type in row and f"`{reason.action}`" in row, reason.name
    for why in occurrences.DROP_REASONS:
        assert f"`{why}`" in section
    for fact in (f"{BURST} ", f"{int(REFILL / 60)} minutes", f"{int(SERIES_WINDOW / 60)} minutes", f"{MAX_QUEUED:,}",
                 f"{CACHE_SIZE:,}", f"{NOTE_BYTES:,} bytes", "imex-webhook.io/extender", "events_dropped_total"):
        assert fact in section, fact
