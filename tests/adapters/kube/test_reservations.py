"""Domain reservations kept as DomainReservation objects in the (fake) API server.

Covered: ``reserve`` stores one object named after the group with every field in ``spec``, and the
group's promise in its domain's ledger, and returns what the server holds; a stored reservation
survives an API server restart and is seen, unchanged, by a brand-new backend; two replicas racing
``reserve`` for one group with different domains agree on one domain, exactly one object exists and
only that domain's ledger keeps the promise; ``all()`` answers from the cache; ``placed`` recovers
from a stale resourceVersion, keeps fields others wrote, and gives up with ``StoreConflict`` when
conflicts persist; ``release`` deletes, treats "already gone" as done and refuses to delete what
another replica changed; without the CRD the backend still becomes ready and ``reserve`` says how to
install it. The capacity checks and faults of ``reserve``: ``test_reservation_races``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.adapters.kube.conftest import Connect
from tests.concurrency import or_error, run_together
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend
from webhook.adapters.kube.reservations import CRD_MISSING
from webhook.domain.model import Reservation
from webhook.errors import DecisionError, StoreConflict
from webhook.wire.domain_reservation import ledger_name, reservation_name

DR = "domainreservations"


def reservations(fake: KubeFake) -> list[dict[str, Any]]:
    """The groups' reservations, without the domains' ledgers."""
    return [o for o in fake.items(DR) if o["metadata"]["name"].startswith("r-")]


def proposal(domain: str = "clique-a.1", group: str = "ann:ml/job-1", created: float = 1_700_000_000.25) -> Reservation:
    return Reservation(group_id=group, group_name=group.rsplit("/", 1)[-1], namespace="ml", domain=domain, size=8,
                       gpus_per_pod=4, one_pod_per_node=True, created_at=created, holder="engine")


def test_reserve_stores_one_object_named_after_the_group(fake: KubeFake, backend: KubeBackend) -> None:
    stored = backend.reservations.reserve(proposal())

    (obj,) = reservations(fake)
    assert obj["metadata"]["name"] == reservation_name("ann:ml/job-1") and len(obj["metadata"]["name"]) == 34
    assert obj["spec"] == {
        "groupId": "ann:ml/job-1", "groupName": "job-1", "namespace": "ml", "domain": "clique-a.1", "size": 8,
        "gpusPerPod": 4, "onePodPerNode": True, "holder": "replica-a", "createdAt": "2023-11-14T22:13:20.250000Z",
    }
    assert stored.version == obj["metadata"]["resourceVersion"]
    assert stored.created_at == 1_700_000_000.25 and stored.holder == "replica-a"
    assert backend.reservations.all() == {"ann:ml/job-1": stored}

    again = backend.reservations.reserve(proposal(domain="clique-b.1"))
    assert again == stored  # the group already has its domain
    ledger = fake.get(DR, None, ledger_name("clique-a.1"))
    assert ledger is not None and ledger["spec"] == {"domain": "clique-a.1", "promises": [{
        "groupId": "ann:ml/job-1", "groupName": "job-1", "namespace": "ml", "size": 8, "gpusPerPod": 4,
        "onePodPerNode": True, "holder": "replica-a", "createdAt": "2023-11-14T22:13:20.250000Z"}]}
    assert backend.reservations.promises()["clique-a.1"]["ann:ml/job-1"].created_at == stored.created_at
    assert fake.requests("create", DR) == 2  # the ledger, then the reservation; nothing for the second call


def test_a_reservation_survives_an_api_server_restart_and_a_new_backend(fake: KubeFake,
                                                                         connect_backend: Connect) -> None:
    first = connect_backend("replica-a")
    stored = first.reservations.reserve(proposal())
    first.reservations.placed(stored.group_id, 1_700_000_100.5)

    fake.restart(down_for=0.1)
    eventually(lambda: fake.watches(DR) == 1, what="watch re-established after the restart")
    kept = first.reservations.all()["ann:ml/job-1"]
    assert (kept.domain, kept.placed_at) == ("clique-a.1", 1_700_000_100.5)
    first.stop()

    second = connect_backend("replica-b")  # our service restarted: nothing in memory
    assert second.reservations.all() == {"ann:ml/job-1": kept}
    assert second.reservations.reserve(proposal(domain="clique-b.1")).domain == "clique-a.1"
    assert len(reservations(fake)) == 1


def _race(replicas: list[KubeBackend], group: str) -> list[Reservation | Exception]:
    """Each replica proposes its own domain for ``group``, all released at the same instant."""
    def ensure(i: int) -> Reservation:
        return replicas[i].reservations.reserve(proposal(domain=f"clique-{i}.1", group=group))

    return run_together(len(replicas), or_error(ensure), timeout=10)


def test_two_replicas_racing_for_one_group_agree_on_one_domain(fake: KubeFake, connect_backend: Connect) -> None:
    replicas = [connect_backend("replica-a"), connect_backend("replica-b")]
    for round_ in range(5):
        group = f"ann:ml/race-{round_}"
        a, b = _race(replicas, group)
        assert isinstance(a, Reservation) and isinstance(b, Reservation), (a, b)
        assert a.domain == b.domain and a.version == b.version
        assert [o["spec"]["domain"] for o in reservations(fake) if o["spec"]["groupId"] == group] == [a.domain]
        # The loser withdrew its promise from the domain it had chosen: only the winner's domain lists it.
        promised = [o["spec"]["domain"] for o in fake.items(DR) if o["metadata"]["name"].startswith("d-")
                    and any(p["groupId"] == group for p in o["spec"]["promises"])]
        assert promised == [a.domain]
    # 5 winning reservations and at least one ledger, and both replicas did try, at least in some rounds.
    assert fake.requests("create", DR) >= 7


def test_all_answers_from_the_cache(fake: KubeFake, backend: KubeBackend) -> None:
    backend.reservations.reserve(proposal())
    reads = fake.requests("list", DR) + fake.requests("fetch", DR)
    for _ in range(50):
        assert "ann:ml/job-1" in backend.reservations.all()
    assert fake.requests("list", DR) + fake.requests("fetch", DR) == reads


def test_placed_survives_a_stale_resource_version(fake: KubeFake, backend: KubeBackend) -> None:
    stored = backend.reservations.reserve(proposal())
    name = reservation_name(stored.group_id)
    # Another writer changes the object; this replica's watch never hears of it (its cache is stale).
    fake.patch(DR, None, name, {"metadata": {"annotations": {"note": "kept"}}}, emit=False)

    backend.reservations.placed(stored.group_id, 1_700_000_200.0)

    obj = fake.get(DR, None, name)
    assert obj is not None
    assert obj["spec"]["placedAt"] == "2023-11-14T22:16:40.000000Z"
    assert obj["metadata"]["annotations"] == {"note": "kept"}  # re-read, not overwritten
    assert backend.reservations.all()[stored.group_id].placed_at == 1_700_000_200.0
    assert fake.requests("fetch", DR) == 1  # one re-read after the conflict


def test_placed_gives_up_with_store_conflict_when_conflicts_persist(fake: KubeFake, backend: KubeBackend) -> None:
    stored = backend.reservations.reserve(proposal())
    fake.fail("put", DR, 409, "Conflict", "the object has been modified; please apply your changes to the "
                                          "latest version and try again")

    with pytest.raises(StoreConflict, match="kept changing"):
        backend.reservations.placed(stored.group_id, 1_700_000_200.0)


def test_placed_on_a_released_reservation_is_a_store_conflict(fake: KubeFake, backend: KubeBackend) -> None:
    stored = backend.reservations.reserve(proposal())
    fake.delete(DR, None, reservation_name(stored.group_id), emit=False)

    with pytest.raises(StoreConflict, match="is gone"):
        backend.reservations.placed(stored.group_id, 1_700_000_200.0)
    assert stored.group_id not in backend.reservations.all()


def test_release_deletes_and_already_gone_is_done(fake: KubeFake, backend: KubeBackend) -> None:
    stored = backend.reservations.reserve(proposal())
    backend.reservations.release(stored.group_id)
    assert fake.items(DR) == [] and backend.reservations.all() == {}  # the ledger went with its last promise

    backend.reservations.release(stored.group_id)  # nothing left: not an error


def test_release_refuses_a_reservation_another_replica_changed(fake: KubeFake, backend: KubeBackend) -> None:
    stored = backend.reservations.reserve(proposal())
    fake.patch(DR, None, reservation_name(stored.group_id), {"spec": {"placedAt": "2030-01-01T00:00:00Z"}}, emit=False)

    with pytest.raises(StoreConflict, match="Precondition failed"):
        backend.reservations.release(stored.group_id)
    assert len(reservations(fake)) == 1


def test_without_the_crd_the_backend_is_ready_and_reserve_says_how_to_install_it(
        fake: KubeFake, connect_backend: Connect) -> None:
    fake.uninstall(DR)
    backend = connect_backend()  # waits for ready()

    with pytest.raises(DecisionError) as raised:
        backend.reservations.reserve(proposal())
    assert str(raised.value) == CRD_MISSING
