"""Faults in ``imex-webhook simulate``: node failures and fabric degradations, seeded; what each policy sees
of them, and the restarts they cost.

The placement cases run on two cliques of four trays x 4 GPUs and no fabric zone (the service may also place
a small ComputeDomain in a healthy fabric zone): only the service reads the fabric-health label, every
policy leaves a failed node alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from webhook.domain import keys
from webhook.domain.reading import parsing
from webhook.tools.simulate import faults, policies, simulation, workload
from webhook.tools.simulate.cluster import SimCluster
from webhook.tools.simulate.faults import Fault
from webhook.tools.simulate.report import TIMING_KEYS

PARAMS = workload.Params(cliques=2, clique_nodes=4, fabric_zones=0)
A = [f"nvl-000-{i:02d}" for i in range(4)]
B = [f"nvl-001-{i:02d}" for i in range(4)]
# Enough faults on a small run that every policy restarts jobs.
FAULTY = workload.Params(seed=5, cliques=4, jobs=60, fabric_zones=1, fabric_share=0.08, load=0.9,
                         node_failures=0.3, repair_hours=1.0, fabric_degradations=0.5, degraded_hours=1.0,
                         degraded_loss=0.5)


def _job(index: int, pods: int, runtime: float = 3600.0, arrival: float = 0.0) -> workload.Job:
    return workload.Job(index, f"job-{index:05d}", "nvlink", pods, 4, arrival, runtime)


def _change(cluster: SimCluster, placer: policies.Placer, names: Sequence[str], field: str) -> None:
    index = cluster.index
    for name in names:
        getattr(cluster, field)[index[name]] += 1
    placer.nodes_changed([index[n] for n in names], 0.0)


def _placed(policy: str, degraded: Sequence[str] = ()) -> tuple[list[str], list[str] | None]:
    """A 2-tray ComputeDomain job placed after one that took two trays of clique A (so the best fit is the
    rest of A), with the ``degraded`` trays (A: the first one the first job left free; B: B[0]). Returns
    A's free trays before it and where the job went (None: it waits)."""
    cluster = SimCluster.build(PARAMS)
    placer = policies.make(policy, cluster, 1)
    first, job = _job(0, 2), _job(1, 2)
    placer.submit(first, 0.0)
    taken = {cluster.names[n] for n in (placer.place(first, i, 0.0) for i in range(2)) if n is not None}
    free = [n for n in A if n not in taken]
    assert len(free) == 2
    _change(cluster, placer, [free[0] if d == "A" else B[0] for d in degraded], "degraded")
    placer.submit(job, 0.0)
    nodes = [placer.place(job, i, 0.0) for i in range(job.pods)]
    if nodes[0] is None:
        return free, None
    assert None not in nodes
    return free, sorted(cluster.names[n] for n in nodes if n is not None)


def test_the_best_fit_with_a_degraded_fabric_is_avoided_by_the_service_and_not_by_the_peers() -> None:
    for policy in ("gang-tas", "imex-webhook"):  # healthy: both take the best fit
        free, placed = _placed(policy)
        assert placed == free, policy
    free, placed = _placed("gang-tas", degraded=["A"])
    assert placed == free  # the peer does not see the label
    free, placed = _placed("imex-webhook-allow", degraded=["A"])
    assert placed == free
    for policy in ("imex-webhook", "imex-webhook-refuse"):
        _, placed = _placed(policy, degraded=["A"])
        assert placed is not None and set(placed) <= set(B), policy


def test_with_every_domain_degraded_avoid_still_places_and_refuse_waits() -> None:
    free, placed = _placed("imex-webhook", degraded=["A", "B"])
    assert placed == free
    assert _placed("imex-webhook-refuse", degraded=["A", "B"])[1] is None


@pytest.mark.parametrize("policy", workload.POLICIES)
def test_no_policy_places_on_a_failed_node(policy: str) -> None:
    cluster = SimCluster.build(PARAMS)
    placer = policies.make(policy, cluster, 1)
    _change(cluster, placer, [*A, *B[:3]], "down")
    job = _job(0, 1)
    placer.submit(job, 0.0)
    node = placer.place(job, 0, 0.0)
    assert node is not None and cluster.names[node] == B[3]  # the only node in service


def test_a_failed_node_is_not_ready_and_tainted_as_the_api_server_shows_it() -> None:
    cluster = SimCluster.build(workload.Params(cliques=1, clique_nodes=4, fabric_zones=1, fabric_nodes=2))
    node = cluster.index[A[1]]
    cluster.down[node] += 1
    cluster.degraded[cluster.index[A[0]]] += 1
    parsed = {n: parsing.node(cluster.node_object(cluster.index[n]), (keys.CLIQUE_LABEL,)) for n in (A[0], A[1], A[2])}
    assert parsed[A[1]].not_ready and parsed[A[1]].taints == (
        "node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute")
    assert parsed[A[0]].fabric_health == "degraded" and not parsed[A[0]].not_ready
    assert parsed[A[2]].fabric_health == "healthy" and not parsed[A[2]].taints
    assert cluster.node_object(cluster.index["fab-0-00"])["metadata"]["labels"][keys.HEALTH_LABEL] == "none"


def _one_job(policy: str, params: workload.Params, fault_list: list[Fault]) -> Any:
    sim = simulation.Simulation(params, [_job(0, 2)], policy, fault_list)
    return sim.run(progress=False).states[0]


@pytest.mark.parametrize("policy", ["imex-webhook", "gang-tas", "default"])
def test_a_running_job_whose_node_fails_restarts_once_the_node_is_back(policy: str) -> None:
    params = workload.Params(cliques=1, clique_nodes=2, fabric_zones=0)  # the job needs both trays
    st = _one_job(policy, params, [Fault(faults.FAIL, 0, 600.0, 1800.0)])
    assert (st.restarts_node, st.lost_fabric, st.outcome) == (1, 0, "completed")
    assert st.lost_gpu_seconds == 600.0 * 8  # the run so far is lost
    assert st.waited == 1200.0  # queued again from the failure until the repair
    assert (st.started, st.ended) == (1800.0, 1800.0 + 3600.0)


def test_a_job_lost_to_a_degraded_fabric_restarts_elsewhere_only_under_the_service() -> None:
    params = workload.Params(cliques=2, clique_nodes=2, fabric_zones=0, degraded_loss=1.0)
    degraded = [Fault(faults.DEGRADE, 0, 600.0, 1800.0)]  # a tray of clique 0, where the job runs
    avoid = _one_job("imex-webhook", params, degraded)
    assert (avoid.lost_fabric, avoid.restarts_node, avoid.outcome) == (1, 0, "completed")
    assert 600.0 < avoid.started < 1800.0 and avoid.waited == 0.0  # restarted at once in clique 1
    peer = _one_job("gang-tas", params, degraded)
    assert peer.lost_fabric >= 2  # restarted into the same degraded clique, and lost again
    assert peer.outcome == "completed" and peer.started <= 1800.0


def test_with_refuse_a_lost_job_waits_for_its_only_domain_to_recover() -> None:
    params = workload.Params(cliques=1, clique_nodes=2, fabric_zones=0, degraded_loss=1.0)
    degraded = [Fault(faults.DEGRADE, 1, 600.0, 1800.0)]
    refuse = _one_job("imex-webhook-refuse", params, degraded)
    assert (refuse.lost_fabric, refuse.started, refuse.outcome) == (1, 1800.0, "completed")
    avoid = _one_job("imex-webhook", params, degraded)  # the degraded clique is the only one: taken again
    assert avoid.lost_fabric >= 2 and avoid.outcome == "completed"


def test_faults_repeat_for_a_seed_over_the_arrival_window() -> None:
    cluster = SimCluster.build(FAULTY)
    nvlink = [zone is None for zone in cluster.zones]
    every = faults.generate(FAULTY, 36000.0, nvlink)
    assert every == faults.generate(FAULTY, 36000.0, nvlink)
    assert every != faults.generate(workload.Params(**{**FAULTY.__dict__, "seed": 6}), 36000.0, nvlink)
    assert {f.kind for f in every} == {faults.FAIL, faults.DEGRADE}
    assert all(0 <= f.start < 36000.0 and f.end > f.start for f in every)
    assert all(nvlink[f.node] for f in every if f.kind == faults.DEGRADE)  # only NVLink trays degrade
    assert {cluster.zones[f.node] for f in every if f.kind == faults.FAIL} >= {None, "pcie-pool-0"}
    no_degradations = workload.Params(**{**FAULTY.__dict__, "fabric_degradations": 0.0})
    assert faults.generate(no_degradations, 36000.0, nvlink) == [f for f in every if f.kind == faults.FAIL]


def _run(out: Path) -> dict[str, Any]:
    simulation.run(FAULTY, workload.POLICIES, out, plots=False, progress=False)
    loaded: dict[str, Any] = json.loads((out / "metrics.json").read_text())
    for row in loaded["policies"].values():
        for key in TIMING_KEYS:
            row.pop(key)
    return loaded


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory.mktemp("faulty"))


def test_same_seed_same_faults_same_report(faulty: dict[str, Any], tmp_path: Path) -> None:
    assert faulty["faults"]["node_failures"] > 0 and faulty["faults"]["fabric_degradations"] > 0
    assert _run(tmp_path) == faulty


def test_restarts_add_up_per_policy_and_size_class(faulty: dict[str, Any]) -> None:
    for name, m in faulty["policies"].items():
        assert m["restarts"] == m["restarts_node_failure"] + m["lost_to_degraded_fabric"], name
        assert m["completed"] + m["stuck"] + m["pending"] == m["submitted"] and m["running"] == 0, name
        sizes = m["delay_by_size"].values()
        for key in ("restarts", "lost_to_degraded_fabric", "completed"):
            assert sum(c[key] for c in sizes) == m[key], (name, key)
        assert sum(c["utilisation_useful"] for c in sizes) == pytest.approx(m["utilisation_useful"]), name
        assert (m["restarts"] > 0) == (m["restart_gpu_hours_lost"] > 0), name
    assert all(m["restarts"] > 0 for m in faulty["policies"].values())
    assert faulty["policies"]["imex-webhook"]["by_kind"]["plain"]["submitted"] > 0


def test_without_degradations_the_service_decides_alike_under_every_health_policy(tmp_path: Path) -> None:
    params = workload.Params(**{**FAULTY.__dict__, "fabric_degradations": 0.0})
    simulation.run(params, ("imex-webhook", "imex-webhook-refuse", "imex-webhook-allow"), tmp_path,
                   plots=False, progress=False)
    rows = json.loads((tmp_path / "metrics.json").read_text())["policies"]
    for row in rows.values():
        for key in (*TIMING_KEYS, "policy"):
            row.pop(key)
    assert rows["imex-webhook"] == rows["imex-webhook-refuse"] == rows["imex-webhook-allow"]
    assert rows["imex-webhook"]["restarts_node_failure"] > 0
