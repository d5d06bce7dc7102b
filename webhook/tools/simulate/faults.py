"""The faults ``imex-webhook simulate`` puts the cluster through: node failures and fabric degradations.

A model, not a measurement (docs/SIMULATE.md, "Faults"):
- a **node failure** takes a node (any node) out of service: its kubelet stops reporting, so the node
  lifecycle controller marks it NotReady and taints it ``node.kubernetes.io/unreachable`` (NoSchedule and
  NoExecute). Every scheduler sees that, every policy stops placing there, and every job with a pod on it
  is restarted. It comes back after its repair time.
- a **fabric degradation** of an NVLink tray: the node agent labels it ``imex-webhook.io/fabric-health=
  degraded`` for a while, then ``healthy``. The node stays Ready; only imex-webhook reads the label. A
  ComputeDomain job (its pods talk over NVLink; plain pods and fabric groups do not) running in that tray's
  domain at any time during the degradation is lost with probability ``degraded_loss`` (once per
  degradation it lives through), at a moment drawn uniformly over the time it spends under it, and
  restarts.

Both are Poisson processes over the arrival window (per node per day, a node drawn uniformly), durations
exponential with the given mean (at least a minute). The events come from the seed on streams of their
own, so the job stream and the faults are the same for every policy, and the same whatever the other
kind's rate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from webhook.tools.simulate.workload import Params

FAIL, DEGRADE = "fail", "degrade"
DAY, HOUR = 86400.0, 3600.0


@dataclass(frozen=True)
class Fault:
    kind: str  # fail | degrade
    node: int
    start: float
    end: float  # repaired, or healthy again


def _process(rng: random.Random, kind: str, rate_per_node_day: float, mean_hours: float, nodes: list[int],
             horizon: float) -> list[Fault]:
    if rate_per_node_day <= 0 or not nodes or horizon <= 0:
        return []
    rate = rate_per_node_day * len(nodes) / DAY  # events per second, all of these nodes together
    out, now = [], rng.expovariate(rate)
    while now < horizon:
        node = nodes[rng.randrange(len(nodes))]
        # At least a minute: a fault must end after it starts (and one shorter than that is no fault).
        lasts = max(60.0, rng.expovariate(1 / (mean_hours * HOUR)))
        out.append(Fault(kind, node, round(now, 3), round(now + lasts, 3)))
        now += rng.expovariate(rate)
    return out


def generate(p: Params, horizon: float, nvlink: list[bool]) -> list[Fault]:
    """Every fault in [0, ``horizon``) on a cluster whose node ``i`` is an NVLink tray when ``nvlink[i]``,
    ordered by start: the same list for the same parameters, on every machine."""
    every = list(range(len(nvlink)))
    trays = [n for n in every if nvlink[n]]
    failures = _process(random.Random(f"node-failures/{p.seed}"), FAIL, p.node_failures, p.repair_hours,
                        every, horizon)
    degradations = _process(random.Random(f"fabric-degradations/{p.seed}"), DEGRADE, p.fabric_degradations,
                            p.degraded_hours, trays, horizon)
    return sorted(failures + degradations, key=lambda f: (f.start, f.kind, f.node))


def describe(faults: list[Fault], names: list[str]) -> dict[str, object]:
    """Counts and node-hours, for the report (the same for every policy)."""
    fails = [f for f in faults if f.kind == FAIL]
    degraded = [f for f in faults if f.kind == DEGRADE]
    return {"node_failures": len(fails), "node_hours_down": sum(f.end - f.start for f in fails) / HOUR,
            "fabric_degradations": len(degraded),
            "node_hours_degraded": sum(f.end - f.start for f in degraded) / HOUR,
            "nodes_failed": sorted({names[f.node] for f in fails}),
            "nodes_degraded": sorted({names[f.node] for f in degraded})}
