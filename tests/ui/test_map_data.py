"""What ``/inspect`` adds for the cluster map and ``explain`` (webhook/domain/views/inspection_detail.py): each
domain's kind and nodes with their GPUs by group, the pods a new group could get there now (the figure
/metrics exports), its health with the nodes behind it and the spare nodes reservations hold there; and
each group's state with the reason it waits, the scheduler's own reason when no domain can take it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from tests import builders as b
from webhook.domain import keys
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Reservation, Snapshot
from webhook.domain.policy import Policy
from webhook.domain.views import figures, inspection, inspection_detail

RACK = "11111111-2222-3333-4444-555555555555.7"
RACK_2 = "66666666-2222-3333-4444-555555555555.7"
NOW = 1_000_000.0


def _res(name: str, domain: str, size: int, version: str = "1", created: float = NOW - 10) -> Reservation:
    return Reservation(group_id=f"cd:{b.cd_uid(name)}", group_name=name, namespace="ml", domain=domain, size=size,
                       gpus_per_pod=4, one_pod_per_node=True, created_at=created, version=version)


def _group(body: dict[str, Any], name: str) -> dict[str, Any]:
    found = [g for g in body["groups"] if g["name"] == f"ml/{name}"]
    assert len(found) == 1, [g["name"] for g in body["groups"]]
    group: dict[str, Any] = found[0]
    return group


def _summary(objects: list[dict[str, Any]], stored: tuple[Reservation, ...] = (),
             proposed: tuple[Reservation, ...] = (), policy: Policy | None = None,
             fabric_free: dict[str, int] | None = None) -> dict[str, Any]:
    snap = b.snapshot(objects, {r.group_id: r for r in stored}, fabric_free=fabric_free, policy=policy)
    body = inspection.summarize(snap, {r.group_id: r for r in proposed}, policy or Policy(), NOW)
    orjson.dumps(body)  # what /inspect answers must stay JSON
    return body


def _cd_pods(name: str, count: int, nodes: list[str | None], phase: str = "Running") -> list[dict[str, Any]]:
    return [b.pod(f"{name}-{i}", name, node=nodes[i] if i < len(nodes) else None,
                  phase=phase if i < len(nodes) and nodes[i] else "Pending") for i in range(count)]


# (case, objects, stored, proposed, group, state, pending, words the reason must hold)
STATES: list[tuple[str, list[dict[str, Any]], tuple[Reservation, ...], tuple[Reservation, ...], str, str, bool,
                   tuple[str, ...]]] = [
    ("every member bound in its reserved domain",
     [*b.rack("a", RACK, 4), *b.cd_objects("two", 2), *_cd_pods("two", 2, ["a-00", "a-01"])],
     (_res("two", RACK, 2),), (), "two", "placed", False, ("all 2 pods placed", RACK)),
    ("a reserved domain with members still to place",
     [*b.rack("a", RACK, 4), *b.cd_objects("four", 4), *_cd_pods("four", 4, ["a-00"])],
     (_res("four", RACK, 4),), (), "four", "reserved", True, ("1 placed, 3 wait", RACK)),
    ("a domain chosen but not stored yet",
     [*b.rack("a", RACK, 4), *b.cd_objects("four", 4), *_cd_pods("four", 4, [])],
     (), (_res("four", RACK, 4, version=""),), "four", "proposed", True, ("proposed for 4 pods", "0 placed")),
    ("a group larger than every domain waits with the scheduler's reason",
     [*b.rack("a", RACK, 4), *b.cd_objects("five", 5), *_cd_pods("five", 5, [])],
     (), (), "five", "pending", True, ("no domain can host 5 pods", "even empty, the largest domain holds 4")),
    ("a group that fits now but was not filtered yet says where it would go",
     [*b.rack("a", RACK, 4), *b.cd_objects("two", 2), *_cd_pods("two", 2, [])],
     (), (), "two", "pending", True, ("no domain chosen yet", "best fit", RACK)),
    ("a domain promised to another group counts as taken",
     [*b.rack("a", RACK, 4), *b.cd_objects("three", 3), *_cd_pods("three", 3, []),
      *b.cd_objects("two", 2), *_cd_pods("two", 2, [])],
     (_res("three", RACK, 3),), (), "two", "pending", True,
     ("no domain can host 2 pods", "largest free capacity is 1")),
    ("members bound without a reservation run there",
     [*b.rack("a", RACK, 4), *b.cd_objects("two", 2), *_cd_pods("two", 2, ["a-00", "a-01"])],
     (), (), "two", "running", False, ("all 2 known pods run in domain", RACK)),
    ("members in two domains are a split group",
     [*b.rack("a", RACK, 2), *b.rack("b", RACK_2, 2), *b.cd_objects("two", 2), *_cd_pods("two", 2, ["a-00", "b-00"])],
     (), (), "two", "split", False, ("2 domains", "delete and resubmit")),
    ("a group-size annotation that is no number makes the group invalid",
     [*b.rack("a", RACK, 4), b.pod("odd-0", None, annotations={keys.GROUP_ANNOTATION: "odd",
                                                                keys.GROUP_SIZE_ANNOTATION: "lots"})],
     (), (), "odd", "invalid", True, (keys.GROUP_SIZE_ANNOTATION, "not a group size")),
    ("members that all finished are finished",
     [*b.rack("a", RACK, 4), *b.cd_objects("two", 2), *_cd_pods("two", 2, ["a-00", "a-01"], phase="Succeeded")],
     (), (), "two", "finished", False, ("every known pod of the group has finished",)),
]


@pytest.mark.parametrize(("objects", "stored", "proposed", "group", "state", "pending", "words"),
                         [c[1:] for c in STATES], ids=[c[0] for c in STATES])
def test_each_group_has_a_state_and_a_reason_a_person_can_act_on(
        objects: list[dict[str, Any]], stored: tuple[Reservation, ...], proposed: tuple[Reservation, ...],
        group: str, state: str, pending: bool, words: tuple[str, ...]) -> None:
    g = _group(_summary(objects, stored, proposed), group)
    assert (g["state"], g["pending"]) == (state, pending), g["reason"]
    for word in words:
        assert word in g["reason"]


def test_the_waiting_reason_is_the_one_filter_gives_the_scheduler() -> None:
    from webhook.domain.decisions import filtering

    objects = [*b.rack("a", RACK, 4), *b.cd_objects("five", 5), *_cd_pods("five", 5, [])]
    snap = b.snapshot(objects)
    pod = next(m.pod for m in snap.members[f"cd:{b.cd_uid('five')}"])
    outcome = filtering.filter_nodes(pod, [f"a-{i:02d}" for i in range(4)], DecisionInputs(snap, Policy(), NOW))
    assert _group(_summary(objects), "five")["reason"] == next(iter(outcome.unresolvable.values()))


@pytest.mark.parametrize(("labels", "policy", "kind"), [
    ({keys.CLIQUE_LABEL: RACK}, None, "nvlink"),
    ({keys.FABRIC_ZONE_LABEL: "pool-1"}, None, "fabric"),
    ({"example.com/rack": "r1"}, Policy(domain_labels=("example.com/rack",)), "other"),
], ids=["clique label: NVLink clique", "fabric-zone label: fabric pool", "a configured label: plain domain"])
def test_every_domain_says_what_kind_it_is(labels: dict[str, str], policy: Policy | None, kind: str) -> None:
    node = b.node("n-00")
    node["metadata"]["labels"].update(labels)
    body = _summary([node], policy=policy)
    assert [d["kind"] for d in body["domains"]] == [kind]


def test_each_node_shows_its_gpus_by_group_the_rest_in_use_and_what_is_free() -> None:
    cordoned = b.node("a-03", 8, RACK)
    cordoned["spec"] = {"unschedulable": True}
    objects = [*b.rack("a", RACK, 3, gpus=8), cordoned, *b.cd_objects("two", 2), *_cd_pods("two", 2, ["a-00", "a-01"]),
               b.pod("notebook", None, gpus=2, node="a-01", phase="Running", namespace="research"),
               b.pod("small-0", None, gpus=1, node="a-02", phase="Running", annotations={keys.GROUP_ANNOTATION: "s"})]
    details = _summary(objects)["domains"][0]["nodeDetails"]
    nodes = {n["node"]: n for n in details}
    two, small = f"cd:{b.cd_uid('two')}", "ann:ml/s"
    shown = {name: (n["gpus"], n["groups"], n["otherUsed"], n["used"], n["free"]) for name, n in nodes.items()}
    assert shown == {"a-00": (8, {two: 4}, 0, 4, 4), "a-01": (8, {two: 4}, 2, 6, 2),
                     "a-02": (8, {small: 1}, 0, 1, 7), "a-03": (8, {}, 0, 0, 8)}
    assert [n["unschedulable"] for n in details] == [False, False, False, True]


def test_fabric_nodes_show_their_slots_and_the_zone_its_free_blocks() -> None:
    objects = [b.node(f"f-{i:02d}", 1, None, zone="pool-1", slots=4) for i in range(2)]
    body = _summary(objects, fabric_free={"pool-1": 6})
    (domain,) = body["domains"]
    assert domain["kind"] == "fabric" and body["fabricFree"] == {"pool-1": 6}
    assert [(n["fabricSlots"], n["attachedBlocks"], n["gpus"]) for n in domain["nodeDetails"]] == [(4, 0, 1)] * 2


def test_a_node_held_by_another_compute_domain_is_marked() -> None:
    objects = [b.node("a-00", 4, RACK, compute_domain="some-uid"), b.node("a-01", 4, RACK)]
    details = _summary(objects)["domains"][0]["nodeDetails"]
    assert [n["heldByComputeDomain"] for n in details] == [True, False]


def test_past_the_budget_waiting_groups_say_their_reason_was_not_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspection_detail, "MAX_REASONED", 1)
    objects = [*b.rack("a", RACK, 2)]
    for name in ("big-a", "big-b", "big-c"):
        objects += [*b.cd_objects(name, 3), *_cd_pods(name, 3, [])]
    reasons = [g["reason"] for g in _summary(objects)["groups"]]
    assert sum("no domain can host 3 pods" in r for r in reasons) == 1
    assert sum("computed for the first 1 such groups only" in r for r in reasons) == 2


def test_without_the_service_clock_every_reservation_counts() -> None:
    old = _res("three", RACK, 3, created=0.0)  # long expired at NOW
    objects = [*b.rack("a", RACK, 4), *b.cd_objects("three", 3), *_cd_pods("three", 3, []),
               *b.cd_objects("two", 2), *_cd_pods("two", 2, [])]
    snap: Snapshot = replace(b.snapshot(objects), reservations={old.group_id: old})
    with_clock = _group(inspection.summarize(snap, {}, Policy(), NOW), "two")
    without = _group(inspection.summarize(snap, {}), "two")
    assert "best fit" in with_clock["reason"]  # the expired reservation no longer holds the rack
    assert "no domain can host 2 pods" in without["reason"]


def test_a_hostile_namespace_is_carried_as_plain_data_and_a_hostile_group_name_makes_no_group() -> None:
    # A group name must be a label value (docs/GROUPS.md); a namespace or a pod name sent in a request (not
    # validated by an API server in embedded mode) still reaches the view, as plain data.
    hostile = "<img src=x onerror=alert(1)>\u202e\x1b[2J"
    objects = [*b.rack("a", RACK, 2), b.pod("h-0", None, annotations={keys.GROUP_ANNOTATION: "h",
                                                                       keys.GROUP_SIZE_ANNOTATION: "2"},
                                            namespace=hostile)]
    (g,) = _summary(objects)["groups"]
    assert g["state"] == "pending" and g["name"].startswith("<img")
    refused = [*b.rack("a", RACK, 2), b.pod("h-0", None, annotations={keys.GROUP_ANNOTATION: hostile,
                                                                       keys.GROUP_SIZE_ANNOTATION: "2"})]
    assert _summary(refused)["groups"] == []


def test_each_domain_says_how_many_pods_of_1_2_and_4_gpus_a_new_group_could_get_there_now() -> None:
    objects = [*b.rack("a", RACK, 4), *b.rack("b", RACK_2, 2), *b.cd_objects("two", 2), *_cd_pods("two", 2, []),
               b.pod("busy", None, gpus=3, node="a-00", phase="Running")]
    body = _summary(objects, stored=(_res("two", RACK_2, 2),))  # one pod per node: both of rack b are promised
    fits = {d["domain"]: d["fitPods"] for d in body["domains"]}
    assert fits == {RACK: {"1": 13, "2": 6, "4": 3}, RACK_2: {"1": 0, "2": 0, "4": 0}}
    assert body["largestGroupFits"] == {"1": 13, "2": 6, "4": 3}
    # What /metrics exports for the same cluster at the same instant.
    snap = b.snapshot(objects, {f"cd:{b.cd_uid('two')}": _res("two", RACK_2, 2)})
    exported = figures.fit_pods(snap, {}, Policy(), NOW)
    assert fits == {d: {str(g): n for g, n in by.items()} for d, by in exported.items()}


def test_a_reservation_past_its_ttl_leaves_its_domain_free_for_a_new_group_only_with_the_service_clock() -> None:
    old = _res("two", RACK, 2, created=0.0)  # long expired at NOW
    snap: Snapshot = replace(b.snapshot(b.rack("a", RACK, 2)), reservations={old.group_id: old})
    assert inspection.summarize(snap, {}, Policy(), NOW)["domains"][0]["fitPods"] == {"1": 8, "2": 4, "4": 2}
    assert inspection.summarize(snap, {})["domains"][0]["fitPods"] == {"1": 0, "2": 0, "4": 0}


def test_each_domain_shows_its_health_with_the_nodes_behind_it_and_the_spare_nodes_held_there() -> None:
    degraded, down = b.node("a-01", 4, RACK), b.node("a-02", 4, RACK)
    degraded["metadata"]["labels"][keys.HEALTH_LABEL] = "degraded"
    down["metadata"]["labels"][keys.HEALTH_LABEL] = "unhealthy"
    objects = [b.node("a-00", 4, RACK), degraded, down, *b.rack("b", RACK_2, 4),
               *b.cd_objects("two", 2), *_cd_pods("two", 2, ["b-00"])]
    held = replace(_res("two", RACK_2, 2), spares=2)
    body = _summary(objects, stored=(held,))
    shown = {d["domain"]: (d["health"], d["degradedNodes"], d["unhealthyNodes"], d["spareNodes"])
             for d in body["domains"]}
    assert shown == {RACK: ("degraded", ["a-01", "a-02"], ["a-02"], 0), RACK_2: ("healthy", [], [], 2)}
    assert [(r["group"], r["spares"]) for r in body["reservations"]] == [(held.group_id, 2)]


def test_spare_nodes_count_only_while_the_reservation_holding_them_is_live() -> None:
    old = replace(_res("two", RACK, 2, created=0.0), spares=3)  # long expired at NOW
    snap: Snapshot = replace(b.snapshot(b.rack("a", RACK, 4)), reservations={old.group_id: old})
    assert inspection.summarize(snap, {}, Policy(), NOW)["domains"][0]["spareNodes"] == 0
    assert inspection.summarize(snap, {})["domains"][0]["spareNodes"] == 3
