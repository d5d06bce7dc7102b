"""Free slots per domain (webhook.domain.views.figures.fit_pods, largest_group_fits): how many pods of 1, 2 and 4
GPUs one new group could be given in each domain now, with other groups' live reservations taken out,
fabric GPUs counted as the decision counts them; and, for every case, the figure is the one /filter acts
on: a group of that many pods gets the domain, one pod more does not."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests import builders as b
from webhook.domain import keys
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import resolution
from webhook.domain.model import Reservation, Snapshot
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.domain.views import figures

NOW = 50_000.0
A, B = "aaaa-1111.7", "bbbb-2222.7"


def held_by(group: str, domain: str, size: int, gpus: int = 4, created: float = NOW - 5) -> Reservation:
    return Reservation(group_id=f"ann:ml/{group}", group_name=group, namespace="ml", domain=domain, size=size,
                       gpus_per_pod=gpus, one_pod_per_node=False, created_at=created, version="1")


def running(name: str, node: str, gpus: int, group: str | None = None) -> dict[str, Any]:
    annotations = {keys.GROUP_ANNOTATION: group, keys.GROUP_SIZE_ANNOTATION: "3"} if group else None
    return b.pod(name, None, gpus, node=node, phase="Running", annotations=annotations)


def cordoned(node: dict[str, Any]) -> dict[str, Any]:
    node["spec"] = {"unschedulable": True}
    return node


def fabric_pool(count: int, local: int = 1, slots: int = 4) -> list[dict[str, Any]]:
    return [b.node(f"f-{i:02d}", local, None, zone="pool-1", slots=slots) for i in range(count)]


# (case, objects, reservations, fabric free blocks, {domain: {gpus per pod: pods}})
CASES: list[tuple[str, list[dict[str, Any]], list[Reservation], dict[str, int], dict[str, dict[int, int]]]] = [
    ("an empty rack has room for all its GPUs", b.rack("a", A, 4), [], {}, {A: {1: 16, 2: 8, 4: 4}}),
    ("pods running in a rack take their GPUs",
     [*b.rack("a", A, 4), running("big", "a-00", 4), running("small", "a-01", 1)], [], {},
     {A: {1: 11, 2: 5, 4: 2}}),
    ("another group's reservation holds its pods still to place",
     b.rack("a", A, 4), [held_by("other", A, 2)], {}, {A: {1: 8, 2: 4, 4: 2}}),
    ("a reserved group's placed pods hold their GPUs once, not twice",
     [*b.rack("a", A, 4), running("other-0", "a-00", 4, group="other")], [held_by("other", A, 3)], {},
     {A: {1: 4, 2: 2, 4: 1}}),  # 4 GPUs used by the placed pod, 8 held for the two to come
    ("a reservation past its TTL holds nothing",
     b.rack("a", A, 4), [held_by("old", A, 4, created=NOW - Policy().reservation_ttl - 1)], {},
     {A: {1: 16, 2: 8, 4: 4}}),
    ("a reservation in another domain leaves this one whole",
     [*b.rack("a", A, 2), *b.rack("b", B, 2)], [held_by("other", B, 1)], {},
     {A: {1: 8, 2: 4, 4: 2}, B: {1: 4, 2: 2, 4: 1}}),
    # Two nodes of 1 local GPU and 4 fabric slots, 6 free blocks: more than the local GPUs, as /filter attaches.
    ("a fabric pool counts the GPUs it can attach, within the zone's free blocks",
     fabric_pool(2), [], {"pool-1": 6}, {"pool-1": {1: 8, 2: 4, 4: 2}}),
    ("a fabric pool with no free block has only its local GPUs",
     fabric_pool(2), [], {"pool-1": 0}, {"pool-1": {1: 2, 2: 0, 4: 0}}),
    ("a node without GPUs adds nothing to its rack", [*b.rack("a", A, 2), b.node("a-09", 0, A)], [], {},
     {A: {1: 8, 2: 4, 4: 2}}),
    ("a domain of one node without GPUs has room for none", [b.node("z-00", 0, A)], [], {}, {A: {1: 0, 2: 0, 4: 0}}),
    ("a cordoned node takes no member, so it offers none", [*b.rack("a", A, 2), cordoned(b.node("a-02", 4, A))],
     [], {}, {A: {1: 8, 2: 4, 4: 2}}),
    ("an 8-GPU node half used fits one 4-GPU pod, not two",
     [b.node("h-00", 8, A), running("half", "h-00", 4)], [], {}, {A: {1: 4, 2: 2, 4: 1}}),
]


def _snapshot(objects: list[dict[str, Any]], reservations: list[Reservation], free: dict[str, int]) -> Snapshot:
    return b.snapshot(objects, {r.group_id: r for r in reservations}, fabric_free=free or None)


@pytest.mark.parametrize(("objects", "reservations", "free", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_domain_has_room_for_what_one_new_group_could_be_given_now(
        objects: list[dict[str, Any]], reservations: list[Reservation], free: dict[str, int],
        expected: dict[str, dict[int, int]]) -> None:
    fits = figures.fit_pods(_snapshot(objects, reservations, free), {}, Policy(), NOW)
    assert fits == expected
    assert figures.largest_group_fits(fits) == {g: max(d[g] for d in expected.values()) for g in figures.FIT_SIZES}


def _domain_for(snapshot: Snapshot, pods: int, gpus: int) -> str | None:
    # In a namespace of its own: the others' reservations hold capacity, not this namespace's share.
    probe = parsing.pod(b.pod("probe-0", None, gpus, annotations={keys.GROUP_ANNOTATION: "probe",
                                                                   keys.GROUP_SIZE_ANNOTATION: str(pods)},
                              namespace="probe"))
    ctx = resolution.resolve(probe, DecisionInputs(snapshot, Policy(), NOW))
    assert ctx is not None and not ctx.resolution.problems
    return ctx.domain


@pytest.mark.parametrize(("objects", "reservations", "free", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_group_of_that_many_pods_gets_a_domain_and_one_pod_more_gets_none(
        objects: list[dict[str, Any]], reservations: list[Reservation], free: dict[str, int],
        expected: dict[str, dict[int, int]]) -> None:
    snapshot = _snapshot(objects, reservations, free)
    largest = figures.largest_group_fits(figures.fit_pods(snapshot, {}, Policy(), NOW))
    for gpus, pods in largest.items():
        if pods:
            assert _domain_for(snapshot, pods, gpus) is not None, (gpus, pods)
        assert _domain_for(snapshot, pods + 1, gpus) is None, (gpus, pods + 1)


def test_this_replicas_choices_not_stored_yet_hold_their_pods_too() -> None:
    snapshot = b.snapshot(b.rack("a", A, 4))
    proposal = replace(held_by("other", A, 3), version="")
    assert figures.fit_pods(snapshot, {proposal.group_id: proposal}, Policy(), NOW)[A] == {1: 4, 2: 2, 4: 1}
    stale = replace(proposal, created_at=NOW - Policy().proposal_ttl - 1)
    assert figures.fit_pods(snapshot, {stale.group_id: stale}, Policy(), NOW)[A] == {1: 16, 2: 8, 4: 4}


def test_a_rack_of_dra_gpus_has_room_for_a_group_that_claims_them() -> None:
    snapshot = b.snapshot(b.rack("a", A, 2))
    dra = replace(snapshot, nodes={n: replace(node, dra_gpus=node.gpus) for n, node in snapshot.nodes.items()})
    # A device-plugin request never lands on DRA-only nodes; a group claiming DRA devices gets them all.
    assert figures.fit_pods(dra, {}, Policy(), NOW)[A] == {1: 8, 2: 4, 4: 2}


def test_a_degraded_rack_has_no_room_for_a_new_group_when_the_policy_refuses_it() -> None:
    rack = b.rack("a", A, 2)
    rack[0]["metadata"]["labels"][keys.HEALTH_LABEL] = "degraded"
    snapshot = b.snapshot([*rack, *b.rack("b", B, 1)])
    for health, room in (("avoid", 8), ("allow", 8), ("refuse", 0)):
        fits = figures.fit_pods(snapshot, {}, Policy(fabric_health=health), NOW)  # type: ignore[arg-type]
        assert (fits[A][1], fits[B][1]) == (room, 4), health


def test_many_domains_each_have_their_own_room_and_the_largest_is_per_size() -> None:
    objects: list[dict[str, Any]] = []
    expected: dict[str, dict[int, int]] = {}
    for i in range(110):
        domain, busy = f"rack-{i:03d}", i % 5  # GPUs used on each of the rack's 18 nodes
        objects += b.rack(f"r{i:03d}", domain, 18)
        objects += [running(f"p{i:03d}-{n:02d}", f"r{i:03d}-{n:02d}", busy) for n in range(18) if busy]
        free = 4 - busy
        expected[domain] = {1: 18 * free, 2: 18 * (free // 2), 4: 18 * (free // 4)}
    # One rack of 8-GPU nodes, each with 5 used: the most 1-GPU pods, no 4-GPU pod.
    objects += [b.node(f"w-{n:02d}", 8, "wide") for n in range(20)]
    objects += [running(f"w{n:02d}", f"w-{n:02d}", 5) for n in range(20)]
    expected["wide"] = {1: 60, 2: 20, 4: 0}
    fits = figures.fit_pods(b.snapshot(objects), {}, Policy(), NOW)
    assert fits == expected
    assert figures.largest_group_fits(fits) == {1: 72, 2: 36, 4: 72 // 4}


def test_without_domains_no_group_fits_anywhere() -> None:
    assert figures.fit_pods(b.snapshot([b.node("lonely", 4)]), {}, Policy(), NOW) == {}
    assert figures.largest_group_fits({}) == {1: 0, 2: 0, 4: 0}
