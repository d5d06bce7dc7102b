"""``imex-webhook agent`` settings: every validation rule of ``settings.from_args``, one row each with the
exact one-line message naming the flag, the edge values each rule still accepts, and the defaults, held once
by ``AgentSettings`` (``NODE_NAME`` from the downward API fills ``--node``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from webhook import cli
from webhook.agent.settings import STEP_NAMES, AgentSettings, SettingsError, from_args
from webhook.agent.steps import Deadlines

STEPS = ", ".join(STEP_NAMES)


@pytest.fixture(autouse=True)
def no_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)


def _from(argv: list[str]) -> AgentSettings:
    return from_args(cli.parser().parse_args(["agent", *argv]))


@pytest.fixture
def scenario(tmp_path: Path) -> str:
    path = tmp_path / "node.yaml"
    path.write_text("gpus: []\n")
    return str(path)


REFUSED = [
    ([], "--node is required (or set NODE_NAME, e.g. from the downward API spec.nodeName)"),
    (["--node", ""], "--node is required (or set NODE_NAME, e.g. from the downward API spec.nodeName)"),
    (["--node", "n", "--interval", "0"], "--interval 0: expected seconds in (0, 86400]"),
    (["--node", "n", "--interval", "-1"], "--interval -1: expected seconds in (0, 86400]"),
    (["--node", "n", "--interval", "nan"], "--interval nan: expected seconds in (0, 86400]"),
    (["--node", "n", "--interval", "1e400"], "--interval inf: expected seconds in (0, 86400]"),
    (["--node", "n", "--interval", "1e10"], "--interval 1e+10: expected seconds in (0, 86400]"),
    (["--node", "n", "--listen", "localhost"], "--listen 'localhost': expected HOST:PORT"),
    (["--node", "n", "--listen", "localhost:http"], "--listen 'localhost:http': expected HOST:PORT"),
    (["--node", "n", "--listen", "evil\n"], "--listen 'evil\\n': expected HOST:PORT"),
    (["--node", "n", "--listen", "127.0.0.1:\uff18"], "--listen '127.0.0.1:\uff18': expected HOST:PORT"),
    (["--node", "n", "--listen", "127.0.0.1:0"], "--listen '127.0.0.1:0': port 0 is out of range (1-65535)"),
    (["--node", "n", "--listen", "127.0.0.1:65536"],
     "--listen '127.0.0.1:65536': port 65536 is out of range (1-65535)"),
    (["--node", "n", "--listen", "h:" + "9" * 40], f"--listen {'h:' + '9' * 40!r}: port 999999999999... is out of "
                                                   "range (1-65535)"),
    (["--node", "n", "--nvml-sim", "/nonexistent.yaml"], "--nvml-sim /nonexistent.yaml: no such file"),
    (["--node", "n", "--deadline", "enumerate"],
     f"--deadline 'enumerate': expected STEP=SECONDS with STEP one of {STEPS}"),
    (["--node", "n", "--deadline", "warp=3"], f"--deadline 'warp=3': expected STEP=SECONDS with STEP one of {STEPS}"),
    (["--node", "n", "--deadline", "rescan=soon"], "--deadline 'rescan=soon': 'soon' is not a number of seconds"),
    (["--node", "n", "--deadline", "rescan=0"], "--deadline 'rescan=0': expected seconds in (0, 86400]"),
    (["--node", "n", "--deadline", "rescan=-2"], "--deadline 'rescan=-2': expected seconds in (0, 86400]"),
    (["--node", "n", "--deadline", "rescan=nan"], "--deadline 'rescan=nan': expected seconds in (0, 86400]"),
    (["--node", "n", "--deadline", "rescan=inf"], "--deadline 'rescan=inf': expected seconds in (0, 86400]"),
    (["--node", "n", "--deadline", "gone=1e400"], "--deadline 'gone=1e400': expected seconds in (0, 86400]"),
]


@pytest.mark.parametrize(("argv", "message"), REFUSED, ids=[" ".join(a) or "(nothing)" for a, _ in REFUSED])
def test_each_rule_refuses_its_command_line_with_one_exact_line(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        _from(argv)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


def test_a_scenario_that_is_a_directory_is_no_such_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"^--nvml-sim .*: no such file$"):
        _from(["--node", "n", "--nvml-sim", str(tmp_path)])


ACCEPTED = [
    (["--interval", "0.001"], {"interval": 0.001}),
    (["--interval", "86400"], {"interval": 86400.0}),
    (["--listen", "127.0.0.1:65535"], {"listen": "127.0.0.1:65535"}),
    (["--deadline", "allocatable=86400"], {"deadlines": dataclasses.replace(Deadlines(), allocatable=86400.0)}),
    (["--listen", "none"], {"listen": ""}),
    (["--listen", ""], {"listen": ""}),
    (["--listen", "0.0.0.0:9000"], {"listen": "0.0.0.0:9000"}),
    (["--listen", "[::]:1"], {"listen": "[::]:1"}),
    (["--deadline", "rescan=0.5", "--deadline", "device_plugin=9"],
     {"deadlines": dataclasses.replace(Deadlines(), rescan=0.5, device_plugin=9.0)}),
    (["--deadline", "device-plugin=9"], {"deadlines": dataclasses.replace(Deadlines(), device_plugin=9.0)}),
    (["--in-cluster", "--own-clique-label", "--persistence-mode", "--no-device-plugin"],
     {"in_cluster": True, "own_clique_label": True, "persistence_mode": True, "device_plugin": False}),
    (["--device-plugin-selector", "app=x", "--device-plugin-selector", "app=y", "--device-plugin-namespace", "ns"],
     {"device_plugin_selectors": ("app=x", "app=y"), "device_plugin_namespace": "ns"}),
    (["--sysfs-root", "/host/sys", "--proc-root", "/host/proc"],
     {"sysfs_root": Path("/host/sys"), "proc_root": Path("/host/proc")}),
]


@pytest.mark.parametrize(("argv", "changed"), ACCEPTED, ids=[" ".join(a) for a, _ in ACCEPTED])
def test_edge_values_are_accepted_and_change_only_their_field(argv: list[str], changed: dict[str, object]) -> None:
    assert _from(["--node", "n", *argv]) == dataclasses.replace(AgentSettings(node="n"), **changed)


def test_the_defaults_are_the_ones_agent_settings_holds() -> None:
    assert _from(["--node", "n"]) == AgentSettings(node="n")


def test_node_name_from_the_downward_api_fills_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    assert _from([]).node == "gpu-7"
    assert _from(["--node", "other"]).node == "other"


def test_a_scenario_file_makes_a_standalone_simulation_without_an_api_server(scenario: str) -> None:
    alone = _from(["--node", "n", "--nvml-sim", scenario])
    in_cluster = _from(["--node", "n", "--nvml-sim", scenario, "--in-cluster"])

    assert alone.simulated and alone.standalone
    assert in_cluster.simulated and not in_cluster.standalone


def test_kubeconfig_and_in_cluster_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["agent", "--node", "n", "--kubeconfig", "k", "--in-cluster"]) == 2
    assert "argument --in-cluster: not allowed with argument --kubeconfig" in capsys.readouterr().err
