"""A group placed in a fabric zone by the real kube-scheduler, with fabric GPUs attached before it binds.

The scheduler runs the fabric-mode configuration (``deploy.scheduler_config(fabric=True)``: NodeResourcesFit
ignores ``nvidia.com/gpu``), the extender replica runs ``serve --fabric URL`` against the Redfish
composition simulator, and ``imex-webhook agent`` hot-adds the composed GPUs on simulated NVML and sysfs.
A stand-in for the node's kubelet re-registers the device plugin: when the agent restarts the plugin's
pod, the Node's allocatable shows the GPUs the node then has.
"""

from __future__ import annotations

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
from tests.e2e import objects
from tests.e2e.conftest import RealCluster
from tests.e2e.kubeapi import ApiCallError, KubeApi, eventually
from webhook.domain import keys
from webhook.sim.fabric import inventory
from webhook.sim.fabric.server import RunningSim, start_in_thread

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]

NODE = "fab-00"
ZONE = "pcie-pool-1"
PRODUCT = "NVIDIA-H100-PCIe"
PLUGIN_POD = f"nvidia-device-plugin-{NODE}"


def _blocks_on(sim: RunningSim, node: str) -> int:
    state = requests.get(sim.url + "/admin/state", auth=("admin", "admin"), timeout=10).json()
    return sum(1 for b in state["blocks"].values() if b.get("system") == node)


def _plugin_pod() -> dict[str, Any]:
    pod = objects.pod("kube-system", PLUGIN_POD, labels={"app.kubernetes.io/name": "nvidia-device-plugin"})
    pod["spec"]["nodeName"] = NODE
    return pod


class DevicePluginKubelet:
    """When the agent deletes the device-plugin pod on the node, it comes back and the Node's allocatable
    shows one local GPU plus what the fabric composed to the node."""

    def __init__(self, api: KubeApi, sim: RunningSim) -> None:
        self.api, self.sim, self.restarts = api, sim, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.api.get("Pod", "kube-system", PLUGIN_POD)
                continue
            except ApiCallError as err:
                if err.status != 404:
                    continue
            gpus = str(1 + _blocks_on(self.sim, NODE))
            self.api.merge_patch("Node", None, NODE, {"status": {"allocatable": {keys.GPU_RESOURCE: gpus},
                                                                 "capacity": {keys.GPU_RESOURCE: gpus}}}, sub="status")
            self.api.create(_plugin_pod())
            self.restarts += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def fabric(real_cluster: RealCluster, tmp_path: Path) -> Iterator[RunningSim]:
    """The fabric zone's node, the simulator, a fabric-mode replica and scheduler; restored afterwards."""
    api = real_cluster.api
    node = objects.node(NODE, fabric_zone=ZONE, device_plugin_gpus=1, product=PRODUCT,
                        annotations={keys.FABRIC_SLOTS_ANNOTATION: "4",
                                     keys.REDFISH_SYSTEM_ANNOTATION: f"/redfish/v1/Systems/{NODE}"})
    api.create(node)
    api.merge_patch("Node", None, NODE, {"spec": {"taints": None}})
    api.create(_plugin_pod())
    creds = tmp_path / "credentials"
    creds.write_text("admin:admin")
    with start_in_thread(inventory.demo()) as sim:
        plain = list(real_cluster.extenders)
        real_cluster.start_extender("imex-webhook-fabric", "--fabric", sim.url, "--fabric-credentials", str(creds),
                                    "--fabric-refresh", "0.3", "--bind-budget", "15")
        for name in plain:
            real_cluster.proxy.remove(real_cluster.extenders[name].port)
        real_cluster.proxy.drop_connections()
        real_cluster.restart_scheduler(fabric=True)
        agent = _start_agent(real_cluster, tmp_path)
        try:
            yield sim
        finally:
            agent.terminate()
            agent.wait(10)
            real_cluster.restart_scheduler(fabric=False)
            for name in plain:
                real_cluster.proxy.add(real_cluster.extenders[name].port)
            real_cluster.stop_extender("imex-webhook-fabric")
            api.delete("Pod", "kube-system", PLUGIN_POD)
            api.delete("Node", None, NODE)


def _start_agent(cluster: RealCluster, tmp_path: Path) -> subprocess.Popen[bytes]:
    """``imex-webhook agent`` for the node, as the DaemonSet runs it: one local GPU, and the fabric's first
    two blocks, which appear on the PCI bus once they are composed and rescanned."""
    blocks = inventory.demo().blocks[:2]
    gpus = [{"uuid": "GPU-0f000000-0000-4000-8000-000000000001", "pci": "0000:18:00.0", "name": "NVIDIA H100 PCIe",
             "fabric": "none"}]
    gpus += [{"uuid": b.uuid, "pci": b.pci_address, "name": "NVIDIA H100 PCIe", "fabric": "none",
              "hotplug": "pending"} for b in blocks]
    scenario = tmp_path / f"{NODE}.yaml"
    scenario.write_text(yaml.safe_dump({"node": NODE, "appear_delay": 0.05, "bind_delay": 0.05, "gpus": gpus}))
    # The agent's RBAC and admission policy key on its service-account token's node claim, which a client
    # certificate does not carry: it runs as the suite's admin here (tests/deploy check its RBAC).
    kubeconfig = cluster.plane.identities["admin"].kubeconfig
    with (tmp_path / "agent.log").open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", "webhook", "agent", "--node", NODE, "--kubeconfig",
                                 str(kubeconfig), "--nvml-sim", str(scenario), "--interval", "0.5",
                                 "--listen", f"127.0.0.1:{serving.free_port()}"], stdout=log, stderr=subprocess.STDOUT)


def test_a_group_whose_only_domain_is_a_fabric_zone_binds_after_its_gpus_are_attached_then_releases_them(
        real_cluster: RealCluster, fabric: RunningSim) -> None:
    ns = real_cluster.namespace("fabric")
    api = real_cluster.api
    eventually(lambda: keys.INVENTORY_ANNOTATION in api.get("Node", None, NODE)["metadata"].get("annotations", {}),
               30, what="the node agent published its inventory")
    kubelet = DevicePluginKubelet(api, fabric)
    try:
        pod = objects.pod(ns, "h100-job-0", gpus=3, annotations={keys.GROUP_ANNOTATION: "h100-job",
                                                                 keys.GROUP_SIZE_ANNOTATION: "1"})
        pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": PRODUCT}
        api.create(pod)
        placed = real_cluster.wait_bound(ns, ["h100-job-0"], timeout=90)
        assert placed == {"h100-job-0": NODE}
        (att,) = api.list("FabricAttachment")
        assert att["status"]["phase"] == "Ready" and len(att["status"]["blocks"]) == 2
        assert _blocks_on(fabric, NODE) == 2
        assert kubelet.restarts >= 1, "the agent refreshed the node's device plugin"
        node = api.get("Node", None, NODE)
        assert node["metadata"]["labels"][keys.DOMAIN_LABEL] == ZONE
        # The job ends: its GPUs go back to the fabric, and nothing stays composed.
        real_cluster.set_phase(ns, "h100-job-0", "Succeeded")
        api.delete("Pod", ns, "h100-job-0")
        eventually(lambda: not api.list("FabricAttachment"), 60, what="released, detached and deleted")
        assert _blocks_on(fabric, NODE) == 0
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{real_cluster.explain(ns)}") from None
    finally:
        kubelet.stop()
        real_cluster.cleanup(ns)
