"""The preempt decision: a group pod may evict pods only on candidates inside its group's domain (its
reservation, the domain it would get now, or the one it would get once the victims are gone), not held by
another ComputeDomain after the evictions; unknown nodes are dropped, victims pass through, and a pod
outside any group keeps every candidate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from tests import builders
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.decisions import preemption
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Reservation, Snapshot
from webhook.domain.placement import vacated
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state.cluster import ClusterStore
from webhook.wire.fabric_attachment import Attachment, Phase

POLICY = Policy()
A, B = "aaaa-1111.7", "bbbb-2222.7"  # rack A: 4 trays, rack B: 8 trays, 4 GPUs each
RACK_A = [f"a-{i:02d}" for i in range(4)]
RACK_B = [f"b-{i:02d}" for i in range(8)]
EVERY = [*RACK_A, *RACK_B, "hgx"]
OTHER_CD = builders.cd_uid("other")


def _low(node: str, gpus: int = 4) -> dict[str, Any]:
    """A lower-priority pod outside any group, the usual victim."""
    return builders.pod(f"low-{node}", gpus=gpus, node=node, phase="Running", namespace="batch")


def _uid(ref: str) -> str:
    namespace, name = ref.split("/")
    return demo.uid("pod", namespace, name)


def _world(busy: Sequence[str] = EVERY, extra: Sequence[dict[str, Any]] = (),
           labelled: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Racks A and B and one node outside any domain; ``busy`` nodes full with one low-priority pod each;
    ``labelled`` nodes carry the driver's label of ComputeDomain "other"."""
    nodes = [builders.node(n, 4, A if n.startswith("a-") else B, compute_domain=OTHER_CD if n in labelled else None)
             for n in [*RACK_A, *RACK_B]]
    return [*nodes, builders.node("hgx", 8), *builders.cd_objects("job", 4), *builders.cd_objects("big", 20),
            *builders.cd_objects("other", 2), *[_low(n) for n in busy], *extra]


@dataclass
class Case:
    id: str
    pod: dict[str, Any]
    kept: Sequence[str]
    outcome: str
    source: str
    objects: list[dict[str, Any]] = field(default_factory=_world)
    # node -> victims as namespace/name; None: every busy node with its low-priority pod
    candidates: dict[str, list[str]] | None = None
    reserved: str | None = None  # the group's stored reservation
    proposed: str | None = None  # the group's proposal from an earlier /filter


JOB = builders.pod("job-0", cd="job")
EVERYONE_LOW = {n: [f"batch/low-{n}"] for n in EVERY}

CASES = [
    Case("a pod outside any group keeps every candidate, unknown nodes included",
         builders.pod("plain"), [*EVERY, "ghost"], "pass-through", "not-a-group",
         candidates={**EVERYONE_LOW, "ghost": ["batch/nobody"]}),
    Case("a stored reservation keeps only its domain's candidates",
         JOB, RACK_B, "kept", "reserved", reserved=B),
    Case("an earlier filter's proposal counts like a reservation",
         JOB, RACK_A, "kept", "proposed", proposed=A),
    Case("in a full cluster the group gets the best fit once the victims are gone",
         JOB, RACK_A, "kept", "chosen-after-eviction"),
    Case("a group that fits now in a free domain evicts nothing elsewhere",
         JOB, [], "none-kept", "chosen", objects=_world(busy=RACK_B),
         candidates={n: [f"batch/low-{n}"] for n in RACK_B}),
    Case("a group too large for any domain, even emptied, evicts nothing",
         builders.pod("big-0", cd="big"), [], "no-domain", "no-domain"),
    Case("victims we do not know free nothing in our accounting",
         JOB, [], "no-domain", "no-domain", candidates={n: ["batch/nobody"] for n in EVERY}),
    Case("unknown nodes and nodes outside any domain are dropped",
         JOB, ["a-00"], "kept", "reserved", reserved=A,
         candidates={"ghost": ["batch/low-a-00"], "a-00": ["batch/low-a-00"], "hgx": ["batch/low-hgx"]}),
    Case("a node stays held by another ComputeDomain whose pod is not a victim",
         JOB, ["a-01", "a-02", "a-03"], "kept", "reserved", reserved=A,
         objects=_world(busy=["a-02", "a-03"], labelled=["a-00", "a-01"], extra=[
             builders.pod("other-0", cd="other", gpus=2, node="a-00", phase="Running"), _low("a-00", 2),
             builders.pod("other-1", cd="other", gpus=4, node="a-01", phase="Running")]),
         candidates={"a-00": ["batch/low-a-00"], "a-01": ["ml/other-1"], "a-02": ["batch/low-a-02"],
                     "a-03": ["batch/low-a-03"]}),
    Case("a node that already runs a member of the ComputeDomain is dropped",
         JOB, ["a-00", "a-01", "a-03"], "kept", "reserved", reserved=A,
         objects=_world(busy=["a-00", "a-01", "a-03"], extra=[
             builders.pod("job-1", cd="job", gpus=2, node="a-02", phase="Running"), _low("a-02", 2)]),
         candidates={n: [f"batch/low-{n}"] for n in RACK_A}),
    Case("a pod whose group is contradictory evicts nothing",
         builders.pod("job-0", cd="job", annotations={keys.GROUP_ANNOTATION: "something-else"}),
         [], "invalid-group", "invalid-group"),
]


def _reservation(domain: str, version: str) -> Reservation:
    return Reservation(group_id=f"cd:{builders.cd_uid('job')}", group_name="job", namespace="ml", domain=domain,
                       size=4, gpus_per_pod=4, one_pod_per_node=True, created_at=990.0, version=version)


def _decide(store: ClusterStore, pod: dict[str, Any], candidates: dict[str, list[str]],
            reservations: dict[str, Reservation] | None = None, proposals: dict[str, Reservation] | None = None,
            snapshot: Snapshot | None = None) -> preemption.PreemptOutcome:
    uids = {node: [_uid(ref) for ref in refs] for node, refs in candidates.items()}
    victims = {uid: p for refs in uids.values() for uid in refs if (p := store.pod_by_uid(uid)) is not None}
    snap = snapshot or replace(store.snapshot(), reservations=reservations or {})
    return preemption.preempt(parsing.pod(pod), uids, victims, DecisionInputs(snap, POLICY, 1000.0, proposals or {}))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_which_candidates_a_pod_may_preempt_on(case: Case) -> None:
    store = builders.store(case.objects)
    stored = _reservation(case.reserved, "7") if case.reserved else None
    proposed = _reservation(case.proposed, "") if case.proposed else None
    reservations = {stored.group_id: stored} if stored else {}
    proposals = {proposed.group_id: proposed} if proposed else {}
    out = _decide(store, case.pod, case.candidates or EVERYONE_LOW, reservations, proposals)
    assert out.kept == tuple(case.kept)
    assert (out.outcome, out.reason_class) == (case.outcome, case.source)
    sent = case.candidates or EVERYONE_LOW
    assert set(out.kept) | set(out.dropped) == set(sent) and not set(out.kept) & set(out.dropped)
    if case.outcome != "pass-through":
        assert all(out.dropped.values()), "every dropped node carries a reason"


def test_in_a_full_cluster_the_reason_says_the_choice_assumes_the_evictions() -> None:
    out = _decide(builders.store(_world()), JOB, EVERYONE_LOW)
    assert out.context is not None and out.context.domain == A
    assert "once the candidates' victims are evicted: best fit" in out.context.reason
    assert "outside domain aaaa-1111.7" in out.dropped["b-00"]


def test_a_group_too_large_says_so_even_after_the_evictions() -> None:
    out = _decide(builders.store(_world()), builders.pod("big-0", cd="big"), EVERYONE_LOW)
    reason = out.dropped["a-00"]
    assert reason.startswith("even once the candidates' victims are evicted") and "no domain can host 20" in reason


def test_while_fabric_gpus_are_attached_for_the_pod_only_that_node_is_kept() -> None:
    store = builders.store(_world())
    pod = parsing.pod(JOB)
    att = Attachment(name="att", node="a-02", pod_namespace="ml", pod_name="job-0", pod_uid=pod.uid, zone="z",
                     gpus=4, system="/redfish/v1/Systems/a-02", phase=Phase.COMPOSING)
    snap = replace(store.snapshot(), reservations={}, attachments={pod.uid: att})
    snap = replace(snap, reservations={_reservation(A, "7").group_id: _reservation(A, "7")})
    out = _decide(store, JOB, EVERYONE_LOW, snapshot=snap)
    assert out.kept == ("a-02",) and "a-02" in out.dropped["a-00"]


def test_without_victims_frees_their_gpus_groups_and_compute_domains() -> None:
    objects = _world(busy=["a-02"], labelled=["a-01"], extra=[
        builders.pod("other-1", cd="other", gpus=4, node="a-01", phase="Running"),
        builders.pod("other-0", cd="other", gpus=2, node="a-00", phase="Running"), _low("a-00", 2)])
    store = builders.store(objects)
    snap = store.snapshot()
    gone = {"a-00": [_uid("batch/low-a-00")], "a-01": [_uid("ml/other-1")], "a-02": [_uid("batch/low-a-02")],
            "ghost": [_uid("batch/low-a-02")]}
    victims = {u: p for us in gone.values() for u in us if (p := store.pod_by_uid(u)) is not None}
    after = vacated.without_victims(snap, gone, victims, POLICY)
    assert [after.used_gpus.get(n, 0) for n in RACK_A[:3]] == [2, 0, 0]
    assert after.node_compute_domains["a-00"] == {OTHER_CD}  # other-0 stays
    assert after.node_compute_domains["a-01"] == frozenset() and after.nodes["a-01"].compute_domain is None
    other = f"cd:{OTHER_CD}"
    assert [m.pod.name for m in after.members[other]] == ["other-0"]
    assert snap.nodes["a-01"].compute_domain == OTHER_CD and snap.used_gpus["a-01"] == 4  # the input is untouched


def test_a_victim_bound_elsewhere_than_its_candidate_frees_nothing() -> None:
    store = builders.store(_world(busy=["a-00"]))
    snap = store.snapshot()
    uid = _uid("batch/low-a-00")
    pod = store.pod_by_uid(uid)
    assert pod is not None
    assert vacated.without_victims(snap, {"a-01": [uid]}, {uid: pod}, POLICY) is snap


@pytest.mark.parametrize(("rank", "kept"), [(0, RACK_B), (5, RACK_B), (9, RACK_A)],
                         ids=["segment 0", "segment 1", "segment 2"])
def test_a_segments_pod_preempts_only_in_the_domain_its_jobs_plan_gives_it(rank: int, kept: list[str]) -> None:
    # 12 pods in segments of 4, every node busy: once the victims are gone the plan puts two segments in
    # rack B (8 nodes) and the third in rack A; no segment evicts anywhere else.
    seg = builders.cd_objects("seg", 12)
    seg[0]["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: "4"}
    # All 12 pods exist, as the job's controller creates them together (what a namespace may hold for pods
    # not created yet is bounded: tests/domain/test_tenant_quota.py).
    members = [builders.pod(f"seg-{i}", cd="seg", annotations={keys.COMPLETION_INDEX: str(i)}) for i in range(12)]
    store = builders.store(_world(extra=[*seg, *members]))
    pod = members[rank]
    out = _decide(store, pod, EVERYONE_LOW)
    assert list(out.kept) == kept and out.reason_class == "chosen-after-eviction", out
