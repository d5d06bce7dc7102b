"""``imex-webhook simulate``: a seedable discrete-event simulation of placement policies on one job stream.

The scheduler is modelled as kube-scheduler behaves towards extender-filtered pods:
- pods are scheduled one at a time from a FIFO queue (a job's pods are created together, in order);
- a pod that does not fit waits; every cluster event that frees capacity (a job ending, a job torn
  down, a reservation released) puts every waiting pod back in the queue, since extenders have no
  queueing hints; an arrival alone brings only the new job's pods (the waiting ones failed on a
  cluster that has only filled up since, so they would fail again: skipping them changes no outcome);
- a job runs only once all its pods are placed (gang by waiting); placed pods of a waiting job hold
  their GPUs meanwhile, which is what a partial placement costs;
- a job partly placed for ``stuck_timeout`` seconds counts as *stuck*: it is torn down (its pods are
  deleted, which frees their GPUs) and is not resubmitted, so every job ends in exactly one of
  completed, stuck or pending (never placed by the end);
- a job whose pods run in more than one domain is *split*: it runs (holding its GPUs) but does no
  useful work, as IMEX channels do not reach across NVLink domains; split jobs count as completed.
Scheduling takes no simulated time. Within one pass, a job whose first pod fails is skipped for the
rest of the pass when an equal-or-smaller job of the same kind already failed: capacity only shrinks
during a pass, so that attempt would fail too (this saves time without changing any outcome).
"""

from __future__ import annotations

import gc
import heapq
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from webhook.tools.simulate import policies, report, workload
from webhook.tools.simulate.cluster import SimCluster
from webhook.tools.simulate.outcome import JobState, Outcome
from webhook.tools.simulate.workload import Job, Params

ARRIVE, FINISH, TIMEOUT, TICK = "arrive", "finish", "timeout", "tick"
_ORDER = {FINISH: 0, TIMEOUT: 1, TICK: 2, ARRIVE: 3}


class Simulation:
    def __init__(self, params: Params, jobs: list[Job], policy: str) -> None:
        self.params = params
        self.jobs = jobs
        self.cluster = SimCluster.build(params)
        self.placer = policies.make(policy, self.cluster, params.seed + workload.POLICIES.index(policy))
        self.states = [JobState([None] * j.pods, [0.0] * j.pods) for j in jobs]
        self.out = Outcome(policy, params, jobs, self.states)
        self.events: list[tuple[float, int, int, str, int]] = []
        self.seq = 0
        self.pending: list[int] = []  # FIFO of jobs with pods still to place
        self.useful = 0
        self.ticks: set[float] = set()
        self.arrived: set[int] = set()  # jobs not tried yet
        for job in jobs:
            self._push(job.arrival, ARRIVE, job.index)

    def _push(self, when: float, kind: str, job: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, _ORDER[kind], self.seq, kind, job))

    def _tick_after(self, now: float) -> None:
        """The service's housekeeping runs on every cache change: a finished group's reservation goes with
        the deletion of its last pod (webhook.engine.housekeeping), so one round follows each release."""
        if self.out.policy != "imex-webhook":
            return
        if now not in self.ticks:
            self.ticks.add(now)
            self._push(now, TICK, -1)

    def _release(self, job: Job, now: float) -> None:
        self.placer.release(job, now)
        self._tick_after(now)

    def handle(self, kind: str, index: int, now: float) -> bool:
        """Apply one event; True when the cluster changed so that waiting pods may now fit."""
        if kind == TICK:
            self.ticks.discard(now)
            return self.placer.tick(now)
        job, st = self.jobs[index], self.states[index]
        if kind == ARRIVE:
            self.placer.submit(job, now)
            self.pending.append(index)
            self.arrived.add(index)
            return True
        if kind == FINISH:
            st.outcome, st.ended = "completed", now
            if not st.split:
                self.useful -= job.gpu_demand
            self._release(job, now)
            return True
        if st.started is not None or st.outcome != "pending":
            return False  # TIMEOUT of a job that started meanwhile
        st.outcome, st.ended = "stuck", now
        st.held_gpu_seconds = sum(now - st.bound_at[i] for i, n in enumerate(st.placed) if n is not None) * job.gpus
        self.pending.remove(index)
        self._release(job, now)
        return True

    def schedule(self, now: float, everyone: bool = True) -> None:
        """One pass over the waiting jobs, FIFO, each job's pods in order until one does not fit; only over
        the jobs that arrived since the last pass unless ``everyone`` (something was freed)."""
        failed: dict[str, list[tuple[int, int]]] = defaultdict(list)
        fresh, self.arrived = self.arrived, set()
        for index in list(self.pending):
            job, st = self.jobs[index], self.states[index]
            if not everyone and index not in fresh:
                continue
            if st.placed_count == 0 and any(g <= job.gpus and n <= job.pods for g, n in failed[job.kind]):
                continue
            for pod, node in enumerate(st.placed):
                if node is not None:
                    continue
                begin = time.perf_counter()
                where = self.placer.place(job, pod, now)
                self.out.decisions.append(time.perf_counter() - begin)
                if where is None:
                    if st.placed_count == 0:
                        failed[job.kind].append((job.gpus, job.pods))
                    break
                st.placed[pod], st.bound_at[pod] = where, now
                if st.first_placed is None:
                    st.first_placed = now
                    self._push(now + self.params.stuck_timeout, TIMEOUT, index)
            if st.placed_count == job.pods:
                self.pending.remove(index)
                st.started, st.outcome = now, "running"
                st.split = len({self.cluster.domains[n] for n in st.placed if n is not None}) > 1
                if not st.split:
                    self.useful += job.gpu_demand
                self._push(now + job.runtime, FINISH, index)

    def run(self, progress: bool = True) -> Outcome:
        # The cluster, the service's caches and the scheduler's view are built and live for the whole run:
        # keep them out of the collector's full scans (as ``serve`` does with its loaded caches).
        gc.collect()
        gc.freeze()
        try:
            return self._run(progress)
        finally:
            gc.unfreeze()

    def _run(self, progress: bool) -> Outcome:
        begin = time.monotonic()
        shown = 0.0
        while self.events:
            now = self.events[0][0]
            changed = freed = False
            while self.events and self.events[0][0] == now:
                _, _, _, kind, index = heapq.heappop(self.events)
                event_changed = self.handle(kind, index, now)
                changed = changed or event_changed
                freed = freed or (event_changed and kind != ARRIVE)
            if changed and self.pending:
                self.schedule(now, everyone=freed)
            self.out.timeline.append((now, self.cluster.held_gpus(), self.useful))
            if progress and time.monotonic() - shown > 1.0:
                shown = time.monotonic()
                self._progress(now)
        self.out.attaches, self.out.attached_gpus = self.cluster.attaches, self.cluster.attached_gpus
        self.out.wall_seconds = time.monotonic() - begin
        if progress:
            sys.stderr.write(f"  {self.out.policy:<14} done in {self.out.wall_seconds:.1f}s\n")
        return self.out

    def _progress(self, now: float) -> None:
        arrived = sum(1 for j in self.jobs if j.arrival <= now)
        running = sum(1 for s in self.states if s.outcome == "running")
        done = sum(1 for s in self.states if s.outcome in ("completed", "stuck"))
        sys.stderr.write(f"  {self.out.policy:<14} t={now / 3600:7.1f}h  arrived {arrived}/{len(self.jobs)}  "
                         f"running {running}  waiting {len(self.pending)}  ended {done}\n")
        sys.stderr.flush()


def run(params: Params, policy_names: tuple[str, ...], out: Path, plots: bool = True,
        progress: bool = True) -> dict[str, Any]:
    """Simulate every policy on the same stream and write report.md, metrics.json and the plots."""
    jobs = workload.generate(params)
    if progress:
        stream = workload.describe(jobs)
        sys.stderr.write(f"simulate: {len(jobs)} jobs over {stream['arrival_span_hours']:.1f}h on "
                         f"{params.cliques} cliques + {params.fabric_zones} fabric zones (seed {params.seed})\n")
    outcomes = [Simulation(params, jobs, name).run(progress) for name in policy_names]
    return report.write(out, params, jobs, outcomes, plots)
