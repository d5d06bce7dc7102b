"""Members without a rank through the engine (webhook.engine.segment_labels): each is given the first
segment with room at its filter and passes only in that segment's domain; the label is written before any
node passes; racing filters never put two members in one place; a failed write passes nothing and gives
nothing; a stale watch event that drops the label changes no later choice."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests import builders
from tests.concurrency import run_together
from tests.engine.test_engine_events import Clock, Kept
from webhook.adapters import embedded
from webhook.domain import keys
from webhook.domain.model import Pod
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine
from webhook.errors import DecisionError
from webhook.state.cluster import ClusterStore

DOMAINS = {"a": "aaaa-1111.7", "b": "bbbb-2222.7", "c": "cccc-3333.7"}


# Pods arrive one at a time here, as each test needs them; a job's controller creates them together, so the
# bound on what a namespace holds for pods not created yet is lifted (tests/domain/test_tenant_quota.py).
POLICY = Policy(max_reserved_share=1.0)


class FlakyBinder(embedded.EmbeddedBinder):
    """The embedded binder whose label writes take ``delay`` seconds (an API call) and fail while ``failing``
    (the API server down)."""

    failing = False
    delay = 0.0

    def label_segment(self, pod: Pod, index: int) -> None:
        time.sleep(self.delay)
        if self.failing:
            raise DecisionError("the API server answered 503 to write segment 0 on pod ml/x")
        super().label_segment(pod, index)


class Cluster:
    def __init__(self, racks: dict[str, int], size: int, per: int) -> None:
        nodes = [n for prefix, count in racks.items() for n in builders.rack(prefix, DOMAINS[prefix], count)]
        cd = builders.cd_objects("train", size)
        cd[0]["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: str(per)}
        self.store = ClusterStore(POLICY)
        backend = embedded.EmbeddedBackend(self.store, [*nodes, *cd], "test")
        backend.start()
        self.binder = FlakyBinder(self.store)
        self.clock = Clock()
        self.engine = Engine(self.store, backend.reservations, self.binder, POLICY, holder="t", clock=self.clock,
                             events=Kept())
        self.job = f"cd:{builders.cd_uid('train')}"

    def pod(self, name: str) -> Pod:
        pod = parsing.pod(builders.pod(name, "train"))
        embedded.put_pod(self.store, pod)
        return pod

    def filter(self, pod: Pod) -> set[str]:
        return {n[0] for n in self.engine.filter(pod, sorted(self.store.snapshot().nodes)).passed}

    def label(self, name: str) -> str | None:
        pod = self.store.pod("ml", name)
        return pod.labels.get(keys.SEGMENT_LABEL) if pod is not None else None

    def bind(self, name: str) -> None:
        pod = self.store.pod("ml", name)
        assert pod is not None
        node = sorted(self.engine.filter(pod, sorted(self.store.snapshot().nodes)).passed)[0]
        self.engine.bind("ml", name, pod.uid, node)


def test_members_without_a_rank_fill_the_segments_in_order_each_in_its_own_domain() -> None:
    c = Cluster({"a": 3, "b": 3, "c": 1}, size=6, per=3)
    racks = [c.filter(c.pod(f"w{i}")) for i in range(6)]
    assert [c.label(f"w{i}") for i in range(6)] == ["0", "0", "0", "1", "1", "1"]
    assert racks == [{"a"}] * 3 + [{"b"}] * 3
    reservations = c.engine.reservations.all()
    assert {g: r.domain for g, r in reservations.items()} == {f"{c.job}#s0": DOMAINS["a"], f"{c.job}#s1": DOMAINS["b"]}


def test_a_member_beyond_the_jobs_size_passes_nowhere_and_is_told_why() -> None:
    c = Cluster({"a": 3, "b": 3}, size=6, per=3)
    for i in range(6):
        c.filter(c.pod(f"w{i}"))
    extra = c.pod("w6")
    out = c.engine.filter(extra, sorted(c.store.snapshot().nodes))
    assert out.passed == () and c.label("w6") is None
    assert out.context is not None and "has its members already" in out.context.reason


def test_racing_filters_never_give_one_place_twice() -> None:
    c = Cluster({"a": 4, "b": 4, "c": 4}, size=12, per=4)
    pods = [c.pod(f"w{i}") for i in range(12)]
    c.binder.delay = 0.02  # each write takes as long as an API call: every filter is in flight at once
    run_together(12, lambda i: c.engine.filter(pods[i], sorted(c.store.snapshot().nodes)))
    assert Counter(c.label(f"w{i}") for i in range(12)) == {"0": 4, "1": 4, "2": 4}


def test_a_failed_label_write_passes_nothing_and_the_next_try_gives_the_same_first_segment() -> None:
    c = Cluster({"a": 3, "b": 3}, size=6, per=3)
    pod = c.pod("w0")
    c.binder.failing = True
    with pytest.raises(DecisionError, match="503"):
        c.engine.filter(pod, sorted(c.store.snapshot().nodes))
    assert c.label("w0") is None and c.engine.segment_labels.given() == {}
    c.binder.failing = False
    assert c.filter(pod) == {"a"} and c.label("w0") == "0"


def test_a_stale_event_without_the_label_does_not_give_its_place_to_another_member() -> None:
    c = Cluster({"a": 2, "b": 2}, size=4, per=2)
    first = c.pod("w0")
    c.filter(first)
    c.filter(c.pod("w1"))
    embedded.put_pod(c.store, first)  # the watch delivers the pod as it was before the label was written
    assert c.label("w0") is None
    assert c.filter(c.pod("w2")) == {"b"} and c.label("w2") == "1"
    assert c.filter(first) == {"a"}, "w0 keeps the segment it was given"


def test_members_given_a_segment_bind_and_a_replacement_takes_the_place_a_lost_one_left() -> None:
    c = Cluster({"a": 3, "b": 3}, size=6, per=3)
    for i in range(6):
        c.pod(f"w{i}")
        c.bind(f"w{i}")
    c.clock.now += 120  # the record of given segments has expired: the cache alone counts
    lost = c.store.pod("ml", "w4")
    assert lost is not None
    c.store.modify("Pod", lost.key, lambda _p: None)  # a member of segment 1 is gone
    assert c.filter(c.pod("w6")) == {"b"} and c.label("w6") == "1"



def _labelled(c: Cluster, name: str, index: int) -> Pod:
    """A pod the other replica labelled, as this replica's watch delivers it."""
    raw = builders.pod(name, "train")
    raw["metadata"]["labels"] = {keys.SEGMENT_LABEL: str(index)}
    pod = parsing.pod(raw)
    embedded.put_pod(c.store, pod)
    return pod


def test_a_member_one_too_many_in_its_labelled_segment_is_given_one_with_room_and_moved() -> None:
    # Two replicas each gave the last place of segment 0 within a watch's delay: w0, w1 and w2 all carry 0.
    c = Cluster({"a": 4, "b": 2, "c": 2}, size=6, per=2)
    pods = [_labelled(c, f"w{i}", 0) for i in range(3)]
    assert c.filter(pods[0]) == {"a"}
    c.bind("w0")
    assert c.filter(pods[1]) == {"a"}
    out = c.engine.filter(pods[2], sorted(c.store.snapshot().nodes))
    assert out.context is not None and "segment 0 holds its 2 pods without this one" in out.context.reason
    assert c.label("w2") == "1"
    assert {n[0] for n in out.passed} == {c.engine.reservations.all()[f"{c.job}#s1"].domain[0]}
    assert c.label("w1") == "0", "the member ahead keeps its place"


def test_a_bound_member_is_not_moved_and_the_unbound_one_behind_it_is() -> None:
    c = Cluster({"a": 4, "b": 2, "c": 2}, size=6, per=2)
    w1, w2 = _labelled(c, "w1", 0), _labelled(c, "w2", 0)
    c.filter(w2)
    c.bind("w2")  # w2 bound first although named after w1
    _labelled(c, "w0", 0)
    c.bind("w0")
    out = c.engine.filter(w1, sorted(c.store.snapshot().nodes))
    assert c.label("w1") == "1" and c.label("w2") == "0" and c.label("w0") == "0"
    assert out.passed
