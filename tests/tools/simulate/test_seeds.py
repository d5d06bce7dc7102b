"""``imex-webhook simulate --seeds`` (docs/SIMULATE.md, "Several seeds at once"): each seed runs as ``--seed``
would, in worker processes, and the combined report compares the service's p99 per class with gang-tas's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from webhook.tools import cli
from webhook.tools.simulate import seeds, simulation, workload
from webhook.tools.simulate.outcome import JobState
from webhook.tools.simulate.report import TIMING_KEYS, delay_by_size, wait_percentiles
from webhook.tools.stats import percentile

# Six cliques of six trays with multi-rack jobs: every size class, in seconds per seed.
SMALL = workload.Params(cliques=6, clique_nodes=6, jobs=50, fabric_zones=1, fabric_share=0.05, load=0.6,
                        multi_rack_load=0.3)
POLICIES = ("imex-webhook", "gang-tas")


def _without_timings(result: dict[str, Any]) -> dict[str, Any]:
    result = orjson.loads(orjson.dumps(result))
    for row in result["policies"].values():
        for key in TIMING_KEYS:
            row.pop(key)
    return result


@pytest.fixture(scope="module")
def combined(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("seeds")
    return out, seeds.run(SMALL, (3, 4), POLICIES, out, plots=False, workers=2)


@pytest.mark.parametrize(("text", "parsed"), [
    ("7", (7,)), ("6,7,8", (6, 7, 8)), (" 9 , 11 ", (9, 11)), ("0", (0,)), (str(seeds.SEED_MAX), (seeds.SEED_MAX,)),
])
def test_seeds_are_read_in_the_order_given(text: str, parsed: tuple[int, ...]) -> None:
    assert seeds.parse_seeds(text) == parsed


@pytest.mark.parametrize(("text", "error"), [
    ("", "comma-separated whole numbers"),
    ("6,,7", "comma-separated whole numbers"),
    ("six", "'six' is not a whole number"),
    ("-1", "'-1' is not a whole number"),
    ("1.5", "'1.5' is not a whole number"),
    ("9" * 400, "is not a whole number from 0 to 2147483647"),
    (str(seeds.SEED_MAX + 1), "is not a whole number"),
    ("7,8,7", "seed 7 is given twice"),
    (",".join(map(str, range(seeds.MAX_SEEDS + 1))), f"at most {seeds.MAX_SEEDS}"),
    # a repeat at the end of a long list: refused by its length before any per-seed work
    (",".join(map(str, [*range(200_000), 199_999])), f"200001 seeds; at most {seeds.MAX_SEEDS}"),
])
def test_a_seed_list_that_cannot_be_used_is_refused_with_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error) as caught:
        seeds.parse_seeds(text)
    assert len(str(caught.value)) < 200  # a hostile value is cut, not echoed whole


def test_each_seed_gives_what_a_run_of_that_seed_alone_gives(combined: tuple[Path, dict[str, Any]],
                                                           tmp_path: Path) -> None:
    out, _ = combined
    for seed in (3, 4):
        alone = simulation.run(replace(SMALL, seed=seed), POLICIES, tmp_path / str(seed), plots=False, progress=False)
        written = orjson.loads((out / f"seed-{seed}" / "metrics.json").read_bytes())
        assert _without_timings(written) == _without_timings(alone)
        assert (out / f"seed-{seed}" / "report.md").is_file()


def test_the_combined_report_holds_every_policy_seed_and_class(combined: tuple[Path, dict[str, Any]]) -> None:
    out, result = combined
    assert result["seeds"] == [3, 4]
    assert result == orjson.loads((out / "seeds.json").read_bytes())
    assert workload.RACK_CLASS in result["classes"]  # the small stream has multi-rack jobs at both seeds
    text = (out / "seeds.md").read_text()
    for policy in POLICIES:
        for seed in (3, 4):
            row = result["policies"][policy][str(seed)]
            per_seed = orjson.loads((out / f"seed-{seed}" / "metrics.json").read_bytes())["policies"][policy]
            assert row["completed"] == per_seed["completed"] and row["split"] == per_seed["split"]
            for cls in result["classes"]:
                assert row["classes"][cls]["wait_p99_minutes"] == per_seed["delay_by_size"][cls]["wait_p99_minutes"]
            assert f"| {policy} | {seed} | {row['completed']} of {row['submitted']} |" in text
    assert "imex-webhook against gang-tas" in text


def test_the_verdict_counts_only_classes_both_policies_started_whole(combined: tuple[Path, dict[str, Any]]) -> None:
    _, result = combined
    verdict = result["against_peer"]["imex-webhook"]
    compared = met = 0
    for seed in ("3", "4"):
        for cls in result["classes"]:
            ours = result["policies"]["imex-webhook"][seed]["classes"][cls]
            peer = result["policies"]["gang-tas"][seed]["classes"][cls]
            cell = verdict["cells"][seed][cls]
            whole = ours["started"] == ours["submitted"] and peer["started"] == peer["submitted"]
            assert cell["comparable"] is (whole and ours["wait_p99_minutes"] is not None
                                          and peer["wait_p99_minutes"] is not None)
            if cell["comparable"]:
                compared += 1
                met += cell["met"]
                assert cell["met"] is (ours["wait_p99_minutes"] <= peer["wait_p99_minutes"])
    assert (verdict["compared"], verdict["met"]) == (compared, met)
    assert verdict["target_met"] is (met == compared and verdict["no_split_or_stuck"])


def test_the_pooled_reading_is_every_started_jobs_wait_over_the_seeds(combined: tuple[Path, dict[str, Any]]) -> None:
    out, result = combined
    text = (out / "seeds.md").read_text()
    for policy in POLICIES:
        metrics = [orjson.loads((out / f"seed-{s}" / "metrics.json").read_bytes())["policies"][policy] for s in (3, 4)]
        for cls in result["classes"]:
            cells = [m["delay_by_size"][cls] for m in metrics]
            assert all(len(c["waits_minutes"]) == c["started"] for c in cells)
            every = sorted(w for c in cells for w in c["waits_minutes"])
            pooled = result["pooled"][policy][cls]
            assert pooled["started"] == len(every) == sum(c["started"] for c in cells)
            assert pooled["submitted"] == sum(c["submitted"] for c in cells)
            assert pooled["wait_p99_minutes"] == (percentile(every, 99) if every else None)
            assert pooled["wait_p100_minutes"] == (max(every) if every else None)
            longest = [c["wait_p100_minutes"] for c in cells if c["wait_p100_minutes"] is not None]
            assert pooled["wait_p100_minutes"] == (pytest.approx(max(longest), abs=1e-4) if longest else None)
    verdict = result["against_peer"]["imex-webhook"]["pooled"]
    for cls in result["classes"]:
        assert verdict[cls] == seeds.compare(result["pooled"]["imex-webhook"][cls], result["pooled"]["gang-tas"][cls])
    assert "| pooled |" in text and "Pooled over the seeds" in text


@pytest.mark.parametrize(("waits", "started", "p99", "p100"), [
    ([[1.0, 2.0], [3.0]], 3, 3.0, 3.0),
    ([[], [5.0]], 1, 5.0, 5.0),  # one seed started none of the class
    ([[], []], 0, None, None),
    ([[0.0] * 99, [100.0]], 100, 0.0, 100.0),  # the longest wait on one seed: p99 misses it, p100 does not
    ([[7.0] * 150, [1.0, 300.0, 2.0]], 153, 7.0, 300.0),  # the longest wait not last in its seed's list
    ([[float(i) for i in range(200)], [50.0]], 201, 197.0, 199.0),  # p99 by nearest rank: the 199th of 201
], ids=["two-seeds", "one-seed-empty", "none-started", "one-long-wait", "unsorted-seed", "nearest-rank"])
def test_pooling_sums_the_counts_and_takes_percentiles_over_all_waits(waits: list[list[float]], started: int,
                                                                      p99: float | None, p100: float | None) -> None:
    cells = [{"submitted": len(w) + 1, "completed": len(w), "split": 0, "stuck": 1, "started": len(w),
              "waits_minutes": w, "after_arrivals": len(w) // 2, "after_arrivals_gpu_hours": 1.5 * len(w)}
             for w in waits]
    pooled = seeds.pool(cells)
    assert pooled["started"] == started and pooled["submitted"] == started + len(waits)
    assert pooled["after_arrivals"] == sum(len(w) // 2 for w in waits)
    assert pooled["after_arrivals_gpu_hours"] == 1.5 * started
    assert pooled["stuck"] == len(waits) and pooled["wait_p99_minutes"] == p99
    assert pooled["wait_p100_minutes"] == p100


@pytest.mark.parametrize(("waits", "expected"), [
    ([], {"wait_p50_minutes": None, "wait_p90_minutes": None, "wait_p99_minutes": None, "wait_p100_minutes": None}),
    ([4.0], {"wait_p50_minutes": 4.0, "wait_p90_minutes": 4.0, "wait_p99_minutes": 4.0, "wait_p100_minutes": 4.0}),
    ([9.0, 1.0, 5.0], {"wait_p50_minutes": 5.0, "wait_p90_minutes": 9.0, "wait_p99_minutes": 9.0,
                       "wait_p100_minutes": 9.0}),
    ([0.0] * 199 + [60.0], {"wait_p50_minutes": 0.0, "wait_p90_minutes": 0.0, "wait_p99_minutes": 0.0,
                            "wait_p100_minutes": 60.0}),
], ids=["none", "one", "unsorted", "one-in-two-hundred"])
def test_every_class_reports_its_longest_wait_as_p100(waits: list[float], expected: dict[str, float | None]) -> None:
    assert wait_percentiles(waits) == expected


@pytest.mark.parametrize(("cell", "shown"), [
    ({"wait_p50_minutes": 1.0, "wait_p90_minutes": 2.0, "wait_p99_minutes": 3.0, "wait_p100_minutes": 45.25,
      "started": 5, "submitted": 5}, "1.0 / 2.0 / 3.0 / 45.2"),
    ({"wait_p50_minutes": 1.0, "wait_p90_minutes": 2.0, "wait_p99_minutes": 3.0, "wait_p100_minutes": 80.0,
      "started": 4, "submitted": 5}, "1.0 / 2.0 / 3.0 / 80.0 (4/5)"),
    ({"wait_p50_minutes": None, "wait_p90_minutes": None, "wait_p99_minutes": None, "wait_p100_minutes": None,
      "started": 0, "submitted": 0}, "- / - / - / -"),
], ids=["all-started", "some-left", "empty-class"])
def test_the_tables_show_the_longest_wait_after_the_p99(cell: dict[str, Any], shown: str) -> None:
    assert seeds._waits_of_started(cell) == shown


def _pooled_cells(out: Path, heading: str, policy: str) -> list[str]:
    """The cells of ``policy``'s row in the pooled table of seeds.md that ``heading`` opens."""
    text = (out / "seeds.md").read_text()
    row = next(line for line in text[text.index(heading):].splitlines() if line.startswith(f"| {policy} |"))
    return [c.strip() for c in row.strip("|").split("|")][1:]


def test_the_pooled_table_shows_each_classs_longest_wait(combined: tuple[Path, dict[str, Any]]) -> None:
    out, result = combined
    for policy in POLICIES:
        cells = _pooled_cells(out, "Pooled over the seeds", policy)
        for cls, cell in zip(result["classes"], cells, strict=True):
            longest = result["pooled"][policy][cls]["wait_p100_minutes"]
            assert cell.split(" (")[0].split(" / ")[3] == ("-" if longest is None else f"{longest:.1f}"), (policy, cls)
        totals = result["pooled_totals"][policy]
        rows = [result["policies"][policy][str(s)] for s in result["seeds"]]
        assert totals["stuck"] == sum(r["stuck"] for r in rows) and totals["split"] == sum(r["split"] for r in rows)
        assert totals["utilisation_useful_mean"] == pytest.approx(sum(r["utilisation_useful"] for r in rows) / 2)


def _cls(started: int, p99: float | None, submitted: int = 10) -> dict[str, Any]:
    return {"submitted": submitted, "started": started, "wait_p99_minutes": p99}


@pytest.mark.parametrize(("ours", "peer", "expected"), [
    (_cls(10, 5.0), _cls(10, 5.0), {"comparable": True, "met": True, "over_minutes": 0.0}),
    (_cls(10, 4.0), _cls(10, 5.0), {"comparable": True, "met": True, "over_minutes": 0.0}),
    (_cls(10, 7.5), _cls(10, 5.0), {"comparable": True, "met": False, "over_minutes": 2.5}),
    (_cls(10, 1.0), _cls(8, 0.0), {"comparable": False, "met": None, "over_minutes": None}),  # peer left 2 out
    (_cls(9, 1.0), _cls(10, 9.0), {"comparable": False, "met": None, "over_minutes": None}),
    (_cls(0, None, 0), _cls(0, None, 0), {"comparable": False, "met": None, "over_minutes": None}),  # empty class
], ids=["equal", "below", "over", "peer-left-jobs-out", "ours-left-jobs-out", "no-jobs"])
def test_a_class_is_compared_only_where_both_started_every_job(ours: dict[str, Any], peer: dict[str, Any],
                                                               expected: dict[str, Any]) -> None:
    assert seeds.compare(ours, peer) == expected


def test_a_failing_seed_is_named(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"seed 3: ValueError: tuple.index"):
        seeds.run(SMALL, (3, 4), ("no-such-policy",), tmp_path, plots=False, workers=2)


def test_the_cli_runs_several_seeds_and_refuses_what_it_cannot_use(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    small = ["--cliques", "6", "--jobs", "20", "--fabric-zones", "1", "--no-plots"]
    assert cli.main(["simulate", "--out", str(tmp_path), *small, "--seeds", "5,6", "--workers", "1",
                     "--policies", "imex-webhook,gang-tas"]) == 0
    printed = capsys.readouterr().out
    assert "| imex-webhook | 5 |" in printed and "| gang-tas | 6 |" in printed
    assert (tmp_path / "seeds.md").is_file() and (tmp_path / "seed-5" / "metrics.json").is_file()
    for flags, error in ((["--seeds", "5,x"], "'x' is not a whole number"),
                         (["--seeds", "5", "--workers", "0"], "--workers 0: expected 1 to"),
                         (["--seeds", "5", "--workers", "100000"], "--workers 100000: expected 1 to")):
        assert cli.main(["simulate", "--out", str(tmp_path), *small, *flags]) == 2
        assert error in capsys.readouterr().err


def _job(index: int, pods: int, runtime: float) -> workload.Job:
    return workload.Job(index, f"job-{index:05d}", "nvlink", pods, 4, float(index), runtime)


@pytest.mark.parametrize(("started", "after"), [
    ([None, None], 0),  # never ran: not put off, left out
    ([50.0, 100.0], 0),  # both ran by the last arrival (100 s): at it is not after it
    ([50.0, 100.5], 1),
    ([3600.0, 7200.0], 2),
], ids=["never-ran", "by-the-last-arrival", "one-after", "both-after"])
def test_a_class_counts_the_jobs_and_gpu_hours_that_ran_only_after_the_last_arrival(
        started: list[float | None], after: int) -> None:
    jobs = [_job(0, 8, 1800.0), _job(100, 8, 3600.0)]  # arrivals at 0 s and 100 s: the window's end is 100 s
    states = [JobState([None] * 8, [0.0] * 8, j.arrival, started=s) for j, s in zip(jobs, started, strict=True)]
    cell = delay_by_size(jobs, states, workload.window(jobs), 1000)["5-8"]
    late = [j for j, s in zip(jobs, started, strict=True) if s is not None and s > 100.0]
    assert cell["after_arrivals"] == after
    assert cell["after_arrivals_gpu_hours"] == pytest.approx(sum(j.gpu_demand * j.runtime for j in late) / 3600)


def test_the_work_put_off_until_the_stream_ended_is_pooled_and_shown(combined: tuple[Path, dict[str, Any]]) -> None:
    out, result = combined
    for policy in POLICIES:
        cells = _pooled_cells(out, "Put off until the stream ended", policy)
        for cls, cell in zip(result["classes"], cells, strict=True):
            per_seed = [orjson.loads((out / f"seed-{s}" / "metrics.json").read_bytes())["policies"][policy]
                        ["delay_by_size"][cls] for s in result["seeds"]]
            pooled = result["pooled"][policy][cls]
            assert pooled["after_arrivals"] == sum(c["after_arrivals"] for c in per_seed)
            assert cell == (f"{pooled['after_arrivals']} of {pooled['submitted']} "
                            f"({pooled['after_arrivals_gpu_hours']:.0f} GPU-h)")
    assert any(result["pooled"][p][c]["after_arrivals"] for p in POLICIES for c in result["classes"]), \
        "the small stream leaves some work to the drain: the figure can be told from zero"
