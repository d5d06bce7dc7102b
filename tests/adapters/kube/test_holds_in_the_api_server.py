"""Holds in Kubernetes mode (``webhook.engine.holds`` over ``KubeReservationStore``, against the wire-level
fake): a hold is a DomainReservation with ``spec.expectedStart`` and a promise with the same in its domain's
ledger, so every replica and every restart sees the same held domain; two replicas planning at once hold it
once; a fault on either write records no half hold; deleting the held group releases both objects; and a
hold as written matches the CRD's schema."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import yaml

from tests import builders
from tests.adapters.kube.conftest import Connect
from tests.adapters.kube.test_reservation_races import MANIFESTS, Fault, ledgers, stored
from tests.concurrency import or_error, run_together
from tests.domain.test_holds import T0, _group
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy
from webhook.engine.engine import Engine
from webhook.wire import domain_reservation
from webhook.wire.timestamps import rfc3339

A, B = "aaaa-1111.7", "bbbb-2222.7"
POLICY = Policy(max_holds=1, hold_after=600.0, hold_timeout=4 * 3600.0)
BIG = _group("big", 4, created=T0)


class Clock:
    def __init__(self) -> None:
        self.now = T0 + 1200.123456789  # finer than the wire's microseconds, as time.time() is

    def __call__(self) -> float:
        return self.now


def _seed(fake: KubeFake) -> None:
    """Rack a runs 'short' (30 min) and 'long' (1 h) since T0, rack b 'endless' (no walltime); 'big' waits."""
    nodes = [dict(n, apiVersion="v1") for n in [*builders.rack("a", A, 4), *builders.rack("b", B, 4)]]
    fake.seed([*nodes, *_group("short", 2, runtime="30m", nodes=["a-00", "a-01"]),
               *_group("long", 2, runtime="1h", nodes=["a-02", "a-03"]),
               *_group("endless", 4, nodes=["b-00", "b-01", "b-02", "b-03"]), *BIG])


def _replica(connect: Connect, holder: str, clock: Clock) -> tuple[KubeBackend, Engine]:
    backend = connect(holder)
    eventually(lambda: backend.store.pod("ml", "big-3") is not None, what=f"{holder} has every pod")
    return backend, builders.engine(backend, POLICY, holder=holder, clock=clock)


def _holds(fake: KubeFake) -> dict[str, dict[str, Any]]:
    return {g: spec for g, spec in stored(fake).items() if "expectedStart" in spec}


def test_a_hold_is_stored_with_its_expected_start_and_seen_by_the_other_replica_and_a_restart(
        kube_fake: KubeFake, connect_backend: Connect) -> None:
    _seed(kube_fake)
    clock = Clock()
    _, a = _replica(connect_backend, "replica-a", clock)
    backend_b, b = _replica(connect_backend, "replica-b", clock)
    (hold,) = a.plan_holds()
    assert (hold.domain, hold.expected_start) == (A, T0 + 3600)
    (spec,) = _holds(kube_fake).values()
    assert spec["domain"] == A and spec["expectedStart"] == rfc3339(T0 + 3600, "us") and "placedAt" not in spec
    (promise,) = ledgers(kube_fake)[A]
    assert promise["expectedStart"] == spec["expectedStart"]
    eventually(lambda: hold.group_id in b.reservations.all(), what="replica b sees the hold")
    assert b.reservations.all()[hold.group_id].expected_start == T0 + 3600
    assert b.plan_holds() == [] and len(_holds(kube_fake)) == 1  # b plans the same group: held already
    backend_b.stop()
    _, restarted = _replica(connect_backend, "replica-b2", clock)
    eventually(lambda: hold.group_id in restarted.reservations.all(), what="the restarted replica reads the hold")
    assert restarted.reservations.all()[hold.group_id].expected_start == T0 + 3600
    assert restarted.plan_holds() == []
    assert restarted.held_gpus(clock.now)[A] == 16


def test_two_replicas_planning_at_once_hold_the_domain_once(kube_fake: KubeFake, connect_backend: Connect) -> None:
    _seed(kube_fake)
    clock = Clock()
    engines = [_replica(connect_backend, f"replica-{c}", clock)[1] for c in "ab"]
    made = run_together(2, or_error(lambda k: engines[k].plan_holds()))
    assert not any(isinstance(m, BaseException) for m in made), made
    assert sum(len(m) for m in made) == 1, "the replica that adopted the other's hold does not report it as made"
    (spec,) = _holds(kube_fake).values()
    assert [p["groupId"] for p in ledgers(kube_fake)[spec["domain"]]] == [spec["groupId"]]


@pytest.mark.parametrize(("prefix", "status", "reason"), [
    ("d-", 500, "InternalError"), ("r-", 500, "InternalError"), ("r-", 503, "ServiceUnavailable"),
])
def test_a_persistent_fault_on_either_write_records_no_half_hold_and_a_later_round_makes_it(
        kube_fake: KubeFake, connect_backend: Connect, prefix: str, status: int, reason: str) -> None:
    _seed(kube_fake)
    clock = Clock()
    _, engine = _replica(connect_backend, "replica-a", clock)
    fault = Fault(kube_fake, "post", prefix, status, reason, times=100)
    assert engine.plan_holds() == []
    assert fault.hits and _holds(kube_fake) == {}
    promised = [p for ps in ledgers(kube_fake).values() for p in ps]
    if promised:  # the reservation's create failed: its promise counts only for the proposal TTL, as any
        clock.now += POLICY.proposal_ttl + 1  # promise whose reservation was never stored (not a hold's hours)
        assert engine.held_gpus(clock.now).get(A, 0) == 0
        engine.housekeep()
        assert not [p for ps in ledgers(kube_fake).values() for p in ps], "the dead promise is pruned"
    fault.clear()
    (hold,) = engine.plan_holds()
    assert list(_holds(kube_fake)) == [hold.group_id]
    assert [p["groupId"] for p in ledgers(kube_fake)[hold.domain]] == [hold.group_id]


def test_deleting_the_held_group_releases_its_hold_and_its_promise(kube_fake: KubeFake,
                                                                  connect_backend: Connect) -> None:
    _seed(kube_fake)
    clock = Clock()
    backend, engine = _replica(connect_backend, "replica-a", clock)
    (hold,) = engine.plan_holds()
    for obj in BIG:
        if obj["kind"] == "Pod":
            kube_fake.delete("pods", "ml", obj["metadata"]["name"])
    eventually(lambda: all(backend.store.pod("ml", f"big-{i}") is None for i in range(4)), what="the deletes cached")
    released = engine.housekeep()  # no grace: its members waited --hold-after before it was made
    assert (hold.group_id, "every member of the group has finished or was deleted") in released
    assert _holds(kube_fake) == {}
    engine.housekeep()
    assert not ledgers(kube_fake).get(A)


def test_a_hold_as_the_code_writes_it_matches_the_crd() -> None:
    crd = yaml.safe_load((MANIFESTS / "crd-domainreservations.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    hold = Reservation("cd:uid", "big", "ml", A, 4, 4, True, T0 + 1200.5, holder="replica-a",
                       expected_start=T0 + 3600)
    for obj in (domain_reservation.reservation_object(hold, "replica-a"), domain_reservation.ledger_object(A, [hold])):
        jsonschema.validate(obj, schema)
    spec_props = schema["properties"]["spec"]["properties"]
    assert spec_props["expectedStart"]["format"] == "date-time"
    assert spec_props["promises"]["items"]["properties"]["expectedStart"]["format"] == "date-time"
    assert {"name": "Held-Until", "type": "string", "jsonPath": ".spec.expectedStart"} in \
        version["additionalPrinterColumns"]



SMALL = _group("small", 4)  # a one-domain group; nothing has room for it either


@pytest.mark.parametrize("fault", [None, ("delete", "r-", 500, "InternalError"), ("delete", "d-", 503,
                                                                                     "ServiceUnavailable")],
                         ids=["two-replicas-at-once", "reservation-delete-fails", "ledger-delete-fails"])
def test_two_replicas_let_a_hold_go_once_a_one_domain_group_waits_long_and_a_failed_release_is_retried(
        kube_fake: KubeFake, connect_backend: Connect, fault: tuple[str, str, int, str] | None) -> None:
    """The API server stamps each pod's creation, the age the wait order reads: the clock is set from the
    stamps, and 'small' comes after the hold is made. POLICY gives way after 1200 s (the default)."""
    _seed(kube_fake)
    clock = Clock()
    replicas = [_replica(connect_backend, f"replica-{c}", clock) for c in "ab"]
    engines = [engine for _, engine in replicas]
    big = replicas[0][0].store.pod("ml", "big-0")
    assert big is not None and big.created_at is not None
    clock.now = big.created_at + 1200  # 'big' has waited --hold-after, far from --hold-yield-until
    (hold,) = engines[0].plan_holds()
    eventually(lambda: hold.group_id in engines[1].reservations.all(), what="replica b sees the hold")
    kube_fake.seed(SMALL)
    for backend, _ in replicas:
        eventually(lambda b=backend: b.store.pod("ml", "small-3") is not None, what="every replica has 'small'")
    small = replicas[0][0].store.pod("ml", "small-0")
    assert small is not None and small.created_at is not None
    clock.now = small.created_at + 1000
    assert engines[1].plan_holds() == [] and len(_holds(kube_fake)) == 1, "not waited long enough: the hold stays"
    clock.now = small.created_at + 1201  # 'small' has waited past --hold-yield-after; 'big' far less than 4 h
    armed = Fault(kube_fake, *fault, times=100) if fault else None
    made = run_together(2, or_error(lambda k: engines[k].plan_holds()))
    assert not any(isinstance(m, BaseException) for m in made), made
    assert made == [[], []], "no hold is made while the one-domain group waits"
    if armed is not None:
        assert armed.hits, "the release met the fault"
        armed.clear()
        assert engines[0].plan_holds() == []  # the next round lets go what is left of the hold
        clock.now += POLICY.proposal_ttl + 1  # a promise a failed write left counts for the proposal TTL only
        assert engines[0].held_gpus(clock.now).get(A, 0) == 0
        engines[0].housekeep()  # and is pruned then
    assert _holds(kube_fake) == {}
    eventually(lambda: not [p for p in ledgers(kube_fake).get(A, []) if p.get("expectedStart")],
               what="no held promise left in the ledger")
