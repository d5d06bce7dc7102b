"""``imex-webhook agent`` as a command (``webhook.cli.main(["agent", ...])``) and its endpoints.

Covered: ``--once --dry-run`` prints the node patch and the hot-add it would make and changes nothing;
``--once`` patches the Node once and a second run finds nothing to change; a scenario without an API server runs on an
in-memory Node; bad flags and scenarios exit with one clear line; ``/healthz``, ``/readyz`` (503 with the
reason while NVML is missing, 200 once NVML works and the API server answered) and ``/metrics`` (GPUs by
health, hot-add and release outcomes and durations); the endpoints served over HTTP, on loopback unless
``--listen`` says otherwise, and the DaemonSet's listen address the one its probes and network policy use.
Hostile requests: tests/agent/test_agent_http_hostile.py.
"""

from __future__ import annotations

import json
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.agent.conftest import Make, scenario_path
from tests.kubefake import KubeFake
from webhook import cli
from webhook.agent import inventory
from webhook.agent.loop import Agent
from webhook.agent.server import ProbeServer, create_app
from webhook.agent.settings import from_args
from webhook.domain import keys
from webhook.service import logs
from webhook.sim.agents import MemoryNodeApi
from webhook.wire import fabric_attachment as fa
from webhook.wire import gpu_inventory

NODE = "gb200-rack1-tray3"
CLUSTER = "9277d399-7d0a-4d4a-9b0e-d85bb19ce2b0"


@pytest.fixture(autouse=True)
def logging_left_to_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command would point the root logger at this test's captured stdout, for every later test."""
    monkeypatch.setattr(logs, "configure", lambda fmt, level: None)


@pytest.fixture
def quiet_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    """No handler on the root logger (one an earlier test left may write to a stream since closed), so
    stderr holds only what the command printed."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])


def _args(kubeconfig: Path, *extra: str) -> list[str]:
    return ["agent", "--node", NODE, "--kubeconfig", str(kubeconfig), "--nvml-sim",
            str(scenario_path("nvl72-tray")), "--listen", "none", "--log-level", "warning", *extra]


@pytest.fixture
def labelled_node(kube_fake: KubeFake) -> KubeFake:
    kube_fake.create("nodes", {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
                               "status": {"allocatable": {keys.GPU_RESOURCE: "4"}}})
    return kube_fake


def test_once_dry_run_prints_the_patch_and_changes_nothing(labelled_node: KubeFake, kubeconfig: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    att = fa.Attachment(name="fa-9", node=NODE, pod_namespace="ml", pod_name="p", pod_uid="u", zone="z", gpus=1,
                        system="/s", phase=fa.Phase.ATTACHED, blocks=(fa.Block("/b/1", pci_address="0004:01:00.0"),))
    labelled_node.create("fabricattachments", fa.to_object(att))
    labelled_node.replace_status("fabricattachments", {"metadata": {"name": "fa-9"}, "status": fa.status_body(att)})
    before = labelled_node.get("nodes", None, NODE), labelled_node.get("fabricattachments", None, "fa-9")

    code = cli.main(_args(kubeconfig, "--once", "--dry-run", "--own-clique-label"))

    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["dryRun"] for line in lines] == ["patch node", "hot-add"]
    assert lines[1]["blocks"] == [{"id": "/b/1", "uuid": "", "pciAddress": "0004:01:00.0"}]
    patch = lines[0]["body"]["metadata"]
    assert patch["labels"] == {keys.CLIQUE_LABEL: f"{CLUSTER}.32766", inventory.HEALTH_LABEL: "healthy"}
    assert json.loads(patch["annotations"][inventory.INVENTORY_ANNOTATION])["clique"] == f"{CLUSTER}.32766"
    assert (labelled_node.get("nodes", None, NODE), labelled_node.get("fabricattachments", None, "fa-9")) == before
    assert labelled_node.requests("update", "nodes") == 0


def test_once_patches_the_node_and_a_second_run_finds_nothing_to_change(labelled_node: KubeFake,
                                                                         kubeconfig: Path) -> None:
    assert cli.main(_args(kubeconfig, "--once")) == 0
    node = labelled_node.get("nodes", None, NODE)
    assert node is not None
    assert node["metadata"]["labels"][inventory.HEALTH_LABEL] == "healthy"
    assert keys.CLIQUE_LABEL not in node["metadata"]["labels"]  # not owned without --own-clique-label

    assert cli.main(_args(kubeconfig, "--once")) == 0
    assert labelled_node.requests("update", "nodes") == 1


def test_once_fails_with_one_line_when_the_node_does_not_exist(kube_fake: KubeFake, kubeconfig: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(_args(kubeconfig, "--once")) == 1
    assert 'nodes "gb200-rack1-tray3" not found' in capsys.readouterr().err


def test_a_simulation_without_an_api_server_runs_on_an_in_memory_node(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["agent", "--node", "n1", "--nvml-sim", str(scenario_path("hgx-zero-uuid")), "--once",
                     "--dry-run", "--listen", "none", "--log-level", "warning"])

    assert code == 0
    line = json.loads(capsys.readouterr().out.splitlines()[0])
    assert line["body"]["metadata"]["labels"] == {inventory.HEALTH_LABEL: "none"}


@pytest.mark.parametrize(("argv", "message"), [
    ([], "--node is required"),
    (["--node", "n", "--interval", "0"], "--interval 0: expected seconds in (0, 86400]"),
    (["--node", "n", "--deadline", "enumerate"], "--deadline 'enumerate': expected STEP=SECONDS"),
    (["--node", "n", "--deadline", "warp=3"], "with STEP one of rescan, enumerate"),
    (["--node", "n", "--listen", "localhost"], "--listen 'localhost': expected HOST:PORT"),
    (["--node", "n", "--nvml-sim", "/nonexistent.yaml"], "--nvml-sim /nonexistent.yaml: no such file"),
])
def test_bad_flags_exit_2_with_one_line(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)

    assert cli.main(["agent", *argv]) == 2
    assert message in capsys.readouterr().err


BROKEN_SCENARIOS = [
    ("bad-field", b"gpus:\n  - {uuid: GPU-1, pci: '0000:01:00.0', hotplug: sometimes}\n",
     "gpus[0].hotplug: expected present, pending or never, got 'sometimes'"),
    ("not-yaml", b"gpus: [unclosed\n",
     "not valid YAML or JSON: expected ',' or ']', but got '<stream end>' at line 2, column 1"),
    ("not-utf8", b"\xff\xfe\x00gpus: []\n", "not UTF-8 text (byte 0xff at offset 0)"),
]


@pytest.mark.parametrize(("content", "problem"), [r[1:] for r in BROKEN_SCENARIOS],
                         ids=[r[0] for r in BROKEN_SCENARIOS])
@pytest.mark.usefixtures("quiet_logging")
def test_a_broken_scenario_is_one_line_naming_the_flag_and_exit_status_2(
        content: bytes, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)

    assert cli.main(["agent", "--node", "n", "--nvml-sim", str(bad), "--once", "--listen", "none"]) == 2
    err = capsys.readouterr().err
    assert err == f"imex-webhook agent: --nvml-sim {bad}: {problem}\n"


@pytest.mark.usefixtures("quiet_logging")
def test_a_listen_port_in_use_is_one_line_naming_the_flag_and_exit_status_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = cli.main(["agent", "--node", "n", "--nvml-sim", str(scenario_path("nvl72-tray")),
                         "--listen", f"127.0.0.1:{port}", "--log-level", "warning"])

    assert code == 2
    assert capsys.readouterr().err == (f"imex-webhook agent: --listen 127.0.0.1:{port}: port {port} is already in use "
                                       "(another process listens there); choose another port with --listen "
                                       "HOST:PORT, or --listen none\n")


def _agent(simulate: Make, name: str) -> Agent:
    node = simulate(name)
    api = MemoryNodeApi({"metadata": {"name": "n1"}}, node.sim)
    return Agent(node.nvml, node.host, api)


def test_readyz_says_why_while_nvml_is_missing_and_healthz_still_answers(simulate: Make) -> None:
    agent = _agent(simulate, "nvml-missing")
    agent.pass_once()
    client = create_app(agent).test_client()

    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.get_json()["reason"] == "NVML is not available: nvmlInit: NVML Shared Library Not Found"
    assert "imex_agent_nvml_up 0.0" in client.get("/metrics").get_data(as_text=True)
    doc = gpu_inventory.of_node(agent.api.read_node())
    assert doc is not None and doc["health"] == "unknown" and "Shared Library Not Found" in doc["reason"]


def test_readyz_is_ok_and_metrics_count_gpus_by_health(simulate: Make) -> None:
    agent = _agent(simulate, "completed-not-success")
    agent.pass_once()
    client = create_app(agent).test_client()

    assert client.get("/readyz").get_json() == {"ready": True,
                                                "reason": "NVML initialised (driver 570.133.20), 4 GPUs"}
    text = client.get("/metrics").get_data(as_text=True)
    assert 'imex_agent_gpus{health="healthy"} 3.0' in text
    assert 'imex_agent_gpus{health="unhealthy"} 1.0' in text
    assert 'imex_agent_passes_total{outcome="ok"} 1.0' in text
    assert client.get("/gpus").get_json()["gpus"][2]["fabric"]["status"] == "Insufficient Resources"


def test_hot_add_and_release_outcomes_and_durations_are_in_the_metrics(simulate: Make) -> None:
    agent = _agent(simulate, "composable-hot-add")
    agent.metrics.finished("hot-add", "ready", 1.5)
    agent.metrics.observer("release")("busy", "refused", 0.01)

    text = create_app(agent).test_client().get("/metrics").get_data(as_text=True)

    assert 'imex_agent_operations_total{operation="hot-add",outcome="ready"} 1.0' in text
    assert 'imex_agent_operation_duration_seconds_sum{operation="hot-add",outcome="ready"} 1.5' in text
    assert 'imex_agent_step_duration_seconds_count{operation="release",outcome="refused",step="busy"} 1.0' in text


@contextmanager
def _served_tray(simulate: Make) -> Iterator[str]:
    """The agent of a simulated NVL72 tray after one pass, its endpoints served on loopback; yields the URL."""
    agent = _agent(simulate, "nvl72-tray")
    agent.pass_once()
    server = ProbeServer(agent, "127.0.0.1:0").start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_the_endpoints_are_served_over_http(simulate: Make) -> None:
    with _served_tray(simulate) as url, urllib.request.urlopen(f"{url}/readyz", timeout=5) as answer:
        body: Any = json.loads(answer.read())
    assert body["ready"] is True


def test_the_endpoints_listen_on_loopback_unless_told_otherwise() -> None:
    def listen(*argv: str) -> str:
        return from_args(cli.parser().parse_args(["agent", "--node", "n1", *argv])).listen

    assert listen() == "127.0.0.1:8081"
    assert listen("--listen", "0.0.0.0:9000") == "0.0.0.0:9000"
    assert listen("--listen", "none") == ""


def test_the_daemonset_listens_where_its_probes_and_prometheus_knock() -> None:
    manifest = Path(__file__).parents[2] / "manifests" / "agent.yaml"
    (daemonset,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    listen = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--listen="))
    host, _, port = listen.rpartition(":")
    assert host == "0.0.0.0" and not daemonset["spec"]["template"]["spec"].get("hostNetwork")  # the pod's own IPs
    assert {p["containerPort"] for p in container["ports"]} == {int(port)}
    assert container["readinessProbe"]["httpGet"]["port"] == container["ports"][0]["name"]


def test_the_endpoints_served_over_http_keep_gpus_for_loopback(simulate: Make) -> None:
    with _served_tray(simulate) as url:
        with urllib.request.urlopen(f"{url}/gpus", timeout=5) as answer:
            local: Any = json.loads(answer.read())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{url}/gpus", method="POST"), timeout=5)
        body = json.loads(refused.value.read())
        refused.value.close()
    assert [g["uuid"] for g in local["gpus"]] and refused.value.code == 405
    assert body == {"error": "method 'POST' is not allowed on '/gpus'; use GET", "status": 405}
