"""In-process figures of a job larger than one NVLink domain (docs/BENCHMARKS.md, "Jobs larger than one
domain"): planning its segments, the first member's filter that stores every segment's reservation, and a
later member's filter, each next to what the same cluster costs a group of one domain.

The job is ``payloads.SEGMENTED_CD``: 5,000 pods of 4 GPUs in segments of 18 (one clique each), or what the
cluster's wholly free cliques hold where that is less. What sits beside each figure, measured in the same
process on the same store:
- the plan (``segment_plan.plan``, pure) beside ``placement.choose`` of a one-domain group: both offer the
  group every domain once; what the plan adds is packing the segments;
- the first filter (``Engine.filter``: plan, then store one reservation per segment) beside the first
  filter of a one-domain group (choose, store one reservation), and that one again once the job's
  segments are reserved: every later choice weighs the job's reservations;
- a later member's filter (its segment reserved) beside a member of a one-domain group with a reservation.
Where the job was cut to fit, the 5,000-pod job's plan is timed too: it is refused, after the same offers.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from webhook.domain.groups import grouping, segments
from webhook.domain.jobs import segment_plan
from webhook.domain.model import Group, Pod
from webhook.domain.placement import capacity, placement
from webhook.domain.reading import parsing
from webhook.tools.bench import payloads
from webhook.tools.bench.micro import Bench, sample, timing


def job_shape(nodes: int) -> dict[str, int]:
    """Pods and segments of the job on a cluster of ``nodes``, and the ranks measured."""
    pods = payloads.segmented_job_pods(nodes)
    count = -(-pods // payloads.SEGMENT_SIZE)
    return {"pods": pods, "segments": count, "segment_size": payloads.SEGMENT_SIZE,
            "gpus_per_pod": payloads.GPUS_PER_NODE, "first_rank": 0,
            "later_rank": payloads.SEGMENT_SIZE * (count // 2)}


def unsegmented(nodes: int) -> str:
    """'' when the job has segments on this cluster; else why it is not measured there."""
    shape = job_shape(nodes)
    if shape["segments"] >= 2:
        return ""
    return (f"{nodes} nodes have {shape['pods'] // payloads.SEGMENT_SIZE} wholly free clique(s): a job of "
            f"{shape['pods']} pods fits one domain, so it is not segmented")


class SegmentBench:
    """The service's engine over the bench cluster of ``nodes`` (``micro.Bench``: the one-domain groups set
    up as there) and the segmented job's first and later member."""

    def __init__(self, nodes: int) -> None:
        self.base = Bench(nodes)
        self.shape = job_shape(nodes)
        engine = self.base.engine
        self.first = self._member(self.shape["first_rank"])
        self.later = self._member(self.shape["later_rank"])
        snap = engine.snapshot()
        resolution = grouping.resolve(self.first, snap.catalog, engine.policy)
        group = resolution.group
        if group is None or group.segment is None:
            raise RuntimeError(f"{payloads.SEGMENTED_CD} pods are not recognised as a segmented job: "
                               f"{'; '.join(resolution.problems) or 'no group'}")
        self.group: Group = group
        self.need = capacity.demand(self.first, snap.catalog, engine.policy)

    def later_segment(self) -> int:
        return self.shape["later_rank"] // payloads.SEGMENT_SIZE

    def _member(self, rank: int) -> Pod:
        pod = parsing.pod(payloads.segment_pod(rank))
        self.base.backend.note_pod(pod)
        return pod

    def forget_job(self) -> None:
        """Drop every segment's reservation, so that the next filter of a member plans the job again."""
        seg = self.group.segment
        assert seg is not None
        for index in range(seg.count):
            self.base.engine.choices.forget(segments.segment_id(seg.job_id, index))

    def reserved(self) -> dict[int, str]:
        """Segment index -> domain of the job's stored reservations."""
        seg = self.group.segment
        assert seg is not None
        stored = self.base.engine.reservations.all()
        return {i: stored[sid].domain for i in range(seg.count) if (sid := segments.segment_id(seg.job_id, i))
                in stored}

    def plan_call(self, group: Group | None = None) -> Callable[[], segment_plan.Plan]:
        """The pure plan of ``group`` (the job by default) against the store as it is now: the inputs the
        filter hands it (live reservations, the candidate set) are built once, outside the timing."""
        engine = self.base.engine
        inputs = engine.decision_inputs(time.time())
        snap, live = inputs.snapshot, inputs.live
        allowed = set(self.base.names)
        chosen = group or self.group
        return lambda: segment_plan.plan(chosen, self.need, snap, live, allowed, engine.policy)

    def choose_call(self) -> Callable[[], placement.Choice]:
        """``placement.choose`` of the one-domain fresh group over the same store: every domain offered once."""
        engine, base = self.base.engine, self.base
        inputs = engine.decision_inputs(time.time())
        snap, live = inputs.snapshot, inputs.live
        resolution = grouping.resolve(base.fresh_pod, snap.catalog, engine.policy)
        group = resolution.group
        assert group is not None
        need = capacity.demand(base.fresh_pod, snap.catalog, engine.policy)
        allowed = set(base.names)
        return lambda: placement.choose(group, resolution.size, need, snap, live, allowed=allowed,
                                        health=engine.policy.fabric_health, policy=engine.policy)


def _whole_job(group: Group) -> Group:
    """The job at its full 5,000 pods, as a pure plan input (the cluster's catalog says fewer)."""
    seg = group.segment
    assert seg is not None
    count = -(-payloads.SEGMENTED_PODS // seg.size)
    return replace(group, segment=replace(seg, job_size=payloads.SEGMENTED_PODS, count=count))


def _first_filters(b: SegmentBench, budget: float) -> dict[str, Any]:
    """The job's first filter, beside a one-domain group's first filter on the same cluster (before the
    job is reserved) and again once the job's segments are reserved (every other group's first filter
    then weighs the job's reservations too). Leaves the job reserved and the one-domain group not."""
    size, engine, base, names = b.base.nodes, b.base.engine, b.base, b.base.names

    def one_domain() -> dict[str, Any]:
        figures = timing(sample(lambda: engine.filter(base.fresh_pod, names), budget, before=base.forget_choice))
        base.forget_choice()  # what the samples stored must not weigh on the next case
        return figures.as_dict()

    out = {f"segment_first_filter_{size}_one_domain_group": {
        **one_domain(), "what": "Engine.filter of a one-domain group's first pod (choose, store one reservation)"}}
    first = engine.filter(b.first, names)
    stored = b.reserved()
    if len(stored) != b.shape["segments"] or not first.passed:
        raise RuntimeError(f"the first filter of {payloads.SEGMENTED_CD} stored {len(stored)} of "
                           f"{b.shape['segments']} segments and passed {len(first.passed)} nodes")
    out[f"segment_first_filter_{size}"] = {
        **timing(sample(lambda: engine.filter(b.first, names), budget, least=3, before=b.forget_job)).as_dict(),
        "passed": len(first.passed), "reservations_stored": len(stored),
        "what": "Engine.filter of the job's first member: plan, then one reservation stored per segment"}
    out[f"segment_first_filter_{size}_one_domain_group_beside_the_job"] = {
        **one_domain(), "what": f"the one-domain group's first pod again, the job's {len(stored)} segments reserved"}
    return out


def run(size: int, budget: float, log: Callable[[str], None]) -> dict[str, Any]:
    """The job's shape (``job``) and every in-process figure of it at ``size`` nodes (``in_process``, keyed
    by case name)."""
    log(f"in-process: {size}-node cluster: the segmented job ({job_shape(size)['pods']} pods)")
    began = time.monotonic()
    b = SegmentBench(size)
    setup_s = time.monotonic() - began
    # As the service does once its caches are loaded (``webhook.service.server``): the cache's objects out of
    # the collector's way, else the collections a plan's garbage triggers walk the whole 20,000-node store.
    gc.collect()
    gc.freeze()
    try:
        cases, plan = _cases(b, budget)
    finally:
        gc.unfreeze()
    job = {**b.shape, "domains": len(set((plan.domains or {}).values())), "plan": plan.reason[:200],
           "engine_setup_s": setup_s}
    return {"job": job, "in_process": cases}


def _cases(b: SegmentBench, budget: float) -> tuple[dict[str, Any], segment_plan.Plan]:
    size, engine, base, names = b.base.nodes, b.base.engine, b.base, b.base.names
    plan = b.plan_call()()
    if plan.domains is None:
        raise RuntimeError(f"the {size}-node bench cluster holds no plan for the segmented job: {plan.reason}")
    out: dict[str, Any] = {f"segment_plan_{size}": {
        **timing(sample(b.plan_call(), budget)).as_dict(), "domains": len(set(plan.domains.values())),
        "what": "segment_plan.plan of the job, pure (every domain offered the job, then the segments packed)"}}
    out[f"segment_plan_{size}_one_domain_choice"] = {
        **timing(sample(b.choose_call(), budget)).as_dict(),
        "what": "placement.choose of a one-domain group of 16 over the same store (every domain offered once)"}
    if b.shape["pods"] < payloads.SEGMENTED_PODS:
        whole = b.plan_call(_whole_job(b.group))
        refused = whole()
        out[f"segment_plan_{size}_whole_job_refused"] = {
            **timing(sample(whole, budget)).as_dict(), "planned": refused.domains is not None,
            "what": f"segment_plan.plan of the {payloads.SEGMENTED_PODS:,}-pod job, which this cluster cannot hold"}
    out |= _first_filters(b, budget)
    stored = b.reserved()
    later = engine.filter(b.later, names)
    if not later.passed or not set(later.passed) <= set(engine.snapshot().domains[stored[b.later_segment()]]):
        raise RuntimeError(f"a later member of {payloads.SEGMENTED_CD} passed {len(later.passed)} nodes, not its "
                           "segment's domain")
    out[f"segment_later_filter_{size}"] = {
        **timing(sample(lambda: engine.filter(b.later, names), budget)).as_dict(), "passed": len(later.passed),
        "what": f"Engine.filter of rank {b.shape['later_rank']} (segment {b.later_segment()}, already reserved)"}
    out[f"segment_later_filter_{size}_one_domain_group"] = {
        **timing(sample(lambda: engine.filter(base.reserved_pod, names), budget)).as_dict(),
        "what": "Engine.filter of a one-domain group's member with a stored reservation"}
    return out, plan
