"""The composition root (``webhook.composition``) hands the simulators and the demo to the service and the
agent: the embedded mode's demo topology, the fabric simulator of ``--fabric embedded`` (which serves and
stops) and the machine of ``--nvml-sim``; started without them, the service and the agent refuse those modes
with one line instead of importing a simulator."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests

from webhook import cli, composition
from webhook.adapters.embedded import EmbeddedBackend
from webhook.agent import cli as agent_cli
from webhook.agent import settings as agent_settings
from webhook.demo import cluster as demo
from webhook.domain.policy import Policy
from webhook.service import assembly, fabric_wiring, settings
from webhook.state.cluster import ClusterStore


def _serve(*argv: str) -> settings.Settings:
    return settings.from_args(cli.parser().parse_args(["serve", *argv]))


def _agent(*argv: str) -> argparse.Namespace:
    return cli.parser().parse_args(["agent", *argv])


def test_the_embedded_mode_without_files_runs_on_the_demo_topology_the_composition_root_hands_in() -> None:
    backend = assembly.build_backend(_serve(), ClusterStore(Policy()), embedded=composition.embedded_parts())

    assert isinstance(backend, EmbeddedBackend) and backend.source == "the built-in demo topology"
    assert backend.node_objects() == [o for o in demo.objects() if o["kind"] == "Node"]


def test_the_service_started_without_the_demo_topology_refuses_the_embedded_mode_in_one_line() -> None:
    with pytest.raises(settings.SettingsError) as refused:
        assembly.build_backend(_serve(), ClusterStore(Policy()))
    assert str(refused.value) == "no --cluster files, and this command was started without the demo topology"


def test_the_embedded_fabric_serves_redfish_until_stopped() -> None:
    fabric = composition.embedded_parts().start_fabric()
    try:
        answer = requests.get(fabric.url + "/redfish/v1/", auth=(fabric.username, fabric.password), timeout=10)
        assert answer.status_code == 200 and "CompositionService" in answer.json()
        assert "password" not in repr(fabric)  # the start-up log may show it
    finally:
        fabric.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(fabric.url + "/redfish/v1/", timeout=2)


def test_the_fabric_wiring_started_without_the_simulators_refuses_fabric_embedded() -> None:
    with pytest.raises(fabric_wiring.FabricConfigError, match=r"^--fabric embedded: this command was started "):
        fabric_wiring.start("embedded", None, None, None)  # type: ignore[arg-type]  # refused first


def test_the_simulated_machine_lives_in_temporary_trees_removed_on_close(tmp_path: Path) -> None:
    scenario = tmp_path / "node.yaml"
    scenario.write_text("gpus: [{uuid: GPU-1, pci: '0000:01:00.0'}]\n")
    config = agent_settings.from_args(_agent("--node", "n1", "--nvml-sim", str(scenario)))
    with ExitStack() as stack:
        machine = composition.simulate_node(config, stack)
        assert machine.sysfs_root != Path("/sys") and machine.proc_root != Path("/proc")
        assert (machine.sysfs_root / "bus" / "pci").is_dir()
        assert machine.memory_node("n1").read_node()["metadata"]["name"] == "n1"
    assert not machine.sysfs_root.exists()


def test_a_scenario_the_simulator_cannot_use_is_a_settings_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: 7\n")
    config = agent_settings.from_args(_agent("--node", "n", "--nvml-sim", str(bad)))
    with ExitStack() as stack, pytest.raises(agent_settings.SettingsError, match=str(bad)):
        composition.simulate_node(config, stack)


def test_the_agent_started_without_the_simulators_refuses_nvml_sim_with_status_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "node.yaml"
    scenario.write_text("gpus: []\n")

    assert agent_cli.run(_agent("--node", "n", "--nvml-sim", str(scenario), "--once", "--listen", "none")) == 1
    assert (f"imex-webhook agent: --nvml-sim {scenario}: this command was started without the simulators"
            in capsys.readouterr().err.splitlines())
