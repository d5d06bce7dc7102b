"""Jobs larger than one rack in ``imex-webhook simulate`` (docs/SIMULATE.md, "Jobs larger than one rack"): they
come on an arrival stream of their own, the service plans their segments from the annotation and completion
indexes it reads in a cluster, the gang-tas peer places them as podset slices, and no policy is credited
for a segment across cliques."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from webhook.domain import keys
from webhook.domain.reading import parsing
from webhook.tools import cli
from webhook.tools.simulate import racks, report, simulation, workload
from webhook.tools.simulate.cluster import SimCluster, job_objects
from webhook.tools.simulate.outcome import Outcome

# Six cliques of six trays: multi-rack jobs of 2-4 racks (10-24 pods) beside the usual mix, in seconds.
SMALL = workload.Params(seed=11, cliques=6, clique_nodes=6, jobs=60, fabric_zones=1, fabric_share=0.05,
                        load=0.6, multi_rack_load=0.3)


def _run(params: workload.Params, policy: str) -> Outcome:
    return simulation.Simulation(params, workload.generate(params), policy).run(progress=False)


def _segments_placed(outcome: Outcome) -> dict[tuple[int, float, int], set[str]]:
    """From the run's placement record: (job, end of the attempt, segment) -> the domains its pods were bound
    in. An attempt's pods are released together (the job ends, is torn down or restarts), so the release
    time tells a job's attempts apart."""
    domains = SimCluster.build(outcome.params).domains
    runs: dict[tuple[int, float, int], set[str]] = defaultdict(set)
    for p in outcome.placements:
        assert p.released is not None, f"job {p.job} pod {p.pod} still bound after the run drained"
        runs[(p.job, p.released, racks.segment_of(outcome.jobs[p.job], p.pod))].add(domains[p.node])
    return runs


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcome]:
    return {policy: _run(SMALL, policy) for policy in workload.DEFAULT_POLICIES}


def test_the_multi_rack_stream_leaves_the_rest_of_the_stream_unchanged() -> None:
    base = replace(SMALL, multi_rack_load=0.0)
    plain = workload.generate(base)
    for load in (0.3, 0.6, 1.0):
        jobs = workload.generate(replace(SMALL, multi_rack_load=load))
        assert jobs[:len(plain)] == plain, load  # the same jobs, indices and names, first
        extra = jobs[len(plain):]
        assert extra and all(j.segment_size == SMALL.clique_nodes and j.kind == "nvlink" for j in extra), load
        assert all(workload.window(plain)[0] <= j.arrival <= workload.window(plain)[1] for j in extra), load
        assert [j.index for j in jobs] == list(range(len(jobs)))
    assert not any(j.segment_size for j in plain)


def test_multi_rack_jobs_span_two_to_four_racks_less_a_spare_tray_or_two() -> None:
    jobs = [j for j in workload.generate(replace(SMALL, jobs=400)) if j.segment_size]
    n = SMALL.clique_nodes
    assert {math.ceil(j.pods / n) for j in jobs} == {2, 3, 4}
    assert {-j.pods % n for j in jobs} == {0, 1, 2}
    assert all(j.gpus == SMALL.gpus_per_node for j in jobs)
    few = [j for j in workload.generate(replace(SMALL, cliques=2, jobs=400)) if j.segment_size]
    assert few and max(math.ceil(j.pods / n) for j in few) == 2  # never more racks than the cluster has


def test_a_multi_rack_job_shows_the_service_what_a_cluster_would() -> None:
    job = workload.Job(0, "job-00000", "nvlink", 35, 4, 0.0, 60.0, segment_size=18)
    objects = job_objects(job)
    cd = parsing.compute_domain(next(o for o in objects if o["kind"] == "ComputeDomain"))
    assert cd.segment_size == "18" and cd.num_nodes == 35
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert [parsing.pod(p, "Pod").rank for p in pods] == [str(i) for i in range(35)]
    assert all(p["metadata"]["labels"][keys.COMPLETION_INDEX] == str(i) for i, p in enumerate(pods))
    single = job_objects(replace(job, pods=4, segment_size=None))
    assert not any(keys.SEGMENT_SIZE_ANNOTATION in (o["metadata"].get("annotations") or {}) for o in single)
    assert not any(keys.COMPLETION_INDEX in (o["metadata"].get("annotations") or {}) for o in single)


@pytest.mark.parametrize(("job", "domains", "split"), [
    ("whole segments in two cliques", ["a"] * 6 + ["b"] * 4, False),
    ("two segments in one clique", ["a"] * 10, False),
    ("a segment across two cliques", ["a"] * 5 + ["b"] * 5, True),
    ("the last segment across two cliques", ["a"] * 6 + ["b", "b", "c", "b"], True),
    ("pods not placed yet are not counted", ["a"] * 6 + [None] * 4, False),
])
def test_a_multi_rack_job_is_split_only_when_a_segment_spans_cliques(
        job: str, domains: list[str | None], split: bool) -> None:
    assert racks.split(workload.Job(0, "j", "nvlink", 10, 4, 0.0, 60.0, segment_size=6), domains) is split, job
    unsegmented = workload.Job(0, "j", "nvlink", 10, 4, 0.0, 60.0)
    assert racks.split(unsegmented, domains) is (len({d for d in domains if d}) > 1), job


@pytest.mark.parametrize(("case", "rooms", "sizes", "expect"), [
    ("all in one domain: the best fit", {"a": 10, "b": 6, "c": 8}, [3, 3], {0: "b", 1: "b"}),
    ("fewest domains: the one taking most slices first", {"a": 6, "b": 12, "c": 6}, [6, 6, 4],
     {0: "b", 1: "b", 2: "a"}),
    ("a slice never straddles domains", {"a": 5, "b": 5, "c": 5}, [6, 4], None),
    ("all or nothing", {"a": 6, "b": 3}, [6, 6], None),
    ("the smaller last slice fits a smaller room", {"a": 6, "b": 6, "c": 4}, [6, 6, 4],
     {0: "a", 1: "b", 2: "c"}),
])
def test_gang_tas_packs_podset_slices_each_in_one_domain(case: str, rooms: dict[str, int], sizes: list[int],
                                                        expect: dict[int, str] | None) -> None:
    assert racks.pack_slices(rooms, sizes) == expect, case


def test_imex_webhook_places_every_segment_whole_and_splits_nothing(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["imex-webhook"]
    assert any(j.segment_size for j in outcome.jobs)
    spans = _segments_placed(outcome)
    assert all(len(d) == 1 for d in spans.values()), {k: d for k, d in spans.items() if len(d) > 1}
    runs: dict[tuple[int, float], set[str]] = defaultdict(set)  # a multi-rack job's attempt -> its cliques
    for (job, end, _), d in spans.items():
        if outcome.jobs[job].segment_size:
            runs[(job, end)] |= d
    assert runs, "no multi-rack job was ever placed"
    assert all(len(d) > 1 for d in runs.values())  # whole segments, yet every such job spans cliques
    m = report.metrics(outcome)
    assert (m["split"], m["stuck"]) == (0, 0)
    rack = m["delay_by_size"][workload.RACK_CLASS]
    assert rack["completed"] == rack["submitted"] > 0 and rack["split"] == 0


def test_gang_tas_places_every_slice_whole_and_never_strands_a_job(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["gang-tas"]
    spans = _segments_placed(outcome)
    assert any(outcome.jobs[job].segment_size for job, _, _ in spans)
    assert all(len(d) == 1 for d in spans.values())
    m = report.metrics(outcome)
    assert (m["split"], m["stuck"]) == (0, 0)
    assert m["delay_by_size"][workload.RACK_CLASS]["completed"] > 0


def test_affinity_only_cannot_place_a_job_larger_than_a_clique(outcomes: dict[str, Outcome]) -> None:
    rack = report.metrics(outcomes["affinity-only"])["delay_by_size"][workload.RACK_CLASS]
    assert rack["completed"] == 0 and rack["stuck"] + rack["pending"] == rack["submitted"] > 0


def test_the_report_gives_the_multi_rack_class_and_its_table_only_when_there_are_such_jobs(
        outcomes: dict[str, Outcome], tmp_path: Path) -> None:
    params = SMALL
    result = report.write(tmp_path, params, outcomes["imex-webhook"].jobs, list(outcomes.values()), plots=False)
    printed = report.tables(result)
    assert "| 2-4 racks |" in printed and racks.CLASS_NOTE in printed
    without = replace(SMALL, multi_rack_load=0.0)
    plain = report.metrics(_run(without, "gang-tas"))
    assert workload.RACK_CLASS not in plain["delay_by_size"]
    assert list(plain["delay_by_size"]) == [label for label, *_ in workload.SIZE_CLASSES]


@pytest.mark.parametrize("load", [-0.01, 1.01, math.nan, "0.2", None, True])
def test_a_multi_rack_load_outside_zero_to_one_is_refused_clearly(load: Any) -> None:
    with pytest.raises(ValueError, match=r"multi_rack_load .*: expected a number in \[0, 1\]"):
        workload.Params(multi_rack_load=load)


def test_multi_rack_jobs_need_two_cliques() -> None:
    with pytest.raises(ValueError, match="needs at least 2 cliques"):
        workload.Params(cliques=1, multi_rack_load=0.1)
    assert workload.Params(cliques=1).multi_rack_load == 0.0


@pytest.mark.parametrize(("flags", "error"), [
    (["--multi-rack-load", "1.5"], "--multi-rack-load"),
    (["--multi-rack-load", "-0.1"], "--multi-rack-load"),
    (["--multi-rack-load", "0.2", "--cliques", "1"], "needs --cliques 2 or more"),
])
def test_the_cli_refuses_a_multi_rack_load_it_cannot_use(flags: list[str], error: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--out", str(tmp_path), "--no-plots", *flags]) == 2
    err = capsys.readouterr().err
    assert error in err and "Traceback" not in err
