"""What ``imex-webhook`` loads before it runs a verb: ``import webhook.cli``, the top-level ``--help`` and
a verb's ``--help`` load neither the web server (Flask, werkzeug, gunicorn), the Kubernetes client,
prometheus_client nor a simulator or the demo, so the node agent on every GPU node and an operator asking
for help never pay for them. Each verb's module is imported when that verb is read (webhook/cli.py);
``serve``'s settings import no web, Kubernetes or Redfish module. Each case runs in a fresh interpreter,
since this test process has long loaded all of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from webhook import command

ROOT = Path(__file__).parents[2]
HEAVY = ("flask", "werkzeug", "gunicorn", "kubernetes", "prometheus_client")
SIMULATORS = ("webhook.sim", "webhook.demo")

# Reads the command line (help printed into a buffer), then prints every module loaded.
SCRIPT = """
import contextlib, io, json, sys
from webhook import cli
argv = json.loads(sys.argv[1])
if argv is not None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(argv) == 0
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(argv: list[str] | None) -> set[str]:
    result = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(argv)], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def _under(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


CASES = [None, ["--help"], ["agent", "--help"], ["serve", "--help"]]


@pytest.mark.parametrize("argv", CASES, ids=["import webhook.cli", "--help", "agent --help", "serve --help"])
def test_the_command_line_loads_no_web_server_kubernetes_client_or_simulator(argv: list[str] | None) -> None:
    loaded = _loaded(argv)

    assert "webhook.cli" in loaded
    assert _under(loaded, HEAVY) == []
    assert _under(loaded, SIMULATORS) == []


def test_a_verbs_help_reads_that_verbs_flags_alone() -> None:
    top, agent = _loaded(["--help"]), _loaded(["agent", "--help"])

    assert _under(top, ("webhook.agent", "webhook.service.settings", "certs")) == []
    assert "webhook.agent.settings" in agent
    assert _under(agent, ("webhook.service.settings", "webhook.http", "webhook.engine", "webhook.state")) == []


def test_a_command_line_reads_the_flags_of_the_verb_it_names_alone() -> None:
    read: list[str] = []

    def flags_of(name: str) -> command.Command:
        return command.Command(name, name, lambda parser: read.append(name), lambda ns: 0)

    verbs = [flags_of("first"), flags_of("second")]
    for argv, wanted in ((["second", "--help"], ["second"]), (["--", "first"], ["first"]), (["--help"], []),
                         (["typo"], []), (None, ["first", "second"])):
        read.clear()
        command.parser("prog", "", verbs, argv=argv)
        assert read == wanted, argv
