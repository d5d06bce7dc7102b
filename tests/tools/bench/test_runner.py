"""``imex-webhook bench --quick``: both servers start, every figure is there with its ratio.

One quick run (a few seconds, real gunicorn + TLS subprocesses) feeds the checks; figures are never
compared with targets here, since CI machines are too noisy for that: the shapes are the contract.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.tools import cli
from webhook.tools.bench import payloads

FIGURES = ("throughput_rps", "p50_ms", "p99_ms", "server_cpu_ms_per_request", "requests", "client_cpu_utilisation")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench")
    assert cli.main(["bench", "--quick", "--out", str(out)]) == 0
    loaded: dict[str, Any] = json.loads((out / "bench.json").read_text())
    return out, loaded


def test_records_machine_and_parameters(bench: tuple[Path, dict[str, Any]]) -> None:
    _, result = bench
    assert result["machine"]["cores"] >= 1
    assert result["machine"]["python"].count(".") == 2
    params = result["parameters"]
    assert params["quick"] is True
    assert params["server_workers"] == 1 and params["worker_class"] == "gthread"
    for key in ("sizes", "concurrency", "duration", "repeats", "procs", "threads", "log_level"):
        assert key in params


def test_every_http_scenario_has_both_sides_and_ratios(bench: tuple[Path, dict[str, Any]]) -> None:
    _, result = bench
    sizes = result["parameters"]["sizes"]
    expected = {f"{verb}-{mode}-{size}" for verb in ("filter", "prioritize") for mode in ("names", "nodelist")
                for size in sizes}
    if "mutate" not in result["skipped"]:
        expected.add("mutate")
    assert set(result["http"]) == expected
    for name, row in result["http"].items():
        for side in ("imex", "baseline"):
            for figure in FIGURES:
                assert row[side][figure] >= 0, (name, side, figure)
            assert len(row[side]["runs"]) == result["parameters"]["repeats"]
            assert row[side]["requests"] > 0 and row[side]["errors"] == 0
        for ratio in ("throughput", "p50", "p99", "cpu_per_request"):
            assert row["ratio"][ratio] > 0, (name, ratio)
        assert set(row["met"]) == {"throughput>=0.8", "p99<=1.25"}


def test_in_process_figures_and_summary(bench: tuple[Path, dict[str, Any]]) -> None:
    out, result = bench
    micro = result["in_process"]
    for size in result["parameters"]["sizes"]:
        for case in ("filter_names_{}_reserved", "filter_names_{}_first_pod", "prioritize_names_{}",
                     "orjson_loads_names_{}"):
            assert micro[case.format(size)]["p99_ms"] > 0
        nodelist = micro[f"filter_nodelist_{size}"]
        assert nodelist["ratio_to_loads"] > 0 and nodelist["decision"]["samples"] >= 1
        assert micro[f"filter_names_{size}_reserved"]["passed"] > 0  # the reserved group has room
    assert micro["mutate"]["p50_ms"] > 0 and micro["parse_pod"]["p50_ms"] > 0
    for size in result["parameters"]["sizes"]:
        for case in ("filter_names_{}_half_shuffled", "filter_view_names_{}", "baseline_view_names_{}"):
            assert micro[case.format(size)]["p50_ms"] > 0
    assert result["serial_cycle"]["extender_pods_per_s_ceiling"] > 0
    assert result["summary"]["mutate_in_process_p50_ms"] == micro["mutate"]["p50_ms"]
    table = (out / "bench.md").read_text()
    for name in result["http"]:
        assert f"| {name} |" in table


def test_full_and_lean_nodes_mean_the_same_to_the_service() -> None:
    policy = Policy()
    for i in (0, 17, 18, 4999):
        lean = parsing.node(payloads.lean_node(i), policy.domain_labels)
        full = parsing.node(payloads.full_node(i), policy.domain_labels)
        assert lean == full
    assert len(orjson.dumps(payloads.full_node(0))) > 4000  # what the API server stores for a GPU node


def test_the_serial_cycle_is_measured_against_a_baseline_answering_the_same_bytes(
        bench: tuple[Path, dict[str, Any]]) -> None:
    out, result = bench
    serial = result["serial_cycle"]
    assert serial["nodes"] == max(result["parameters"]["sizes"]) and serial["passed"] > 0
    for side in ("imex", "baseline"):
        assert len(serial[side]["runs"]) == result["parameters"]["repeats"]
        for figure in ("pair_p50_ms", "filter_p50_ms", "prioritize_p50_ms", "server_cpu_ms_per_cycle"):
            assert serial[side][figure] > 0, (side, figure)
        assert serial[side]["cycles"] >= result["parameters"]["min_requests"]
    assert serial["pair_ratio"] > 0 and serial["reasons_complete"] is True
    assert serial["filter_reply_bytes"] > serial["prioritize_reply_bytes"] > 0
    assert "the baseline that decodes the same requests and answers the same bytes" in (out / "bench.md").read_text()


def test_every_target_of_the_issue_is_reported_with_met_or_missed(bench: tuple[Path, dict[str, Any]]) -> None:
    out, result = bench
    rows = result["summary"]["issue_targets"]
    small, big = min(result["parameters"]["sizes"]), max(result["parameters"]["sizes"])
    names = {row["name"] for row in rows}
    for wanted in (f"filter-names-{small} throughput", f"prioritize-names-{small} p99",
                   f"serial cycle at {big} nodes vs the same bytes", f"filter reply at {big} names",
                   "every rejected node has a reason", f"RSS of the worker with {big} nodes cached"):
        assert wanted in names
    for row in rows:
        assert row["value"] is not None or row["name"].startswith("mutate"), row
        assert row["met"] in (True, False, None)
    assert result["memory"]["cached"][f"imex-{big}"] > 0 and result["memory"]["after_run"]["baseline"] > 0
    table = (out / "bench.md").read_text()
    section = table.split("## The targets", 1)[1].split("\n## ", 1)[0]
    verdicts = [line.rsplit("|", 2)[1].strip() for line in section.splitlines() if line.startswith("| ")][1:]
    assert len(verdicts) == len(rows) and set(verdicts) <= {"met", "**missed**", "reported"}


def test_the_job_larger_than_one_domain_is_measured_wherever_it_has_segments(
        bench: tuple[Path, dict[str, Any]]) -> None:
    out, result = bench
    rows = result["segments"]
    assert set(rows) == {str(size) for size in result["parameters"]["sizes"]}
    measured = {size: row for size, row in rows.items() if "skipped" not in row}
    assert measured, rows  # the quick run's largest cluster holds a job of several segments
    for size, row in measured.items():
        for case in ("segment_plan_{}", "segment_plan_{}_one_domain_choice", "segment_first_filter_{}",
                     "segment_first_filter_{}_one_domain_group", "segment_later_filter_{}",
                     "segment_later_filter_{}_one_domain_group"):
            assert row["in_process"][case.format(size)]["p50_ms"] > 0, case
        for scenario in ("first_filter", "later_filter"):
            assert row[scenario]["p50_ms"] > 0 and row[scenario]["baseline_p50_ms"] > 0 and row[scenario]["ratio"] > 0
        assert row["memory"]["after_first_filter"] > 0
        assert f"### {int(size):,} nodes: {row['job']['pods']} pods in {row['job']['segments']} segments" in (
            out / "bench.md").read_text()
