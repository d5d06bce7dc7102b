"""The tools' numeric flags (bench, simulate, soak): a value they cannot use gets one line naming the flag
and exit 2 before anything runs; the edge values they accept."""

from __future__ import annotations

import argparse

import pytest

from webhook import cli
from webhook.command import out_of_range
from webhook.tools.cli import BENCH_BOUNDS, SIMULATE_BOUNDS, SOAK_BOUNDS


@pytest.mark.parametrize(("argv", "message"), [
    (["simulate", "--cliques", "0"], "--cliques 0: expected a whole number in [1, 20000]"),
    (["simulate", "--jobs", str(10**30)], "--jobs 1e+30: expected a whole number in [1, 1e+07]"),
    (["simulate", "--load", "-1"], "--load -1: expected a number in [0.001, 100]"),
    (["simulate", "--fabric-pool", "-5"], "--fabric-pool -5: expected a whole number in [0, 1e+06]"),
    (["simulate", "--stuck-timeout", "0"], "--stuck-timeout 0: expected a number in [1, 3.1536e+07]"),
    (["simulate", "--node-failures", "-1"], "--node-failures -1: expected a number in [0, 100]"),
    (["simulate", "--repair-hours", "0"], "--repair-hours 0: expected a number in [0.01, 8760]"),
    (["simulate", "--fabric-degradations", "1e9"], "--fabric-degradations 1e+09: expected a number in [0, 100]"),
    (["simulate", "--degraded-hours", "-2"], "--degraded-hours -2: expected a number in [0.01, 8760]"),
    (["simulate", "--degraded-loss", "1.5"], "--degraded-loss 1.5: expected a number in [0, 1]"),
    (["simulate", "--degraded-loss", "nan"], "--degraded-loss"),
    (["simulate", "--exclusive-share", "1.5"], "--exclusive-share 1.5: expected a number in [0, 1]"),
    (["simulate", "--exclusive-share", "-0.25"], "--exclusive-share -0.25: expected a number in [0, 1]"),
    (["simulate", "--exclusive-share", "nan"], "--exclusive-share nan: expected a finite number"),
    (["bench", "--concurrency", "0"], "--concurrency 0: expected a whole number in [1, 1024]"),
    (["bench", "--repeats", str(10**30)], "--repeats 1e+30: expected a whole number in [1, 100]"),
    (["bench", "--duration", "-3"], "--duration -3: expected a number in [0.01, 3600]"),
    (["soak", "--minutes", "0"], "--minutes 0: expected a number in [0.01, 1440]"),
    (["soak", "--minutes", "1", "--interval", "0"], "--interval 0: expected a number in [0.1, 3600]"),
])
def test_a_value_a_tool_cannot_use_is_one_line_naming_the_flag_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_share_that_is_not_a_number_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--exclusive-share", "half"]) == 2
    assert "argument --exclusive-share: invalid float value: 'half'" in capsys.readouterr().err


@pytest.mark.parametrize("bounds", [BENCH_BOUNDS, SIMULATE_BOUNDS, SOAK_BOUNDS])
def test_the_edges_are_accepted(bounds: dict[str, tuple[float, float]]) -> None:
    for edge in (0, 1):
        values = {flag.lstrip("-").replace("-", "_"): limits[edge] for flag, limits in bounds.items()}
        assert out_of_range(argparse.Namespace(**values), bounds) is None
