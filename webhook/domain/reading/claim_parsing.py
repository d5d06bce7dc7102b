"""ResourceClaim and ResourceClaimTemplate JSON -> ``ClaimSpec``: what grouping, demand and the per-node
ComputeDomain lock need (docs/SCHEDULER.md, "What a domain can take").

A claim belongs to a ComputeDomain's *workload* when the controller's label names the ComputeDomain (and
its target is not the daemon) or its opaque ``ComputeDomainChannelConfig`` does; such claims make a pod a
member of that ComputeDomain's group. The controller's *daemon* claims (target label ``Daemon``, or a
``ComputeDomainDaemonConfig``) are held by the driver's IMEX daemon pods: they never make a group, but the
node their ``daemon-0`` device is allocated on is held by that ComputeDomain all the same, as is the node
of an allocated channel (``imex_nodes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.domain import keys
from webhook.domain.model import ClaimSpec, DeviceRequest
from webhook.domain.reading.parsing import count
from webhook.wire.fields import label_map as _labels
from webhook.wire.fields import list_ as _list
from webhook.wire.fields import map_ as _map
from webhook.wire.fields import str_ as _str


def _device_request(raw: Any, path: str) -> DeviceRequest | None:
    raw = _map(raw, path)
    name = _str(raw.get("name"), f"{path}.name")
    # resource.k8s.io/v1 nests the request under "exactly" or lists "firstAvailable" alternatives;
    # v1beta1 put deviceClassName at the top. Read all three shapes.
    body = _map(raw.get("exactly"), f"{path}.exactly")
    bpath = f"{path}.exactly"
    if not body:
        alternatives = _list(raw.get("firstAvailable"), f"{path}.firstAvailable")
        body, bpath = (_map(alternatives[0], f"{path}.firstAvailable[0]"), f"{path}.firstAvailable[0]") \
            if alternatives else (raw, path)
    device_class = _str(body.get("deviceClassName"), f"{bpath}.deviceClassName")
    if not device_class:
        return None
    mode = _str(body.get("allocationMode"), f"{bpath}.allocationMode", "ExactCount")
    amount = count(body.get("count", 1), f"{bpath}.count")
    return DeviceRequest(name=name, device_class=device_class, count=amount, all_devices=mode == "All")


def _compute_domain_from_config(spec: Mapping[str, Any], path: str, kind: str) -> str | None:
    for i, cfg in enumerate(_list(spec.get("config"), f"{path}.config")):
        opaque = _map(_map(cfg, f"{path}.config[{i}]").get("opaque"), f"{path}.config[{i}].opaque")
        params = _map(opaque.get("parameters"), f"{path}.config[{i}].opaque.parameters")
        if params.get("kind") == kind and params.get("domainID"):
            return _str(params["domainID"], f"{path}.config[{i}].opaque.parameters.domainID")
    return None


def _imex_nodes(status: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """The nodes whose compute-domain devices (channel or daemon) the claim's allocation holds: the plugin
    publishes one pool per node, named after the node."""
    allocation = _map(status.get("allocation"), f"{path}.allocation")
    devices = _map(allocation.get("devices"), f"{path}.allocation.devices")
    nodes: set[str] = set()
    for i, raw in enumerate(_list(devices.get("results"), f"{path}.allocation.devices.results")):
        result = _map(raw, f"{path}.allocation.devices.results[{i}]")
        where = f"{path}.allocation.devices.results[{i}]"
        if _str(result.get("driver"), f"{where}.driver") == keys.COMPUTE_DOMAIN_DRIVER:
            pool = _str(result.get("pool"), f"{where}.pool")
            if pool:
                nodes.add(pool)
    return tuple(sorted(nodes))


def claim_spec(obj: Any, template: bool, path: str = "claim") -> ClaimSpec:
    """A ResourceClaim, or a ResourceClaimTemplate (whose claim spec sits under spec.spec)."""
    obj = _map(obj, path)
    meta = _map(obj.get("metadata"), f"{path}.metadata")
    spec = _map(obj.get("spec"), f"{path}.spec")
    spath = f"{path}.spec"
    if template:
        spec, spath = _map(spec.get("spec"), f"{path}.spec.spec"), f"{path}.spec.spec"
    devices = _map(spec.get("devices"), f"{spath}.devices")
    requests = []
    for i, raw in enumerate(_list(devices.get("requests"), f"{spath}.devices.requests")):
        parsed = _device_request(raw, f"{spath}.devices.requests[{i}]")
        if parsed is not None:
            requests.append(parsed)
    labels = _labels(meta.get("labels"), f"{path}.metadata.labels")
    status = _map(obj.get("status"), f"{path}.status")
    reserved = tuple(
        _str(_map(r, f"{path}.status.reservedFor[{i}]").get("uid"), f"{path}.status.reservedFor[{i}].uid")
        for i, r in enumerate(_list(status.get("reservedFor"), f"{path}.status.reservedFor"))
    )
    labelled = labels.get(keys.COMPUTE_DOMAIN_LABEL)
    daemon = labels.get(keys.COMPUTE_DOMAIN_TARGET_LABEL) == keys.DAEMON_TARGET
    workload_cd = daemon_cd = None
    if daemon:
        daemon_cd = labelled or _compute_domain_from_config(
            devices, f"{spath}.devices", keys.COMPUTE_DOMAIN_DAEMON_CONFIG_KIND)
    else:
        workload_cd = labelled or _compute_domain_from_config(
            devices, f"{spath}.devices", keys.COMPUTE_DOMAIN_CHANNEL_CONFIG_KIND)
        if workload_cd is None:  # a daemon claim made without the controller's labels
            daemon_cd = _compute_domain_from_config(devices, f"{spath}.devices", keys.COMPUTE_DOMAIN_DAEMON_CONFIG_KIND)
    return ClaimSpec(
        namespace=_str(meta.get("namespace"), f"{path}.metadata.namespace", "default") or "default",
        name=_str(meta.get("name"), f"{path}.metadata.name"),
        uid=_str(meta.get("uid"), f"{path}.metadata.uid"),
        compute_domain=workload_cd,
        requests=tuple(requests),
        reserved_for=reserved,
        daemon_for=daemon_cd,
        imex_nodes=() if template else _imex_nodes(status, f"{path}.status"),
    )
