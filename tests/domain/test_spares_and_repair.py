"""Repair inside the domain and spare nodes (docs/SCHEDULER.md, "Repair inside the domain"): a replacement of a
running group's member is offered only the group's domain and waits there with counted reasons when the
domain is full, even with another domain empty; ``imex-webhook.io/spare-nodes`` makes the reservation hold
that many more members' worth of the domain, which other groups cannot take and the group's replacements use;
without room for the spares the group runs without them; the value is checked and stored on the wire."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.groups import grouping, spares
from webhook.domain.model import Demand, Reservation, Snapshot
from webhook.domain.placement import placement, repair
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import WireError
from webhook.wire import domain_reservation as wire

A, B = "aaaa-1111.7", "bbbb-2222.7"
NOW = 1000.0


@pytest.mark.parametrize(("raw", "expected"), [
    ("2", 2), (" 3 ", 3), ("0", 0), ("64", 64), ("65", None), ("-1", None), ("1e3", None), ("²", None),
    ("", None), ("9" * 100_000, None), ("2.0", None),
], ids=["two", "spaces around", "zero", "the bound", "over the bound", "negative", "exponent", "superscript digit",
        "empty", "a huge number", "a fraction"])
def test_the_spare_nodes_annotation_is_a_small_whole_number(raw: str, expected: int | None) -> None:
    assert spares.parse(raw) == expected


def _cd(name: str, nodes: int, spare: str | None = None) -> list[dict[str, Any]]:
    objects = builders.cd_objects(name, nodes)
    if spare is not None:
        objects[0]["metadata"]["annotations"] = {keys.SPARE_NODES_ANNOTATION: spare}
    return objects


def _resolve(objects: list[dict[str, Any]], pod: dict[str, Any]) -> grouping.GroupResolution:
    snap = builders.snapshot(objects)
    return grouping.resolve(parsing.pod(pod), snap.catalog, Policy())


@pytest.mark.parametrize(("on_cd", "on_pod", "expected", "problem"), [
    ("2", None, 2, None),
    ("2", "1", 1, None),  # the pods' value wins
    (None, None, 0, None),
    ("lots", None, 0, "ComputeDomain ml/job's annotation imex-webhook.io/spare-nodes='lots'"),
    (None, "-3", 0, "the pod's annotation imex-webhook.io/spare-nodes='-3'"),
], ids=["on the ComputeDomain", "on the pods over the ComputeDomain", "absent", "unusable on the ComputeDomain",
        "unusable on the pod"])
def test_a_group_asks_for_spares_on_its_compute_domain_or_its_pods(on_cd: str | None, on_pod: str | None,
                                                                     expected: int, problem: str | None) -> None:
    pod = builders.pod("job-0", "job", annotations={keys.SPARE_NODES_ANNOTATION: on_pod} if on_pod else None)
    resolution = _resolve(_cd("job", 2, on_cd), pod)
    assert resolution.group is not None and resolution.group.spares == expected
    if problem is None:
        assert not resolution.problems
    else:
        assert any(problem in p for p in resolution.problems), resolution.problems


def _snap(objects: list[dict[str, Any]], reservations: dict[str, Reservation] | None = None) -> Snapshot:
    return builders.snapshot([*builders.rack("a", A, 4), *builders.rack("b", B, 6), *objects], reservations)


def _choose(snap: Snapshot, name: str, others: dict[str, Reservation] | None = None) -> placement.Choice:
    pod = parsing.pod(builders.pod(f"{name}-0", name))
    resolution = grouping.resolve(pod, snap.catalog, Policy())
    assert resolution.group is not None
    known = {m.pod.uid for m in snap.members.get(resolution.group.id, ())}
    return placement.choose(resolution.group, resolution.size, Demand(4), snap, others or {},
                            pending_self=pod.uid not in known)


def test_a_group_with_spares_gets_a_domain_with_room_for_them_too() -> None:
    # 3 pods: rack a (4 nodes) is the best fit without spares; with 2 spares only rack b (6) has room.
    assert _choose(_snap(_cd("job", 3)), "job").domain == A
    choice = _choose(_snap(_cd("job", 3, "2")), "job")
    assert (choice.domain, choice.spares) == (B, 2) and "2 spare nodes held" in choice.reason


def test_without_room_for_its_spares_a_group_runs_without_them_and_is_told() -> None:
    choice = _choose(_snap(_cd("job", 5, "4")), "job")
    assert (choice.domain, choice.spares) == (B, 0)
    assert "no domain has room for its 4 spare nodes as well" in choice.reason


def _reservation(name: str, domain: str, size: int, spare: int = 0) -> Reservation:
    return Reservation(f"cd:{builders.cd_uid(name)}", name, "ml", domain, size, 4, True, NOW, version="1",
                       spares=spare)


def test_another_groups_spares_are_kept_off_like_its_members_still_to_place() -> None:
    # "owner" runs 2 pods in rack a and holds 2 spares: the 2 free nodes are not free for "guest".
    running = [builders.pod(f"owner-{i}", "owner", node=f"a-{i:02d}", phase="Running") for i in range(2)]
    objects = [*_cd("owner", 2, "2"), *running, *_cd("guest", 2)]
    for spare, expected in ((0, A), (2, B)):
        res = _reservation("owner", A, 2, spare)
        snap = _snap(objects, {res.group_id: res})
        assert _choose(snap, "guest", {res.group_id: res}).domain == expected


def _running_group(lost: int, replacements: int, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A 4-pod group on rack a's 4 nodes; ``lost`` of them failed, ``replacements`` new pods pending."""
    pods = [builders.pod(f"job-{i}", "job", node=f"a-{i:02d}", phase="Failed" if i < lost else "Running")
            for i in range(4)]
    pods += [builders.pod(f"job-r{i}", "job") for i in range(replacements)]
    return [*_cd("job", 4), *pods, *(extra or [])]


def test_a_replacement_goes_back_to_its_groups_domain() -> None:
    snap = _snap(_running_group(lost=1, replacements=1))
    choice = _choose(snap, "job")
    assert choice.domain == A, choice.reason


def test_a_replacement_waits_in_its_full_domain_even_with_another_domain_empty() -> None:
    # The failed member's node is taken meanwhile by another group's pod; rack b is empty.
    squatter = [*_cd("other", 1), builders.pod("other-0", "other", node="a-00", phase="Running")]
    snap = _snap(_running_group(lost=1, replacements=1, extra=squatter))
    pod = parsing.pod(builders.pod("job-r0", "job"))
    resolution = grouping.resolve(pod, snap.catalog, Policy())
    assert resolution.group is not None
    note = repair.waiting(resolution.group, resolution.size, Demand(4), snap, {}, pending_self=False)
    assert note is not None
    assert "waits in NVLink domain aaaa-1111.7, where 3 members run; it is never placed in another domain" in note
    assert "domain aaaa-1111.7: 4 nodes, 3 already running a member, 1 held by ComputeDomain ml/other, 0 < 1 needed" \
        in note, note


def test_a_group_that_runs_nowhere_is_no_repair() -> None:
    snap = _snap(_running_group(lost=4, replacements=4))
    group = grouping.resolve(parsing.pod(builders.pod("job-r0", "job")), snap.catalog, Policy()).group
    assert group is not None
    assert repair.waiting(group, 4, Demand(4), snap, {}, pending_self=False) is None


@pytest.mark.parametrize("spare", [0, 3, 64])
def test_spares_travel_in_the_reservation_and_its_ledger_promises(spare: int) -> None:
    res = _reservation("job", A, 4, spare)
    body = wire.reservation_object(res, "t")
    assert body["spec"].get("spareNodes", 0) == spare
    parsed = wire.parse_reservation(body, Reservation)
    assert replace(parsed, version="1") == replace(res, holder="t")
    ledger = wire.parse_ledger(wire.ledger_object(A, [res]), Reservation)
    assert ledger.promises[res.group_id].spares == spare


@pytest.mark.parametrize("value", [-1, 65, "2", True, 10**30, None, [2]])
def test_a_stored_reservation_with_unusable_spares_names_the_field(value: Any) -> None:
    body = wire.reservation_object(_reservation("job", A, 4), "t")
    body["spec"]["spareNodes"] = value  # type: ignore[typeddict-unknown-key]
    with pytest.raises(WireError) as err:
        wire.parse_reservation(body, Reservation)
    assert err.value.path == "spec.spareNodes"
