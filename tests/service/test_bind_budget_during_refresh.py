"""``/bind`` over TLS keeps ``--bind-budget`` while the fabric feed's refresh is in flight (issue 38, item 7):
``imex-webhook serve`` against the composition simulator, every Redfish request slowed to 2.5 s, so that
the feed (every 0.2 s) is always half-way through a read of about 12 s when the bind comes. The bind used
to wait for that read before starting its own: 12 s with a 3 s budget. It now answers by the budget with
an Error that says what it waited for, leaves nothing composed and nothing that holds the node's slots,
and the scheduler's retry binds once the fabric is quick again. Engine-level cases (a held refresh, a
hanging fabric, two binds at once, a refresh that ends late): tests/engine/test_bind_budget_under_refresh.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import serving
from tests.service.test_attach_before_bind import admin, attachments, composed, pod_body
from webhook.sim.fabric import inventory
from webhook.sim.fabric.server import RunningSim, start_in_thread

BUDGET = 3.0
LATENCY = 2.5  # per Redfish request
BOUND = 6.0  # far above the budget for a busy machine, far below the 12 s the bind took before


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    with start_in_thread(inventory.demo()) as running:
        yield running


def bind(served: serving.Served, body: dict[str, Any], node: str) -> tuple[float, dict[str, Any]]:
    meta = body["Pod"]["metadata"]
    started = time.monotonic()
    reply = served.post("/bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                  "PodUID": meta["uid"], "Node": node}).json()
    return time.monotonic() - started, reply


def test_bind_during_a_slow_refresh_answers_by_its_budget_and_leaves_nothing_attached(sim: RunningSim,
                                                                                       tmp_path: Path) -> None:
    creds = tmp_path / "fabric-credentials"
    creds.write_text("admin:admin\n")
    with serving.serve(tmp_path / "serve", "--fabric", sim.url, "--fabric-credentials", str(creds),
                       "--fabric-refresh", "0.2", "--bind-budget", str(BUDGET)) as served:
        body = pod_body("during-refresh")
        found = served.post("/filter", body).json()
        assert found["Error"] == "" and found["NodeNames"], found
        node = found["NodeNames"][0]
        admin(sim, "/admin/faults", {"latency_s": LATENCY})
        time.sleep(1.0)  # the feed's next read has begun on the slow fabric

        took, reply = bind(served, body, node)

        admin(sim, "/admin/faults", {"latency_s": 0})
        assert took < BOUND, f"/bind took {took:.1f}s with --bind-budget {BUDGET:g}: {reply}"
        for words in ("free GPU blocks of fabric zone", "did not answer in time", "bind budget 3 s spent",
                      "the scheduler retries"):
            assert words in reply["Error"], reply
        assert composed(sim) == {}
        assert [(a["phase"], a["blocks"]) for a in attachments(served)] in ([], [("Failed", [])])

        _, retried = bind(served, body, node)
        assert retried == {"Error": ""}, retried
        assert sorted(composed(sim).values()) == [node] * 2
