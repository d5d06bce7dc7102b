"""One run: a fresh kube-scheduler with the variant's configuration, the workload created on its clock in a
namespace of its own, every pod's binding seen on a watch, the figures taken, the namespace emptied.

A pod's latency is from the moment its create returned (admission included) to the first watch event that
shows it bound. A run ends when every pod is bound, or when nothing more binds for ``stall`` seconds after
the last create: without the extender nothing checks a group's capacity per domain, and a group whose first
pod picked a clique too full for the rest stays pending; those pods are counted, not waited for.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import IO, Any

import requests

from tests.e2e import objects
from tests.e2e.kubeapi import ApiCallError, KubeApi, eventually
from tests.e2e.realbench import measure
from tests.e2e.realbench.cluster import BenchCluster
from tests.e2e.realbench.workload import BURST, GPUS_PER_NODE, Workload


@dataclass
class Observed:
    """What the driver saw: per pod, the monotonic time its create returned and the time it was seen bound."""

    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    node: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Watch(threading.Thread):
    def __init__(self, api: KubeApi, namespace: str, seen: Observed) -> None:
        super().__init__(daemon=True, name=f"watch-{namespace}")
        self.api, self.namespace, self.seen = api, namespace, seen
        self.stopped = threading.Event()
        listed = api.call("GET", api.path("Pod", namespace))
        self.version = listed["metadata"]["resourceVersion"]

    def run(self) -> None:
        session = requests.Session()
        session.cert = self.api.session.cert
        while not self.stopped.is_set():
            try:
                with session.get(self.api.server + self.api.path("Pod", self.namespace), stream=True,
                                 params={"watch": "1", "resourceVersion": self.version,
                                         "allowWatchBookmarks": "true", "timeoutSeconds": "60"},
                                 verify=self.api.ca_file, timeout=(10, 90)) as reply:
                    for line in reply.iter_lines():
                        if self.stopped.is_set():
                            return
                        if line:
                            self._event(json.loads(line))
            except (requests.RequestException, ValueError):
                time.sleep(0.2)

    def _event(self, event: Mapping[str, Any]) -> None:
        obj = event.get("object", {})
        self.version = obj.get("metadata", {}).get("resourceVersion", self.version)
        node = obj.get("spec", {}).get("nodeName")
        name = obj.get("metadata", {}).get("name")
        if node and name:
            now = time.monotonic()
            with self.seen.lock:
                self.seen.bound.setdefault(name, now)
                self.seen.node[name] = node


def _create_job_objects(cluster: BenchCluster, namespace: str, workload: Workload) -> None:
    def one(api: KubeApi, job: Any) -> None:
        cd = api.create(objects.computedomain(namespace, job.name, job.size))
        api.create(objects.channel_template(namespace, job.name, cd["metadata"]["uid"]))

    cluster.pool.each(one, workload.jobs)


def _group_pod(namespace: str, job_name: str, index: int) -> dict[str, Any]:
    return objects.pod(namespace, f"{job_name}-{index}", gpus=GPUS_PER_NODE,
                       claims=[{"name": "imex-channel", "resourceClaimTemplateName": f"{job_name}-channel"}])


def _plain_pod(namespace: str, name: str) -> dict[str, Any]:
    pod = objects.pod(namespace, name, gpus=1)
    # Not a group pod, so admission leaves it alone: it asks for the profile under test itself.
    pod["spec"]["schedulerName"] = "imex-scheduler"
    return pod


def _in_pool(cluster: BenchCluster, call: Callable[[KubeApi, Any], None], item: Any) -> None:
    call(cluster.pool.api(), item)


def drive(cluster: BenchCluster, namespace: str, workload: Workload, *, stall: float, timeout: float) -> Observed:
    """Create the workload's pods on its clock; return when all are bound or binding stalled."""
    seen = Observed()
    watch = _Watch(cluster.api, namespace, seen)
    watch.start()
    arrivals: list[tuple[float, dict[str, Any]]] = []
    for job in workload.jobs:
        arrivals += [(job.at, _group_pod(namespace, job.name, i)) for i in range(job.size)]
    arrivals += [(p.at, _plain_pod(namespace, p.name)) for p in workload.plain]
    arrivals.sort(key=lambda a: a[0])

    def create(api: KubeApi, pod: dict[str, Any]) -> None:
        api.create(pod)
        with seen.lock:
            seen.created[pod["metadata"]["name"]] = time.monotonic()

    start = time.monotonic()
    futures = []
    for at, pod in arrivals:
        delay = start + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        futures.append(cluster.pool.executor.submit(_in_pool, cluster, create, pod))
    wait(futures)
    for future in futures:
        future.result()
    deadline = time.monotonic() + timeout
    total = len(arrivals)
    while time.monotonic() < deadline:
        with seen.lock:
            done, last = len(seen.bound), max(seen.bound.values(), default=start)
        if done >= total or time.monotonic() - max(last, max(seen.created.values())) > stall:
            break
        time.sleep(0.2)
    watch.stopped.set()
    return seen


def cleanup(cluster: BenchCluster, namespace: str, log: IO[str]) -> None:
    """Empty the namespace and wait until the extender has released its groups' domains."""
    api = cluster.api
    started = time.monotonic()
    for kind in ("Pod", "ResourceClaim", "ResourceClaimTemplate", "ComputeDomain"):
        api.call("DELETE", api.path(kind, namespace), {"gracePeriodSeconds": 0})

    def lift(a: KubeApi, name: str) -> None:
        # A PUT of the object as read: kube-apiserver v1.37 refuses any patch of a claim whose devices carry an
        # opaque config ("spec: field is immutable", the config's raw bytes re-encoded), as the ComputeDomain
        # channel claims do. A conflict or a claim already gone is left to the next poll.
        try:
            claim = a.get("ResourceClaim", namespace, name)
            claim["metadata"]["finalizers"] = []
            a.call("PUT", a.path("ResourceClaim", namespace, name), claim)
        except ApiCallError as exc:
            if exc.status not in (404, 409):
                raise

    def gone() -> bool:
        # A deleted claim keeps its finalizer until the ResourceClaim controller lifts it, which at a few
        # thousand claims takes it minutes (one claim at a time, with conflicts). Its pods are gone, so
        # nothing uses the claim any more: the bench lifts the finalizers itself, in parallel, and the
        # scheduler's DRA plugin sees the devices free once the claims are deleted. What holds capacity is
        # an allocation, so the run waits for the pods to be gone and every claim deallocated or deleted.
        for pod in api.list("Pod", namespace):
            if pod["metadata"].get("deletionTimestamp"):
                api.delete("Pod", namespace, pod["metadata"]["name"])
        if api.list("Pod", namespace):
            return False
        held = [c["metadata"]["name"] for c in api.list("ResourceClaim", namespace)
                if c["metadata"].get("deletionTimestamp") and c["metadata"].get("finalizers")]
        cluster.pool.each(lift, held)
        return not any(c.get("status", {}).get("allocation") for c in api.list("ResourceClaim", namespace))

    eventually(gone, 600, interval=0.5, what=f"the pods of {namespace} gone and its claims deallocated")
    try:
        eventually(lambda: not [r for r in api.list("DomainReservation")
                                if r.get("spec", {}).get("namespace") == namespace], 300, interval=0.5,
                   what=f"the reservations of {namespace} released")
    except (AssertionError, ApiCallError) as failure:
        log.write(f"warning: {failure}\n")
    log.write(f"{namespace} emptied in {time.monotonic() - started:.0f} s\n")


def usage(cluster: BenchCluster) -> dict[str, measure.Usage]:
    out = {"kube-scheduler": measure.tree_usage(cluster.scheduler_pid),
           "kube-apiserver": measure.tree_usage(cluster.plane.procs["kube-apiserver"].pid)}
    if cluster.service is not None:
        out["imex-webhook"] = measure.tree_usage(cluster.service.process.pid)
    if cluster.passthrough is not None:
        out["pass-through"] = measure.tree_usage(cluster.passthrough.pid)
    return out


@dataclass(frozen=True)
class RunData:
    """The raw material of one run's figures."""

    variant: str
    namespace: str
    seen: Observed
    metrics: str
    before: dict[str, measure.Usage]
    after: dict[str, measure.Usage]
    peak_rss: dict[str, int]
    seconds: float


def one_run(cluster: BenchCluster, variant: str, namespace: str, workload: Workload, log: IO[str], *,
            stall: float = 20.0, timeout: float = 900.0) -> RunData:
    cluster.restart_scheduler(variant)
    cluster.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, exist_ok=True)
    _create_job_objects(cluster, namespace, workload)
    time.sleep(2)  # the service's informers see the new templates before the first pod's admission
    before = usage(cluster)
    peak: dict[str, int] = {name: u.rss_bytes for name, u in before.items()}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(1.0):
            for name, u in usage(cluster).items():
                peak[name] = max(peak.get(name, 0), u.rss_bytes)

    sampler = threading.Thread(target=sample, daemon=True, name="rss-sampler")
    sampler.start()
    started = time.monotonic()
    seen = drive(cluster, namespace, workload, stall=stall, timeout=timeout)
    seconds = time.monotonic() - started
    sampling.set()
    sampler.join(5)
    after = usage(cluster)
    metrics = cluster.scheduler_metrics()
    with seen.lock:
        bound = len(seen.bound)
    log.write(f"run {namespace} ({variant}): {bound}/{workload.pods} pods bound in {seconds:.1f} s\n")
    log.flush()
    return RunData(variant, namespace, seen, metrics, before, after, peak, seconds)


def burst_names(workload: Workload) -> set[str]:
    names = {f"{j.name}-{i}" for j in workload.jobs if j.phase == BURST for i in range(j.size)}
    return names | {p.name for p in workload.plain if p.phase == BURST}
