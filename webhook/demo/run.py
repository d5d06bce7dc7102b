"""The demo of ``imex-webhook demo`` (its command line: ``webhook.demo.cli``): the service on the demo
cluster, driven the way a cluster would drive it.

Starts ``imex-webhook serve`` (embedded demo cluster, simulated fabric and node agents, TLS with fresh
certificates) and plays the jobs of ``demo_scenario`` through the real HTTPS endpoints in the order
kube-apiserver and kube-scheduler call them: ``/mutate`` for each pod CREATE, then each pod goes through
kube-scheduler's scheduling and binding cycle as the emulator in ``webhook.sim.cycle`` runs it (the
dedicated profile of ``deploy.scheduler_config``, its in-tree filters, then ``/filter``, ``/prioritize``
and ``/bind`` of the running service over TLS), so a pod that fits nowhere gets kube-scheduler's
FailedScheduling text. Shows progress, ends with a table of where every job went, and exits non-zero if
anything did not happen as a correct service must make it happen.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import requests

from certs import files as cert_files
from certs import issue as cert_issue
from webhook.demo import cluster as demo
from webhook.demo import scenario as demo_scenario
from webhook.demo.scenario import Job
from webhook.service import deploy
from webhook.sim import cycle
from webhook.sim.cycle.scheduling import BIND_ERROR, BOUND, UNSCHEDULABLE
from webhook.sim.dra_objects import channel_device_class
from webhook.sim.extender_http import HttpExtender


@dataclass
class Outcome:
    job: Job
    nodes: list[str] = field(default_factory=list)
    domains: set[str] = field(default_factory=set)
    attached: int = 0
    reason: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class Client:
    """kube-apiserver's and kube-scheduler's calls; ``cert``: the scheduler's client certificate and key."""

    def __init__(self, url: str, ca: Path, cert: tuple[Path, Path] | None = None) -> None:
        self.url = url
        self.session = requests.Session()
        self.cert = cert
        if cert is not None:
            self.session.cert = (str(cert[0]), str(cert[1]))
        # Per request, not on the session: requests lets REQUESTS_CA_BUNDLE override a session's verify.
        self.ca = str(ca)

    def post(self, path: str, body: Any) -> Any:
        reply = self.session.post(self.url + path, json=body, timeout=60, verify=self.ca)
        if reply.status_code != 200:
            raise RuntimeError(f"POST {path} answered {reply.status_code}: {reply.text[:300]}")
        return reply.json()

    def get(self, path: str) -> Any:
        return self.session.get(self.url + path, timeout=30, verify=self.ca).json()


def _admit(client: Client, job: Job, index: int) -> dict[str, Any]:
    """kube-apiserver: mutating admission, then name generation and the UID (they come after admission)."""
    pod = demo_scenario.pod_create(job, index)
    answer = client.post("/mutate", demo_scenario.admission_review(str(uuid.uuid4()), pod))["response"]
    return demo_scenario.admitted(pod, answer, f"{job.name}-{index}")


@dataclass
class Scheduler:
    """kube-scheduler with the dedicated profile, as the emulator runs it, and the cluster as it sees it."""

    config: cycle.SchedulerConfig
    cluster: cycle.ClusterState
    extender: HttpExtender


def claims_of(pod: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The resource claim controller's part: a ResourceClaim ``<pod>-<claim>`` per template the pod names."""
    meta = pod["metadata"]
    claims, statuses = [], []
    for item in pod["spec"].get("resourceClaims") or []:
        template = item.get("resourceClaimTemplateName")
        if not template:
            continue
        name = f"{meta['name']}-{item['name']}"
        claims.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                       "metadata": {"name": name, "namespace": meta.get("namespace", demo.NAMESPACE),
                                    "uid": demo.uid("claim", meta.get("namespace", demo.NAMESPACE), name)},
                       "spec": demo_scenario.template_claim_spec(template)})
        statuses.append({"name": item["name"], "resourceClaimName": name})
    if statuses:
        pod = {**pod, "status": {**(pod.get("status") or {}), "resourceClaimStatuses": statuses}}
    return pod, claims


def scheduler(client: Client) -> Scheduler:
    """The dedicated profile (the demo serves with a fabric) and the demo cluster as kube-scheduler sees it."""
    config = cycle.parse_config(deploy.scheduler_config(fabric=True))
    running, claims = [], []
    for obj in demo.objects():
        if obj["kind"] != "Pod":
            continue
        pod, made = claims_of(obj)
        for claim in made:  # a running pod's channel: allocated on its node, reserved for it
            claim["status"] = {"allocation": demo_scenario.channel_allocation(pod["spec"]["nodeName"]),
                               "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"],
                                                "uid": pod["metadata"]["uid"]}]}
        running.append(pod)
        claims += made
    cluster = cycle.parse_cluster(demo_scenario.labelled_nodes(), running, claims=claims,
                                  slices=demo_scenario.channel_slices(),
                                  device_classes=[channel_device_class()])
    return Scheduler(config, cluster, HttpExtender(client.url, client.ca, config.extenders[0],
                                                  session=client.session))


def _schedule(sched: Scheduler, pod: dict[str, Any], out: Outcome) -> None:
    """One pod through kube-scheduler's scheduling and binding cycles (emulated), the service behind."""
    pod, claims = claims_of(pod)
    if claims:
        made = cycle.parse_cluster((), claims=claims).claims
        sched.cluster = replace(sched.cluster, claims=(*sched.cluster.claims, *made))
    name = pod["metadata"]["name"]
    for attempt in range(20):  # a pending fabric attach answers bind with an Error; the scheduler retries
        result = cycle.schedule_one(sched.config, sched.cluster, pod, sched.extender)
        sched.cluster = result.cluster
        if result.outcome == BOUND:
            assert result.node is not None
            out.nodes.append(result.node)
            return
        if result.outcome == UNSCHEDULABLE:
            out.reason = result.event
            return
        if result.outcome != BIND_ERROR:  # an extender error aborted the cycle (or the pod was never tried)
            raise RuntimeError(f"scheduling {name}: {result.outcome}: {result.message}")
        if "retries" not in result.message or attempt == 19:
            raise RuntimeError(f"bind of {name} to {result.node}: {result.message}")
        pod = dict(result.pod_raw)
        time.sleep(0.2)


def _check(out: Outcome, inspect: dict[str, Any]) -> None:
    job = out.job
    node_domain = {n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu.clique")
                   or n["metadata"]["labels"].get("imex-webhook.io/fabric-zone") for n in demo.nodes()}
    out.domains = {node_domain[n] or "" for n in out.nodes}
    if job.expect_reason:
        if out.nodes:
            out.problems.append(f"expected no placement, got {len(out.nodes)} pods bound")
        if job.expect_reason not in out.reason:
            out.problems.append(f"expected a reason with {job.expect_reason!r}, got {out.reason!r}")
        return
    if len(out.nodes) != job.pods:
        out.problems.append(f"{len(out.nodes)} of {job.pods} pods bound ({out.reason})")
    if out.domains != {job.expect_domain}:
        out.problems.append(f"expected domain {job.expect_domain}, got {sorted(out.domains)}")
    if job.compute_domain and len(set(out.nodes)) != len(out.nodes):
        out.problems.append("two pods of one ComputeDomain share a node")
    out.attached = sum(a["gpus"] for a in inspect.get("attachments", [])
                       if a.get("pod", "").startswith(f"{demo.NAMESPACE}/{job.name}-") and a.get("phase") == "Ready")
    if out.attached != job.expect_attached:
        out.problems.append(f"expected {job.expect_attached} fabric GPUs attached, got {out.attached}")


def run(client: Client, stream: TextIO) -> list[Outcome]:
    sched = scheduler(client)
    outcomes = []
    for job in demo_scenario.JOBS:
        print(f"==> {job.name}: {job.what}", file=stream, flush=True)
        out = Outcome(job)
        pods = [_admit(client, job, i) for i in range(job.pods)]
        print(f"    admitted {len(pods)} pods (scheduler {pods[0]['spec'].get('schedulerName')})", file=stream)
        for i, pod in enumerate(pods, 1):
            _schedule(sched, pod, out)
            if out.reason:
                print(f"\n    FailedScheduling {pod['metadata']['name']}: {out.reason}", file=stream, flush=True)
                break
            print(f"\r    scheduled {i}/{len(pods)}", end="", file=stream, flush=True)
        print("", file=stream)
        _check(out, client.get("/inspect"))
        outcomes.append(out)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    rows = [("job", "pods", "domain", "nodes", "attached GPUs", "outcome")]
    for o in outcomes:
        domain = ", ".join(sorted(o.domains)) or "-"
        nodes = f"{min(o.nodes)}..{max(o.nodes)}" if o.nodes else "-"
        verdict = ("ok" if o.ok else "FAILED: " + "; ".join(o.problems))
        detail = o.reason if o.reason and o.ok else ""
        rows.append((o.job.name, str(o.job.pods), domain, nodes, str(o.attached),
                     f"{verdict}{': ' + detail if detail else ''}"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5] for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def certificates(tls: Path) -> tuple[Path, tuple[Path, Path]]:
    """The CA and serving certificate ``serve --tls-dir`` would make, and the scheduler's client certificate
    from the same CA (serve gets the CA as --client-ca, as deployed): (CA file, (client cert, key))."""
    names = ["localhost", *cert_issue.service_dns_names(deploy.SERVICE_NAME, deploy.NAMESPACE)]
    made = cert_files.ensure_tls_dir(tls, names, ["127.0.0.1", "::1"])
    return made.paths.ca_cert, cert_files.issue_client(tls, cert_files.SCHEDULER_CLIENT)


@contextmanager
def served(workdir: Path, port: int) -> Iterator[tuple[str, Client, subprocess.Popen[bytes]]]:
    tls = workdir / "tls"
    ca, client_cert = certificates(tls)
    log = (workdir / "serve.log").open("wb")
    cmd = [sys.executable, "-m", "webhook", "serve", "--bind", f"127.0.0.1:{port}", "--tls-dir", str(tls),
           "--client-ca", str(ca), "--fabric", "embedded", "--exit-with-parent"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            start_new_session=True)  # Ctrl-C reaches the demo only; it stops serve itself
    url = f"https://localhost:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited ({proc.returncode}): {_last_line(workdir / 'serve.log')}")
            try:
                if (tls / "ca.crt").exists() and requests.get(url + "/readyz", verify=str(tls / "ca.crt"),
                                                              timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve not ready within 60 s; see {workdir / 'serve.log'}")
            time.sleep(0.2)
        yield url, Client(url, ca, client_cert), proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else f"see {path}"
