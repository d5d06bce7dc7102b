"""Numbers and addresses on every verb's command line: argparse reads ``nan``, ``inf`` and ``1e400`` as
floats, so ``webhook.command`` refuses a value that is not finite for every ``type=float`` flag of every verb
(found from the parsers themselves, so a new flag is covered too) with one line naming the flag and exit
status 2, before the verb runs. The range each flag needs is its verb's own check (tests/service/
test_settings.py, tests/agent/test_agent_settings.py, tests/certs/test_certs_cli.py). Also: ``fabric-sim
--bind`` on a port in use, and ``certs --days`` past what a certificate can hold, as real commands."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from webhook import cli, command

# What a verb needs on its command line besides the flag under test.
REQUIRED = {"soak": ["--minutes", "1"], "explain": ["ml/job"]}


def _float_flags() -> list[tuple[str, str]]:
    verbs = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [(verb, action.option_strings[-1]) for verb, sub in verbs.choices.items() for action in sub._actions
            if action.type is float and action.option_strings]


FLOAT_FLAGS = _float_flags()


def _never_run(ns: argparse.Namespace) -> int:
    raise AssertionError(f"{ns.command} ran with a value that is not finite")


def test_every_verb_with_numbers_is_covered() -> None:
    verbs = {verb for verb, _ in FLOAT_FLAGS}
    assert {"serve", "agent", "bench", "simulate", "soak", "explain"} <= verbs
    assert ("serve", "--bind-budget") in FLOAT_FLAGS and ("agent", "--interval") in FLOAT_FLAGS


@pytest.mark.parametrize("value", ["nan", "1e400"])  # 1e400 is inf to float()
@pytest.mark.parametrize(("verb", "flag"), FLOAT_FLAGS, ids=[f"{v} {f}" for v, f in FLOAT_FLAGS])
def test_a_number_that_is_not_finite_is_one_line_naming_the_flag_and_exit_status_2(
        verb: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    top = command.parser("imex-webhook", "", [c._replace(run=_never_run) for c in cli.COMMANDS])

    assert command.main(top, [verb, *REQUIRED.get(verb, []), f"{flag}={value}"]) == 2
    shown = {"1e400": "inf"}.get(value, value)  # what float() made of it
    assert capsys.readouterr().err == f"imex-webhook {verb}: {flag} {shown}: expected a finite number\n"


def test_finite_numbers_reach_the_verb(capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[float] = []

    def record(ns: argparse.Namespace) -> int:
        ran.append(ns.bind_budget)
        return 0

    top = command.parser("imex-webhook", "", [c._replace(run=record) for c in cli.COMMANDS])
    assert command.main(top, ["serve", "--bind-budget", "1e-3"]) == 0
    assert ran == [0.001] and capsys.readouterr().err == ""


def _command(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", *argv], capture_output=True, text=True, timeout=300,
                          check=False)


def test_fabric_sim_on_a_port_in_use_is_one_line_naming_bind_and_exit_status_2() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = _command("fabric-sim", "--bind", f"127.0.0.1:{port}")
    assert result.returncode == 2
    assert result.stderr == (f"imex-webhook fabric-sim: --bind 127.0.0.1:{port}: port {port} is already in use "
                             "(another process listens there); choose another port with --bind HOST:PORT (port 0: "
                             "any free one)\n")


def test_certs_with_a_validity_no_certificate_can_hold_is_one_line_and_exit_status_2(tmp_path: Path) -> None:
    result = _command("certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path / "out"),
                      "--days", "1000000000")
    assert result.returncode == 2
    assert result.stderr == ("imex-webhook certs: error: --days 1000000000: validity must be at most 36500 days "
                             "(100 years), not 1000000000\n")
