"""The simulated cluster's shape and the job stream every policy is fed (``imex-webhook simulate``).

One stream, generated once from the seed, is replayed under every policy, so differences in the
results come from the policies alone. The mix is what a shared NVL72 installation runs:
- ``nvlink`` jobs: a ComputeDomain of 1 to 18 pods, one pod per node (the DRA driver's channel), each
  pod taking a whole tray (4 GPUs) or half of one; sizes cluster around powers of two and full racks;
- ``fabric`` jobs: 1 to 4 pods that each need more GPUs than any node has locally (the local GPU of a
  composable node plus all of its fabric slots), grouped by the ``imex-webhook.io/group`` annotation:
  only a policy that attaches fabric GPUs before binding can run them;
- ``plain`` pods: single pods of 1 or 2 GPUs in no group (notebooks, inference), which fragment nodes
  for everyone alike;
- with ``multi_rack_load`` > 0, *multi-rack* ComputeDomain jobs of 2 to 4 racks (``multi_rack_jobs``;
  docs/SIMULATE.md, "Jobs larger than one rack"): whole trays, k x 18 pods less a spare tray or two,
  annotated ``imex-webhook.io/segment-size`` = the rack's trays, on an arrival process of their own over
  the same arrival window; the jobs above are unchanged by them.
Arrivals are Poisson with the rate that offers ``load`` times the clique GPUs on average; run times are
log-normal (median ``runtime_median``, shape ``runtime_sigma``), as job durations on shared clusters are.
The node failures and fabric degradations the cluster suffers meanwhile (``faults``) are drawn from the
same seed, on a stream of their own: the job stream is the same with or without them. So is the choice of
the ComputeDomain jobs that ask for an NVLink domain of their own (``exclusive_share``; docs/SCHEDULER.md,
"Exclusive domains"): one draw per ComputeDomain job whatever the share, so the exclusive jobs at a share
are among those at any larger share, and only that flag differs between two shares' streams. The
multi-rack jobs come after the others in the list (indices from ``jobs`` on), in arrival order among
themselves: a stream is ordered by arrival only without them (``window`` gives its arrival span).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from webhook.domain.groups.waits import SIZE_CLASSES, size_class

# imex-webhook-refuse and imex-webhook-allow: the service with --fabric-health-policy refuse or allow
# (imex-webhook: avoid, the default); imex-webhook-exclusive: with --exclusive-domains; imex-webhook-pack:
# with --pack-plain-gpu-pods. Not in a default run: each costs as much as the rest together.
POLICIES = ("imex-webhook", "default", "affinity-only", "gang-tas", "imex-webhook-refuse", "imex-webhook-allow",
            "imex-webhook-exclusive", "imex-webhook-pack")
DEFAULT_POLICIES = POLICIES[:4]
KINDS = ("nvlink", "fabric", "plain")

# nvlink group sizes and their weights: small jobs, powers of two, whole racks, and a spread in between.
SIZE_WEIGHTS: tuple[tuple[int, float], ...] = (
    (1, 0.10), (2, 0.12), (4, 0.16), (8, 0.18), (16, 0.08), (18, 0.06),
    *((n, 0.30 / 12) for n in (3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 17)),
)

# Job-size classes (pods per job) the report gives queueing delay for are the service's own
# (``webhook.domain.groups.waits``, its wait histogram's), cut where the generator's sizes cluster: single pods
# (plain pods, 1-pod groups), small groups (2-4: fabric groups and small ComputeDomains), up to a half rack
# (5-8), up to 16 trays, and whole racks (17-18).
# The multi-rack jobs' class, whatever their pods (``multi_rack_jobs``): "17+" holds only single-rack jobs.
RACK_CLASS = "2-4 racks"


def job_class(job: Job) -> str:
    """The report's class of a job: ``RACK_CLASS`` for a multi-rack job, else by its pods."""
    return RACK_CLASS if job.segment_size is not None else size_class(job.pods)


def class_labels(jobs: list[Job]) -> list[str]:
    """The classes a report shows for a stream: the multi-rack class only when the stream has such jobs, so
    that a stream without them reports exactly as before they existed."""
    labels = [label for label, *_ in SIZE_CLASSES]
    return [*labels, RACK_CLASS] if any(j.segment_size is not None for j in jobs) else labels


@dataclass(frozen=True)
class Params:
    seed: int = 7
    cliques: int = 64
    clique_nodes: int = 18
    gpus_per_node: int = 4
    fabric_zones: int = 4
    fabric_nodes: int = 8  # per zone
    fabric_local_gpus: int = 1
    fabric_slots: int = 4
    fabric_pool: int = 16  # free fabric GPU blocks per zone
    jobs: int = 1500
    load: float = 0.85  # offered GPU-seconds / (clique GPUs x time)
    runtime_median: float = 3600.0
    runtime_sigma: float = 1.0
    fabric_share: float = 0.03
    plain_share: float = 0.12
    half_tray_share: float = 0.2  # nvlink pods that take 2 GPUs instead of 4
    stuck_timeout: float = 1800.0  # seconds a partly placed job may wait before it is torn down
    # Faults over the arrival window (``faults``): rates per node per day, mean durations in hours.
    node_failures: float = 0.01  # any node lost (NotReady) until repaired
    repair_hours: float = 4.0
    fabric_degradations: float = 0.02  # an NVLink tray's fabric degraded, then healthy again
    degraded_hours: float = 6.0
    degraded_loss: float = 0.3  # chance a running job fails per degradation of its domain it lives through
    exclusive_share: float = 0.0  # ComputeDomain jobs annotated imex-webhook.io/exclusive-domain: "true"
    # Offered GPU load of the multi-rack jobs (``multi_rack_jobs``), a fraction of the clique GPUs, on top of
    # ``load``.
    multi_rack_load: float = 0.0
    # Jobs that state a walltime (``with_walltimes``): the share of jobs, each bound its runtime times a factor
    # drawn between WALLTIME_FACTORS (users overestimate), on a stream of their own.
    walltime_share: float = 0.0

    def __post_init__(self) -> None:
        share = self.exclusive_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
            raise ValueError(f"exclusive_share {share!r}: expected a number in [0, 1] (the share of ComputeDomain "
                             "jobs that ask for an NVLink domain of their own)")
        stated = self.walltime_share
        if isinstance(stated, bool) or not isinstance(stated, int | float) or not 0.0 <= stated <= 1.0:
            raise ValueError(f"walltime_share {stated!r}: expected a number in [0, 1] (the share of jobs that state "
                             "a walltime)")
        extra = self.multi_rack_load
        if isinstance(extra, bool) or not isinstance(extra, int | float) or not 0.0 <= extra <= 1.0:
            raise ValueError(f"multi_rack_load {extra!r}: expected a number in [0, 1] (the GPU load the multi-rack "
                             "jobs offer, as a fraction of the clique GPUs)")
        if extra > 0 and self.cliques < 2:
            raise ValueError(f"multi_rack_load {extra!r} needs at least 2 cliques (a multi-rack job spans 2 to 4); "
                             f"the cluster has {self.cliques}")

    @property
    def clique_gpus(self) -> int:
        return self.cliques * self.clique_nodes * self.gpus_per_node

    @property
    def fabric_pod_gpus(self) -> int:
        return self.fabric_local_gpus + self.fabric_slots

    @property
    def total_gpus(self) -> int:
        """Every physical GPU: clique trays, composable nodes' local GPUs and the fabric pools."""
        fabric = self.fabric_zones * (self.fabric_nodes * self.fabric_local_gpus + self.fabric_pool)
        return self.clique_gpus + fabric


@dataclass(frozen=True)
class Job:
    index: int
    name: str  # also the namespace its objects live in
    kind: str  # nvlink | fabric | plain
    pods: int
    gpus: int  # per pod
    arrival: float  # seconds since the start
    runtime: float  # seconds, once every pod is placed
    exclusive: bool = False  # a ComputeDomain that asks for an NVLink domain of its own
    segment_size: int | None = None  # a multi-rack job: pods per segment (its ComputeDomain's annotation)
    walltime: float | None = None  # seconds it states it runs at most (imex-webhook.io/max-runtime), if any

    @property
    def grouped(self) -> bool:
        return self.kind != "plain"

    @property
    def gpu_demand(self) -> int:
        return self.pods * self.gpus


def _shape(rng: random.Random, p: Params) -> tuple[str, int, int]:
    roll = rng.random()
    if roll < p.fabric_share and p.fabric_zones > 0:
        return "fabric", rng.randint(1, min(4, p.fabric_nodes)), p.fabric_pod_gpus
    if roll < p.fabric_share + p.plain_share:
        return "plain", 1, rng.choice((1, 1, 2))
    sizes, weights = zip(*((s, w) for s, w in SIZE_WEIGHTS if s <= p.clique_nodes), strict=True)
    size = rng.choices(sizes, weights)[0]
    gpus = p.gpus_per_node // 2 if rng.random() < p.half_tray_share else p.gpus_per_node
    return "nvlink", size, gpus


def generate(p: Params) -> list[Job]:
    """The job stream for ``p``: the same list for the same parameters, on every machine; the multi-rack jobs
    (``multi_rack_jobs``) after the others."""
    jobs = _generate(p)
    return with_walltimes(jobs + multi_rack_jobs(p, len(jobs), window(jobs)[1]), p)


# What a stated walltime is, times the job's runtime: users overestimate, by 20 % to three times.
WALLTIME_FACTORS = (1.2, 3.0)


def with_walltimes(jobs: list[Job], p: Params) -> list[Job]:
    """The jobs, ``walltime_share`` of them stating a walltime: two draws per job whatever the share, on a
    stream of their own, so that the jobs stating one at a share are among those at any larger share, with
    the same bound, and the rest of the stream is the same with or without walltimes."""
    rng = random.Random(f"walltime/{p.seed}")
    out = []
    for job in jobs:
        states, factor = rng.random(), rng.uniform(*WALLTIME_FACTORS)
        out.append(replace(job, walltime=round(job.runtime * factor)) if states < p.walltime_share else job)
    return out


def window(jobs: list[Job]) -> tuple[float, float]:
    """The first and the last arrival of a stream."""
    arrivals = [j.arrival for j in jobs]
    return (min(arrivals), max(arrivals)) if arrivals else (0.0, 0.0)


def _generate(p: Params) -> list[Job]:
    rng = random.Random(p.seed)
    shapes = [_shape(rng, p) for _ in range(p.jobs)]
    mu = math.log(p.runtime_median)
    runtimes = [max(60.0, rng.lognormvariate(mu, p.runtime_sigma)) for _ in range(p.jobs)]
    work = sum(pods * gpus * rt for (_, pods, gpus), rt in zip(shapes, runtimes, strict=True)) / p.jobs
    rate = p.load * p.clique_gpus / work  # jobs per second that offer ``load`` of the clique GPUs
    now = 0.0
    exclusive = random.Random(f"exclusive/{p.seed}")
    jobs = []
    for i, ((kind, pods, gpus), runtime) in enumerate(zip(shapes, runtimes, strict=True)):
        own = kind == "nvlink" and exclusive.random() < p.exclusive_share
        jobs.append(Job(i, f"job-{i:05d}", kind, pods, gpus, round(now, 3), round(runtime, 3), own))
        now += rng.expovariate(rate)
    return jobs


RACKS: tuple[tuple[int, float], ...] = ((2, 0.5), (3, 0.3), (4, 0.2))  # racks per job, weights
SPARES: tuple[tuple[int, float], ...] = ((0, 0.3), (1, 0.4), (2, 0.3))  # trays left out of the last rack


def multi_rack_jobs(p: Params, first_index: int, until: float) -> list[Job]:
    """The multi-rack jobs arriving in [0, ``until``], indices from ``first_index``: Poisson arrivals at the
    rate that offers ``multi_rack_load`` of the clique GPUs, log-normal run times as the other jobs'."""
    if p.multi_rack_load <= 0:
        return []
    rng = random.Random(f"multi-rack/{p.seed}")
    racks = [(k, w) for k, w in RACKS if k <= p.cliques]
    spares = [(min(s, p.clique_nodes - 1), w) for s, w in SPARES]
    mean_pods = (sum(k * w for k, w in racks) / sum(w for _, w in racks) * p.clique_nodes
                 - sum(s * w for s, w in spares) / sum(w for _, w in spares))
    mean_runtime = p.runtime_median * math.exp(p.runtime_sigma ** 2 / 2)  # the log-normal's mean
    rate = p.multi_rack_load * p.clique_gpus / (mean_pods * p.gpus_per_node * mean_runtime)
    mu = math.log(p.runtime_median)
    jobs: list[Job] = []
    now = rng.expovariate(rate)
    while now <= until:
        k = rng.choices([k for k, _ in racks], [w for _, w in racks])[0]
        spare = rng.choices([s for s, _ in spares], [w for _, w in spares])[0]
        runtime = max(60.0, rng.lognormvariate(mu, p.runtime_sigma))
        index = first_index + len(jobs)
        jobs.append(Job(index, f"job-{index:05d}", "nvlink", k * p.clique_nodes - spare, p.gpus_per_node,
                        round(now, 3), round(runtime, 3), segment_size=p.clique_nodes))
        now += rng.expovariate(rate)
    return jobs


def describe(jobs: list[Job]) -> dict[str, object]:
    """Counts and averages of a stream, for the report."""
    by_kind = {k: [j for j in jobs if j.kind == k] for k in KINDS}
    return {
        "jobs": len(jobs),
        "by_kind": {k: len(v) for k, v in by_kind.items()},
        "pods": sum(j.pods for j in jobs),
        "exclusive_compute_domains": sum(1 for j in jobs if j.exclusive),
        **({"multi_rack_jobs": racked} if (racked := sum(1 for j in jobs if j.segment_size is not None)) else {}),
        "mean_nvlink_pods": (sum(j.pods for j in by_kind["nvlink"]) / len(by_kind["nvlink"]))
        if by_kind["nvlink"] else 0.0,
        "arrival_span_hours": (window(jobs)[1] - window(jobs)[0]) / 3600,
        "median_runtime_hours": sorted(j.runtime for j in jobs)[len(jobs) // 2] / 3600 if jobs else 0.0,
    }
