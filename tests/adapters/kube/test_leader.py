"""The reconciler's Lease (``webhook.adapters.kube.leader``) against the fake API server, on a test clock:
one replica leads at a time and another takes over when it stops renewing; a fresh renewal answers without
an API call; a leader cut off from the API server keeps leading until its term ends, then stops."""

from __future__ import annotations

from tests.kubefake import KubeFake
from webhook.adapters.kube import backend as kube
from webhook.adapters.kube.leader import LeaseLeader

LEASE = "imex-webhook-reconciler"


def _replicas(api: kube.Api, clock: list[float], *names: str) -> list[LeaseLeader]:
    return [LeaseLeader(api, "imex-system", LEASE, name, duration=30, clock=lambda: clock[0]) for name in names]


def test_one_replica_leads_and_another_takes_over_when_it_stops_renewing(api: kube.Api) -> None:
    clock = [1000.0]
    a = LeaseLeader(api, "imex-system", "imex-webhook-reconciler", "a", duration=30, clock=lambda: clock[0])
    b = LeaseLeader(api, "imex-system", "imex-webhook-reconciler", "b", duration=30, clock=lambda: clock[0])
    assert a.is_leader() and not b.is_leader()
    clock[0] += 25
    assert a.is_leader() and not b.is_leader()  # a renewed
    clock[0] += 31  # a stopped renewing; its lease ran out
    assert b.is_leader()
    assert not a.is_leader()


def test_a_fresh_renewal_answers_without_an_api_call(api: kube.Api, fake: KubeFake) -> None:
    clock = [1000.0]
    (a,) = _replicas(api, clock, "a")
    assert a.is_leader()
    calls = fake.requests("fetch", "leases") + fake.requests("update", "leases")
    for _ in range(100):
        clock[0] += 0.09  # nine seconds in all: younger than a third of the lease
        assert a.is_leader()
    assert fake.requests("fetch", "leases") + fake.requests("update", "leases") == calls
    lease = fake.get("leases", "imex-system", LEASE)
    assert lease is not None and lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["renewTime"] == "1970-01-01T00:16:40.000000Z"  # a MicroTime


def test_a_leader_cut_off_from_the_api_server_leads_until_its_term_ends_then_stops(
        api: kube.Api, fake: KubeFake) -> None:
    clock = [1000.0]
    a, b = _replicas(api, clock, "a", "b")
    assert a.is_leader()
    fake.fail("get", "leases", 503, "ServiceUnavailable", "etcd is down")
    clock[0] += 15  # renewal due, and it fails: the term already won still holds
    assert a.is_leader() and not b.is_leader()
    clock[0] += 16  # past the term: nobody can tell who leads, so nobody does
    assert not a.is_leader() and not b.is_leader()
