"""Resource quantities and pod requests, computed the way kube-scheduler computes them.

- Quantities: Kubernetes' notation (``500m``, ``1Gi``, ``2e3``, JSON numbers); CPU is kept in millicores
  and every other resource in whole units, both rounded up as ``MilliValue``/``Value`` round.
- A pod's requests: the sum of its app containers and its sidecars (init containers with
  ``restartPolicy: Always``), against the largest single init container plus the sidecars started before
  it, whichever is larger per resource; pod-level ``spec.resources.requests`` replace the CPU, memory and
  hugepages totals; ``spec.overhead`` is added.
- The "non-zero" variant used for scoring gives a container without a CPU or memory request 100m and
  200 MiB of it (the scheduler's defaults), so best-effort pods still count when packing.
- A container's missing requests default to its limits, as the API server stores them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?))$")
_SUFFIX: dict[str, Fraction] = {
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000), "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
    "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18),
}


def parse_quantity(value: Any, where: str) -> Fraction:
    """A Kubernetes quantity (string or JSON number) as an exact fraction; ``ValueError`` names ``where``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{where}: expected a quantity, got {type(value).__name__}")
    if isinstance(value, int | float):
        return Fraction(str(value))
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"{where}: {value!r} is not a quantity")
    number, exponent, suffix = match.groups()
    scale = Fraction(10) ** int(exponent[1:]) if exponent else _SUFFIX[suffix or ""]
    return Fraction(number) * scale


def amount(resource: str, value: Any, where: str) -> int:
    """Millicores for CPU, whole units (rounded up) for everything else."""
    quantity = parse_quantity(value, where)
    return math.ceil(quantity * 1000) if resource == CPU else math.ceil(quantity)


def resource_list(raw: Any, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a map of resources")
    return {str(name): amount(str(name), value, f"{where}.{name}") for name, value in raw.items()}


def is_extended(name: str) -> bool:
    """An extended resource: a qualified name outside the ``kubernetes.io/`` namespaces."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def is_scalar(name: str) -> bool:
    """What the scheduler tracks beyond cpu, memory, ephemeral-storage and pods (other names are dropped)."""
    return (is_extended(name) or name.startswith("hugepages-") or "kubernetes.io/" in name
            or name.startswith("attachable-volumes-"))


def tracked(resources: Mapping[str, int]) -> dict[str, int]:
    """Only the resources the scheduler's ``Resource`` type keeps."""
    return {name: value for name, value in resources.items()
            if name in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS) or is_scalar(name)}


@dataclass(frozen=True)
class Container:
    name: str
    requests: Mapping[str, int]
    resource_names: frozenset[str]
    sidecar: bool


def parse_container(raw: Any, where: str, init: bool) -> Container:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object")
    resources = raw.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ValueError(f"{where}.resources: expected an object")
    requests = resource_list(resources.get("requests"), f"{where}.resources.requests")
    limits = resource_list(resources.get("limits"), f"{where}.resources.limits")
    names = frozenset(requests) | frozenset(limits)
    defaulted = {**limits, **requests}
    return Container(name=str(raw.get("name", "")), requests=defaulted, resource_names=names,
                     sidecar=init and raw.get("restartPolicy") == "Always")


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def _max_into(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = max(value, into[name]) if name in into else value


def _with_defaults(requests: Mapping[str, int], non_missing: Mapping[str, int]) -> dict[str, int]:
    out = dict(requests)
    for name, value in non_missing.items():
        if name not in requests:
            out[name] = out.get(name, 0) + value
    return out


def _pod_level_supported(name: str) -> bool:
    return name in (CPU, MEMORY) or name.startswith("hugepages-")


def pod_requests(containers: Iterable[Container], init_containers: Iterable[Container],
                 pod_level: Mapping[str, int], overhead: Mapping[str, int],
                 non_missing: Mapping[str, int] | None = None) -> dict[str, int]:
    """The pod's effective requests (kube-scheduler's ``PodRequests``)."""
    defaults = non_missing or {}
    result: dict[str, int] = {}
    for container in containers:
        _add(result, _with_defaults(container.requests, defaults))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for container in init_containers:
        own = _with_defaults(container.requests, defaults)
        if container.sidecar:
            _add(result, own)
            _add(sidecars, own)
            _max_into(init_max, sidecars)
        else:
            combined = dict(own)
            _add(combined, sidecars)
            _max_into(init_max, combined)
    _max_into(result, init_max)
    if any(_pod_level_supported(name) for name in pod_level):
        result.update({name: value for name, value in pod_level.items() if _pod_level_supported(name)})
    _add(result, overhead)
    return result


def non_zero_requests(containers: Iterable[Container], init_containers: Iterable[Container],
                      pod_level: Mapping[str, int], overhead: Mapping[str, int],
                      requests: Mapping[str, int]) -> tuple[int, int]:
    """(CPU millicores, memory bytes) with the scheduler's defaults for containers that request none."""
    pod_level_set = any(_pod_level_supported(name) for name in pod_level)
    if pod_level_set:
        defaults = {name: value for name, value in ((CPU, DEFAULT_MILLI_CPU_REQUEST), (MEMORY, DEFAULT_MEMORY_REQUEST))
                    if name not in requests}
    else:
        defaults = {CPU: DEFAULT_MILLI_CPU_REQUEST, MEMORY: DEFAULT_MEMORY_REQUEST}
    if not defaults:
        return requests.get(CPU, 0), requests.get(MEMORY, 0)
    non_zero = pod_requests(list(containers), list(init_containers), pod_level, overhead, defaults)
    return non_zero.get(CPU, 0), non_zero.get(MEMORY, 0)
