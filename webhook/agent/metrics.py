"""The agent's Prometheus metrics, on a registry of its own (several agents can live in one process)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.agent import clique
from webhook.agent.model import Gpu

# Hot-add and release take from milliseconds (nothing to do) to minutes (device plugin, kubelet status).
_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _GpuCollector(Collector):
    def __init__(self, gpus: Callable[[], Sequence[Gpu]]) -> None:
        self._gpus = gpus

    def collect(self):  # type: ignore[no-untyped-def]
        by_health: Tally[str] = Tally()
        for gpu in self._gpus():
            by_health["unreadable" if not gpu.valid else clique.gpu_health(gpu).health.label] += 1
        family = GaugeMetricFamily("imex_agent_gpus", "GPUs NVML reports on this node, by fabric health "
                                   "(unreadable: the GPU's calls fail)", labels=["health"])
        for health in ("healthy", "degraded", "unhealthy", "none", "unreadable"):
            family.add_metric([health], float(by_health[health]))
        yield family


class AgentMetrics:
    def __init__(self, gpus: Callable[[], Sequence[Gpu]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.nvml_up = Gauge("imex_agent_nvml_up", "1 while NVML is initialised", registry=self.registry)
        self.passes = Counter("imex_agent_passes_total", "Agent passes by outcome", ["outcome"],
                              registry=self.registry)
        self.node_patches = Counter("imex_agent_node_patches_total", "Merge patches sent to the Node",
                                    registry=self.registry)
        self.operations = Counter("imex_agent_operations_total", "Hot-adds and releases by outcome",
                                  ["operation", "outcome"], registry=self.registry)
        self.duration = Histogram("imex_agent_operation_duration_seconds", "Time of a hot-add or release",
                                  ["operation", "outcome"], buckets=_BUCKETS, registry=self.registry)
        self.steps = Histogram("imex_agent_step_duration_seconds", "Time of each hot-add or release step",
                               ["operation", "step", "outcome"], buckets=_BUCKETS, registry=self.registry)
        self.registry.register(_GpuCollector(gpus))

    def observer(self, operation: str) -> Callable[[str, str, float], None]:
        def observe(step: str, outcome: str, seconds: float) -> None:
            self.steps.labels(operation, step, outcome).observe(seconds)
        return observe

    def finished(self, operation: str, outcome: str, seconds: float) -> None:
        self.operations.labels(operation, outcome).inc()
        self.duration.labels(operation, outcome).observe(seconds)
