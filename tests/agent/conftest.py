"""Simulated nodes for the agent tests: each scenario under ``tests/fixtures/nvml/`` is one node, run through
the real NVML adapter over the fake pynvml, with a fake kernel (sysfs and procfs) under ``tmp_path``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kubefake import kube_fake, kubeconfig
from webhook.agent.nvml import Nvml
from webhook.agent.steps import Deadlines
from webhook.agent.sysfs import Host
from webhook.sim import node_scenario as scenario
from webhook.sim.host import SimHost
from webhook.sim.nvml import FakePynvml

__all__ = ["kube_fake", "kubeconfig"]  # the shared API-server fake, re-exported for this package

SCENARIOS = Path(__file__).parent.parent / "fixtures" / "nvml"
# Short enough that a step that can never succeed fails within a test's patience.
FAST = Deadlines(rescan=1, enumerate=0.6, driver=0.6, nvml=0.6, check=0.6, persistence=1, device_plugin=2,
                 allocatable=3, gone=1, poll=0.02)


def scenario_path(name: str) -> Path:
    return SCENARIOS / f"{name}.yaml"


@dataclass
class Simulated:
    """One simulated node: the scenario state, the fake pynvml, the fake kernel and the real adapters."""

    sim: scenario.SimNode
    fake: FakePynvml
    nvml: Nvml
    kernel: SimHost
    host: Host

    def fast(self, **changes: float) -> Deadlines:
        return dataclasses.replace(FAST, **changes)


Make = Callable[[str], Simulated]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``cli.main`` configures logging for a process; the next test must not write to this one's stdout."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def simulate(tmp_path: Path) -> Iterator[Make]:
    made: list[Simulated] = []

    def make(name: str) -> Simulated:
        sim = scenario.load(scenario_path(name))
        root = tmp_path / f"{name}-{len(made)}"
        kernel = SimHost(sim, root / "sys", root / "proc").start()
        fake = FakePynvml(sim)
        node = Simulated(sim, fake, Nvml(fake), kernel, Host(root / "sys", root / "proc", own_pid=-1))
        made.append(node)
        return node

    yield make
    for node in made:
        node.kernel.close()
        node.nvml.shutdown()
