"""The whole fabric path as it runs in a cluster, every piece a separate process or server talking over
the wire: the API server (the fake), ``imex-webhook serve --kubeconfig --fabric URL`` (extender and
reconciler), the Redfish composition simulator, and ``imex-webhook agent --kubeconfig`` for the node
(simulated NVML and sysfs), plus a stand-in kubelet that re-registers the device plugin.

Covered: a pod needing two fabric GPUs binds once the node agent has hot-added them (FabricAttachment
Ready with UUIDs, one binding, the device-plugin pod refreshed); when the pod is deleted, the reconciler
asks the agent to release, the agent removes the devices, the blocks are detached and the attachment is
deleted: nothing stays composed."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests import serving
from tests.kubefake import KubeFake, eventually
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.sim.fabric import inventory
from webhook.sim.fabric.server import RunningSim, start_in_thread

NODE = "fab-00"
LOCAL_GPU = {"uuid": "GPU-0f000000-0000-4000-8000-000000000001", "pci": "0000:18:00.0"}


def _scenario(path: Path) -> Path:
    """fab-00 as the agent's simulation sees it: one local GPU, and the fabric's first two blocks, which
    appear on the PCI bus only after they are composed and rescanned."""
    blocks = inventory.demo().blocks[:2]
    gpus = [{"uuid": LOCAL_GPU["uuid"], "pci": LOCAL_GPU["pci"], "name": "NVIDIA H100 PCIe", "fabric": "none"}]
    gpus += [{"uuid": b.uuid, "pci": b.pci_address, "name": "NVIDIA H100 PCIe", "fabric": "none",
              "hotplug": "pending"} for b in blocks]
    path.write_text(yaml.safe_dump({"node": NODE, "appear_delay": 0.05, "bind_delay": 0.05, "gpus": gpus}))
    return path


class Kubelet:
    """Just enough kubelet: when the device-plugin pod on the node is deleted, a new one starts and the
    Node's allocatable shows the GPUs the simulated node has on its PCI bus by then."""

    def __init__(self, fake: KubeFake, sim: RunningSim) -> None:
        self.fake = fake
        self.sim = sim
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            if self.fake.get("pods", "kube-system", "nvidia-device-plugin-fab-00") is not None:
                continue
            attached = sum(1 for b in _state(self.sim)["blocks"].values() if b.get("system") == NODE)
            gpus = str(1 + attached)
            # A merge patch, as the kubelet's status update: the agent and the extender's domain labeller
            # write the same Node meanwhile, and a whole-object replace would lose to them with a 409.
            self.fake.patch("nodes", None, NODE, {"status": {"allocatable": {keys.GPU_RESOURCE: gpus},
                                                             "capacity": {keys.GPU_RESOURCE: gpus}}})
            self.fake.create("pods", _device_plugin_pod())
            self.restarts += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _state(sim: RunningSim) -> dict[str, Any]:
    return requests.get(sim.url + "/admin/state", auth=("admin", "admin"), timeout=10).json()  # type: ignore[no-any-return]


def _device_plugin_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nvidia-device-plugin-fab-00", "namespace": "kube-system",
                         "labels": {"app.kubernetes.io/name": "nvidia-device-plugin"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin"}]},
            "status": {"phase": "Running"}}


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    with start_in_thread(inventory.demo()) as running:
        yield running


def test_a_fabric_pod_binds_after_the_node_agent_hot_adds_and_everything_is_released_after(
        fake: KubeFake, kubeconfig: Path, sim: RunningSim, tmp_path: Path) -> None:
    node = copy.deepcopy(next(n for n in demo.nodes() if n["metadata"]["name"] == NODE))
    fake.create("nodes", node)
    fake.create("pods", _device_plugin_pod())
    pod = demo.pod("fabric-pod", None, 3, annotations={keys.GROUP_ANNOTATION: "fabric-pod",
                                                       keys.GROUP_SIZE_ANNOTATION: "1"})
    fake.create("pods", pod, keep_uid=True)
    kubelet = Kubelet(fake, sim)
    creds = tmp_path / "credentials"
    creds.write_text("admin:admin")
    agent_log = tmp_path / "agent.log"
    try:
        with serving.serve(tmp_path / "serve", "--kubeconfig", str(kubeconfig), "--fabric", sim.url,
                           "--fabric-credentials", str(creds), "--fabric-refresh", "0.3",
                           "--bind-budget", "15") as served, _agent(fake, kubeconfig, tmp_path):
            eventually(lambda: keys.INVENTORY_ANNOTATION in (fake.get("nodes", None, NODE) or {})
                       .get("metadata", {}).get("annotations", {}), what="the agent published")
            args = {"Pod": pod, "Nodes": None, "NodeNames": [NODE]}
            assert served.post("/filter", args).json()["NodeNames"] == [NODE]
            bind = {"PodName": "fabric-pod", "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"], "Node": NODE}
            reply = served.post("/bind", bind).json()
            assert reply == {"Error": ""}, reply + "\n" + agent_log.read_text()[-3000:]  # type: ignore[operator]
            (att,) = fake.items("fabricattachments")
            assert att["status"]["phase"] == "Ready" and len(att["status"]["blocks"]) == 2
            assert {b["uuid"] for b in att["status"]["blocks"]} == {b.uuid for b in inventory.demo().blocks[:2]}
            assert [b["name"] for b in fake.bindings() if b["status"] == 201] == ["fabric-pod"]
            assert kubelet.restarts == 1  # the device plugin on this node, and nothing else, was refreshed
            # The job ends: the pod is deleted, so its GPUs go back to the fabric.
            fake.delete("pods", "ml", "fabric-pod")
            eventually(lambda: fake.items("fabricattachments") == [],
                       what="released by the agent, detached and deleted")
            assert not any(b.get("system") for b in _state(sim)["blocks"].values())
    finally:
        kubelet.stop()


class _agent:
    """``imex-webhook agent`` for the node, as the DaemonSet runs it, in its own process."""

    def __init__(self, fake: KubeFake, kubeconfig: Path, tmp_path: Path) -> None:
        self.args = [sys.executable, "-m", "webhook", "agent", "--node", NODE, "--kubeconfig", str(kubeconfig),
                     "--nvml-sim", str(_scenario(tmp_path / "fab-00.yaml")), "--interval", "0.5",
                     "--listen", f"127.0.0.1:{serving.free_port()}"]
        self.log_path = tmp_path / "agent.log"

    def __enter__(self) -> subprocess.Popen[bytes]:
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        return self.proc

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
