"""Exclusive domains in ``imex-webhook simulate`` (docs/SIMULATE.md, "Exclusive domains"): a share of the
ComputeDomain jobs asks for an NVLink domain of its own, drawn on a stream of its own; the service decides it
through the annotation it reads in a cluster, and the peers ignore it."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from typing import Any

import pytest

from webhook.domain import keys
from webhook.domain.groups import grouping
from webhook.domain.reading import parsing
from webhook.tools.simulate import policies, report, simulation, workload
from webhook.tools.simulate.cluster import SimCluster, job_objects
from webhook.tools.simulate.outcome import Outcome

# Four cliques under 90 % load: ComputeDomains share cliques all the time unless kept apart.
SMALL = workload.Params(seed=11, cliques=4, jobs=70, fabric_zones=1, fabric_share=0.08, load=0.9)
PEERS = ("default", "affinity-only", "gang-tas")


def _run(params: workload.Params, policy: str) -> Outcome:
    return simulation.Simulation(params, workload.generate(params), policy).run(progress=False)


def _metrics(outcome: Outcome, *drop: str) -> dict[str, Any]:
    row = report.metrics(outcome)
    for key in (*report.TIMING_KEYS, *drop):
        row.pop(key)
    return row


def _shared_domains(outcome: Outcome) -> list[tuple[str, int, int]]:
    """From the run's placement record: every (domain, job, job) where pods of two ComputeDomain jobs were
    bound in one domain at the same time (a release and a bind at one instant do not overlap)."""
    domains = SimCluster.build(outcome.params).domains
    spans: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for p in outcome.placements:
        assert p.released is not None, f"job {p.job} pod {p.pod} still bound after the run drained"
        if outcome.jobs[p.job].kind == "nvlink":
            spans[domains[p.node]][p.job].append((p.bound, p.released))
    shared = []
    for domain, jobs in spans.items():
        for a in jobs:
            for b in jobs:
                if a < b and any(s < e2 and s2 < e for s, e in jobs[a] for s2, e2 in jobs[b]):
                    shared.append((domain, a, b))
    return shared


def test_the_share_marks_compute_domain_jobs_on_a_stream_of_its_own() -> None:
    base = workload.Params()
    streams = {share: workload.generate(replace(base, exclusive_share=share)) for share in (0.0, 0.25, 0.5, 1.0)}
    plain = [replace(j, exclusive=False) for j in streams[0.0]]
    for share, jobs in streams.items():
        assert [replace(j, exclusive=False) for j in jobs] == plain, share  # only the flag differs
    marked = {share: {j.index for j in jobs if j.exclusive} for share, jobs in streams.items()}
    compute_domains = {j.index for j in plain if j.kind == "nvlink"}
    assert marked[0.0] == set()
    assert marked[1.0] == compute_domains
    assert marked[0.25] <= marked[0.5] <= marked[1.0]  # a larger share adds jobs, keeps the others
    assert 0.2 < len(marked[0.25]) / len(compute_domains) < 0.3


def test_an_exclusive_job_annotates_its_compute_domain_as_the_service_reads_it() -> None:
    job = workload.Job(0, "job-00000", "nvlink", 2, 4, 0.0, 60.0)
    for exclusive in (False, True):
        objects = job_objects(replace(job, exclusive=exclusive))
        cd = next(o for o in objects if o["kind"] == "ComputeDomain")
        assert grouping.exclusive_requested(parsing.compute_domain(cd).exclusive) == (exclusive, None)
        annotations = [o["metadata"].get("annotations") or {} for o in objects]
        assert sum(keys.EXCLUSIVE_ANNOTATION in a for a in annotations) == int(exclusive)  # on the CD alone


def test_share_zero_changes_no_metric() -> None:
    for policy in workload.POLICIES:
        assert _metrics(_run(replace(SMALL, exclusive_share=0.0), policy)) == _metrics(_run(SMALL, policy)), policy


def test_the_peers_ignore_exclusivity() -> None:
    for policy in PEERS:
        every = _run(replace(SMALL, exclusive_share=1.0), policy)
        assert _metrics(every, "compute_domains") == _metrics(_run(SMALL, policy), "compute_domains"), policy
        assert _shared_domains(every), policy


def test_with_every_compute_domain_exclusive_no_two_ever_share_a_domain() -> None:
    assert _shared_domains(_run(SMALL, "imex-webhook"))  # the record shows sharing where it is allowed
    for params, policy in ((replace(SMALL, exclusive_share=1.0), "imex-webhook"), (SMALL, "imex-webhook-exclusive")):
        outcome = _run(params, policy)
        assert _shared_domains(outcome) == [], policy
        assert report.metrics(outcome)["completed"] == SMALL.jobs, policy


def test_annotating_every_compute_domain_decides_as_the_cluster_wide_flag() -> None:
    annotated = _metrics(_run(replace(SMALL, exclusive_share=1.0), "imex-webhook"), "compute_domains", "policy")
    cluster_wide = _metrics(_run(SMALL, "imex-webhook-exclusive"), "compute_domains", "policy")
    assert annotated == cluster_wide
    assert annotated != _metrics(_run(SMALL, "imex-webhook"), "compute_domains", "policy")  # and it costs


def test_a_quarter_exclusive_is_counted_apart_in_the_report() -> None:
    params = replace(SMALL, exclusive_share=0.25)
    split = report.metrics(_run(params, "imex-webhook"))["compute_domains"]
    marked = sum(j.exclusive for j in workload.generate(params))
    assert split["exclusive"]["submitted"] == marked > 0
    assert split["exclusive"]["submitted"] + split["shared"]["submitted"] == \
        sum(j.kind == "nvlink" for j in workload.generate(params))


@pytest.mark.parametrize("share", [-0.01, 1.01, math.nan, math.inf, "0.5", None, True])
def test_a_share_outside_zero_to_one_or_not_a_number_is_refused_clearly(share: Any) -> None:
    with pytest.raises(ValueError, match=r"exclusive_share .*: expected a number in \[0, 1\]"):
        workload.Params(exclusive_share=share)


@pytest.mark.parametrize("share", [0, 0.0, 0.25, 1, 1.0])
def test_the_share_accepts_zero_to_one(share: float) -> None:
    assert workload.Params(exclusive_share=share).exclusive_share == share


def test_the_service_keeps_other_compute_domains_out_through_the_annotation_it_reads() -> None:
    params = workload.Params(cliques=1, clique_nodes=4, fabric_zones=0)
    cluster = SimCluster.build(params)
    placer = policies.make("imex-webhook", cluster, 1)
    assert isinstance(placer, policies.ImexPolicy)
    owner = workload.Job(0, "job-00000", "nvlink", 1, 4, 0.0, 60.0, exclusive=True)
    guest = workload.Job(1, "job-00001", "nvlink", 1, 4, 0.0, 60.0)
    for job in (owner, guest):
        placer.submit(job, 0.0)
    assert placer.place(owner, 0, 0.0) is not None
    assert placer.place(guest, 0, 1.0) is None  # three trays are free, but the clique is the owner's
    why = placer.cycle.schedule_one(*placer.pods[(guest.index, 0)]).message
    assert "held exclusively by ComputeDomain job-00000/job-00000" in why, why
    placer.release(owner, 2.0)
    placer.tick(2.0)
    assert placer.place(guest, 0, 2.0) is not None
