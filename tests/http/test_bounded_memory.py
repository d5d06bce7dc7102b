"""Embedded mode stays bounded over a long run: ``imex-webhook serve`` (a real subprocess, short pod TTL)
gets rounds of /filter requests, each naming a pod never seen before, and the worker's resident memory
stays flat after warm-up, because unbound pods not named again for the TTL are forgotten. Before that
bound, every pod a request ever named was kept (+28.6 MB RSS after 20,000 such requests)."""

from __future__ import annotations

import copy
import os
import time
import uuid
from pathlib import Path

import pytest

from tests import serving

ROUNDS = 8
PER_ROUND = 500
POD_TTL = 0.5  # seconds
SLACK_KB = 1536  # allocator noise; without forgetting rounds 3-8 added ~4 MB over round 2 (~1.4 KB a pod)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def _worker(master: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = _children(master)
        if kids:
            return kids[0]  # one worker: the only value --workers accepts
        time.sleep(0.1)
    raise AssertionError("no gunicorn worker under the serve process")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads RSS from /proc")
def test_rss_stays_flat_over_rounds_of_requests_naming_new_pods(
        tmp_path: Path) -> None:
    template = serving.fixture("extender/filter-names-plain.json")
    template["NodeNames"] = template["NodeNames"][:8]
    with serving.serve(tmp_path, "--threads", "4", "--pod-ttl", str(POD_TTL)) as served:
        worker = _worker(served.process.pid)
        session = served.session()
        rss: list[int] = []
        for r in range(ROUNDS):
            for i in range(PER_ROUND):
                body = copy.deepcopy(template)
                body["Pod"]["metadata"].update(name=f"lone-{r}-{i}", uid=str(uuid.uuid4()))
                reply = served.post("/filter", body, session=session)
                assert reply.status_code == 200 and reply.json()["Error"] == ""
            rss.append(_rss_kb(worker))
        inspect = served.get("/inspect")
        assert inspect.status_code == 200
    print(f"worker RSS after each round of {PER_ROUND} new pods (KB): {rss}")
    if os.environ.get("IMEX_BOUNDED_MEMORY_REPORT"):
        Path(os.environ["IMEX_BOUNDED_MEMORY_REPORT"]).write_text(" ".join(map(str, rss)) + "\n")
    assert max(rss[2:]) <= rss[1] + SLACK_KB, rss
