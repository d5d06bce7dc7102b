"""Kubernetes JSON -> model for the objects of Kubernetes' gang scheduling and of the workload controllers
whose pods may form a group (docs/GROUPS.md): what a pod says about them, PodGroups and Workloads
(scheduling.k8s.io), JobSets, Kubeflow training jobs.

Shapes, as the releases named in docs/GROUPS.md write them:

- pod ``spec.schedulingGroup.podGroupName`` (Kubernetes 1.36+) names a PodGroup whose
  ``spec.schedulingPolicy.gang.minCount`` (or ``basic: {}``) is the policy: the same fields in
  scheduling.k8s.io/v1alpha2 (1.36), v1alpha3 and v1beta1 (1.37). Its topology constraint (KEP-5732, gate
  ``TopologyAwareWorkloadScheduling``) is ``spec.schedulingConstraints.topology[].key`` in v1alpha3 and
  v1beta1, ``spec.schedulingConstraints.topologyConstraints[].topologyKey`` in v1alpha2;
- pod ``spec.workloadRef`` {name, podGroup, podGroupReplicaKey} (Kubernetes 1.35) names a pod group in a
  scheduling.k8s.io/v1alpha1 Workload: ``spec.podGroups[] {name, policy: {gang: {minCount}}}`` (no
  topology constraints: KEP-5732 came in 1.36);
- JobSet ``spec.replicatedJobs[] {name, replicas, template: {spec: {parallelism, completions, template}}}``;
- training jobs ``spec.<kind>ReplicaSpecs: {<type>: {replicas, template}}``.

A field of the wrong type raises ``WireError`` (the object is skipped and counted by the store, a request
gets a 400); a count that is of the right type but unusable (negative, beyond int32) is kept as the
object's ``problem``, so the group it sizes says why instead of vanishing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from webhook.domain.model import (
    ControllerObject,
    GangGroup,
    GangWorkload,
    PodClaim,
    PodTemplate,
    Replicas,
)
from webhook.domain.reading.parsing import effective_gpus
from webhook.errors import WireError
from webhook.wire.fields import LABEL_KEY_MAX, list_, map_, str_
from webhook.wire.text import shown

INT32_MAX = 2**31 - 1  # every count these APIs have is an int32
# PodGroup topology constraints read: Kubernetes 1.37 validates at most one ("may change in the future");
# a few more leave a later release room, a longer list is no PodGroup an API server stored.
TOPOLOGY_MAX = 8

REPLICA_SPECS: Mapping[str, str] = {
    "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs", "TFJob": "tfReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs", "XGBoostJob": "xgbReplicaSpecs", "PaddleJob": "paddleReplicaSpecs",
}
# mpi-operator defaults a Worker without replicas to none; the training-operator every other type to one.
_DEFAULT_REPLICAS = {("MPIJob", "Worker"): 0}


def _count(value: Any, path: str, default: int, least: int = 0) -> tuple[int, str | None]:
    """An int32 count, or the default when absent; a wrong one is ``(0, why)``, never an exception."""
    if value is None:
        return default, None
    if isinstance(value, bool) or not isinstance(value, int):
        return 0, f"{path} is {shown(value)}, not a whole number"
    if not least <= value <= INT32_MAX:
        return 0, f"{path} is {shown(value)}; it must be from {least} to {INT32_MAX}"
    return value, None


def _meta(obj: Any, path: str) -> tuple[Mapping[str, Any], str, str, str]:
    obj = map_(obj, path)
    meta = map_(obj.get("metadata"), f"{path}.metadata")
    name = str_(meta.get("name"), f"{path}.metadata.name")
    if not name:
        raise WireError(f"{path}.metadata.name", "missing")
    namespace = str_(meta.get("namespace"), f"{path}.metadata.namespace", "default") or "default"
    return obj, namespace, name, str_(meta.get("uid"), f"{path}.metadata.uid")


def _foreign(obj: Mapping[str, Any], group: str) -> bool:
    """An object of another API group under the same kind (Volcano's or Kueue's PodGroup, Kueue's Workload):
    in a file of objects only the kind tells them apart, and they are none of ours."""
    version = obj.get("apiVersion")
    return isinstance(version, str) and not version.startswith(f"{group}/")


def _policy(raw: Any, path: str, namespace: str, name: str) -> GangGroup:
    policy = map_(raw, path)
    if policy.get("gang") is None:
        return GangGroup(namespace, name, gang=False, min_count=None)
    gang = map_(policy.get("gang"), f"{path}.gang")
    count, problem = _count(gang.get("minCount"), f"{path}.gang.minCount", 0, least=1)
    if gang.get("minCount") is None:
        problem = f"{path}.gang.minCount is missing"
    return GangGroup(namespace, name, gang=True, min_count=None if problem else count, problem=problem)


def _topology_keys(raw: Any, path: str) -> tuple[str, ...]:
    """The label keys of ``schedulingConstraints``: ``topology[].key`` (v1alpha3, v1beta1) or, as 1.36's
    v1alpha2 spells them, ``topologyConstraints[].topologyKey``; both when a hand-made object has both."""
    constraints = map_(raw, path)
    found: list[str] = []
    for field, key in (("topology", "key"), ("topologyConstraints", "topologyKey")):
        entries = list_(constraints.get(field), f"{path}.{field}")
        if len(entries) > TOPOLOGY_MAX:
            raise WireError(f"{path}.{field}", f"{len(entries)} topology constraints; Kubernetes allows 1, "
                            f"imex-webhook reads at most {TOPOLOGY_MAX}")
        for i, entry in enumerate(entries):
            where = f"{path}.{field}[{i}]"
            label = str_(map_(entry, where).get(key), f"{where}.{key}", limit=LABEL_KEY_MAX)
            if not label:
                raise WireError(f"{where}.{key}", "missing: a topology constraint names a node label")
            found.append(label)
    return tuple(found)


def pod_group(obj: Any, path: str = "PodGroup") -> GangGroup | None:
    """A scheduling.k8s.io PodGroup (v1alpha2, v1alpha3, v1beta1); ``None`` for another group's PodGroup."""
    obj, namespace, name, _ = _meta(obj, path)
    if _foreign(obj, "scheduling.k8s.io"):
        return None
    spec = map_(obj.get("spec"), f"{path}.spec")
    group = _policy(spec.get("schedulingPolicy"), f"{path}.spec.schedulingPolicy", namespace, name)
    topology = _topology_keys(spec.get("schedulingConstraints"), f"{path}.spec.schedulingConstraints")
    return replace(group, topology_keys=topology) if topology else group


def gang_workload(obj: Any, path: str = "Workload") -> GangWorkload | None:
    """A Kubernetes 1.35 scheduling.k8s.io/v1alpha1 Workload; ``None`` for another group's Workload."""
    obj, namespace, name, _ = _meta(obj, path)
    if _foreign(obj, "scheduling.k8s.io"):
        return None
    spec = map_(obj.get("spec"), f"{path}.spec")
    groups: dict[str, GangGroup] = {}
    for i, raw in enumerate(list_(spec.get("podGroups"), f"{path}.spec.podGroups")):
        gpath = f"{path}.spec.podGroups[{i}]"
        raw = map_(raw, gpath)
        group = str_(raw.get("name"), f"{gpath}.name")
        groups[group] = _policy(raw.get("policy"), f"{gpath}.policy", namespace, group)
    return GangWorkload(namespace, name, groups)


def _template(raw: Any, path: str) -> PodTemplate:
    """A PodTemplateSpec: its nvidia.com/gpu, counted as the scheduler does, and its resource claims."""
    spec = map_(map_(raw, path).get("spec"), f"{path}.spec")
    claims = []
    for i, entry in enumerate(list_(spec.get("resourceClaims"), f"{path}.spec.resourceClaims")):
        cpath = f"{path}.spec.resourceClaims[{i}]"
        entry = map_(entry, cpath)
        claims.append(PodClaim(
            name=str_(entry.get("name"), f"{cpath}.name"),
            template=str_(entry.get("resourceClaimTemplateName"), f"{cpath}.resourceClaimTemplateName") or None,
            claim=str_(entry.get("resourceClaimName"), f"{cpath}.resourceClaimName") or None))
    return PodTemplate(gpus=effective_gpus(spec, f"{path}.spec"), claims=tuple(claims))


def jobset(obj: Any, path: str = "JobSet") -> ControllerObject | None:
    """A jobset.x-k8s.io/v1alpha2 JobSet: per replicated job, its child Jobs and each Job's active pods."""
    obj, namespace, name, uid = _meta(obj, path)
    if _foreign(obj, "jobset.x-k8s.io"):
        return None
    spec = map_(obj.get("spec"), f"{path}.spec")
    parts: list[Replicas] = []
    problems: list[str] = []
    for i, raw in enumerate(list_(spec.get("replicatedJobs"), f"{path}.spec.replicatedJobs")):
        rpath = f"{path}.spec.replicatedJobs[{i}]"
        raw = map_(raw, rpath)
        job = map_(map_(raw.get("template"), f"{rpath}.template").get("spec"), f"{rpath}.template.spec")
        replicas, p1 = _count(raw.get("replicas"), f"{rpath}.replicas", 1)
        parallelism, p2 = _count(job.get("parallelism"), f"{rpath}.template.spec.parallelism", 1)
        completions, p3 = _count(job.get("completions"), f"{rpath}.template.spec.completions", parallelism)
        problems.extend(p for p in (p1, p2, p3) if p)
        parts.append(Replicas(name=str_(raw.get("name"), f"{rpath}.name"), replicas=replicas,
                              pods_each=min(parallelism, completions),
                              template=_template(job.get("template"), f"{rpath}.template.spec.template")))
    return ControllerObject("JobSet", namespace, name, uid, tuple(parts), "; ".join(problems) or None)


def training_job(obj: Any, kind: str, path: str = "") -> ControllerObject | None:
    """A Kubeflow training job (kubeflow.org): the replicas of each replica type."""
    path = path or kind
    obj, namespace, name, uid = _meta(obj, path)
    if _foreign(obj, "kubeflow.org"):
        return None
    spec = map_(obj.get("spec"), f"{path}.spec")
    field = REPLICA_SPECS.get(kind, "")
    specs = map_(spec.get(field), f"{path}.spec.{field}") if field else {}
    parts: list[Replicas] = []
    problems: list[str] = []
    for replica_type, raw in specs.items():
        rpath = f"{path}.spec.{field}.{replica_type}"
        raw = map_(raw, rpath)
        replicas, problem = _count(raw.get("replicas"), f"{rpath}.replicas",
                                   _DEFAULT_REPLICAS.get((kind, replica_type), 1))
        if problem:
            problems.append(problem)
        parts.append(Replicas(name=str(replica_type), replicas=replicas, pods_each=1,
                              template=_template(raw.get("template"), f"{rpath}.template")))
    return ControllerObject(kind, namespace, name, uid, tuple(parts), "; ".join(problems) or None)
