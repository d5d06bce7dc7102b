"""Concurrent first pods on the embedded 5,004-node cluster (278 cliques of 18 nodes x 4 GPUs).

Covered: 8 and 16 first-pod filters of different annotated groups, released at the same instant from
threads, each store their group's reservation at filter time and never promise any clique more GPUs than
it has (17-pod groups: one per clique; 9-pod groups: two per clique, never three), and every group that
got a domain then places all its members there; a later pod's filter neither waits for the
choose-and-record lock nor changes the store; a reservation expired but not yet housekept is replaced
by the next first filter. Replicas and API-server faults: ``tests/adapters/kube/test_reservation_races.py``.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from tests import builders
from tests.concurrency import or_error, run_together
from webhook.adapters.embedded import EmbeddedBackend
from webhook.domain.decisions.filtering import FilterOutcome
from webhook.domain.policy import Policy
from webhook.state.cluster import ClusterStore
from webhook.tools.simulate.cluster import SimCluster, job_objects
from webhook.tools.simulate.workload import Job, Params

GPUS = 4
PARAMS = Params(cliques=278, fabric_zones=0)  # 5,004 nodes of 4 GPUs, no composable pools


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """The embedded cluster with ``groups`` annotated groups of ``size`` pods x 4 GPUs, none placed."""

    def __init__(self, groups: int, size: int) -> None:
        sim = SimCluster.build(PARAMS)
        self.names = list(sim.names)
        self.jobs = [Job(i, f"g{i:02d}", "fabric", size, GPUS, 0.0, 0.0) for i in range(groups)]
        objects = [sim.node_object(n) for n in range(len(sim.names))]
        for job in self.jobs:
            objects += job_objects(job)  # "fabric" jobs carry the group and group-size annotations
        store = ClusterStore(Policy())
        backend = EmbeddedBackend(store, objects, "5,004-node test cluster")
        backend.start()
        self.clock = Clock()
        self.engine = builders.engine(backend, holder="test", clock=self.clock)
        self.capacity = {domain: len(nodes) * GPUS for domain, nodes in store.snapshot().domains.items()}

    def filter(self, job: Job, i: int) -> FilterOutcome:
        pod = self.engine.store.pod(job.name, f"{job.name}-{i}")
        assert pod is not None
        return self.engine.filter(pod, self.names)

    def first_pods_at_once(self) -> list[FilterOutcome | Exception]:
        return run_together(len(self.jobs), or_error(lambda k: self.filter(self.jobs[k], 0)), timeout=60)

    def promised(self) -> dict[str, int]:
        """GPUs promised per domain: every stored reservation's whole group."""
        out: dict[str, int] = defaultdict(int)
        for res in self.engine.reservations.all().values():
            out[res.domain] += res.size * res.gpus_per_pod
        return out

    def place_all(self, job: Job) -> set[str | None]:
        """Filter and bind every member in turn; the domains they landed in."""
        snapshot = self.engine.snapshot()
        domains = set()
        for i in range(job.pods):
            passed = self.filter(job, i).passed
            assert passed, f"{job.name}-{i} found no node"
            self.engine.bind(job.name, f"{job.name}-{i}", "", passed[0])
            domains.add(snapshot.nodes[passed[0]].domain)
        return domains


@pytest.mark.parametrize(("groups", "size", "per_domain"), [(8, 17, 1), (16, 17, 1), (16, 9, 2)])
def test_concurrent_first_pods_never_over_commit_a_domain_and_every_group_fits(
        groups: int, size: int, per_domain: int) -> None:
    cluster = Cluster(groups, size)

    results = cluster.first_pods_at_once()

    stored = cluster.engine.reservations.all()
    snapshot = cluster.engine.snapshot()
    for job, result in zip(cluster.jobs, results, strict=True):
        assert isinstance(result, FilterOutcome), result
        assert result.passed, f"{job.name}: {result.context.reason if result.context else result}"
        (res,) = [r for r in stored.values() if r.namespace == job.name]  # stored by the filter itself
        assert {snapshot.nodes[n].domain for n in result.passed} == {res.domain}
        assert res.size == size and res.gpus_per_pod == GPUS
    promised = cluster.promised()
    assert all(gpus <= cluster.capacity[d] for d, gpus in promised.items()), promised
    holders: dict[str, int] = defaultdict(int)
    for res in stored.values():
        holders[res.domain] += 1
    assert max(holders.values()) == per_domain  # best fit packs, but never past the capacity

    for job in cluster.jobs:
        (domain,) = cluster.place_all(job)
        assert domain == next(r.domain for r in stored.values() if r.namespace == job.name)


def test_a_later_pod_neither_waits_for_the_choice_lock_nor_writes() -> None:
    cluster = Cluster(2, 17)
    job = cluster.jobs[0]
    assert cluster.filter(job, 0).passed
    before = dict(cluster.engine.reservations.all())
    done: list[FilterOutcome] = []

    with cluster.engine.choices.hold():  # a first pod of another group is choosing right now
        worker = threading.Thread(target=lambda: done.append(cluster.filter(job, 1)))
        worker.start()
        worker.join(10)
        assert done and done[0].passed, "the later pod's filter waited for the lock"
    assert cluster.engine.reservations.all() == before


def test_an_expired_reservation_is_replaced_by_the_next_first_filter() -> None:
    cluster = Cluster(1, 17)
    job = cluster.jobs[0]
    first = cluster.filter(job, 0)
    (old,) = cluster.engine.reservations.all().values()

    cluster.clock.now += Policy().reservation_ttl + 1  # no member placed in time; housekeeping not run yet
    again = cluster.filter(job, 0)

    (new,) = cluster.engine.reservations.all().values()
    assert again.passed and new.version != old.version and new.created_at == cluster.clock.now
    assert first.passed
