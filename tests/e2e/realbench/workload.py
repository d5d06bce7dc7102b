"""What the benchmark's cluster and workload are, as plain data: pure, seeded, the same for every run.

The cluster is N GB200 nodes in NVL72 cliques of 18 (the last clique holds the remainder), 4 GPUs each;
every other clique is busy (a pod holding all four GPUs of each of its nodes, bound by hand as a
DaemonSet's would be), so the scheduler and the extender see a cluster half full. A run's workload is
ComputeDomain jobs of 1 to 18 pods (4 GPUs and the ComputeDomain's channel claim each), first at a steady
rate and then all at once, plus plain 1-GPU pods spread over both phases. The jobs take about half of
the free GPUs, so every job fits in some free clique however the runs before it packed theirs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

CLIQUE_SIZE = 18
GPUS_PER_NODE = 4
MAX_GROUP = CLIQUE_SIZE
STEADY, BURST = "steady", "burst"


@dataclass(frozen=True)
class Layout:
    nodes: int

    def __post_init__(self) -> None:
        if self.nodes < 2 * CLIQUE_SIZE:
            raise ValueError(f"--nodes must be at least {2 * CLIQUE_SIZE} (two cliques), got {self.nodes}")

    @property
    def cliques(self) -> int:
        return math.ceil(self.nodes / CLIQUE_SIZE)

    def clique_of(self, index: int) -> int:
        return index // CLIQUE_SIZE

    def node_name(self, index: int) -> str:
        return f"gb200-{self.clique_of(index):04d}-{index % CLIQUE_SIZE:02d}"

    def clique_label(self, clique: int) -> str:
        """The ``nvidia.com/gpu.clique`` value GFD writes: ``<cluster UUID>.<clique ID>``."""
        return f"6c1b4a9e-0000-4000-8000-{clique:012d}.{32000 + clique}"

    def busy(self, clique: int) -> bool:
        return clique % 2 == 1

    def busy_nodes(self) -> list[int]:
        return [i for i in range(self.nodes) if self.busy(self.clique_of(i))]

    def free_nodes(self) -> int:
        return self.nodes - len(self.busy_nodes())


@dataclass(frozen=True)
class Job:
    name: str
    size: int
    phase: str
    at: float  # seconds after the run starts that its pods are created


@dataclass(frozen=True)
class PlainPod:
    name: str
    phase: str
    at: float


@dataclass(frozen=True)
class Workload:
    jobs: tuple[Job, ...]
    plain: tuple[PlainPod, ...]
    steady_seconds: float

    @property
    def group_pods(self) -> int:
        return sum(j.size for j in self.jobs)

    @property
    def pods(self) -> int:
        return self.group_pods + len(self.plain)


def plan(layout: Layout, *, seed: int = 1, fill: float = 0.5, burst_share: float = 0.5,
         steady_rate: float = 2.0, plain_per_job: float = 2.0) -> Workload:
    """Jobs whose pods add up to about ``fill`` of the free nodes, ``burst_share`` of them in the burst,
    the steady ones ``steady_rate`` jobs a second; ``plain_per_job`` plain pods per job."""
    if not 0 < fill <= 0.8:
        raise ValueError(f"fill must be in (0, 0.8] so every job keeps a free clique, got {fill}")
    if not 0 <= burst_share <= 1 or steady_rate <= 0:
        raise ValueError(f"burst_share must be in [0, 1] and steady_rate > 0, got {burst_share}, {steady_rate}")
    rng = random.Random(seed)
    budget = int(layout.free_nodes() * fill)
    sizes: list[int] = []
    while sum(sizes) < budget:
        sizes.append(min(rng.randint(1, MAX_GROUP), budget - sum(sizes)))
    burst_from = round(len(sizes) * (1 - burst_share))
    steady_seconds = burst_from / steady_rate
    jobs = tuple(Job(f"cd-{k:04d}", size, STEADY if k < burst_from else BURST,
                     k / steady_rate if k < burst_from else steady_seconds)
                 for k, size in enumerate(sizes))
    plain = tuple(PlainPod(f"plain-{k:04d}", STEADY if at < steady_seconds else BURST, at)
                  for k, at in enumerate(sorted(rng.uniform(0, steady_seconds) if rng.random() > burst_share
                                                else steady_seconds for _ in range(round(len(sizes) * plain_per_job)))))
    return Workload(jobs, plain, steady_seconds)
