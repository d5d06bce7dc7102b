"""``imex-webhook`` as one parser with a subcommand per verb: each verb's ``--help`` is printed once, under
its own name, with exit status 0; the command lines the manifests and the real-cluster suite (tests/e2e, not
run here) give parse and pass their settings checks; the verbs that run on simulators go through the
composition root; ``python -m webhook.tools.cli`` hosts the tools on its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook import cli, composition
from webhook.agent import settings as agent_settings
from webhook.service import settings
from webhook.tools import cli as tools_cli

ROOT = Path(__file__).parents[2]
VERBS = ["serve", "agent", "fabric-sim", "bench", "simulate", "soak", "demo", "explain", "certs"]


@pytest.mark.parametrize("verb", VERBS)
def test_each_verb_prints_its_help_once_under_its_own_name(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.count("usage:") == 1
    assert out.startswith(f"usage: imex-webhook {verb} ")


def test_the_top_level_help_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"    {verb}" in out for verb in VERBS)


@pytest.mark.parametrize(("argv", "words"), [
    ([], "the following arguments are required: COMMAND"),
    (["launch"], "argument COMMAND: invalid choice: 'launch'"),
    (["serve", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["certs", "--service", "s"], "the following arguments are required: --namespace, --out"),
    (["demo", "--port", "70000"], "argument --port: 70000: expected a port in 1-65535"),
])
def test_a_wrong_command_line_is_a_usage_error_with_status_2(
        argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    assert words in capsys.readouterr().err


def _container_args(manifest: str) -> list[str]:
    for doc in yaml.safe_load_all((ROOT / "manifests" / manifest).read_text()):
        if doc and doc.get("kind") in ("Deployment", "DaemonSet"):
            args: list[str] = doc["spec"]["template"]["spec"]["containers"][0]["args"]
            return [a.replace("$(NODE_NAME)", "gpu-1") for a in args]
    raise AssertionError(f"no workload in {manifest}")


def test_the_manifests_command_lines_parse_and_pass_their_checks() -> None:
    webhook = cli.parser().parse_args(_container_args("webhook.yaml"))
    agent = cli.parser().parse_args(_container_args("agent.yaml"))

    assert settings.from_args(webhook).cluster.in_cluster and webhook.run is composition.serve
    assert agent_settings.from_args(agent).node == "gpu-1" and agent.run is composition.agent


def test_the_real_cluster_suites_command_lines_parse_and_pass_their_checks(tmp_path: Path) -> None:
    kubeconfig, creds, scenario = tmp_path / "kubeconfig", tmp_path / "credentials", tmp_path / "node.yaml"
    kubeconfig.write_text("")
    creds.write_text("admin:admin")
    scenario.write_text("gpus: []\n")
    extender = ["serve", "--bind", "127.0.0.1:40000", "--kubeconfig", str(kubeconfig), "--tls-dir", str(tmp_path),
                "--client-ca", str(tmp_path / "ca.crt"), "--housekeeping-interval", "1"]
    fabric = [*extender, "--fabric", "http://127.0.0.1:1", "--fabric-credentials", str(creds),
              "--fabric-refresh", "0.3", "--bind-budget", "15"]
    agent = ["agent", "--node", "n", "--kubeconfig", str(kubeconfig), "--nvml-sim", str(scenario),
             "--interval", "0.5", "--listen", "127.0.0.1:40001"]

    assert settings.from_args(cli.parser().parse_args(extender)).cluster.housekeeping_interval == 1
    assert settings.from_args(cli.parser().parse_args(fabric)).fabric.manager == "http://127.0.0.1:1"
    assert agent_settings.from_args(cli.parser().parse_args(agent)).standalone is False


def test_python_m_webhook_tools_cli_hosts_the_tools_on_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert tools_cli.main(["bench", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m webhook.tools.cli bench ")
    assert tools_cli.main(["explain"]) == 2  # explain is a verb of imex-webhook only
