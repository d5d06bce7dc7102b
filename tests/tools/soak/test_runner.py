"""``imex-webhook soak``: a short real run (serve over TLS, embedded demo cluster) and the invariant checker.

The run is short (one minute, ten intervals, as CI runs it), so its figures prove nothing about leaks; what
is checked is the shape of the report and that the stream kept every invariant.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from webhook.tools import cli
from webhook.tools.soak import runner, stream

FIELDS = ("t", "rss_kib", "fds", "threads", "requests", "errors", "groups_placed", "groups_finished", "refusals",
          "latency_ms")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("soak")
    assert cli.main(["soak", "--minutes", "1", "--interval", "6", "--seed", "3", "--out", str(out)]) == 0
    assert (out / "soak.md").read_text().startswith("# imex-webhook soak")
    loaded: dict[str, Any] = json.loads((out / "soak.json").read_text())
    return loaded


def test_intervals_have_every_field(report: dict[str, Any]) -> None:
    samples = report["samples"]
    assert len(samples) >= 4
    for s in samples:
        assert set(FIELDS) <= set(s)
        assert s["rss_kib"] > 0 and s["fds"] > 0 and s["threads"] > 0
        assert set(s["latency_ms"]) == set(stream.VERBS)
        for figures in s["latency_ms"].values():
            assert set(figures) == {"n", "p50", "p99"}
            assert figures["p99"] >= figures["p50"] >= 0
    assert samples[-1]["requests"] > samples[0]["requests"] > 0


def test_stream_is_mixed_and_keeps_the_invariants(report: dict[str, Any]) -> None:
    assert report["violations"] == [] and report["errors"] == 0 and report["ok"] is True
    assert report["groups_placed"] >= 2 and report["groups_finished"] >= 1
    seen = {v for s in report["samples"] for v, f in s["latency_ms"].items() if f["n"]}
    assert {"mutate", "filter", "bind", "complete"} <= seen


# The checker on its own: a hand-made picture that breaks every invariant once.
NODE_DOMAIN = {"a-0": "A", "a-1": "A", "b-0": "B", "b-1": "B"}
NODE_GPUS = dict.fromkeys(NODE_DOMAIN, 4)


def _group(name: str, bound: dict[str, str], size: int = 2, finished: bool = False) -> stream.Group:
    return stream.Group(name, size, 1.0, bound=bound, started=0.0, finished=finished)


def _reservation(name: str, domain: str, size: int = 2) -> dict[str, Any]:
    return {"group": f"ann:{name}", "name": name, "domain": domain, "size": size, "gpusPerPod": 4}


def test_checker_accepts_a_consistent_picture() -> None:
    groups = [_group("soak-1", {"soak-1-0": "a-0", "soak-1-1": "a-1"})]
    inspect = {"groups": [{"group": "ann:ml/soak-1", "pods": [{"node": "a-0"}, {"node": "a-1"}]}],
               "reservations": [_reservation("ml/soak-1", "A")], "domains": [{"domain": "A", "freeGpus": 0}]}
    used = {"a-0": 4, "a-1": 4, "b-0": 0, "b-1": 0}
    assert runner.check_invariants(inspect, NODE_DOMAIN, groups, NODE_GPUS, used) == []


def test_checker_reports_each_violation() -> None:
    split = _group("soak-1", {"soak-1-0": "a-0", "soak-1-1": "b-0"})
    lost = _group("soak-2", {"soak-2-0": "a-1"})
    inspect = {
        "groups": [{"group": "ann:ml/soak-1", "pods": [{"node": "a-0"}, {"node": "b-0"}]}],
        "reservations": [_reservation("ml/soak-1", "A"), {**_reservation("ml/soak-1", "A"), "group": "cd:ml/soak-1"},
                         _reservation("ml/soak-9", "B", size=4)],
        "domains": [{"domain": "B", "freeGpus": -4}],
    }
    used = {"a-0": 4, "a-1": 4, "b-0": 4, "b-1": 0}
    problems = runner.check_invariants(inspect, NODE_DOMAIN, [split, lost], NODE_GPUS, used)
    text = "\n".join(problems)
    assert "group soak-1 split across domains" in text
    assert "service group ann:ml/soak-1 split across domains" in text
    assert "group ml/soak-1 holds 2 reservations" in text
    assert "domain B over-committed: 4 used + 16 promised > 8 GPUs" in text
    assert "domain B has -4 free GPUs" in text
    assert "group soak-2 with running pods has 0 reservations (lost)" in text


def test_finished_groups_promise_nothing() -> None:
    done = _group("soak-1", {"soak-1-0": "a-0", "soak-1-1": "a-1"}, finished=True)
    inspect = {"groups": [], "reservations": [_reservation("ml/soak-1", "A")], "domains": []}
    used = dict.fromkeys(NODE_DOMAIN, 0)
    assert runner.check_invariants(inspect, NODE_DOMAIN, [done], NODE_GPUS, used) == []


def test_rejects_bad_arguments() -> None:
    assert cli.main(["soak", "--minutes", "0"]) == 2
    assert cli.main(["soak", "--minutes", "1", "--interval", "-1"]) == 2
