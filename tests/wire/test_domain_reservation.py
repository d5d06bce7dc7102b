"""The DomainReservation codec (``webhook.wire.domain_reservation``): both shapes round-trip, times keep
their microseconds, and every malformed object is a ``WireError`` naming the field, never a KeyError,
TypeError or ValueError."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.domain.model import Reservation, Segment
from webhook.errors import WireError
from webhook.wire import domain_reservation as dr

RES = Reservation("ann:ml/job", "job", "ml", "clique-0.1", 4, 4, False, 1_700_000_000.123456,
                  placed_at=1_700_000_001.5, holder="replica-a", version="7")
PROMISE = Reservation("cd:uid", "train", "ml", "clique-0.1", 2, 4, True, 1_700_000_002.0, holder="replica-b")


def _reservation() -> dict[str, Any]:
    obj: dict[str, Any] = dict(dr.reservation_object(RES, "replica-a"))
    obj["metadata"]["resourceVersion"] = "7"
    return obj


def _ledger() -> dict[str, Any]:
    return dr.ledger_object("clique-0.1", [RES, PROMISE])


def test_a_reservation_round_trips_with_its_times_to_the_microsecond() -> None:
    obj = _reservation()
    assert obj["spec"]["createdAt"] == "2023-11-14T22:13:20.123456Z"
    assert obj["spec"]["placedAt"] == "2023-11-14T22:13:21.500000Z"
    assert dr.parse_reservation(obj, Reservation) == RES
    assert not dr.is_ledger(obj) and obj["metadata"]["name"] == dr.reservation_name(RES.group_id)


def test_a_ledger_round_trips_its_promises_sorted_by_group_and_without_their_domain() -> None:
    obj = _ledger()
    assert [p["groupId"] for p in obj["spec"]["promises"]] == ["ann:ml/job", "cd:uid"]
    assert all("domain" not in p for p in obj["spec"]["promises"])
    ledger = dr.parse_ledger(obj, Reservation)
    assert dr.is_ledger(obj) and ledger.domain == "clique-0.1" and ledger.version == ""
    assert ledger.promises["cd:uid"].one_pod_per_node and ledger.promises["cd:uid"].holder == "replica-b"
    assert ledger.promises["ann:ml/job"].domain == "clique-0.1"


def test_a_ledger_rewritten_from_the_object_read_keeps_what_others_added() -> None:
    base = _ledger()
    base["metadata"].update(resourceVersion="9", annotations={"note": "kept"})
    body = dr.ledger_object("clique-0.1", [PROMISE], base)
    assert body["metadata"]["annotations"] == {"note": "kept"} and body["metadata"]["resourceVersion"] == "9"
    assert [p["groupId"] for p in body["spec"]["promises"]] == ["cd:uid"]
    assert len(base["spec"]["promises"]) == 2  # the object read is not changed


def test_a_placement_is_written_into_a_copy_of_the_reservation_read() -> None:
    read = _reservation()
    body = dr.with_placed_at(read, 1_700_000_100.25)
    assert body["spec"]["placedAt"] == "2023-11-14T22:15:00.250000Z"
    assert read["spec"]["placedAt"] == "2023-11-14T22:13:21.500000Z"


def test_created_at_falls_back_to_the_creation_timestamp() -> None:
    obj = _reservation()
    del obj["spec"]["createdAt"]
    obj["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    assert dr.parse_reservation(obj, Reservation).created_at == 1_704_067_200.0


def _without(path: tuple[str, ...]) -> Any:
    def change(obj: dict[str, Any]) -> None:
        *parents, last = path
        for key in parents:
            obj = obj[key]
        del obj[last]
    return change


def _set(path: tuple[str | int, ...], value: Any) -> Any:
    def change(obj: Any) -> None:
        *parents, last = path
        for key in parents:
            obj = obj[key]
        obj[last] = value
    return change


@pytest.mark.parametrize(("change", "path"), [
    (_without(("spec",)), "spec"),
    (_set(("spec",), ["not", "an", "object"]), "spec"),
    (_set(("metadata",), "m"), "metadata"),
    (_without(("spec", "groupId")), "spec.groupId"),
    (_set(("spec", "domain"), 3), "spec.domain"),
    (_set(("spec", "size"), True), "spec.size"),
    (_set(("spec", "gpusPerPod"), "4"), "spec.gpusPerPod"),
    (_set(("spec", "onePodPerNode"), "yes"), "spec.onePodPerNode"),
    (_set(("spec", "createdAt"), 1700000000), "spec.createdAt"),
    (_set(("spec", "placedAt"), "yesterday"), "spec.placedAt"),
    (_set(("spec", "holder"), {"name": "a"}), "spec.holder"),
])
def test_a_malformed_reservation_is_a_wire_error_naming_the_field(change: Any, path: str) -> None:
    obj = _reservation()
    change(obj)
    with pytest.raises(WireError) as raised:
        dr.parse_reservation(obj, Reservation)
    assert raised.value.path == path


@pytest.mark.parametrize(("change", "path"), [
    (_set(("spec", "domain"), ""), "spec.domain"),
    (_without(("spec", "promises")), "spec.promises"),
    (_set(("spec", "promises"), {"a": 1}), "spec.promises"),
    (_set(("spec", "promises", 1), "entry"), "spec.promises[1]"),
    (_set(("spec", "promises", 1, "size"), -0.5), "spec.promises[1].size"),
    (_without(("spec", "promises", 0, "gpusPerPod")), "spec.promises[0].gpusPerPod"),
    (_set(("metadata", "name"), dr.ledger_name("another")), "metadata.name"),
])
def test_a_malformed_ledger_is_a_wire_error_naming_the_field(change: Any, path: str) -> None:
    obj = copy.deepcopy(_ledger())
    change(obj)
    with pytest.raises(WireError) as raised:
        dr.parse_ledger(obj, Reservation)
    assert raised.value.path == path


@pytest.mark.parametrize("hostile", [None, [], "d-x", 7, {"metadata": None}, {"metadata": {"name": 5}}])
def test_anything_else_is_refused_with_a_wire_error_or_read_as_no_ledger(hostile: Any) -> None:
    assert not dr.is_ledger(hostile)
    with pytest.raises(WireError):
        dr.parse_reservation(hostile, Reservation)


SEGMENT = Segment("cd:uid", "train", 1, 3, 18, 40)
SEGMENT_RES = Reservation("cd:uid#s1", "train#s1", "ml", "clique-0.1", 18, 4, True, 1_700_000_000.0,
                          holder="replica-a", version="3", segment=SEGMENT)


def _segment_reservation() -> dict[str, Any]:
    obj: dict[str, Any] = dict(dr.reservation_object(SEGMENT_RES, "replica-a"))
    obj["metadata"]["resourceVersion"] = "3"
    return obj


def test_a_segments_reservation_round_trips_where_it_stands_in_its_job() -> None:
    obj = _segment_reservation()
    assert obj["spec"]["segment"] == {"jobId": "cd:uid", "jobName": "train", "index": 1, "count": 3, "size": 18,
                                      "jobSize": 40}
    assert dr.parse_reservation(obj, Reservation, Segment) == SEGMENT_RES
    assert "segment" not in dr.ledger_object("clique-0.1", [SEGMENT_RES])["spec"]["promises"][0]


@pytest.mark.parametrize(("field", "value", "path"), [
    ("index", 3, "spec.segment.index"), ("index", -1, "spec.segment.index"), ("count", 0, "spec.segment.count"),
    ("count", 10**12, "spec.segment.count"), ("size", "18", "spec.segment.size"), ("jobSize", 60, "spec.segment"),
    ("jobId", "cd:other", "spec.segment.jobId"), ("jobId", None, "spec.segment.jobId"),
    ("index", True, "spec.segment.index"),
])
def test_a_malformed_segment_is_a_wire_error_naming_the_field(field: str, value: Any, path: str) -> None:
    obj = _segment_reservation()
    obj["spec"]["segment"][field] = value
    with pytest.raises(WireError) as err:
        dr.parse_reservation(obj, Reservation, Segment)
    assert err.value.path == path


@pytest.mark.parametrize("hostile", ["x", 7, [], {"index": {"deep": [[[]]]}}])
def test_a_segment_of_the_wrong_type_is_refused(hostile: Any) -> None:
    obj = _segment_reservation()
    obj["spec"]["segment"] = hostile
    with pytest.raises(WireError):
        dr.parse_reservation(obj, Reservation, Segment)


HOLD = Reservation("ann:ml/big", "big", "ml", "clique-0.2", 18, 4, True, 1_700_000_000.0, holder="replica-a",
                   expected_start=1_700_002_400.25)


def test_a_hold_round_trips_its_expected_start_in_its_reservation_and_its_promise() -> None:
    obj = dict(dr.reservation_object(HOLD, "replica-a"))
    assert obj["spec"]["expectedStart"] == "2023-11-14T22:53:20.250000Z" and "placedAt" not in obj["spec"]
    assert dr.parse_reservation(obj, Reservation) == HOLD
    ledger = dr.parse_ledger(dr.ledger_object("clique-0.2", [HOLD, PROMISE]), Reservation)
    assert ledger.promises["ann:ml/big"].expected_start == HOLD.expected_start
    assert ledger.promises["cd:uid"].expected_start is None


def test_a_reservation_written_without_an_expected_start_reads_as_no_hold() -> None:
    """What a replica of an earlier release wrote, and what it reads back: additive both ways."""
    assert "expectedStart" not in _reservation()["spec"]
    assert dr.parse_reservation(_reservation(), Reservation).expected_start is None


@pytest.mark.parametrize(("value", "why"), [
    ("2023-11-14T22:13:19Z", "is not between createdAt"),  # before the hold was made
    ("2025-01-01T00:00:00Z", "is not between createdAt"),  # past the longest walltime after it
    ("soon", "is not an RFC 3339 time"),
    (1_700_002_400, "expected an RFC 3339 time"),
    ("9" * 10_000, "is not an RFC 3339 time"),
])
def test_an_impossible_expected_start_is_a_wire_error_naming_the_field(value: Any, why: str) -> None:
    for obj, parse, path in (
            (dict(dr.reservation_object(HOLD, "a")), lambda o: dr.parse_reservation(o, Reservation),
             "spec.expectedStart"),
            (dr.ledger_object("clique-0.2", [HOLD]), lambda o: dr.parse_ledger(o, Reservation),
             "spec.promises[0].expectedStart")):
        target = obj["spec"] if path.startswith("spec.e") else obj["spec"]["promises"][0]
        target["expectedStart"] = value
        with pytest.raises(WireError) as raised:
            parse(obj)
        assert raised.value.path == path and why in str(raised.value)
