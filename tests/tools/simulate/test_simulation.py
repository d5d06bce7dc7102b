"""``imex-webhook simulate`` on a small cluster: outputs exist, counts add up, runs repeat exactly.

Nothing here asserts a timing; the decision-time and wall-clock fields are the only ones allowed to
differ between two runs with the same seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from webhook.engine.engine import Engine
from webhook.tools import cli
from webhook.tools.simulate import policies, simulation, workload
from webhook.tools.simulate.cluster import SimCluster
from webhook.tools.simulate.report import TIMING_KEYS

SMALL = workload.Params(seed=11, cliques=4, jobs=70, fabric_zones=1, fabric_share=0.08, load=0.9)


def _run(out: Path, plots: bool = False) -> dict[str, Any]:
    simulation.run(SMALL, workload.POLICIES, out, plots=plots, progress=False)
    loaded: dict[str, Any] = json.loads((out / "metrics.json").read_text())
    return loaded


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("sim")
    return out, _run(out, plots=True)


def test_writes_report_metrics_and_plots(result: tuple[Path, dict[str, Any]]) -> None:
    out, metrics = result
    for name in ("report.md", "metrics.json", "utilisation.png", "delay.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "utilisation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    for policy in workload.POLICIES:
        assert f"| {policy} |" in report
    assert metrics["plots"] == ["utilisation.png", "delay.png"]


def test_every_policy_reported_and_counts_add_up(result: tuple[Path, dict[str, Any]]) -> None:
    _, metrics = result
    assert set(metrics["policies"]) == set(workload.POLICIES)
    for name, m in metrics["policies"].items():
        assert m["submitted"] == SMALL.jobs
        assert m["completed"] + m["stuck"] + m["pending"] == m["submitted"], name
        assert m["running"] == 0, name  # the simulation drains: every started job ends
        assert 0 <= m["split"] <= m["completed"], name
        assert m["queue_delay_minutes"]["started"] == m["completed"], name
        for kind, k in m["by_kind"].items():
            assert k["completed"] + k["stuck"] + k["pending"] == k["submitted"], (name, kind)
        assert sum(k["submitted"] for k in m["by_kind"].values()) == SMALL.jobs
        assert 0.0 <= m["utilisation_useful"] <= m["utilisation_held"] + 1e-9 <= 1.0 + 1e-9, name
        assert m["pod_attempts"] >= m["completed"], name  # at least one attempt per pod of a started job
        sizes = m["delay_by_size"]
        assert set(sizes) == {label for label, *_ in workload.SIZE_CLASSES}
        assert sum(c["submitted"] for c in sizes.values()) == SMALL.jobs, name
        assert sum(c["started"] for c in sizes.values()) == m["queue_delay_minutes"]["started"], name
        for label, c in sizes.items():
            if c["started"]:
                assert 0.0 <= c["wait_p50_minutes"] <= c["wait_p90_minutes"], (name, label)
            else:
                assert c["wait_p50_minutes"] is None and c["wait_p90_minutes"] is None, (name, label)


def test_imex_webhook_never_splits_nor_strands_a_job(result: tuple[Path, dict[str, Any]]) -> None:
    _, metrics = result
    imex = metrics["policies"]["imex-webhook"]
    assert imex["split"] == 0
    assert imex["stuck"] == 0
    assert imex["pending"] == 0
    assert imex["stuck_gpu_hours_held"] == 0
    assert imex["fabric_attaches"] > 0  # fabric jobs run only because the bind attaches GPUs
    for other in ("default", "affinity-only"):
        assert metrics["policies"][other]["fabric_attaches"] == 0
        assert metrics["policies"][other]["by_kind"]["fabric"]["completed"] == 0


def test_gang_tas_never_splits_nor_strands_a_job_but_cannot_attach(result: tuple[Path, dict[str, Any]]) -> None:
    _, metrics = result
    gang = metrics["policies"]["gang-tas"]
    assert gang["split"] == 0 and gang["stuck"] == 0 and gang["stuck_gpu_hours_held"] == 0
    assert gang["fabric_attaches"] == 0
    assert gang["by_kind"]["fabric"]["completed"] == 0
    assert gang["by_kind"]["nvlink"]["completed"] == gang["by_kind"]["nvlink"]["submitted"]


def test_size_classes_cover_every_job_size_the_generator_makes() -> None:
    sizes = {s for s, _ in workload.SIZE_WEIGHTS} | set(range(1, 5))
    assert [workload.size_class(n) for n in (1, 2, 4, 5, 8, 9, 16, 17, 18)] == [
        "1", "2-4", "2-4", "5-8", "5-8", "9-16", "9-16", "17+", "17+"]
    assert {workload.size_class(n) for n in sizes} == {label for label, *_ in workload.SIZE_CLASSES}


def test_report_shows_queueing_delay_per_job_size(result: tuple[Path, dict[str, Any]]) -> None:
    out, metrics = result
    report = (out / "report.md").read_text()
    assert "| policy | 1 pods | 2-4 pods | 5-8 pods | 9-16 pods | 17+ pods |" in report
    imex = metrics["policies"]["imex-webhook"]["delay_by_size"]["1"]
    assert f"({imex['started']}/{imex['submitted']})" in report


def test_baselines_show_the_problem(result: tuple[Path, dict[str, Any]]) -> None:
    _, metrics = result
    assert metrics["policies"]["default"]["split"] > 0
    assert metrics["policies"]["affinity-only"]["split"] == 0  # co-located, but without a reservation...
    assert metrics["policies"]["affinity-only"]["stuck"] > 0  # ...groups start where they cannot finish


def _without_timings(metrics: dict[str, Any]) -> dict[str, Any]:
    for row in metrics["policies"].values():
        for key in TIMING_KEYS:
            row.pop(key)
    return metrics


def test_same_seed_same_metrics(result: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    _, first = result
    again = _run(tmp_path)
    again["plots"] = first["plots"]
    assert _without_timings(again) == _without_timings(json.loads(json.dumps(first)))


def test_another_seed_another_stream() -> None:
    a = workload.generate(SMALL)
    b = workload.generate(workload.Params(**{**SMALL.__dict__, "seed": SMALL.seed + 1}))
    assert a == workload.generate(SMALL)
    assert a != b


def test_the_imex_policy_drives_the_service_engine() -> None:
    cluster = SimCluster.build(SMALL)
    placer = policies.make("imex-webhook", cluster, 1)
    assert isinstance(placer, policies.ImexPolicy)
    assert isinstance(placer.engine, Engine)
    job = workload.Job(0, "job-00000", "nvlink", 3, 4, 0.0, 60.0)
    placer.submit(job, 0.0)
    nodes = [placer.place(job, i, 0.0) for i in range(job.pods)]
    assert None not in nodes
    assert len({cluster.domains[n] for n in nodes if n is not None}) == 1
    assert len(placer.engine.reservations.all()) == 1  # the bind stored the group's reservation
    placer.release(job, 10.0)
    assert cluster.held_gpus() == 0


def test_cli_runs_and_rejects_unknown_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["simulate", "--out", str(tmp_path), "--cliques", "2", "--jobs", "15", "--fabric-zones", "1",
                              "--policies", "imex-webhook,default", "--no-plots"])
    assert code == 0
    assert set(json.loads((tmp_path / "metrics.json").read_text())["policies"]) == {"imex-webhook", "default"}
    printed = capsys.readouterr().out
    assert "| imex-webhook |" in printed and "| 17+ pods |" in printed  # both tables are printed
    assert cli.main(["simulate", "--out", str(tmp_path), "--policies", "magic"]) == 2
    assert "unknown policy" in capsys.readouterr().err


@pytest.mark.parametrize(("policy", "expected"), [("imex-webhook", "default-scheduler"),
                                                  ("imex-webhook-pack", "imex-scheduler")])
def test_plain_gpu_pods_reach_the_extender_only_under_the_packing_setting(policy: str, expected: str) -> None:
    """``imex-webhook-pack`` is ``serve --pack-plain-gpu-pods``: admission sends plain GPU pods to the dedicated
    profile, and the extender puts one beside the group already running, not in the empty cliques."""
    cluster = SimCluster.build(workload.Params(cliques=3, clique_nodes=4, fabric_zones=0))
    placer = policies.make(policy, cluster, 1)
    assert isinstance(placer, policies.ImexPolicy)
    group = workload.Job(0, "job-00000", "nvlink", 2, 4, 0.0, 600.0)
    plain = workload.Job(1, "job-00001", "plain", 1, 1, 0.0, 600.0)
    placer.submit(group, 0.0)
    placed = [placer.place(group, i, 0.0) for i in range(group.pods)]
    placer.submit(plain, 1.0)
    assert placer.pods[(plain.index, 0)][0]["spec"].get("schedulerName", "default-scheduler") == expected
    where = placer.place(plain, 0, 1.0)
    assert where is not None and None not in placed
    used = {cluster.domains[n] for n in placed if n is not None}
    if policy == "imex-webhook-pack":
        assert cluster.domains[where] in used  # best fit beside the group; the other cliques stay whole
        assert cluster.free_local(where) == cluster.base_gpus[where] - 1
