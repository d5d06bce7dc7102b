"""The gang-tas policy (Kueue Topology-Aware Scheduling, required topology on the domain), case by case.

Each case: a small cluster (two cliques of four trays x 4 GPUs, one fabric zone of two composable nodes
with 1 local GPU), GPUs already busy per node, one job; expected: the nodes its pods get, or ``None``
(the whole job waits, nothing bound).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from webhook.tools.simulate import policies, workload
from webhook.tools.simulate.cluster import SimCluster

PARAMS = workload.Params(cliques=2, clique_nodes=4, gpus_per_node=4, fabric_zones=1, fabric_nodes=2,
                         fabric_local_gpus=1, fabric_slots=4, fabric_pool=8)
A = [f"nvl-000-{i:02d}" for i in range(4)]  # clique 0
B = [f"nvl-001-{i:02d}" for i in range(4)]  # clique 1
F = ["fab-0-00", "fab-0-01"]  # fabric zone pcie-pool-0


@dataclass(frozen=True)
class Case:
    kind: str
    pods: int
    gpus: int
    expect: list[str] | None
    busy: dict[str, int] = field(default_factory=dict)  # node -> GPUs taken by a plain pod
    channels: tuple[str, ...] = ()  # nodes whose IMEX channel another ComputeDomain holds


CASES = {
    "an empty cluster: the first clique by name, trays in name order": Case("nvlink", 3, 4, A[:3]),
    "best fit: the clique with the least room left over once the job is in": Case(
        "nvlink", 2, 4, B[2:], busy={B[0]: 4, B[1]: 4}),
    "room in no single clique: the whole job waits, nothing is bound": Case(
        "nvlink", 4, 4, None, busy={A[0]: 4, B[0]: 4}),
    "room in two cliques together is not enough": Case(
        "nvlink", 5, 4, None),
    "a ComputeDomain takes one pod per tray, even when a tray has room for two": Case(
        "nvlink", 3, 2, None, busy={A[0]: 4, A[1]: 4, B[0]: 4, B[1]: 4}),
    "a tray whose channel another ComputeDomain holds does not count": Case(
        "nvlink", 4, 2, B, busy={A[0]: 2}, channels=(A[0],)),
    "inside the domain: the fullest trays that still fit first": Case(
        "nvlink", 2, 2, [A[2], A[0]], busy={A[0]: 1, A[2]: 2, A[3]: 4, B[0]: 4, B[1]: 4, B[2]: 4, B[3]: 4}),
    "a ComputeDomain never goes to a fabric zone (no NVLink there)": Case(
        "nvlink", 1, 1, None, busy={n: 4 for n in A + B}),
    "a plain pod may take a composable node's local GPU, the best fit": Case("plain", 1, 1, [F[0]]),
    "a plain pod that fits no local GPU waits (nothing attaches fabric GPUs)": Case(
        "plain", 1, 2, None, busy={n: 3 for n in A + B}),
    "fabric groups need fabric GPUs attached, so they wait": Case("fabric", 2, 5, None),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_gang_tas_admits_whole_jobs_into_one_domain(case: Case) -> None:
    cluster = SimCluster.build(PARAMS)
    index = cluster.index
    for i, (node, gpus) in enumerate(case.busy.items()):
        cluster.bind((900, i), index[node], gpus, None)
    for i, node in enumerate(case.channels):
        cluster.channel[index[node]] = f"other-{i}"
    placer = policies.make("gang-tas", cluster, 1)
    job = workload.Job(0, "job-00000", case.kind, case.pods, case.gpus, 0.0, 60.0)
    placer.submit(job, 0.0)
    placed = [placer.place(job, i, 0.0) for i in range(job.pods)] if case.expect else [placer.place(job, 0, 0.0)]
    if case.expect is None:
        assert placed == [None]
        assert not cluster.domains_of(job)  # no partial placement
        return
    assert [cluster.names[n] for n in placed if n is not None] == case.expect
    assert len(cluster.domains_of(job)) == 1
    placer.release(job, 10.0)
    assert not cluster.domains_of(job)


def test_a_waiting_job_starts_once_a_domain_has_room_for_all_of_it() -> None:
    cluster = SimCluster.build(PARAMS)
    placer = policies.make("gang-tas", cluster, 1)
    blocker = workload.Job(1, "job-00001", "nvlink", 1, 4, 0.0, 60.0)
    cluster.bind((900, 0), cluster.index[A[0]], 4, None)
    cluster.bind((blocker.index, 0), cluster.index[B[0]], 4, blocker.name)
    big = workload.Job(0, "job-00000", "nvlink", 4, 4, 0.0, 60.0)
    placer.submit(big, 0.0)
    assert placer.place(big, 0, 0.0) is None  # three free trays in each clique
    placer.release(blocker, 5.0)
    nodes = [placer.place(big, i, 5.0) for i in range(big.pods)]
    assert [cluster.names[n] for n in nodes if n is not None] == B
