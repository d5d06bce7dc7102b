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
  useful work, as IMEX channels do not reach across NVLink domains; split jobs count as completed; a
  multi-rack job (``racks``) is split only when one of its segments is, not for spanning cliques;
- faults (``faults``: the same for every policy) change the nodes as the API server shows them; a job
  running on a node that fails, or lost to a degraded fabric in its domain, is *restarted*: its pods are
  deleted and created again at once, at the back of the queue, and the run so far is lost (a partly
  placed job with a pod on a failed node is requeued the same way, not counted as a restart). Queueing
  delay counts every wait of a job, from its arrival and from each restart until it runs.
Scheduling takes no simulated time. Within one pass, a job whose first pod fails is skipped for the
rest of the pass when an equal-or-smaller job of the same kind already failed: capacity only shrinks
during a pass, so that attempt would fail too (this saves time without changing any outcome).
"""

from __future__ import annotations

import gc
import heapq
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from webhook.tools.simulate import faults, policies, racks, report, workload
from webhook.tools.simulate.cluster import SimCluster
from webhook.tools.simulate.outcome import JobState, Outcome, Placement
from webhook.tools.simulate.workload import Job, Params

ARRIVE, FINISH, TIMEOUT, TICK, RESTART, LOST = "arrive", "finish", "timeout", "tick", "restart", "lost"
FAIL, REPAIR, DEGRADE, RECOVER = "fail", "repair", "degrade", "recover"
# At one instant: jobs that end do so before a fault strikes; repairs before new faults; housekeeping
# after every release, and a restarted job's pods are created after it (its reservation gone).
_ORDER = {FINISH: 0, LOST: 1, REPAIR: 2, RECOVER: 3, FAIL: 4, DEGRADE: 5, TIMEOUT: 6, TICK: 7, RESTART: 8, ARRIVE: 9}
_FAULT_END = {faults.FAIL: REPAIR, faults.DEGRADE: RECOVER}


def policy_seed(params: Params, policy: str) -> int:
    """The policy's tie-breaking seed; the service's shares one under every setting (health policy,
    exclusive domains), so that where a setting changes nothing they decide alike."""
    base = "imex-webhook" if policy in policies.IMEX_SETTINGS else policy
    return params.seed + workload.POLICIES.index(base)


class Simulation:
    def __init__(self, params: Params, jobs: list[Job], policy: str,
                 fault_list: list[faults.Fault] | None = None) -> None:
        self.params = params
        self.jobs = jobs
        self.cluster = SimCluster.build(params)
        self.placer = policies.make(policy, self.cluster, policy_seed(params, policy))
        self.states = [JobState([None] * j.pods, [0.0] * j.pods, j.arrival) for j in jobs]
        self.out = Outcome(policy, params, jobs, self.states)
        self.events: list[tuple[float, int, int, str, int, int]] = []
        self.seq = 0
        self.pending: list[int] = []  # FIFO of jobs with pods still to place
        self.useful = 0
        self.ticks: set[float] = set()
        self.arrived: set[int] = set()  # jobs not tried yet
        self.bound: dict[int, list[Placement]] = defaultdict(list)  # job -> its pods' open placements
        self.faults = fault_list if fault_list is not None else default_faults(params, jobs, self.cluster)
        self.degraded_now: dict[str, dict[int, float]] = defaultdict(dict)  # domain -> fault -> its end
        self.loss = random.Random(f"fabric-loss/{params.seed}")
        for job in jobs:
            self._push(job.arrival, ARRIVE, job.index)
        for i, fault in enumerate(self.faults):
            self._push(fault.start, fault.kind, i)
            self._push(fault.end, _FAULT_END[fault.kind], i)

    def _push(self, when: float, kind: str, index: int, attempt: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, _ORDER[kind], self.seq, kind, index, attempt))

    def _tick_after(self, now: float) -> None:
        """The service's housekeeping runs on every cache change: a finished group's reservation goes with
        the deletion of its last pod (webhook.engine.housekeeping), so one round follows each release."""
        if not isinstance(self.placer, policies.ImexPolicy):
            return
        if now not in self.ticks:
            self.ticks.add(now)
            self._push(now, TICK, -1)

    def _release(self, job: Job, now: float) -> None:
        self.placer.release(job, now)
        for placement in self.bound.pop(job.index, ()):
            placement.released = now
        self._tick_after(now)

    def handle(self, kind: str, index: int, now: float, attempt: int = 0) -> bool:
        """Apply one event; True when the cluster changed so that waiting pods may now fit."""
        if kind == TICK:
            self.ticks.discard(now)
            return self.placer.tick(now)
        if kind in _FAULT_KINDS:
            return self._fault(kind, index, now)
        job, st = self.jobs[index], self.states[index]
        if attempt != st.attempt:
            return False  # an event of a run that was restarted since
        if kind in (ARRIVE, RESTART):
            self.placer.submit(job, now)
            self.pending.append(index)
            self.arrived.add(index)
            return True
        if kind == LOST:
            return self._restart(index, now, "fabric")
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

    def _fault(self, kind: str, index: int, now: float) -> bool:
        """A node fails or is repaired, a tray's fabric degrades or recovers; True when it may make room."""
        fault = self.faults[index]
        node, c = fault.node, self.cluster
        if kind in (FAIL, REPAIR):
            c.down[node] += 1 if kind == FAIL else -1
        else:
            c.degraded[node] += 1 if kind == DEGRADE else -1
        self.placer.nodes_changed([node], now)
        if kind == FAIL:
            restarted = [self._restart(j, now, "node") for j in c.jobs_on(node)]
            return any(restarted)
        if kind == DEGRADE:
            self.degraded_now[c.domains[node]][index] = fault.end
            for j, st in enumerate(self.states):
                if st.outcome == "running" and self.jobs[j].kind == "nvlink" \
                        and c.domains[node] in c.domains_of(self.jobs[j]):
                    self._expose(j, fault.end, now)
            return False
        if kind == RECOVER:
            del self.degraded_now[c.domains[node]][index]
        return True

    def _expose(self, index: int, until: float, now: float) -> None:
        """A running ComputeDomain job (the only kind whose pods talk over NVLink) lives through a degradation
        of its domain (until ``until``): lost with the chance ``degraded_loss``, at a moment drawn uniformly
        over its time under it."""
        job, st = self.jobs[index], self.states[index]
        assert st.started is not None
        if self.loss.random() < self.params.degraded_loss:
            self._push(self.loss.uniform(now, min(until, st.started + job.runtime)), LOST, index, st.attempt)

    def _restart(self, index: int, now: float, cause: str) -> bool:
        """Delete the job's pods and create them again: a running job loses its run (a restart, counted by
        ``cause``: node or fabric), a partly placed one only its placements. True when it freed GPUs."""
        job, st = self.jobs[index], self.states[index]
        if st.outcome == "running":
            assert st.started is not None
            if cause == "node":
                st.restarts_node += 1
            else:
                st.lost_fabric += 1
            st.lost_gpu_seconds += (now - st.started) * job.gpu_demand
            if not st.split:
                self.useful -= job.gpu_demand
            st.outcome, st.started, st.queued_at = "pending", None, now
        elif st.outcome == "pending":
            self.pending.remove(index)
        else:
            return False
        st.attempt += 1
        st.placed, st.bound_at = [None] * job.pods, [0.0] * job.pods
        st.first_placed, st.split = None, False
        self._release(job, now)
        self._push(now, RESTART, index, st.attempt)
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
            shape = job.kind if job.segment_size is None else f"{job.kind}/segments of {job.segment_size}"
            if st.placed_count == 0 and any(g <= job.gpus and n <= job.pods for g, n in failed[shape]) \
                    and not self.placer.promised(job):
                continue
            for pod, node in enumerate(st.placed):
                if node is not None:
                    continue
                begin = time.perf_counter()
                where = self.placer.place(job, pod, now)
                self.out.decisions.append(time.perf_counter() - begin)
                if where is None:
                    if st.placed_count == 0:
                        failed[shape].append((job.gpus, job.pods))
                    break
                st.placed[pod], st.bound_at[pod] = where, now
                placement = Placement(index, pod, where, now)
                self.out.placements.append(placement)
                self.bound[index].append(placement)
                if st.first_placed is None:
                    st.first_placed = now
                    self._push(now + self.params.stuck_timeout, TIMEOUT, index, st.attempt)
            if st.placed_count == job.pods:
                self.pending.remove(index)
                st.started, st.outcome = now, "running"
                st.waited += now - st.queued_at
                placed = [self.cluster.domains[n] if n is not None else None for n in st.placed]
                domains = {d for d in placed if d is not None}
                st.split = racks.split(job, placed)
                if not st.split:
                    self.useful += job.gpu_demand
                self._push(now + job.runtime, FINISH, index, st.attempt)
                for domain in sorted(domains) if job.kind == "nvlink" else ():  # degradations under way
                    for until in self.degraded_now.get(domain, {}).values():
                        self._expose(index, until, now)

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
                _, _, _, kind, index, attempt = heapq.heappop(self.events)
                event_changed = self.handle(kind, index, now, attempt)
                changed = changed or event_changed
                freed = freed or (event_changed and kind not in (ARRIVE, RESTART))
            if changed and self.pending:
                self.schedule(now, everyone=freed)
            self.out.timeline.append((now, self.cluster.held_gpus(), self.useful))
            if progress and time.monotonic() - shown > 1.0:
                shown = time.monotonic()
                self._progress(now)
        self.out.attaches, self.out.attached_gpus = self.cluster.attaches, self.cluster.attached_gpus
        self.out.wall_seconds = time.monotonic() - begin
        if progress:
            sys.stderr.write(f"  {self.out.policy:<19} done in {self.out.wall_seconds:.1f}s\n")
        return self.out

    def _progress(self, now: float) -> None:
        arrived = sum(1 for j in self.jobs if j.arrival <= now)
        running = sum(1 for s in self.states if s.outcome == "running")
        done = sum(1 for s in self.states if s.outcome in ("completed", "stuck"))
        sys.stderr.write(f"  {self.out.policy:<19} t={now / 3600:7.1f}h  arrived {arrived}/{len(self.jobs)}  "
                         f"running {running}  waiting {len(self.pending)}  ended {done}\n")
        sys.stderr.flush()


_FAULT_KINDS = frozenset((FAIL, REPAIR, DEGRADE, RECOVER))


def default_faults(params: Params, jobs: list[Job], cluster: SimCluster) -> list[faults.Fault]:
    """The faults of a run: over the arrival window, where the offered load is steady."""
    horizon = workload.window(jobs)[1]
    return faults.generate(params, horizon, [zone is None for zone in cluster.zones])


def run(params: Params, policy_names: tuple[str, ...], out: Path, plots: bool = True,
        progress: bool = True) -> dict[str, Any]:
    """Simulate every policy on the same stream and faults; write report.md, metrics.json and the plots."""
    jobs = workload.generate(params)
    cluster = SimCluster.build(params)
    fault_list = default_faults(params, jobs, cluster)
    if progress:
        stream = workload.describe(jobs)
        sys.stderr.write(f"simulate: {len(jobs)} jobs over {stream['arrival_span_hours']:.1f}h on "
                         f"{params.cliques} cliques + {params.fabric_zones} fabric zones (seed {params.seed}); "
                         f"{sum(f.kind == faults.FAIL for f in fault_list)} node failures, "
                         f"{sum(f.kind == faults.DEGRADE for f in fault_list)} fabric degradations\n")
    outcomes = [Simulation(params, jobs, name, fault_list).run(progress) for name in policy_names]
    return report.write(out, params, jobs, outcomes, plots, faults.describe(fault_list, cluster.names))
