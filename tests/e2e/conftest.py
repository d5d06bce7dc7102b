"""The real-cluster fixture: kube-apiserver, kube-scheduler and the ResourceClaim controller of one
Kubernetes release, with ``imex-webhook serve --kubeconfig`` as their admission webhook and extender.

Session scope: the control plane and the cluster's nodes are made once; each test works in its own
namespace and deletes its pods at the end so the next one finds the capacity free. Every test here is
marked ``realcluster``; ``pytest -m "not realcluster"`` runs the fast suite without them.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from certs import files as cert_files
from certs import issue as cert_issue
from tests import serving
from tests.e2e import install, objects
from tests.e2e.controlplane import RELEASE, ControlPlane, build
from tests.e2e.kubeapi import ApiCallError, KubeApi, eventually
from tests.e2e.proxy import RoundRobinProxy
from webhook.service import deploy

WEBHOOK_USER = f"system:serviceaccount:{deploy.NAMESPACE}:{deploy.SERVICE_NAME}"
WEBHOOK_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{deploy.NAMESPACE}")

# The cluster: two device-plugin racks and two DRA racks (GPUs only as ResourceSlices), every node with
# the compute-domain plugin's channel, plus two HGX nodes in no NVLink domain.
UUID_A, UUID_B = "3183419e-0000-4000-8000-00000000000a", "bbc2edac-0000-4000-8000-00000000000b"
UUID_C, UUID_D = "9277d399-0000-4000-8000-00000000000c", "5a1e0f00-0000-4000-8000-00000000000d"
RACKS: dict[str, tuple[str, int, bool]] = {  # prefix -> (clique, nodes, DRA GPUs instead of the device plugin)
    "a": (f"{UUID_A}.32766", 4, False),
    "b": (f"{UUID_B}.32766", 3, False),
    "c": (f"{UUID_C}.17044", 4, True),
    "d": (f"{UUID_D}.17044", 2, True),
}
GPUS_PER_NODE = 4


# What the closing summary reports: how long the control plane took to build and to start.
TIMINGS: dict[str, float] = {}
# And how long waiting groups took to bind once capacity returned (test_real_requeue), by scenario.
RETRY_SECONDS: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.write_line(
            f"real cluster (Kubernetes {RELEASE}): build {TIMINGS['build']:.0f} s "
            f"({'cached' if TIMINGS['build'] == 0 else 'fresh'}), start {TIMINGS['start']:.1f} s")
    for scenario, seconds in RETRY_SECONDS.items():
        terminalreporter.write_line(f"capacity returned -> group bound: {scenario} {seconds:.1f} s")


def rack_of(node_name: str) -> str:
    return node_name.split("-")[1]


def cluster_objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = objects.device_classes()
    for rack, (clique, count, dra) in RACKS.items():
        for i in range(count):
            name = f"gb200-{rack}-{i:02d}"
            out.append(objects.node(name, clique=clique, device_plugin_gpus=0 if dra else GPUS_PER_NODE))
            out.append(objects.channel_slice(name))
            if dra:
                out.append(objects.gpu_slice(name, GPUS_PER_NODE))
    for i in range(2):
        out.append(objects.node(f"hgx-x-{i:02d}", device_plugin_gpus=8, product="NVIDIA-H100-80GB-HBM3"))
    return out



class Kubelets:
    """The one part of every node's kubelet the scenarios need: a pod being deleted (a preemption victim,
    a pod whose grace period started) is gone once its containers would have stopped."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.removed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kubelets")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                for pod in self.api.list("Pod"):
                    meta = pod["metadata"]
                    if meta.get("deletionTimestamp"):
                        self.api.delete("Pod", meta["namespace"], meta["name"])
                        self.removed.append(f"{meta['namespace']}/{meta['name']}")
            except (ApiCallError, OSError):
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class RealCluster:
    plane: ControlPlane
    api: KubeApi
    workdir: Path
    build_seconds: float
    # The Service in front of the replicas: the scheduler's extender URL and the webhook's URL point here.
    proxy: RoundRobinProxy = field(default_factory=lambda: RoundRobinProxy([]))
    extenders: dict[str, serving.Served] = field(default_factory=dict)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    # -- the service under test ---------------------------------------------------------------------------

    @property
    def tls_dir(self) -> Path:
        """One serving certificate for every replica, as one Secret serves a Deployment's pods; made here
        (with the names ``serve --tls-dir`` asks for) with the scheduler's client certificate from the same
        CA, which every replica requires of extender callers (--client-ca), as deployed."""
        tls = self.workdir / "tls"
        if not cert_files.client_files(tls, cert_files.SCHEDULER_CLIENT)[0].exists():
            names = ["localhost", *cert_issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)]
            cert_files.ensure_tls_dir(tls, names, ["127.0.0.1", "::1"])
            cert_files.issue_client(tls, cert_files.SCHEDULER_CLIENT)
        return tls

    @property
    def scheduler_client(self) -> tuple[str, str]:
        cert, key = cert_files.client_files(self.tls_dir, cert_files.SCHEDULER_CLIENT)
        return str(cert), str(key)

    def scheduler_session(self) -> requests.Session:
        """A session presenting the scheduler's client certificate, for calls made on the scheduler's behalf."""
        session = requests.Session()
        session.cert = self.scheduler_client
        return session

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.proxy.port}"

    def start_extender(self, name: str = "imex-webhook", *extra: str) -> serving.Served:
        """A replica: ``serve --kubeconfig`` as the webhook's service account, behind the proxy."""
        identity = self.plane.identity("webhook", WEBHOOK_USER, WEBHOOK_GROUPS)
        served = self._stack.enter_context(serving.serve(
            self.workdir / name, "--kubeconfig", str(identity.kubeconfig), "--tls-dir", str(self.tls_dir),
            "--client-ca", str(self.tls_dir / "ca.crt"), *extra,
            ready_timeout=60, ca=self.tls_dir / "ca.crt"))
        self.extenders[name] = served
        self.proxy.add(served.port)
        return served

    def stop_extender(self, name: str = "imex-webhook") -> None:
        served = self.extenders.pop(name)
        self.proxy.remove(served.port)
        served.process.terminate()
        served.process.wait(15)
        self.proxy.drop_connections()

    def register_webhook(self, match_conditions: list[dict[str, str]] | None = None) -> None:
        """The base's MutatingWebhookConfiguration pointed at the proxy; ``match_conditions`` replace its own
        (a component's, e.g. manifests/components/pack-plain-gpu-pods)."""
        (config,) = install.documents(install.MANIFESTS / "mutating-webhook.yaml")
        config = copy.deepcopy(config)
        (hook,) = config["webhooks"]
        if match_conditions is not None:
            hook["matchConditions"] = match_conditions
        hook["clientConfig"] = {"url": f"{self.url}{deploy.WEBHOOK_PATH}",
                                "caBundle": base64.b64encode((self.tls_dir / "ca.crt").read_bytes()).decode()}
        with contextlib.suppress(ApiCallError):
            self.api.delete("MutatingWebhookConfiguration", None, config["metadata"]["name"])
        self.api.create(config)

    def scheduler_config(self, fabric: bool = False) -> dict[str, Any]:
        """The KubeSchedulerConfiguration ``deploy.py`` renders, pointed at the proxy on loopback; the TLS
        server name stays the Service's DNS name, which the serving certificate carries; the client
        certificate files are the ones made for this cluster instead of the mounted Secret's paths."""
        config = deploy.scheduler_config((self.tls_dir / "ca.crt").read_bytes(), fabric=fabric)
        (extender,) = config["extenders"]
        extender["urlPrefix"] = self.url
        assert extender["tlsConfig"]["certFile"] == deploy.SCHEDULER_CLIENT_CERT_FILE
        extender["tlsConfig"]["certFile"], extender["tlsConfig"]["keyFile"] = self.scheduler_client
        return config

    def restart_scheduler(self, fabric: bool) -> None:
        self.plane.stop("kube-scheduler")
        self.plane.start_scheduler(self.scheduler_config(fabric=fabric))

    # -- playing the nodes' part ----------------------------------------------------------------------------

    def wait_bound(self, namespace: str, names: list[str], timeout: float = 60) -> dict[str, str]:
        """pod name -> node, once every named pod is bound; then marks them Running as a kubelet would."""
        def bound() -> dict[str, str] | None:
            pods = {p["metadata"]["name"]: p for p in self.api.list("Pod", namespace)}
            nodes = {n: pods[n]["spec"].get("nodeName") for n in names if n in pods}
            return nodes if len(nodes) == len(names) and all(nodes.values()) else None
        try:
            placed = eventually(bound, timeout, what=f"pods {names} bound")
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{self.explain(namespace)}") from None
        for name in names:
            self.set_phase(namespace, name, "Running")
        return placed

    def explain(self, namespace: str) -> str:
        """What a person would look at: pod conditions, scheduler events, and the logs' last lines."""
        lines = []
        for pod in self.api.list("Pod", namespace):
            conditions = [(c.get("type"), c.get("reason"), c.get("message")) for c in
                          pod.get("status", {}).get("conditions", [])]
            lines.append(f"pod {pod['metadata']['name']}: node={pod['spec'].get('nodeName')} {conditions}")
        for event in self.api.list("Event", namespace):
            lines.append(f"event {event.get('regarding', {}).get('name')}: {event.get('reason')}: {event.get('note')}")
        lines.append("--- kube-scheduler:\n" + self.plane.log_tail("kube-scheduler", 30))
        for name, served in self.extenders.items():
            lines.append(f"--- {name}:\n" + "\n".join(served.output().splitlines()[-30:]))
        return "\n".join(lines)

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        """As the kubelet reports it: a strategic merge of the status, which keeps the conditions others own
        (the scheduler's PodScheduled, ours)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status: dict[str, Any] = {"phase": phase, "startTime": now,
                                  "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False",
                                                  "lastTransitionTime": now}]}
        self.api.merge_patch("Pod", namespace, name, {"status": status}, sub="status", strategic=True)

    def fill(self, namespace: str, rack: str, priority_class: str | None = None) -> list[str]:
        """A running pod on every node of ``rack``, holding all its GPUs (bound by hand, as a DaemonSet's)."""
        names = []
        for i in range(RACKS[rack][1]):
            pod = objects.pod(namespace, f"filler-{rack}-{i}", gpus=GPUS_PER_NODE, priority_class=priority_class)
            pod["spec"]["nodeName"] = f"gb200-{rack}-{i:02d}"
            self.api.create(pod)
            self.set_phase(namespace, pod["metadata"]["name"], "Running")
            names.append(pod["metadata"]["name"])
        return names

    def cordon(self, rack: str, cordoned: bool = True) -> None:
        for i in range(RACKS[rack][1]):
            self.api.merge_patch("Node", None, f"gb200-{rack}-{i:02d}", {"spec": {"unschedulable": cordoned or None}})

    def events_for(self, namespace: str, pod_name: str, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.api.list("Event", namespace)
                if e.get("regarding", {}).get("name") == pod_name and e.get("reason") == reason]

    def cleanup(self, namespace: str) -> None:
        """Delete the scenario's pods and claims, and wait until they are gone (a claim stays while it is
        allocated: the ResourceClaim controller frees it first) and the extender has released its groups'
        domains, so the next scenario finds the whole cluster free."""
        for pod in self.api.list("Pod", namespace):
            self.api.delete("Pod", namespace, pod["metadata"]["name"])
        for claim in self.api.list("ResourceClaim", namespace):
            self.api.delete("ResourceClaim", namespace, claim["metadata"]["name"])
        eventually(lambda: not self.api.list("Pod", namespace) and not self.api.list("ResourceClaim", namespace),
                   75, interval=0.2, what=f"the pods and claims of namespace {namespace} gone")
        if self.extenders:
            eventually(lambda: not self.reservations(namespace), 75, interval=0.2,
                       what=f"the reservations of namespace {namespace} released")

    def reservations(self, namespace: str) -> list[dict[str, Any]]:
        return [r for r in self.api.list("DomainReservation") if r.get("spec", {}).get("namespace") == namespace]

    def namespace(self, name: str) -> str:
        self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, exist_ok=True)
        return name



@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    binary, seconds = build(sys.stderr)
    TIMINGS["build"] = seconds
    started = time.monotonic()
    workdir = tmp_path_factory.mktemp("realcluster")
    plane = ControlPlane(workdir, binary)
    try:
        plane.start()
        api = KubeApi(plane.server, str(plane.ca_file), plane.identity("admin", "e2e-admin", ["system:masters"]))
        install.install_project(api)
        api.create_all(cluster_objects())
        for node in api.list("Node"):
            # The TaintNodesByCondition admission plugin gives every new node the not-ready taint; the node
            # lifecycle controller lifts it once the kubelet reports Ready. There is neither here.
            api.merge_patch("Node", None, node["metadata"]["name"], {"spec": {"taints": None}})
        cluster = RealCluster(plane, api, workdir, seconds)
        kubelets = Kubelets(api)
        cluster._stack.callback(kubelets.stop)
        cluster.start_extender()
        cluster.register_webhook()
        plane.start_scheduler(cluster.scheduler_config())
        TIMINGS["start"] = time.monotonic() - started
        yield cluster
        cluster.proxy.close()
        cluster._stack.close()
    finally:
        plane.stop_all()
