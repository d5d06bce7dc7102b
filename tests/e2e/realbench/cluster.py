"""The benchmark's cluster: the real control plane of tests/e2e, N fake nodes in NVL72 cliques, half of them
busy, ``imex-webhook serve --kubeconfig`` as admission webhook and extender, and the pass-through extender.

No kubelets: Nodes are created Ready, as GPU Feature Discovery and the kubelet leave them (clique label,
four device-plugin GPUs), with the compute-domain plugin's ResourceSlice (``channel-0``, ``daemon-0``) per
node as NVIDIA's DRA driver publishes it. Objects are created from a thread pool, one keep-alive session
per thread: the API server takes parallel creates, and one at a time would take most of the run at 20,000.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from certs import files as cert_files
from certs import issue as cert_issue
from tests import serving
from tests.e2e import install, objects
from tests.e2e.controlplane import ControlPlane, build, free_port
from tests.e2e.kubeapi import ApiCallError, KubeApi, eventually
from tests.e2e.realbench.workload import GPUS_PER_NODE, Layout
from webhook.service import deploy

WEBHOOK_USER = f"system:serviceaccount:{deploy.NAMESPACE}:{deploy.SERVICE_NAME}"
WEBHOOK_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{deploy.NAMESPACE}")
BUSY_NAMESPACE = "busy"
THREADS = 16



@dataclass
class Pool:
    """Parallel API calls: each thread its own KubeApi (one keep-alive TLS session)."""

    make: Callable[[], KubeApi]
    _local: threading.local = field(default_factory=threading.local)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(THREADS, "realbench-api"))

    def api(self) -> KubeApi:
        api: KubeApi | None = getattr(self._local, "api", None)
        if api is None:
            api = self._local.api = self.make()
        return api

    def each(self, call: Callable[[KubeApi, Any], Any], items: Iterable[Any]) -> list[Any]:
        return list(self.executor.map(lambda item: call(self.api(), item), items))


@dataclass
class BenchCluster:
    plane: ControlPlane
    api: KubeApi
    pool: Pool
    layout: Layout
    workdir: Path
    service: serving.Served | None = None
    passthrough: subprocess.Popen[bytes] | None = None
    passthrough_port: int = 0
    metrics_port: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    # -- TLS, as tests/e2e/conftest.py makes it ------------------------------------------------------------

    @property
    def tls_dir(self) -> Path:
        tls = self.workdir / "tls"
        if not cert_files.client_files(tls, cert_files.SCHEDULER_CLIENT)[0].exists():
            names = ["localhost", *cert_issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)]
            cert_files.ensure_tls_dir(tls, names, ["127.0.0.1", "::1"])
            cert_files.issue_client(tls, cert_files.SCHEDULER_CLIENT)
        return tls

    # -- the cluster's objects ------------------------------------------------------------------------------

    def populate(self, log: IO[str]) -> None:
        started = time.monotonic()
        layout = self.layout
        api = self.api
        install.install_project(api)
        api.create_all(objects.device_classes())
        names = [layout.node_name(i) for i in range(layout.nodes)]

        def node(a: KubeApi, i: int) -> None:
            a.create(objects.node(layout.node_name(i), clique=layout.clique_label(layout.clique_of(i)),
                                  device_plugin_gpus=GPUS_PER_NODE), exist_ok=True)
            # TaintNodesByCondition gives a new node the not-ready taint; no node lifecycle controller lifts it.
            a.merge_patch("Node", None, layout.node_name(i), {"spec": {"taints": None}})
            a.create(objects.channel_slice(layout.node_name(i)), exist_ok=True)

        self.pool.each(node, range(layout.nodes))
        self.timings["nodes_s"] = time.monotonic() - started
        log.write(f"{len(names)} nodes and their channel slices in {self.timings['nodes_s']:.0f} s\n")
        started = time.monotonic()
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BUSY_NAMESPACE}}, exist_ok=True)

        def filler(a: KubeApi, i: int) -> None:
            pod = objects.pod(BUSY_NAMESPACE, f"busy-{i:05d}", gpus=GPUS_PER_NODE)
            pod["spec"]["nodeName"] = layout.node_name(i)
            a.create(pod, exist_ok=True)
            set_running(a, BUSY_NAMESPACE, pod["metadata"]["name"])

        busy = layout.busy_nodes()
        self.pool.each(filler, busy)
        self.timings["busy_s"] = time.monotonic() - started
        log.write(f"{len(busy)} busy nodes filled in {self.timings['busy_s']:.0f} s\n")

    # -- the service, the webhook and the pass-through --------------------------------------------------------

    def start_service(self, log: IO[str], extra: tuple[str, ...] = ()) -> None:
        started = time.monotonic()
        identity = self.plane.identity("webhook", WEBHOOK_USER, WEBHOOK_GROUPS)
        tls = self.tls_dir
        self.service = self.stack.enter_context(serving.serve(
            self.workdir / "imex-webhook", "--kubeconfig", str(identity.kubeconfig), "--tls-dir", str(tls),
            "--client-ca", str(tls / "ca.crt"), *extra, ready_timeout=900, ca=tls / "ca.crt"))
        (config,) = install.documents(install.MANIFESTS / "mutating-webhook.yaml")
        config = copy.deepcopy(config)
        (hook,) = config["webhooks"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.service.port}{deploy.WEBHOOK_PATH}",
                                "caBundle": base64.b64encode((tls / "ca.crt").read_bytes()).decode()}
        with contextlib.suppress(ApiCallError):
            self.api.delete("MutatingWebhookConfiguration", None, config["metadata"]["name"])
        self.api.create(config)
        # The node domain labeller gives every node of a domain imex-webhook.io/domain, which admission's
        # required terms ask for; wait until it has reached the last node.
        last = self.layout.node_name(self.layout.nodes - 1)
        eventually(lambda: self.api.get("Node", None, last)["metadata"]["labels"].get(_domain_label()), 900,
                   interval=1, what=f"node {last} labelled with its domain")
        self.timings["service_s"] = time.monotonic() - started
        log.write(f"imex-webhook serve ready and every node labelled in {self.timings['service_s']:.0f} s\n")

    def start_passthrough(self) -> None:
        tls, admin = self.tls_dir, self.plane.identity("webhook", WEBHOOK_USER, WEBHOOK_GROUPS)
        self.passthrough_port = free_port()
        log = (self.workdir / "passthrough.log").open("wb")
        self.passthrough = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.realbench.passthrough", "--port", str(self.passthrough_port),
             "--tls-cert", str(tls / "tls.crt"), "--tls-key", str(tls / "tls.key"),
             "--api-server", self.plane.server, "--api-ca", str(self.plane.ca_file),
             "--api-cert", str(admin.cert), "--api-key", str(admin.key)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        self.stack.callback(_terminate, self.passthrough)
        eventually(lambda: "pass-through extender on" in (self.workdir / "passthrough.log").read_text(), 30,
                   what="the pass-through extender listening")

    # -- the scheduler of a run -------------------------------------------------------------------------------

    def scheduler_config(self, variant: str) -> dict[str, Any]:
        """``a``: the shipped profile and extender; ``b``: the same, the extender URL at the pass-through;
        ``c``: kube-scheduler's default plugins under the same profile name, no extender, the shipped
        percentageOfNodesToScore."""
        shipped = deploy.scheduler_config((self.tls_dir / "ca.crt").read_bytes())
        if variant == "c":
            return {"apiVersion": shipped["apiVersion"], "kind": shipped["kind"],
                    "percentageOfNodesToScore": shipped["percentageOfNodesToScore"],
                    "profiles": [{"schedulerName": deploy.SCHEDULER_NAME,
                                  "percentageOfNodesToScore": shipped["percentageOfNodesToScore"]}]}
        assert self.service is not None
        port = self.service.port if variant == "a" else self.passthrough_port
        (extender,) = shipped["extenders"]
        extender["urlPrefix"] = f"https://127.0.0.1:{port}"
        extender["tlsConfig"]["certFile"], extender["tlsConfig"]["keyFile"] = (
            str(p) for p in cert_files.client_files(self.tls_dir, cert_files.SCHEDULER_CLIENT))
        return shipped

    def restart_scheduler(self, variant: str) -> None:
        self.plane.stop("kube-scheduler")
        self.metrics_port = free_port()
        self.plane.start_scheduler(self.scheduler_config(variant), extra_args=[
            f"--secure-port={self.metrics_port}", "--bind-address=127.0.0.1",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"])
        eventually(lambda: self.scheduler_metrics().startswith("#") or None, 120, interval=0.5,
                   what="kube-scheduler serving /metrics")

    def scheduler_metrics(self) -> str:
        import requests
        import urllib3
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        try:
            reply = requests.get(f"https://127.0.0.1:{self.metrics_port}/metrics", verify=False, timeout=30)
        except requests.RequestException:
            return ""
        return reply.text if reply.status_code == 200 else ""

    @property
    def scheduler_pid(self) -> int:
        return self.plane.procs["kube-scheduler"].pid


def set_running(api: KubeApi, namespace: str, name: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    api.merge_patch("Pod", namespace, name, {"status": {"phase": "Running", "startTime": now, "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": now}]}}, sub="status", strategic=True)


def _domain_label() -> str:
    from webhook.domain import keys
    return keys.DOMAIN_LABEL



def _terminate(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextlib.contextmanager
def bench_cluster(workdir: Path, layout: Layout, log: IO[str],
                  service_args: tuple[str, ...] = ()) -> Iterator[BenchCluster]:
    binary, built = build(log)
    workdir.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(workdir, binary)
    try:
        started = time.monotonic()
        plane.start()
        admin = plane.identity("admin", "e2e-admin", ["system:masters"])
        api = KubeApi(plane.server, str(plane.ca_file), admin)
        pool = Pool(lambda: KubeApi(plane.server, str(plane.ca_file), admin))
        cluster = BenchCluster(plane, api, pool, layout, workdir)
        cluster.timings["build_s"] = built
        cluster.timings["control_plane_s"] = time.monotonic() - started
        with cluster.stack:
            cluster.stack.callback(pool.executor.shutdown)
            cluster.populate(log)
            cluster.start_service(log, service_args)
            cluster.start_passthrough()
            yield cluster
    finally:
        plane.stop_all()


def pod_nodes(api: KubeApi, namespace: str) -> Mapping[str, str | None]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in api.list("Pod", namespace)}
