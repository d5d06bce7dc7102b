"""What a simulation run leaves behind: each job's state and one policy's whole outcome.

``simulation`` fills them in, ``report`` turns them into metrics; both import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.tools.simulate.workload import Job, Params


@dataclass
class JobState:
    """One job across its attempts: a restart deletes its pods and creates them again (a new attempt)."""

    placed: list[int | None]
    bound_at: list[float]
    queued_at: float  # when the current attempt's pods were created (arrival, or the last restart)
    first_placed: float | None = None
    started: float | None = None  # when the current attempt began to run
    ended: float | None = None
    outcome: str = "pending"  # pending | running | completed | stuck
    split: bool = False
    held_gpu_seconds: float = 0.0  # GPU-seconds held by pods of a job that was torn down as stuck
    attempt: int = 0  # events of an earlier attempt are stale
    waited: float = 0.0  # seconds queued before each start, every attempt together
    restarts_node: int = 0  # runs cut short by the failure of one of the job's nodes
    lost_fabric: int = 0  # runs lost to a degraded fabric in the job's domain
    lost_gpu_seconds: float = 0.0  # GPU-seconds of the runs cut short

    @property
    def restarts(self) -> int:
        return self.restarts_node + self.lost_fabric

    @property
    def placed_count(self) -> int:
        return sum(1 for n in self.placed if n is not None)


@dataclass(slots=True)
class Placement:
    """One pod on one node, from its bind until its job released it (``released``: None while bound). The
    run's placement record: every bind, partial placements and runs later lost included."""

    job: int
    pod: int
    node: int
    bound: float
    released: float | None = None


@dataclass
class Outcome:
    """Everything one policy's run produced; ``report`` turns it into metrics."""

    policy: str
    params: Params
    jobs: list[Job]
    states: list[JobState]
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # (t, GPUs held, GPUs useful)
    decisions: list[float] = field(default_factory=list)  # seconds per pod scheduling attempt
    placements: list[Placement] = field(default_factory=list)  # every bind, in order
    attaches: int = 0
    attached_gpus: int = 0
    wall_seconds: float = 0.0
