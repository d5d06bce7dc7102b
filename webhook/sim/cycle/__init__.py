"""A pure emulator of kube-scheduler's scheduling cycle around an extender (the release we build, v1.37).

Plain data in, plain data out: a KubeSchedulerConfiguration dict, raw Kubernetes objects, and an
``Extender`` object whose four methods take and return the wire dicts kube-scheduler exchanges with an
extender. No HTTP inside: tests plug in an in-process fake or a TLS client.

- ``parse_config`` / ``parse_cluster``: the inputs.
- ``schedule`` (scheduling cycle), ``bind`` (binding cycle), ``schedule_one`` (both): one ``Attempt``.
- ``play``: many pods through repeated cycles, with per-pod outcomes.
Each module's docstring states the kube-scheduler behaviour it reproduces and what it leaves out.
"""

from webhook.sim.cycle.cluster import ClusterState, parse_cluster
from webhook.sim.cycle.config import ExtenderConfig, SchedulerConfig, parse_config
from webhook.sim.cycle.driver import PhaseChange, Play, PodOutcome, play
from webhook.sim.cycle.extender import Extender, ExtenderCallFailed, http_failure
from webhook.sim.cycle.scheduling import Attempt, bind, schedule, schedule_one

__all__ = [
    "Attempt",
    "ClusterState",
    "Extender",
    "ExtenderCallFailed",
    "ExtenderConfig",
    "PhaseChange",
    "Play",
    "PodOutcome",
    "SchedulerConfig",
    "bind",
    "http_failure",
    "parse_cluster",
    "parse_config",
    "play",
    "schedule",
    "schedule_one",
]
