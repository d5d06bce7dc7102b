"""``imex-webhook demo`` end to end (the README's first command): it starts the real TLS server with the
simulated fabric and node agents, plays the scenario through /mutate and then kube-scheduler's emulated
cycle (in-tree filters, /filter, /prioritize, /bind), and its table shows the placements the demo cluster
must produce, and kube-scheduler's FailedScheduling text for the job that fits nowhere; it exits 0 only
if all are right."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import serving
from webhook.demo import cluster as demo


def test_the_demo_places_every_job_where_it_must_and_exits_zero(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "demo", "--exit", "--port", str(serving.free_port()),
         "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:] + (tmp_path / "serve.log").read_text()[-3000:]
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line and not line.startswith("-")}
    assert demo.clique_value("gb200-c") in rows["train-8"] and rows["train-8"].rstrip().endswith("ok")
    assert demo.clique_value("gb200-a") in rows["train-16"]
    assert demo.clique_value("gb200-b") in rows["train-4"]
    assert "pcie-pool-1" in rows["fabric-3x2"] and " 4 " in rows["fabric-3x2"]
    assert "no domain can host 20 pods" in rows["train-20"]
    nodes = len(demo.nodes())
    assert f"0/{nodes} nodes are available: " in rows["train-20"]  # as kube-scheduler words it
    # The in-tree filters kept the extender from nodes without the domain label (HGX) or a free channel.
    assert "node(s) didn't match Pod's node affinity/selector" in rows["train-20"]
    assert "cannot allocate all claims" in rows["train-20"]
    assert "FailedScheduling train-20-0: " in result.stderr
    assert "/inspect" in result.stdout
    assert "scheduled 8/8" in result.stderr  # progress is shown
