"""Jobs larger than one domain through the engine (webhook.domain.jobs.segment_plan): the first filter of any
segment stores the whole job's plan, one reservation per segment; later members pass only in their
segment's domain; two jobs racing for the capacity of both never each take half of it."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from tests.concurrency import run_together
from tests.engine.test_engine_events import Clock, Kept
from webhook.adapters import embedded
from webhook.domain import keys
from webhook.domain.groups import segments
from webhook.domain.model import Pod
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import DecisionError, DomainFull
from webhook.state.cluster import ClusterStore

A, B, C = "aaaa-1111.7", "bbbb-2222.7", "cccc-3333.7"


def _cd(name: str, size: int, per: int) -> list[dict[str, Any]]:
    objs = builders.cd_objects(name, size)
    objs[0]["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: str(per)}
    return objs


def _member(job: str, rank: int) -> dict[str, Any]:
    return builders.pod(f"{job}-{rank}", job, annotations={segments.COMPLETION_INDEX: str(rank)})


class Cluster:
    def __init__(self, racks: dict[str, int], jobs: dict[str, tuple[int, int]]) -> None:
        domains = {"a": A, "b": B, "c": C}
        nodes = [n for prefix, count in racks.items() for n in builders.rack(prefix, domains[prefix], count)]
        self.store = ClusterStore(Policy())
        objects = [*nodes, *(o for name, (size, per) in jobs.items() for o in _cd(name, size, per))]
        # Every member exists, as the job's controller creates them together (what a namespace may hold for
        # pods not created yet is bounded: tests/domain/test_tenant_quota.py).
        objects += [_member(job, rank) for job, (size, _) in jobs.items() for rank in range(size)]
        backend = embedded.EmbeddedBackend(self.store, objects, "test")
        backend.start()
        self.engine = builders.engine(backend, holder="t", clock=Clock(),
                             events=Kept())

    def pod(self, job: str, rank: int) -> Pod:
        return parsing.pod(_member(job, rank))

    def nodes(self) -> list[str]:
        return sorted(self.store.snapshot().nodes)

    def domains(self, job: str) -> dict[int, str]:
        uid = builders.cd_uid(job)
        return {int(g.rpartition("#s")[2]): r.domain for g, r in self.engine.reservations.all().items()
                if segments.job_of(g) == f"cd:{uid}"}


def test_the_first_filter_of_a_job_reserves_every_segment_and_members_pass_only_in_their_own() -> None:
    c = Cluster({"a": 3, "b": 3, "c": 2}, {"train": (6, 3)})
    first = c.engine.filter(c.pod("train", 4), c.nodes())  # a member of segment 1 comes first
    assert c.domains("train") == {0: A, 1: B}
    assert {n[0] for n in first.passed} == {"b"}
    assert {n[0] for n in c.engine.filter(c.pod("train", 0), c.nodes()).passed} == {"a"}


def test_a_job_the_cluster_cannot_hold_reserves_nothing_and_says_why() -> None:
    c = Cluster({"a": 3, "b": 2}, {"train": (6, 3)})
    out = c.engine.filter(c.pod("train", 0), c.nodes())
    assert out.passed == () and c.domains("train") == {}
    assert out.context is not None and "no plan holds job ml/train (6 pods in 2 segments of 3" in out.context.reason


def test_two_jobs_racing_for_room_that_holds_one_never_each_take_half() -> None:
    # Racks a and b hold one 2-segment job; the racing first pods of x and y ask for both.
    c = Cluster({"a": 3, "b": 3}, {"x": (6, 3), "y": (6, 3)})
    pods = [c.pod("x", 0), c.pod("y", 0), c.pod("x", 3), c.pod("y", 3)]
    run_together(8, lambda i: c.engine.filter(pods[i % 4], c.nodes()))
    x, y = c.domains("x"), c.domains("y")
    assert sorted([len(x), len(y)]) == [0, 2], (x, y)  # one job whole, the other nothing
    assert set((x or y).values()) == {A, B}


class Refusing:
    """The reservation store, refusing the named segments' promises as a domain ledger another replica
    filled meanwhile would (``DomainFull``), ``times`` times each."""

    def __init__(self, inner: Any, refused: set[str], times: int) -> None:
        self.inner, self.refused, self.left = inner, refused, dict.fromkeys(refused, times)
        self.released: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reserve(self, proposal: Any, arbiter: Any = None) -> Any:
        if proposal.group_id in self.refused and self.left[proposal.group_id] > 0:
            self.left[proposal.group_id] -= 1
            raise DomainFull(proposal.domain, proposal.group_id)
        return self.inner.reserve(proposal, arbiter)

    def release(self, group_id: str) -> None:
        self.released.append(group_id)
        self.inner.release(group_id)


def _refusing(c: Cluster, segment: int, times: int) -> Refusing:
    sid = segments.segment_id(f"cd:{builders.cd_uid('train')}", segment)
    store = Refusing(c.engine.choices.reservations, {sid}, times)
    c.engine.choices.reservations = store
    return store


def test_a_segment_refused_at_its_ledger_withdraws_those_stored_before_it_and_the_job_is_planned_again() -> None:
    c = Cluster({"a": 3, "b": 3}, {"train": (6, 3)})
    store = _refusing(c, 0, times=1)  # segment 0 is stored last: the pod's own
    out = c.engine.filter(c.pod("train", 0), c.nodes())
    assert store.released == [segments.segment_id(f"cd:{builders.cd_uid('train')}", 1)]  # withdrawn once
    assert c.domains("train") == {0: A, 1: B} and {n[0] for n in out.passed} == {"a"}
    assert not c.engine.choices.in_flight


def test_a_job_whose_plan_never_stores_leaves_no_reservation_and_nothing_in_flight() -> None:
    c = Cluster({"a": 3, "b": 3}, {"train": (6, 3)})
    _refusing(c, 1, times=99)
    with pytest.raises(DecisionError, match="could not reserve a domain for group ml/train#s0"):
        c.engine.filter(c.pod("train", 0), c.nodes())
    assert c.domains("train") == {} and not c.engine.choices.in_flight
