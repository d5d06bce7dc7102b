"""Walltimes and holds in ``imex-webhook simulate`` (docs/SIMULATE.md, "Holds and backfill"): a share of the
jobs states a walltime, its runtime times 1.2 to 3, drawn on a stream of its own; the service reads it where
a cluster carries it, holds domains for the groups that wait longest, and the peers ignore it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from webhook.domain import keys
from webhook.domain.groups import walltime
from webhook.domain.policy import Policy
from webhook.tools.simulate import policies, simulation, workload
from webhook.tools.simulate.cluster import SimCluster, job_objects

SMALL = workload.Params(seed=11, cliques=4, jobs=80, fabric_zones=0, load=0.8, multi_rack_load=0.2)


def test_the_share_marks_jobs_on_a_stream_of_its_own_and_larger_shares_keep_the_smaller_ones() -> None:
    base = workload.Params(jobs=400, multi_rack_load=0.1)
    streams = {share: workload.generate(replace(base, walltime_share=share)) for share in (0.0, 0.3, 0.8, 1.0)}
    plain = streams[0.0]
    for share, jobs in streams.items():
        assert [replace(j, walltime=None) for j in jobs] == plain, share  # only the walltime differs
    stated = {share: {j.index: j.walltime for j in jobs if j.walltime is not None} for share, jobs in streams.items()}
    assert stated[0.0] == {} and len(stated[1.0]) == len(plain)
    assert stated[0.3].items() <= stated[0.8].items() <= stated[1.0].items()  # same jobs, same bounds
    assert 0.25 < len(stated[0.3]) / len(plain) < 0.35
    for job in streams[1.0]:
        assert job.walltime is not None and 1.2 * job.runtime - 1 <= job.walltime <= 3.0 * job.runtime + 1


@pytest.mark.parametrize("kind", ["nvlink", "fabric", "plain"])
def test_a_stated_walltime_is_written_where_the_service_reads_it(kind: str) -> None:
    job = workload.Job(0, "job-00000", kind, 2, 4, 0.0, 600.0, walltime=1500.0)
    objects = job_objects(job)
    annotated = [o for o in objects if keys.MAX_RUNTIME_ANNOTATION in (o["metadata"].get("annotations") or {})]
    assert {o["kind"] for o in annotated} == ({"ComputeDomain"} if kind == "nvlink" else {"Pod"})
    raw = annotated[0]["metadata"]["annotations"][keys.MAX_RUNTIME_ANNOTATION]
    assert walltime.parse_duration(raw) == 1500.0


def test_a_stream_without_walltimes_runs_exactly_as_before_holds_existed() -> None:
    """No running group states a walltime, so no domain is ever planned free: no hold, no change."""
    jobs = workload.generate(SMALL)
    run = simulation.Simulation(SMALL, jobs, "imex-webhook")
    outcome = run.run(progress=False)
    assert outcome.params.walltime_share == 0.0
    assert run.placer.holds_made == 0  # type: ignore[attr-defined]


def test_with_walltimes_the_service_runs_every_job_whole_and_never_stuck() -> None:
    params = replace(SMALL, walltime_share=0.8)
    run = simulation.Simulation(params, workload.generate(params), "imex-webhook")
    outcome = run.run(progress=False)
    assert run.placer.holds_made > 0  # type: ignore[attr-defined]  # the stream makes some group wait for holds
    states = outcome.states
    assert all(st.outcome == "completed" for st in states), {st.outcome for st in states}
    assert not any(st.split for st in states)


def test_the_service_runs_with_its_hold_knobs_holds_on_and_giving_way_as_serve_defaults_do() -> None:
    cluster = SimCluster.build(SMALL)
    engine = policies.make("imex-webhook", cluster, 1).engine  # type: ignore[attr-defined]
    serve = Policy()
    assert (engine.policy.max_holds, engine.policy.hold_after, engine.policy.hold_timeout) == (
        1, serve.hold_after, serve.hold_timeout)
    assert (engine.policy.hold_yield_after, engine.policy.hold_yield_until) == (
        serve.hold_yield_after, serve.hold_yield_until) and serve.hold_yield_after > 0
