"""Kubernetes JSON -> model. The only module that reads raw Kubernetes objects.

Objects from the API server are trusted to be well formed Kubernetes, but request bodies are not: every
shape problem raises ``WireError`` with the path of the field, so a malformed request becomes a 400 that
names it. Unknown fields are ignored, as Kubernetes clients do. Strings are bounded by Kubernetes' own
validation limits (``webhook.wire.fields``) and quantities parsed exactly as Kubernetes parses them
(``webhook.domain.reading.quantity``), so a hostile value is a clear 400, never an exception of another kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from webhook.domain import domain_kinds, keys
from webhook.domain.model import (
    ComputeDomain,
    Job,
    Node,
    OwnerRef,
    Pod,
    PodClaim,
)
from webhook.domain.reading import quantity as quantities
from webhook.domain.reading import workload_refs
from webhook.errors import WireError
from webhook.wire import gpu_inventory
from webhook.wire.fields import NAME_MAX
from webhook.wire.fields import annotation_map as _annotations
from webhook.wire.fields import int_ as _int
from webhook.wire.fields import label_map as _labels
from webhook.wire.fields import list_ as _list
from webhook.wire.fields import map_ as _map
from webhook.wire.fields import str_ as _str
from webhook.wire.text import shown
from webhook.wire.timestamps import parse_rfc3339

_OURS = f"{keys.PREFIX}/"


def quantity(value: Any, path: str) -> Decimal:
    """A Kubernetes resource.Quantity ("4", "500m", "1Gi", 2, null) as its exact value; see
    ``webhook.domain.reading.quantity`` for the grammar and Kubernetes' quirks."""
    try:
        return quantities.from_json(value).value
    except quantities.QuantityError as exc:
        raise WireError(path, f"{shown(value)} is not a Kubernetes quantity: {exc}") from None


def count(value: Any, path: str) -> int:
    """A countable resource such as nvidia.com/gpu; fractions are rejected by Kubernetes, so by us too.
    Kubernetes computes counts in 64 bits: a larger value, though a valid decimal quantity, is out of range."""
    number = quantity(value, path)
    if number > quantities.MAX_INT64:  # compared before anything expands "1e2147483647"
        raise WireError(path, f"{shown(value)} is out of range: more than {quantities.MAX_INT64} (2^63-1), the "
                        "most Kubernetes counts")
    if number < 0 or number != number.to_integral_value():
        raise WireError(path, f"expected a whole non-negative count, got {shown(value)}")
    return int(number)


def node_labels(obj: Any, path: str = "node") -> tuple[str, str, dict[str, str]]:
    """(name, resourceVersion, labels) of a Node: all the node domain labeller reads of it."""
    obj = _map(obj, path)
    meta = _map(obj.get("metadata"), f"{path}.metadata")
    name = _str(meta.get("name"), f"{path}.metadata.name")
    if not name:
        raise WireError(f"{path}.metadata.name", "missing")
    version = _str(meta.get("resourceVersion"), f"{path}.metadata.resourceVersion")
    return name, version, _labels(meta.get("labels"), f"{path}.metadata.labels")


def node(obj: Any, domain_labels: Sequence[str], path: str = "node", block_labels: Sequence[str] = ()) -> Node:
    obj = _map(obj, path)
    meta = _map(obj.get("metadata"), f"{path}.metadata")
    name = _str(meta.get("name"), f"{path}.metadata.name")
    if not name:
        raise WireError(f"{path}.metadata.name", "missing")
    labels = _labels(meta.get("labels"), f"{path}.metadata.labels")
    annotations = _annotations(meta.get("annotations"), f"{path}.metadata.annotations")
    domain, domain_key = domain_kinds.node_domain(labels, domain_labels)
    status = _map(obj.get("status"), f"{path}.status")
    allocatable = _map(status.get("allocatable"), f"{path}.status.allocatable")
    gpus = count(allocatable.get(keys.GPU_RESOURCE, 0), f"{path}.status.allocatable[{keys.GPU_RESOURCE}]")
    gpus = max(0, gpus - releasing_gpus(annotations.get(keys.INVENTORY_ANNOTATION)))
    zone = labels.get(keys.FABRIC_ZONE_LABEL) or None
    slots_raw = annotations.get(keys.FABRIC_SLOTS_ANNOTATION)
    slots = count(slots_raw, f"{path}.metadata.annotations[{keys.FABRIC_SLOTS_ANNOTATION}]") if slots_raw else 0
    spec = _map(obj.get("spec"), f"{path}.spec")
    return Node(
        fabric_health=labels.get(keys.HEALTH_LABEL, ""),
        not_ready=_not_ready(status.get("conditions"), f"{path}.status.conditions"),
        taints=_condition_taints(spec.get("taints"), f"{path}.spec.taints"),
        name=name,
        domain=domain,
        domain_key=domain_key,
        gpus=gpus,
        fabric_zone=zone,
        fabric_slots=slots if zone else 0,
        compute_domain=labels.get(keys.COMPUTE_DOMAIN_LABEL) or None,
        unschedulable=bool(spec.get("unschedulable", False)),
        fabric_system=annotations.get(keys.REDFISH_SYSTEM_ANNOTATION) or None,
        blocks=tuple(labels.get(key, "") for key in block_labels),
    )


def _not_ready(conditions: Any, path: str) -> bool:
    """Whether the node's Ready condition is there and not True (a node without conditions, as one that no
    kubelet reports yet, is not judged by them: kube-scheduler does not read them either)."""
    for i, raw in enumerate(_list(conditions, path)):
        cond = _map(raw, f"{path}[{i}]")
        if cond.get("type") == "Ready":
            return _str(cond.get("status"), f"{path}[{i}].status") != "True"
    return False


def _condition_taints(taints: Any, path: str) -> tuple[str, ...]:
    """The node-condition taints (not ready, unreachable, pressure, network, cordon) that keep new pods
    off the node. Other taints (``nvidia.com/gpu:NoSchedule`` and the like) are the scheduler's to judge
    against the pod's tolerations: it does so before it calls the extender."""
    out = []
    for i, raw in enumerate(_list(taints, path)):
        taint = _map(raw, f"{path}[{i}]")
        key = _str(taint.get("key"), f"{path}[{i}].key", limit=317)
        effect = _str(taint.get("effect"), f"{path}[{i}].effect")
        if key.startswith(keys.NODE_CONDITION_TAINT_PREFIX) and effect in ("NoSchedule", "NoExecute"):
            out.append(f"{key}:{effect}")
    return tuple(out)


def releasing_gpus(inventory: str | None) -> int:
    """GPUs our node agent is releasing (still in allocatable until the device plugin recounts): no new
    pod may be offered them. A missing or unreadable inventory withholds nothing, and must not stop the
    watch that carries the node."""
    if not inventory:
        return 0
    try:
        return gpu_inventory.releasing(gpu_inventory.parse(inventory))
    except WireError:
        return 0


def _ours(values: dict[str, str]) -> dict[str, str]:
    # A pod is kept (embedded mode learns pods from requests): of its labels and annotations, only the
    # imex-webhook.io/ ones are ever read, and only they are kept.
    return {k: v for k, v in values.items() if k.startswith(_OURS)}


def _container_gpus(container: Any, path: str) -> int:
    container = _map(container, path)
    resources = _map(container.get("resources"), f"{path}.resources")
    limits = _map(resources.get("limits"), f"{path}.resources.limits")
    requests = _map(resources.get("requests"), f"{path}.resources.requests")
    # Extended resources cannot be overcommitted: a limit, when given, equals the request.
    raw = limits.get(keys.GPU_RESOURCE, requests.get(keys.GPU_RESOURCE, 0))
    return count(raw, f"{path}.resources.limits[{keys.GPU_RESOURCE}]")


def effective_gpus(spec: Mapping[str, Any], path: str = "pod.spec") -> int:
    """The pod's nvidia.com/gpu as the scheduler computes it (k8s.io/component-helpers PodRequests).

    max(sum of app containers + restartable init (sidecar) containers,
        for each ordinary init container: its own need + the sidecars started before it).
    """
    sidecars = 0
    init_peak = 0
    for i, c in enumerate(_list(spec.get("initContainers"), f"{path}.initContainers")):
        cpath = f"{path}.initContainers[{i}]"
        need = _container_gpus(c, cpath)
        if _map(c, cpath).get("restartPolicy") == "Always":
            sidecars += need
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + need)
    app = sum(
        _container_gpus(c, f"{path}.containers[{i}]")
        for i, c in enumerate(_list(spec.get("containers"), f"{path}.containers"))
    )
    total = max(app + sidecars, init_peak)
    if total > quantities.MAX_INT64:  # each count fits 64 bits; their sum may not, where Kubernetes' wraps
        raise WireError(f"{path}.containers", f"the pod's {keys.GPU_RESOURCE} adds up to {total}, more than "
                        f"{quantities.MAX_INT64} (2^63-1), the most Kubernetes counts")
    return total


def pod(obj: Any, path: str = "Pod", validated: bool = True) -> Pod:
    """``validated``: the object passed the API server's validation (every object the scheduler or a watch
    sends), so a name, label or annotation beyond Kubernetes' limits makes it malformed. An admission
    review's object is checked before validation: there, over-long strings are the verdict's business."""
    obj = _map(obj, path)
    if not obj:
        raise WireError(path, "missing or empty")
    limit = NAME_MAX if validated else None
    meta = _map(obj.get("metadata"), f"{path}.metadata")
    spec = _map(obj.get("spec"), f"{path}.spec")
    status = _map(obj.get("status"), f"{path}.status")
    claims = []
    for i, raw in enumerate(_list(spec.get("resourceClaims"), f"{path}.spec.resourceClaims")):
        cpath = f"{path}.spec.resourceClaims[{i}]"
        raw = _map(raw, cpath)
        claims.append(
            PodClaim(
                name=_str(raw.get("name"), f"{cpath}.name", limit=limit),
                template=_str(raw.get("resourceClaimTemplateName"), f"{cpath}.resourceClaimTemplateName",
                              limit=limit) or None,
                claim=_str(raw.get("resourceClaimName"), f"{cpath}.resourceClaimName", limit=limit) or None,
            )
        )
    owners = []
    for i, raw in enumerate(_list(meta.get("ownerReferences"), f"{path}.metadata.ownerReferences")):
        opath = f"{path}.metadata.ownerReferences[{i}]"
        raw = _map(raw, opath)
        owners.append(
            OwnerRef(
                kind=_str(raw.get("kind"), f"{opath}.kind", limit=limit),
                name=_str(raw.get("name"), f"{opath}.name", limit=limit),
                uid=_str(raw.get("uid"), f"{opath}.uid", limit=limit),
                controller=bool(raw.get("controller", False)),
            )
        )
    phase = _str(status.get("phase"), f"{path}.status.phase", limit=limit)
    annotations = _annotations(meta.get("annotations"), f"{path}.metadata.annotations", validated)
    labels = _labels(meta.get("labels"), f"{path}.metadata.labels", validated)
    parsed = Pod(
        namespace=_str(meta.get("namespace"), f"{path}.metadata.namespace", "default", limit) or "default",
        name=_str(meta.get("name"), f"{path}.metadata.name", limit=limit),
        uid=_str(meta.get("uid"), f"{path}.metadata.uid", limit=limit),
        node_name=_str(spec.get("nodeName"), f"{path}.spec.nodeName", limit=limit) or None,
        terminated=phase in ("Succeeded", "Failed"),
        gpu_limit=effective_gpus(spec, f"{path}.spec"),
        claims=tuple(claims),
        annotations=_ours(annotations),
        labels=_ours(labels),
        owners=tuple(owners),
        scheduler_name=_str(spec.get("schedulerName"), f"{path}.spec.schedulerName", "default-scheduler", limit),
        deleting=bool(meta.get("deletionTimestamp")),
        rank=annotations.get(keys.COMPLETION_INDEX, labels.get(keys.COMPLETION_INDEX)),
        active_deadline=_int(spec.get("activeDeadlineSeconds"), f"{path}.spec.activeDeadlineSeconds") or None,
        started_at=parse_rfc3339(status["startTime"], f"{path}.status.startTime") if status.get("startTime") else None,
        created_at=parse_rfc3339(meta["creationTimestamp"], f"{path}.metadata.creationTimestamp")
        if meta.get("creationTimestamp") else None,
        priority=_priority(spec.get("priority"), f"{path}.spec.priority"),
    )
    # The groups other controllers put the pod in are read from their labels before only ours are kept.
    refs = workload_refs.pod_refs(parsed.namespace, parsed.name, labels, annotations, spec, f"{path}.spec")
    return replace(parsed, workload=refs) if refs is not None else parsed


def _priority(value: Any, path: str) -> int:
    """A pod's priority: a 32-bit integer, negative ones included (kube-apiserver validates the range)."""
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**31) <= value < 2**31:
        raise WireError(path, f"expected a 32-bit integer, got {shown(value)}")
    return value


def compute_domain(obj: Any, path: str = "computeDomain") -> ComputeDomain:
    obj = _map(obj, path)
    meta = _map(obj.get("metadata"), f"{path}.metadata")
    spec = _map(obj.get("spec"), f"{path}.spec")
    channel = _map(spec.get("channel"), f"{path}.spec.channel")
    rct = _map(channel.get("resourceClaimTemplate"), f"{path}.spec.channel.resourceClaimTemplate")
    num = _int(spec.get("numNodes"), f"{path}.spec.numNodes")
    annotations = _annotations(meta.get("annotations"), f"{path}.metadata.annotations")
    return ComputeDomain(
        namespace=_str(meta.get("namespace"), f"{path}.metadata.namespace", "default") or "default",
        name=_str(meta.get("name"), f"{path}.metadata.name"),
        uid=_str(meta.get("uid"), f"{path}.metadata.uid"),
        num_nodes=num,
        template=_str(rct.get("name"), f"{path}.spec.channel.resourceClaimTemplate.name") or None,
        exclusive=annotations.get(keys.EXCLUSIVE_ANNOTATION),
        spare_nodes=annotations.get(keys.SPARE_NODES_ANNOTATION),
        segment_size=annotations.get(keys.SEGMENT_SIZE_ANNOTATION),
        placement=annotations.get(keys.PLACEMENT_ANNOTATION),
        max_runtime=annotations.get(keys.MAX_RUNTIME_ANNOTATION),
    )


def job(obj: Any, path: str = "job") -> Job:
    obj = _map(obj, path)
    meta = _map(obj.get("metadata"), f"{path}.metadata")
    spec = _map(obj.get("spec"), f"{path}.spec")
    parallelism = spec.get("parallelism")
    deadline = spec.get("activeDeadlineSeconds")
    labels = meta.get("labels")
    max_exec = labels.get(keys.KUEUE_MAX_EXEC_LABEL) if isinstance(labels, Mapping) else None
    return Job(
        namespace=_str(meta.get("namespace"), f"{path}.metadata.namespace", "default") or "default",
        name=_str(meta.get("name"), f"{path}.metadata.name"),
        uid=_str(meta.get("uid"), f"{path}.metadata.uid"),
        parallelism=parallelism if isinstance(parallelism, int) and not isinstance(parallelism, bool) else None,
        # Both are read leniently, as parallelism is: a Job the API server accepted has them right, and one
        # that does not only states no walltime.
        active_deadline=deadline if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline > 0
        else None,
        max_exec=max_exec if isinstance(max_exec, str) else None,
    )
