"""One cluster, seen twice: by the scheduling-cycle emulator (``webhook.sim.cycle``) standing in for
kube-scheduler, and by ``imex-webhook serve`` in embedded mode, a real subprocess over TLS.

What a real cluster would do around them is played here, in order, for every pod:

1. a controller creates the pod (``tests.e2e.objects`` shapes), and kube-apiserver applies its defaults
   and the built-in admission plugins (Priority resolves ``priorityClassName``) before the webhooks;
2. kube-apiserver sends the AdmissionReview (the shape of ``tests/fixtures/admission``) to ``/mutate``;
   the returned base64 JSON Patch is applied with the ``jsonpatch`` library, and only then does the API
   server give a ``generateName`` pod its name and UID;
3. the ResourceClaim controller creates the pod's claims from their templates, when the templates exist;
4. the emulator runs the scheduling cycle with ``deploy.scheduler_config()`` and an extender that POSTs
   the wire dicts to the served ``/filter``, ``/prioritize``, ``/preempt`` and ``/bind``.

The two views stay the same cluster: the emulator's bound pods are the service's bound pods (the service
records a binding when ``/bind`` succeeds, the emulator when its binding cycle does), and the service
learns the pods it schedules from the extender requests. Embedded mode reads its ``--cluster`` file once
and has no watch: what only the API server would tell it (a template created later, victims deleted by
preemption) reaches it by writing the file again from the emulator's state and restarting the replicas.
Its reservations live in memory, so a restart forgets them (Kubernetes mode keeps them as objects).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import requests
import yaml

from tests import admission_support, serving
from tests.e2e import objects
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.domain.reading import node_labels
from webhook.service import deploy
from webhook.sim import cycle
from webhook.sim.cycle.claims import parse_claim
from webhook.sim.extender_http import HttpExtender

NS = "ml"
# PriorityClasses as the Priority admission plugin resolves them into spec.priority before any webhook.
PRIORITY_CLASSES = {"filler-low": 0, "filler-batch": 100, "training-urgent": 1000}
CATALOG_KINDS = ("Namespace", "Node", "DeviceClass", "ResourceSlice", "ComputeDomain", "ResourceClaimTemplate",
                 "Job")
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of kube-apiserver's generateName suffixes


def clique(rack: str) -> str:
    """An ``nvidia.com/gpu.clique`` value: every rack has clique number 32766, told apart by the cluster UUID
    (as in the demo cluster: the number alone would merge racks)."""
    return f"{uuid.uuid5(uuid.NAMESPACE_DNS, f'{rack}.nvl72.example')}.32766"


def uid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "imex-webhook-cycle-e2e/" + "/".join(parts)))


def _suffix(seed: str) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_SUFFIX[b % len(_SUFFIX)] for b in digest[:5])


# -- cluster objects --------------------------------------------------------------------------------


def labelled(node: dict[str, Any]) -> dict[str, Any]:
    """The node as the extender's node domain labeller leaves it (``serve --kubeconfig`` runs it; embedded
    mode does not, because nothing in the service reads the label, but the emulated scheduler does:
    InterPodAffinity rejects every node that lacks the admission-added term's ``topologyKey``)."""
    node = copy.deepcopy(node)
    node["metadata"].setdefault("uid", uid("node", node["metadata"]["name"]))
    value = node_labels.state_of(node, Policy()).value
    if value is not None:
        node["metadata"]["labels"][keys.DOMAIN_LABEL] = value
    return node


def rack(prefix: str, clique: str, count: int, *, dra_gpus: int = 0, plugin_gpus: int = 4) -> list[dict[str, Any]]:
    """``count`` GB200 trays of one NVLink clique, each with the compute-domain plugin's channel slice; GPUs
    from the device plugin (allocatable ``nvidia.com/gpu``) or, with ``dra_gpus``, only as DRA devices."""
    out: list[dict[str, Any]] = []
    for i in range(count):
        name = f"{prefix}-{i}"
        out.append(labelled(objects.node(name, clique=clique, device_plugin_gpus=0 if dra_gpus else plugin_gpus)))
        out.append(objects.channel_slice(name))
        if dra_gpus:
            out.append(objects.gpu_slice(name, dra_gpus))
    return out


def fabric_pool() -> list[dict[str, Any]]:
    """The demo's PCIe pool: fab-00..fab-03 in zone pcie-pool-1, the systems ``--fabric embedded`` composes to."""
    return [labelled(n) for n in demo.nodes() if n["metadata"]["labels"].get(keys.FABRIC_ZONE_LABEL)]


def compute_domain(name: str, num_nodes: int, *, with_template: bool = True) -> list[dict[str, Any]]:
    """A ComputeDomain and the workload ResourceClaimTemplate its controller creates for it."""
    cd = objects.computedomain(NS, name, num_nodes)
    cd["metadata"]["uid"] = uid("cd", name)
    return [cd, channel_template(name)] if with_template else [cd]


def channel_template(cd_name: str) -> dict[str, Any]:
    template = objects.channel_template(NS, cd_name, uid("cd", cd_name))
    template["metadata"]["uid"] = uid("rct", cd_name)
    return template


def namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "uid": uid("ns", NS)}}


def job_pod(job: str, index: int, *, gpus: int = 0, claims: Sequence[tuple[str, str]] = (),
            annotations: Mapping[str, str] | None = None, priority_class: str | None = None) -> dict[str, Any]:
    """Pod ``index`` of an Indexed Job, as the job controller creates it: ``generateName``, no name or UID
    yet; ``claims`` are (claim name, ResourceClaimTemplate name)."""
    owner = {"metadata": {"name": job, "uid": uid("job", job)}}
    pod = objects.pod(NS, "", gpus=gpus, annotations=dict(annotations or {}), owner=owner,
                      claims=[{"name": c, "resourceClaimTemplateName": t} for c, t in claims] or None,
                      priority_class=priority_class)
    meta = pod["metadata"]
    del meta["name"]
    meta["generateName"] = f"{job}-{index}-"
    meta["labels"]["batch.kubernetes.io/job-completion-index"] = str(index)
    meta["annotations"]["batch.kubernetes.io/job-completion-index"] = str(index)
    return pod


def bound_pod(name: str, node: str, *, gpus: int, priority_class: str) -> dict[str, Any]:
    """A pod another scheduler placed earlier, as the API server lists it (defaults applied, Running)."""
    pod = with_api_defaults(objects.pod(NS, name, gpus=gpus, priority_class=priority_class))
    pod["metadata"]["uid"] = uid("pod", name)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running", "startTime": "2026-03-02T09:00:00Z"}
    return pod


def with_api_defaults(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What kube-apiserver fills in before the mutating webhooks see a pod: API defaults, the Priority and
    DefaultTolerationSeconds admission plugins, the service account."""
    out = copy.deepcopy(dict(pod))
    meta, spec = out["metadata"], out["spec"]
    meta["creationTimestamp"] = None
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec["priority"] = PRIORITY_CLASSES[spec["priorityClassName"]] if spec.get("priorityClassName") else 0
    spec.setdefault("tolerations", [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
    ])
    for container in spec["containers"]:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
    out.setdefault("status", {})
    return out


def rack_of(node: str | None) -> str | None:
    """``a`` for node ``a-0``; the fabric pool's nodes are ``fab``."""
    return node.rsplit("-", 1)[0] if node else None


# -- the service ------------------------------------------------------------------------------------


class Replica:
    """One ``imex-webhook serve --cluster FILE`` process; restarts keep its TLS directory, so one CA."""

    def __init__(self, tmp: Path, cluster_file: Path, args: Sequence[str]) -> None:
        self.tmp = tmp
        self.file = cluster_file
        self.args = tuple(args)
        self.tls = tmp / "tls"
        self.starts = 0
        self._context: Any = None
        self.served: serving.Served | None = None
        self.http = requests.Session()

    @property
    def url(self) -> str:
        assert self.served is not None, "replica not running"
        return self.served.url

    @property
    def ca(self) -> str:
        return str(self.tls / "ca.crt")

    def start(self) -> None:
        self.starts += 1
        self._context = serving.serve(self.tmp / f"run-{self.starts}", "--cluster", str(self.file),
                                      "--tls-dir", str(self.tls), *self.args, ca=self.tls / "ca.crt")
        self.served = self._context.__enter__()
        self.http.close()
        self.http = requests.Session()  # keep-alive, as kube-scheduler's extender client

    def stop(self) -> None:
        self.http.close()
        if self._context is not None:
            context, self._context, self.served = self._context, None, None
            context.__exit__(None, None, None)

    def restart(self) -> None:
        self.stop()
        self.start()

    def post(self, path: str, body: Any) -> requests.Response:
        return self.http.post(self.url + path, data=json.dumps(body).encode(),
                              headers={"Content-Type": "application/json"}, verify=self.ca, timeout=30)

    def inspect(self) -> dict[str, Any]:
        reply = self.http.get(self.url + "/inspect", verify=self.ca, timeout=30)
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body


@dataclasses.dataclass
class Call:
    replica: int
    """Index of the replica that answered."""
    verb: str
    args: dict[str, Any]
    reply: Any
    """The decoded 200 reply; ``None`` after a non-200."""


class TlsExtender(HttpExtender):
    """The emulator's ``Extender``: the served endpoints over TLS, verified with the served CA, following the
    replica across restarts. A non-200 reply raises ``ExtenderCallFailed`` with kube-scheduler's text. Every
    call is recorded."""

    def __init__(self, replicas: Sequence[Replica], index: int, config: cycle.ExtenderConfig,
                 calls: list[Call]) -> None:
        self.index = index
        self.replica = replicas[index]
        self.calls = calls
        super().__init__(self.replica.url, self.replica.ca, config, timeout=30,
                         observe=lambda verb, args, reply: calls.append(Call(index, verb, args, reply)))

    def endpoint(self) -> tuple[str, requests.Session]:
        return self.replica.url, self.replica.http


class SplitExtender:
    """The scheduling cycle's verbs (filter, prioritize, preempt) to one replica and bind to another: what a
    Service in front of two replicas may do to the scheduler's separate HTTP calls."""

    def __init__(self, scheduling: TlsExtender, binding: TlsExtender) -> None:
        self.scheduling = scheduling
        self.binding = binding

    def filter(self, args: dict[str, Any]) -> Any:
        return self.scheduling.filter(args)

    def prioritize(self, args: dict[str, Any]) -> Any:
        return self.scheduling.prioritize(args)

    def preempt(self, args: dict[str, Any]) -> Any:
        return self.scheduling.preempt(args)

    def bind(self, args: dict[str, Any]) -> Any:
        return self.binding.bind(args)


# -- the cluster ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    attempts: list[cycle.Attempt]
    pods: dict[str, dict[str, Any]]
    """Pod key -> the pod as it stands at the end (bound: with spec.nodeName)."""

    def node(self, key: str) -> str | None:
        return str(self.pods[key]["spec"].get("nodeName") or "") or None

    def last(self, key: str) -> cycle.Attempt:
        return [a for a in self.attempts if a.pod == key][-1]


class World:
    """The cluster's objects, the emulator's ``ClusterState`` of them, and the serving replicas."""

    def __init__(self, tmp: Path, catalog: Iterable[dict[str, Any]], *, bound: Iterable[dict[str, Any]] = (),
                 fabric: bool = False, replicas: int = 1) -> None:
        self.tmp = tmp
        self.catalog = list(catalog)
        self.fabric = fabric
        self.file = tmp / "cluster.yaml"
        kinds = {o["kind"] for o in self.catalog}
        assert kinds <= set(CATALOG_KINDS), kinds
        self.state = cycle.parse_cluster(
            self._kind("Node"), list(bound), slices=self._kind("ResourceSlice"),
            device_classes=self._kind("DeviceClass"), namespaces=self._kind("Namespace"))
        self.calls: list[Call] = []
        self._write()
        args = ("--fabric", "embedded") if fabric else ()
        self.replicas = [Replica(tmp / f"replica-{i + 1}", self.file, args) for i in range(replicas)]
        self.created = 0
        self.version = 0
        """Bumped on every change of the cluster, so pods that found no node are tried again."""

    def __enter__(self) -> World:
        try:
            for replica in self.replicas:
                replica.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for replica in self.replicas:
            replica.stop()

    # -- what kube-apiserver stores ---------------------------------------------------------------

    def _kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.catalog if o["kind"] == kind]

    def bound_pods(self) -> list[dict[str, Any]]:
        return [dict(p.raw) for p in self.state.pods if p.key not in self.state.assumed]

    def _write(self) -> None:
        claims = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **dict(c.raw)}
                  for c in self.state.claims]
        pods = [{"apiVersion": "v1", "kind": "Pod", **p} for p in self.bound_pods()]
        self.file.write_text(yaml.safe_dump_all([*self.catalog, *claims, *pods], sort_keys=False))

    def add(self, obj: dict[str, Any]) -> None:
        """An object created in the API server (the emulator reads templates through the claim controller)."""
        assert obj["kind"] in CATALOG_KINDS and obj["kind"] not in ("Node", "ResourceSlice", "DeviceClass")
        self.catalog.append(obj)
        self.version += 1

    def sync(self) -> None:
        """Tell the replicas what only a watch would: write the cluster file from the emulator's state
        (bound pods, claims) and the catalog, and restart every replica on it."""
        self._write()
        for replica in self.replicas:
            replica.restart()
        self.version += 1

    # -- the scheduler and its extender -----------------------------------------------------------

    def config(self, replica: int = 0) -> cycle.SchedulerConfig:
        raw = deploy.scheduler_config(fabric=self.fabric)
        raw["extenders"][0]["urlPrefix"] = self.replicas[replica].url
        return cycle.parse_config(raw)

    def extender(self, replica: int = 0) -> TlsExtender:
        return TlsExtender(self.replicas, replica, self.config(replica).extenders[0], self.calls)

    def calls_of(self, verb: str, replica: int | None = None) -> list[Call]:
        return [c for c in self.calls if c.verb == verb and replica in (None, c.replica)]

    def placements(self, replica: int = 0) -> dict[str, str | None]:
        """Group member -> node, as the replica's ``/inspect`` shows its groups."""
        body = self.replicas[replica].inspect()
        return {m["pod"]: m["node"] or None for g in body["groups"] for m in g["pods"]}

    def assert_views_agree(self, replica: int = 0) -> None:
        """The replica holds every group member where the emulator bound it (or neither placed it)."""
        bound = {p.key: p.node_name for p in self.state.pods if p.key not in self.state.assumed}
        placements = self.placements(replica)
        assert placements, "the replica knows no group member"
        assert placements == {pod: bound.get(pod) for pod in placements}

    # -- a pod's way in ---------------------------------------------------------------------------

    def review(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """The AdmissionReview kube-apiserver sends for the pod's CREATE."""
        body = admission_support.review("create-job-pod-generate-name.json")
        request = body["request"]
        self.created += 1
        request["uid"] = uid("admission", str(self.created))
        request["namespace"] = pod["metadata"]["namespace"]
        if pod["metadata"].get("name"):
            request["name"] = pod["metadata"]["name"]
        request["object"] = copy.deepcopy(dict(pod))
        return body

    def admit(self, pod: Mapping[str, Any], replica: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
        """The pod as the API server stores it after ``/mutate``, and the admission response."""
        submitted = with_api_defaults(pod)
        review = self.review(submitted)
        reply = self.replicas[replica].post("/mutate", review)
        assert reply.status_code == 200, reply.text
        response: dict[str, Any] = reply.json()["response"]
        assert response["uid"] == review["request"]["uid"]
        assert response["allowed"], response
        stored = submitted
        if "patch" in response:
            assert response["patchType"] == "JSONPatch"
            stored = admission_support.apply(submitted, json.loads(base64.b64decode(response["patch"])))
        meta = stored["metadata"]
        if not meta.get("name"):
            meta["name"] = meta["generateName"] + _suffix(f"{meta['generateName']}/{self.created}")
        meta["uid"] = uid("pod", meta["name"])
        meta["creationTimestamp"] = "2026-03-02T10:15:04Z"
        stored["status"] = {"phase": "Pending", "qosClass": "Burstable"}
        return stored, response

    def create(self, pods: Iterable[Mapping[str, Any]], replica: int = 0) -> list[dict[str, Any]]:
        return [self.admit(p, replica)[0] for p in pods]

    def claim_controller(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """kube-controller-manager's ResourceClaim controller: a claim per template reference whose template
        exists, named ``<pod>-<claim>-<suffix>``, recorded in ``status.resourceClaimStatuses``."""
        out: dict[str, Any] = copy.deepcopy(dict(pod))
        meta, status = out["metadata"], out.setdefault("status", {})
        statuses = list(status.get("resourceClaimStatuses") or [])
        templates = {t["metadata"]["name"]: t for t in self._kind("ResourceClaimTemplate")
                     if t["metadata"]["namespace"] == meta["namespace"]}
        for ref in out["spec"].get("resourceClaims") or []:
            template = templates.get(ref.get("resourceClaimTemplateName", ""))
            if template is None or any(s["name"] == ref["name"] for s in statuses):
                continue
            name = f"{meta['name']}-{ref['name']}-{_suffix(meta['uid'] + ref['name'])}"
            statuses.append({"name": ref["name"], "resourceClaimName": name})
            if self.state.claim(meta["namespace"], name) is not None:
                continue  # made earlier, found again through its owner reference
            claim = {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": meta["namespace"], "uid": uid("claim", name),
                             "labels": dict(template["metadata"].get("labels") or {}),
                             "annotations": {"resource.kubernetes.io/pod-claim-name": ref["name"]},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                  "uid": meta["uid"], "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "spec": copy.deepcopy(template["spec"]["spec"]),
            }
            self.advance(dataclasses.replace(self.state, claims=(*self.state.claims, parse_claim(claim))))
        if statuses:
            status["resourceClaimStatuses"] = statuses
        return out

    # -- scheduling ---------------------------------------------------------------------------------

    def run(self, pods: Sequence[Mapping[str, Any]], *, rounds: int = 4,
            replica_of: Callable[[int], int] = lambda i: 0) -> Run:
        """The scheduling queue, as kube-scheduler's: every round tries each pod that is due once, higher
        priority first, then in arrival order; a scheduling cycle that found a host is followed by its
        binding cycle at once. A pod is due on its first round, after an error (backoff), and once the
        cluster changed since its last try (a binding, an allocation, an eviction, a new object). Victims
        deleted by a preemption reach the replicas at the end of the round (``sync``). ``replica_of``:
        which replica serves the pod with this arrival index (all of its calls)."""
        queue = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": dict(p) for p in pods}
        order = {key: i for i, key in enumerate(queue)}
        final: dict[str, dict[str, Any]] = dict(queue)
        attempts: list[cycle.Attempt] = []
        tried: dict[str, tuple[int, str]] = {}
        for _ in range(rounds):
            due = [k for k in queue if k not in tried or tried[k][1] in ("error", "bind-error")
                   or tried[k][0] != self.version]
            if not due:
                break
            deleted = False
            for key in sorted(due, key=lambda k: (-int(queue[k]["spec"].get("priority") or 0), order[k])):
                index = replica_of(order[key])
                config, extender = self.config(index), self.extender(index)
                pod = self.claim_controller(queue[key])
                attempt = cycle.schedule(config, self.state, pod, extender)
                self.advance(attempt.cluster)
                deleted = deleted or bool(attempt.victims)
                if attempt.outcome == "assumed":
                    attempts.append(attempt)
                    attempt = cycle.bind(config, attempt, extender)
                    self.advance(attempt.cluster)
                attempts.append(attempt)
                tried[key] = (self.version, attempt.outcome)
                final[key] = dict(attempt.pod_raw)
                if attempt.outcome == "bound":
                    del queue[key]
                else:
                    queue[key] = dict(attempt.pod_raw)
                for victim in attempt.victims:
                    final.pop(victim, None)
            if deleted:
                self.sync()
        return Run(attempts, final)

    def advance(self, state: cycle.ClusterState) -> None:
        """The emulator's cluster after a cycle (or the claim controller) changed it."""
        if state != self.state:
            self.state = state
            self.version += 1
