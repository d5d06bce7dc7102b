"""/bind with a slow fabric manager answers within ``--bind-budget`` (which sits below kube-scheduler's extender
httpTimeout): every Redfish call the bind makes counts against the bind's deadline. The simulator's
``latency_s`` fault makes each Redfish request take that long, each one well under the client's own
request deadline, so only the bind's deadline can stop the bind in time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import serving
from tests.fabric_sims import Sim
from tests.service.test_attach_before_bind import admin, pod_body
from webhook.errors import FabricFailure
from webhook.sim.fabric import inventory
from webhook.sim.fabric.server import RunningSim, start_in_thread

BUDGET = 3.0
LATENCY = 2.5  # per Redfish request: a full inventory read (about 5 requests) takes 12.5 s
SLACK = 6.0  # a busy 2-core machine: the answer may come this much after the budget; without it, 12.5 s


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    with start_in_thread(inventory.demo()) as running:
        yield running


def test_bind_with_a_slow_fabric_answers_within_its_budget(sim: RunningSim, tmp_path: Path) -> None:
    creds = tmp_path / "fabric-credentials"
    creds.write_text("admin:admin\n")
    with serving.serve(tmp_path / "serve", "--fabric", sim.url, "--fabric-credentials", str(creds),
                       "--fabric-refresh", "0.2", "--bind-budget", str(BUDGET)) as served:
        body = pod_body("slow-fabric")
        found = served.post("/filter", body).json()
        assert found["Error"] == "" and found["NodeNames"], found
        admin(sim, "/admin/faults", {"latency_s": LATENCY})
        meta = body["Pod"]["metadata"]
        started = time.monotonic()
        reply = served.post("/bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                      "PodUID": meta["uid"], "Node": found["NodeNames"][0]}).json()
        elapsed = time.monotonic() - started
        admin(sim, "/admin/faults", {"latency_s": 0})
    assert reply["Error"], reply  # not attached in time: the scheduler is told so and retries
    assert elapsed < BUDGET + SLACK, f"/bind took {elapsed:.1f}s with --bind-budget {BUDGET:g}: {reply}"


@pytest.mark.parametrize("call", ["free_blocks", "system_for"])
def test_the_reads_bind_makes_stop_at_the_deadline_they_are_given(start_sim: Callable[..., Sim], call: str) -> None:
    sim = start_sim()
    fabric = sim.fabric(timeout=5.0)  # a fresh one: system_for has to discover first
    sim.faults(latency_s=LATENCY)
    started = time.monotonic()
    try:
        with pytest.raises(FabricFailure, match=r"deadline|no complete answer"):
            if call == "free_blocks":
                fabric.free_blocks("pool-a", deadline=time.monotonic() + 1.0)
            else:
                fabric.system_for("a-0", None, deadline=time.monotonic() + 1.0)
        assert time.monotonic() - started < 1.0 + SLACK
    finally:
        sim.faults(latency_s=0)
        fabric.stop()
