"""Holds where the running ComputeDomains hold their nodes through allocated channel claims, as on a real
cluster with NVIDIA's DRA driver (the node's compute-domain devices are allocated to one ComputeDomain at a
time): a domain frees for a waiting group when the groups whose claims hold its nodes end, exactly as when
only their pods held it (``webhook.domain.placement.vacated`` takes the claims away with the pods)."""

from __future__ import annotations

from tests import builders
from tests.domain.test_holds import T0, _group
from webhook.domain.jobs import holds
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy

A, B = "aaaa-1111.7", "bbbb-2222.7"
NOW = T0 + 1200.0
POLICY = Policy(max_holds=1, hold_after=30.0)


def _claims(cd: str, nodes: list[str]) -> list[dict[str, object]]:
    return [builders.allocated_claim(f"{cd}-{n}", n, builders.cd_uid(cd)) for n in nodes]


def test_a_job_in_segments_is_planned_behind_groups_whose_channel_claims_hold_their_racks() -> None:
    a_nodes, b_nodes = [f"a-{i:02d}" for i in range(4)], [f"b-{i:02d}" for i in range(3)]
    snap = builders.snapshot([*builders.rack("a", A, 4), *builders.rack("b", B, 3),
                              *_group("short", 4, runtime="20m", nodes=a_nodes), *_claims("short", a_nodes),
                              *_group("long", 3, runtime="40m", nodes=b_nodes), *_claims("long", b_nodes),
                              *_group("big", 6, created=T0, segment=3)])
    assert snap.imex_holds["a-00"] == {builders.cd_uid("short")}
    (entry,) = holds.waiting(snap, {}, POLICY)
    planned = holds.plan(entry, snap, {}, POLICY, NOW)
    assert planned is not None and sorted(planned.domains) == [A, B] and planned.start == T0 + 2400


def test_a_claim_no_compute_domain_is_known_for_keeps_its_node_held_for_planning() -> None:
    a_nodes = [f"a-{i:02d}" for i in range(4)]
    stranger = builders.allocated_claim("stranger", "a-00", None)
    snap = builders.snapshot([*builders.rack("a", A, 4), *_group("short", 4, runtime="20m", nodes=a_nodes),
                              *_claims("short", a_nodes), stranger, *_group("big", 4, created=T0)])
    (entry,) = holds.waiting(snap, {}, POLICY)
    assert holds.earliest_start(A, entry.group, entry.need, 4, snap, {}, POLICY, NOW) is None
    assert holds.earliest_start(A, entry.group, entry.need, 3, snap, {}, POLICY, NOW) == T0 + 1200


def test_the_reservations_of_the_running_groups_end_with_them_for_planning() -> None:
    """On a cluster, each running group keeps its reservation until it ends: what it holds must not be
    counted as kept once its walltime has ended it."""
    a_nodes, b_nodes = [f"a-{i:02d}" for i in range(4)], [f"b-{i:02d}" for i in range(3)]
    objects = [*builders.rack("a", A, 4), *builders.rack("b", B, 3),
               *_group("short", 4, runtime="20m", nodes=a_nodes), *_claims("short", a_nodes),
               *_group("long", 3, runtime="40m", nodes=b_nodes), *_claims("long", b_nodes),
               *_group("big", 6, created=T0, segment=3)]
    reservations = {f"cd:{builders.cd_uid(name)}": Reservation(f"cd:{builders.cd_uid(name)}", name, "ml", domain,
                                                               size, 4, True, T0, placed_at=T0)
                    for name, domain, size in (("short", A, 4), ("long", B, 3))}
    snap = builders.snapshot(objects, reservations=reservations)
    (entry,) = holds.waiting(snap, reservations, POLICY)
    planned = holds.plan(entry, snap, reservations, POLICY, NOW)
    assert planned is not None and sorted(planned.domains) == [A, B] and planned.start == T0 + 2400
