"""Pure decisions over what NVML reported: the node's NVLink clique and its fabric health.

The clique (the value of ``nvidia.com/gpu.clique``) is ``<clusterUUID>.<cliqueID>``, and only when every
GPU with a fabric reports state COMPLETED, status SUCCESS and a non-zero cluster UUID, and all agree.
That is GPU Feature Discovery's rule (``internal/lm/imex.go``) made strict: where GFD skips a GPU that
is not (yet) attached to the fabric, we give no clique and say why, because a node whose fabric is half
up must not be offered to a job that needs the whole domain. A GPU without fabric support (PCIe, or a
driver without the call) does not take part; a GPU NVML cannot read (a placeholder) does not either:
it is reported in the inventory, and the clique of the GPUs that work stays.

Fabric health per GPU, worst first:
- unhealthy: state not COMPLETED, status not SUCCESS, health summary UNHEALTHY, a route unhealthy, or an
  incorrect configuration;
- degraded: summary LIMITED_CAPACITY, degraded bandwidth, route or access-timeout recovery in progress,
  fabric manager disconnected, no partition assigned;
- healthy: COMPLETED, SUCCESS, nothing above (a summary NVML does not support is not a problem: healthy
  GB200s report it, gpud PR #1106);
- none: no multi-node fabric (not supported, or an all-zero cluster UUID with SUCCESS, as on HGX).
The node's value is the worst over its readable GPUs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from webhook.agent.model import ZERO_UUID, FabricState, Gpu, Health, HealthSummary


@dataclass(frozen=True, slots=True)
class CliqueDecision:
    clique: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class GpuHealth:
    health: Health
    flags: tuple[str, ...]  # what made it less than healthy, e.g. ("degradedBandwidth", "summary:Unhealthy")


def fabric_gpus(gpus: Sequence[Gpu]) -> list[Gpu]:
    return [g for g in gpus if g.valid and g.fabric.supported]


def node_clique(gpus: Sequence[Gpu]) -> CliqueDecision:
    if not gpus:
        return CliqueDecision(None, "no GPUs")
    readable = [g for g in gpus if g.valid]
    if not readable:
        return CliqueDecision(None, f"no GPU could be read ({gpus[0].error})")
    members = fabric_gpus(readable)
    if not members:
        note = next((g.fabric.note for g in readable if g.fabric.note), "fabric state not supported")
        return CliqueDecision(None, f"no GPU reports a multi-node NVLink fabric ({note})")
    problems: dict[str, list[str]] = {}
    for gpu in members:
        fabric = gpu.fabric
        if fabric.state is not FabricState.COMPLETED:
            problem = f"fabric state {fabric.state.value}, not Completed"
        elif not fabric.status_ok:
            problem = f"fabric status {fabric.status!r}, not Success"
        elif fabric.cluster_uuid == ZERO_UUID:
            problem = "cluster UUID is all zero (NVLink without a multi-node fabric)"
        else:
            continue
        problems.setdefault(problem, []).append(gpu.ref)
    if problems:
        return CliqueDecision(None, "; ".join(_where(p, refs, len(members)) for p, refs in problems.items()))
    counts = Counter(g.fabric.clique for g in members)
    if len(counts) > 1:
        spread = ", ".join(f"{clique} ({n} GPU{'s' if n > 1 else ''})" for clique, n in sorted(counts.items()))
        return CliqueDecision(None, f"GPUs disagree on the clique: {spread}")
    clique = next(iter(counts))
    return CliqueDecision(clique, f"{len(members)} GPU{'s' if len(members) > 1 else ''} in clique {clique}")


def _where(problem: str, refs: list[str], members: int) -> str:
    if len(refs) == 1:
        return f"{refs[0]}: {problem}"
    return f"{'all ' if len(refs) == members else ''}{len(refs)} GPUs: {problem}"


_DEGRADING = {"degradedBandwidth": "true", "routeRecovery": "true", "accessTimeoutRecovery": "true",
              "gfmState": "disconnected", "partitionAssigned": "false"}


def gpu_health(gpu: Gpu) -> GpuHealth:
    if not gpu.valid or not gpu.fabric.supported:
        return GpuHealth(Health.NONE, ())
    fabric = gpu.fabric
    bad: list[str] = []
    degraded: list[str] = []
    if fabric.state is not FabricState.COMPLETED:
        bad.append(f"state:{fabric.state.value}")
    elif not fabric.status_ok:
        bad.append(f"status:{fabric.status}")
    if fabric.health_summary is HealthSummary.UNHEALTHY:
        bad.append(f"summary:{fabric.health_summary.value}")
    elif fabric.health_summary is HealthSummary.LIMITED_CAPACITY:
        degraded.append(f"summary:{fabric.health_summary.value}")
    if fabric.health.get("routeUnhealthy") == "true":
        bad.append("routeUnhealthy")
    config = fabric.health.get("incorrectConfiguration")
    if config not in (None, "none"):
        bad.append(f"incorrectConfiguration:{config}")
    for name, value in _DEGRADING.items():
        if fabric.health.get(name) == value:
            degraded.append(name if value == "true" else f"{name}:{value}")
    if bad:
        return GpuHealth(Health.UNHEALTHY, tuple(bad + degraded))
    if degraded:
        return GpuHealth(Health.DEGRADED, tuple(degraded))
    if fabric.cluster_uuid == ZERO_UUID:
        return GpuHealth(Health.NONE, ())
    return GpuHealth(Health.HEALTHY, ())


def node_health(gpus: Sequence[Gpu]) -> Health:
    return max((gpu_health(g).health for g in gpus if g.valid), default=Health.NONE)
