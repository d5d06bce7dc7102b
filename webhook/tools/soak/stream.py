"""The request stream of ``imex-webhook soak`` (``webhook.tools.soak.runner``): groups of pods admitted through
``/mutate``, scheduled through ``/filter``, ``/prioritize`` and ``/bind``, finished and retried the way
kube-apiserver and kube-scheduler would drive a real ``serve``, one request at a time over one kept-alive
TLS connection, with the latency of each verb.
"""

from __future__ import annotations

import copy
import http.client
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from webhook.demo import cluster as demo
from webhook.demo import scenario as demo_scenario
from webhook.domain import keys
from webhook.tools import servers
from webhook.tools.stats import percentile

GPUS_PER_POD = 4
VERBS = ("mutate", "filter", "prioritize", "bind", "complete")
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
MAX_LIVE_GROUPS = 12  # groups admitted and not finished at once: bounds the stream's footprint
MAX_PENDING = 6  # groups waiting for room
GIVE_UP = 12  # refusals (1-3 s apart) after which a group with nothing bound is given up


@dataclass
class Group:
    name: str
    size: int
    run_time: float
    pods: list[dict[str, Any]] = field(default_factory=list)  # admitted (mutated, named)
    bound: dict[str, str] = field(default_factory=dict)  # pod name -> node
    started: float | None = None  # when its last pod was bound
    finished: bool = False
    refusals: int = 0
    retry_at: float = 0.0


class Client:
    """One kept-alive TLS connection to the service on loopback; latencies per verb."""

    def __init__(self, port: int, tls: servers.Tls) -> None:
        self.port, self.tls = port, tls
        self.conn = self._connect()
        self.latencies: dict[str, list[float]] = {v: [] for v in VERBS}
        self.requests = self.errors = 0

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self._context(), timeout=30)

    def _context(self) -> Any:
        context = self.tls.client_context()
        context.check_hostname = False  # the certificate names localhost and 127.0.0.1; loopback either way
        return context

    def call(self, verb: str, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        begin = time.perf_counter()
        try:
            self.conn.request(method, path, body=data, headers=HEADERS)
            reply = self.conn.getresponse()
            payload = reply.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = self._connect()
            self.errors += 1
            raise
        self.requests += 1
        if verb in self.latencies:
            self.latencies[verb].append(time.perf_counter() - begin)
        if reply.status != 200:
            self.errors += 1
            raise RuntimeError(f"{method} {path} answered {reply.status}: {payload[:300]!r}")
        return json.loads(payload)

    def take_latencies(self) -> dict[str, dict[str, float]]:
        out = {v: {"n": float(len(x)), "p50": round(percentile(x, 50) * 1000, 2),
                   "p99": round(percentile(x, 99) * 1000, 2)} for v, x in self.latencies.items()}
        self.latencies = {v: [] for v in VERBS}
        return out

    def close(self) -> None:
        self.conn.close()


class Cluster:
    """The cluster as kube-scheduler sees it: GPUs per node and in use (the demo's running pods included)."""

    def __init__(self) -> None:
        self.gpus: dict[str, int] = {}
        self.domain: dict[str, str | None] = {}
        for node in demo.nodes():
            meta = node["metadata"]
            self.gpus[meta["name"]] = int(node["status"]["allocatable"].get(keys.GPU_RESOURCE, "0"))
            self.domain[meta["name"]] = meta["labels"].get(keys.CLIQUE_LABEL)
        self.used: dict[str, int] = dict.fromkeys(self.gpus, 0)
        for obj in demo.objects():
            if obj["kind"] == "Pod" and obj["spec"].get("nodeName"):
                limits = obj["spec"]["containers"][0]["resources"].get("limits", {})
                self.used[obj["spec"]["nodeName"]] += int(limits.get(keys.GPU_RESOURCE, "0"))

    def fitting(self, gpus: int) -> list[str]:
        return [n for n, total in self.gpus.items() if total - self.used[n] >= gpus]

    def largest_domain(self) -> int:
        sizes: dict[str, int] = {}
        for dom in self.domain.values():
            if dom:
                sizes[dom] = sizes.get(dom, 0) + 1
        return max(sizes.values())


def _pod_create(group: Group, index: int) -> dict[str, Any]:
    job = demo_scenario.Job(group.name, group.size, GPUS_PER_POD, None, annotation_group=group.name,
                            extra_annotations={keys.GROUP_SIZE_ANNOTATION: str(group.size)})
    return demo_scenario.pod_create(job, index)


class Stream:
    """The mixed stream: admits, schedules, finishes and retries groups, one request at a time."""

    def __init__(self, client: Client, rng: random.Random) -> None:
        self.client, self.rng = client, rng
        self.cluster = Cluster()
        self.groups: list[Group] = []
        self.serial = 0
        self.refusals = 0
        self.binding_errors: list[str] = []

    def new_group(self, now: float) -> Group:
        self.serial += 1
        roll = self.rng.random()
        if roll < 0.05:
            size = self.cluster.largest_domain() + 2  # fits no domain: refused every time
        elif roll < 0.2:
            size = self.rng.randint(10, 16)
        else:
            size = self.rng.randint(2, 6)
        group = Group(f"soak-{self.serial:05d}", size, run_time=self.rng.uniform(2.0, 8.0))
        for i in range(size):
            pod = _pod_create(group, i)
            review = demo_scenario.admission_review(str(uuid.uuid4()), pod)
            answer = self.client.call("mutate", "POST", "/mutate", review)["response"]
            pod = demo_scenario.admitted(pod, answer, f"{group.name}-{i}")
            pod["status"] = {"phase": "Pending"}
            group.pods.append(pod)
        self.groups.append(group)
        return group

    def schedule(self, group: Group, now: float) -> None:
        """Every unbound pod of the group, in order, until one is refused."""
        for pod in group.pods:
            name = pod["metadata"]["name"]
            if name in group.bound:
                continue
            candidates = self.cluster.fitting(GPUS_PER_POD)
            args = {"Pod": pod, "Nodes": None, "NodeNames": candidates}
            passed = self.client.call("filter", "POST", "/filter", args).get("NodeNames") or []
            if not passed:
                group.refusals += 1
                self.refusals += 1
                group.retry_at = now + self.rng.uniform(1.0, 3.0)
                return
            node = passed[0]
            if len(passed) > 1:
                scores = self.client.call("prioritize", "POST", "/prioritize", {**args, "NodeNames": passed})
                best = max((s["Score"] for s in scores), default=0)
                node = next(s["Host"] for s in scores if s["Score"] == best)
            reply = self.client.call("bind", "POST", "/bind", {
                "PodName": name, "PodNamespace": demo.NAMESPACE, "PodUID": pod["metadata"]["uid"], "Node": node})
            if reply.get("Error"):
                self.binding_errors.append(f"{name} -> {node}: {reply['Error']}")
                group.retry_at = now + 1.0
                return
            group.bound[name] = node
            pod["spec"]["nodeName"] = node
            self.cluster.used[node] += GPUS_PER_POD
        group.started = now

    def finish(self, group: Group) -> None:
        """Pod completions: each finished pod, re-sent to /filter, is how the embedded service learns it.
        Pods never bound (a group given up) end as Failed, as if their Job was deleted."""
        for pod in group.pods:
            name = pod["metadata"]["name"]
            done = copy.deepcopy(pod)
            done["status"] = {"phase": "Succeeded" if name in group.bound else "Failed"}
            self.client.call("complete", "POST", "/filter", {"Pod": done, "Nodes": None, "NodeNames": []})
            if name in group.bound:
                self.cluster.used[group.bound[name]] -= GPUS_PER_POD
        group.finished = True

    def step(self, now: float) -> None:
        live = [g for g in self.groups if not g.finished]
        for g in live:
            if g.started is not None and now - g.started >= g.run_time:
                self.finish(g)
                return
        waiting = [g for g in live if g.started is None and now >= g.retry_at]
        if waiting:
            g = min(waiting, key=lambda g: g.retry_at)
            if g.refusals >= GIVE_UP and not g.bound:
                self.finish(g)  # given up: it never fitted
                return
            self.schedule(g, now)
            return
        pending = sum(1 for g in live if g.started is None)
        if len(live) < MAX_LIVE_GROUPS and pending < MAX_PENDING:
            self.schedule(self.new_group(now), now)
            return
        time.sleep(0.05)

    def finish_all(self) -> None:
        for g in self.groups:
            if not g.finished:
                self.finish(g)
