"""The agent against the project's HTTP API-server fake (``tests.kubefake``) through the official client:
labels, the inventory annotation, FabricAttachment status, the device-plugin pod refresh and the
allocatable wait, with a simulated node (fake pynvml and kernel) underneath.

Covered: a pass labels the Node with clique and fabric health and writes the inventory, and a second
pass with nothing new sends no patch; a hot-add moves the attachment to Ready with the GPUs' UUIDs and
PCI addresses once the Node's allocatable shows them, deleting only the device-plugin pod on this node
(the pod on another node, other pods on this node and another node's attachment stay as they were);
a hot-add whose GPU never appears moves it to Failed naming the address and the step; a release
watched in a running agent is refused while a process holds the device (Released=False naming it, the
GPUs marked releasing), then completes when the process exits, and the device plugin re-counts.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from tests.agent.conftest import FAST, Make, Simulated
from tests.kubefake import KINDS, KubeFake, eventually
from webhook.adapters.kube import node_agent as kube_agent
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.agent import hotplug, inventory, release
from webhook.agent.loop import Agent
from webhook.agent.ports import NodeApiError
from webhook.domain import keys
from webhook.wire import fabric_attachment as fa
from webhook.wire import gpu_inventory

NODE = "cdi-node-01"
CLUSTER = "9277d399-7d0a-4d4a-9b0e-d85bb19ce2b0"
C1 = ("GPU-8a000000-0000-4000-8000-0000000000c1", "0000:c1:00.0")
C2 = ("GPU-8a000000-0000-4000-8000-0000000000c2", "0000:c2:00.0")
DP_LABELS = {"app.kubernetes.io/name": "nvidia-device-plugin", "app.kubernetes.io/instance": "nvdp"}


def _node(name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {keys.GPU_RESOURCE: str(gpus)}, "capacity": {keys.GPU_RESOURCE: str(gpus)}}}


def _pod(name: str, node: str, labels: dict[str, str], namespace: str = "nvidia-device-plugin") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}


def _attachment(name: str, node: str, phase: fa.Phase, *blocks: tuple[str, str]) -> fa.Attachment:
    return fa.Attachment(name=name, node=node, pod_namespace="ml", pod_name="trainer-0", pod_uid=f"uid-{name}",
                         zone="pool-a", gpus=len(blocks), system=f"/redfish/v1/Systems/{node}", phase=phase,
                         blocks=tuple(fa.Block(f"/redfish/v1/CompositionService/ResourceBlocks/{p}", uuid=u,
                                               pci_address=p) for u, p in blocks))


def _put(fake: KubeFake, att: fa.Attachment) -> None:
    obj = fa.to_object(att)
    if fake.get("fabricattachments", None, att.name) is None:
        fake.create("fabricattachments", obj)
    fake.replace_status("fabricattachments", {"metadata": {"name": att.name}, "status": obj["status"]})


def _stored(fake: KubeFake, name: str) -> fa.Attachment:
    obj = fake.get("fabricattachments", None, name)
    assert obj is not None
    return fa.parse(obj)


def _params(fake: KubeFake, action: str, plural: str) -> Any:
    """The query parameters of the first such request the fake received (the selectors the agent sent)."""
    wanted, resource = kmock.action(action.upper()), KINDS[plural].resource

    def first() -> dict[str, str]:
        return next(dict(r.params) for r in fake.emulator if r.action == wanted and r.resource == resource)
    return fake._call(first).items()


class Kubelet:
    """The part of the node the test plays: when the device-plugin pod on the node is deleted, its
    DaemonSet starts a new one, which registers every GPU bound to nvidia, and the kubelet reports them."""

    def __init__(self, fake: KubeFake, node: Simulated) -> None:
        self.fake, self.node = fake, node
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            if self.fake.get("pods", "nvidia-device-plugin", f"nvdp-{NODE}-{self.restarts}") is not None:
                continue
            self.restarts += 1
            self.fake.create("pods", _pod(f"nvdp-{NODE}-{self.restarts}", NODE, DP_LABELS))
            with self.node.sim.lock:
                count = sum(1 for g in self.node.sim.gpus if g.enumerated and g.bound == "nvidia")
            self.fake.patch("nodes", None, NODE, {"status": {"allocatable": {keys.GPU_RESOURCE: str(count)}}})


@pytest.fixture
def cluster(kube_fake: KubeFake) -> KubeFake:
    kube_fake.create("nodes", _node(NODE, 2))
    kube_fake.create("nodes", _node("other-node", 4))
    kube_fake.create("pods", _pod(f"nvdp-{NODE}-0", NODE, DP_LABELS))
    kube_fake.create("pods", _pod("nvdp-other-node", "other-node", DP_LABELS))
    kube_fake.create("pods", _pod("gpu-operator-dp", "other-node", {"app": "nvidia-device-plugin-daemonset"},
                                  "gpu-operator"))
    kube_fake.create("pods", _pod("trainer-0", NODE, {"app": "trainer"}, "ml"))
    kube_fake.create("pods", _pod("gfd", NODE, {"app.kubernetes.io/name": "gpu-feature-discovery"}))
    return kube_fake


@pytest.fixture
def connect(kubeconfig: Path) -> Iterator[Any]:
    made: list[kube_agent.KubeNodeApi] = []

    def make(node: str = NODE) -> kube_agent.KubeNodeApi:
        api = kube_agent.connect(node, str(kubeconfig), False, watch=WatchSettings(absent_recheck=0.2))
        made.append(api)
        return api

    yield make
    for api in made:
        api.stop()


def _agent(node: Simulated, api: kube_agent.KubeNodeApi, **kw: Any) -> Agent:
    return Agent(node.nvml, node.host, api, hot_add=hotplug.Options(deadlines=FAST, rescan_every=0.2),
                 releasing=release.Options(deadlines=FAST), **kw)


def test_a_pass_labels_the_node_and_a_second_pass_with_nothing_new_sends_no_patch(
        cluster: KubeFake, connect: Any, simulate: Make) -> None:
    cluster.create("nodes", _node("gb200-rack1-tray3", 4))
    agent = _agent(simulate("nvl72-tray"), connect("gb200-rack1-tray3"), own_clique_label=True)

    agent.pass_once()

    node = cluster.get("nodes", None, "gb200-rack1-tray3")
    assert node is not None
    labels = node["metadata"]["labels"]
    assert labels[keys.CLIQUE_LABEL] == f"{CLUSTER}.32766"
    assert labels[inventory.HEALTH_LABEL] == "healthy"
    assert labels["kubernetes.io/hostname"] == "gb200-rack1-tray3"  # a merge patch keeps what it does not name
    doc = gpu_inventory.of_node(node)
    assert doc is not None and [g["uuid"][-1] for g in doc["gpus"]] == ["1", "2", "3", "4"]
    patches = cluster.requests("update", "nodes")
    assert patches == 1

    agent.pass_once()

    assert cluster.requests("update", "nodes") == patches
    assert agent.ready() == (True, "NVML initialised (driver 570.133.20), 4 GPUs")


def test_a_hot_add_goes_ready_and_refreshes_only_the_device_plugin_pod_on_this_node(
        cluster: KubeFake, connect: Any, simulate: Make) -> None:
    node = simulate("composable-hot-add")
    _put(cluster, _attachment("fa-1", NODE, fa.Phase.ATTACHED, C1, C2))
    _put(cluster, _attachment("fa-elsewhere", "other-node", fa.Phase.ATTACHED, ("GPU-x", "0000:c1:00.0")))
    untouched = {(p["metadata"].get("namespace"), p["metadata"]["name"]): p["metadata"]["resourceVersion"]
                 for p in cluster.items("pods") if p["metadata"]["name"] != f"nvdp-{NODE}-0"}
    elsewhere = cluster.get("fabricattachments", None, "fa-elsewhere")

    with Kubelet(cluster, node) as kubelet:
        _agent(node, connect()).pass_once()

    att = _stored(cluster, "fa-1")
    assert att.phase is fa.Phase.READY, att.message
    assert [(b.uuid, b.pci_address) for b in att.blocks] == [C1, C2]
    assert att.condition(fa.READY_CONDITION) is not None
    assert kubelet.restarts == 1
    assert cluster.get("pods", "nvidia-device-plugin", f"nvdp-{NODE}-0") is None
    now = {(p["metadata"].get("namespace"), p["metadata"]["name"]): p["metadata"]["resourceVersion"]
           for p in cluster.items("pods")}
    assert {k: now.get(k) for k in untouched} == untouched  # the other node's plugin, the job, GFD: untouched
    assert cluster.get("fabricattachments", None, "fa-elsewhere") == elsewhere
    assert {"labelSelector": f"{fa.NODE_LABEL}={NODE}"}.items() <= _params(cluster, "list", "fabricattachments")
    assert {"labelSelector": "app.kubernetes.io/name=nvidia-device-plugin",
            "fieldSelector": f"spec.nodeName={NODE}"}.items() <= _params(cluster, "list", "pods")
    node_obj = cluster.get("nodes", None, NODE)
    assert node_obj is not None and node_obj["status"]["allocatable"][keys.GPU_RESOURCE] == "4"
    doc = gpu_inventory.of_node(node_obj)
    assert doc is not None
    assert {g["pci"]: g.get("owner") for g in doc["gpus"]} == {
        "0000:18:00.0": None, "0000:3a:00.0": None, C1[1]: "fa-1", C2[1]: "fa-1"}


def test_a_hot_add_whose_gpu_never_appears_goes_failed_naming_the_address_and_the_step(
        cluster: KubeFake, connect: Any, simulate: Make) -> None:
    node = simulate("composable-hot-add")
    _put(cluster, _attachment("fa-2", NODE, fa.Phase.ATTACHED, ("GPU-8a000000-0000-4000-8000-0000000000e1",
                                                                "0000:e1:00.0")))

    _agent(node, connect()).pass_once()

    att = _stored(cluster, "fa-2")
    assert att.phase is fa.Phase.FAILED
    assert att.message.startswith("hot-add failed at step enumerate after ")
    assert "PCI device 0000:e1:00.0 did not appear" in att.message
    assert cluster.get("pods", "nvidia-device-plugin", f"nvdp-{NODE}-0") is not None  # nothing refreshed


def test_a_watched_release_is_refused_while_a_process_holds_the_device_then_completes(
        cluster: KubeFake, connect: Any, simulate: Make) -> None:
    node = simulate("composable-hot-add")
    with Kubelet(cluster, node):
        _put(cluster, _attachment("fa-3", NODE, fa.Phase.ATTACHED, C1, C2))
        agent = _agent(node, connect())
        stopping = threading.Event()
        runner = threading.Thread(target=agent.run, args=(stopping, 0.1), daemon=True)
        runner.start()
        try:
            eventually(lambda: _stored(cluster, "fa-3").phase is fa.Phase.READY, what="Ready")
            node.sim.open_device(88, "dcgm-exporter", "/dev/nvidia3")  # c2's device node, held without a context
            _put(cluster, dataclasses.replace(_stored(cluster, "fa-3"), phase=fa.Phase.RELEASING))

            refused = eventually(lambda: _stored(cluster, "fa-3").condition(fa.RELEASED_CONDITION),
                                 what="Released=False")
            assert refused is not None
            assert (refused.status, refused.reason) == ("False", "InUse")
            assert refused.message == f"{C2[0]} ({C2[1]}) is in use by pid 88 (dcgm-exporter)"
            doc = gpu_inventory.of_node(cluster.get("nodes", None, NODE) or {})
            assert doc is not None
            assert [g["pci"] for g in doc["gpus"] if g.get("releasing")] == [C1[1], C2[1]]

            node.sim.end_process(88)
            eventually(lambda: _stored(cluster, "fa-3").released, what="Released=True")
            eventually(lambda: (cluster.get("nodes", None, NODE) or {})["status"]["allocatable"][keys.GPU_RESOURCE]
                       == "2", what="the device plugin re-counted after the release")
        finally:
            stopping.set()
            agent.wake()
            runner.join(5)
    assert not node.host.present(C1[1]) and not node.host.present(C2[1])
    assert node.sim.violations == []


def test_failed_calls_reach_the_agent_as_the_ports_error_with_the_http_status(
        cluster: KubeFake, connect: Any, tmp_path: Path) -> None:
    with pytest.raises(NodeApiError) as missing:
        connect("no-such-node").read_node()
    assert missing.value.status == 404 and "no-such-node" in str(missing.value)
    assert connect().read_attachment("fa-none") is None  # a 404 there means "no such attachment"

    config = cluster.write_kubeconfig(tmp_path / "unreachable")
    config.write_text(config.read_text().replace(cluster.url, "http://127.0.0.1:1"))
    unreachable = kube_agent.connect(NODE, str(config), False)
    try:
        for call in (unreachable.read_node, unreachable.refresh_device_plugin, unreachable.attachments,
                     lambda: unreachable.patch_node({})):
            with pytest.raises(NodeApiError) as raised:
                call()
            assert raised.value.status == 0
    finally:
        unreachable.stop()


def test_a_pass_that_cannot_reach_the_api_server_says_so_and_the_next_one_tries_again(
        cluster: KubeFake, connect: Any, simulate: Make, tmp_path: Path) -> None:
    config = cluster.write_kubeconfig(tmp_path / "unreachable")
    config.write_text(config.read_text().replace(cluster.url, "http://127.0.0.1:1"))
    api = kube_agent.connect(NODE, str(config), False)
    try:
        agent = _agent(simulate("nvl72-tray"), api)
        agent.pass_once()
        ok, why = agent.api_ok
        assert not ok and "Unreachable" in why and agent.passes == 0
    finally:
        api.stop()


def test_an_attachment_moved_to_another_node_leaves_the_agents_cache(cluster: KubeFake, connect: Any) -> None:
    _put(cluster, _attachment("fa-moving", NODE, fa.Phase.ATTACHED, C1))
    api = connect()
    api.start(lambda: None)
    eventually(lambda: [a.name for a in api.attachments()] == ["fa-moving"], what="the agent sees its attachment")

    cluster.patch("fabricattachments", None, "fa-moving", {"metadata": {"labels": {fa.NODE_LABEL: "other-node"}},
                                                             "spec": {"node": "other-node"}})

    eventually(lambda: api.attachments() == [], what="the attachment left this node's cache")
