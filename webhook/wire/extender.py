"""kube-scheduler extender wire types.

Mirrors ``k8s.io/kube-scheduler/extender/v1/types.go``. Those Go structs have no json tags and no
``omitempty``, so the keys on the wire are the Go field names (``Pod``, ``NodeNames``, ...) and a nil
pointer or nil map arrives as ``null``. Replies use the same names.
"""

from __future__ import annotations

from typing import Any, TypedDict

# A Kubernetes object as it is on the wire (lowercase camelCase keys); parsed in webhook.domain.reading.parsing.
KubeObject = dict[str, Any]


class NodeList(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    items: list[KubeObject]


class ExtenderArgs(TypedDict):
    """``ExtenderArgs``: the body of /filter and /prioritize."""

    Pod: KubeObject
    Nodes: NodeList | None  # filled when the extender is not nodeCacheCapable
    NodeNames: list[str] | None  # filled when it is


class ExtenderFilterResult(TypedDict):
    """``ExtenderFilterResult``: the reply to /filter. Node maps are node name -> reason."""

    Nodes: NodeList | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    """One entry of ``HostPriorityList``, the reply to /prioritize (Score 0..MaxExtenderPriority)."""

    Host: str
    Score: int


class ExtenderBindingArgs(TypedDict):
    """``ExtenderBindingArgs``: the body of /bind. No pod spec, no node object."""

    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(TypedDict):
    """``ExtenderBindingResult``: the reply to /bind; an empty ``Error`` means bound."""

    Error: str


class MetaPod(TypedDict):
    """``MetaPod``: a victim named by its pod UID (the Go field ``UID`` has no json tag, so the key is
    ``UID``, not ``uid``)."""

    UID: str


class MetaVictims(TypedDict):
    """``MetaVictims``: the victims on one candidate node, by UID, and how many PodDisruptionBudgets
    evicting them would violate."""

    Pods: list[MetaPod]
    NumPDBViolations: int


class Victims(TypedDict):
    """``Victims``: the same as ``MetaVictims`` with whole pods; sent when not nodeCacheCapable."""

    Pods: list[KubeObject]
    NumPDBViolations: int


class ExtenderPreemptionArgs(TypedDict):
    """``ExtenderPreemptionArgs``: the body of /preempt. kube-scheduler fills exactly one map, node name ->
    victims: ``NodeNameToMetaVictims`` when nodeCacheCapable, else ``NodeNameToVictims``; the other is null."""

    Pod: KubeObject
    NodeNameToVictims: dict[str, Victims] | None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None


class ExtenderPreemptionResult(TypedDict):
    """``ExtenderPreemptionResult``: the reply to /preempt, always in the meta form, whatever the mode.
    It has no ``Error`` field: the candidate nodes the extender accepts, each with its victims."""

    NodeNameToMetaVictims: dict[str, MetaVictims]


MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10
