"""ExtenderArgs and ExtenderPreemptionArgs, parsed: what the extender views hand the engine.

Keys are the Go field names (see webhook.wire.extender). Every shape problem is a ``WireError`` naming the
field (a 400 through ``webhook.http.common.answered``). The pod is parsed once per version (``PodCache``) and
the names of cached nodes are checked with one subset test (``node_names``), because the scheduler sends
the same pod to several verbs and 5,000 names to each filter.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import orjson

from webhook.domain.model import Node, Pod
from webhook.domain.placement import candidates
from webhook.domain.reading import parsing
from webhook.errors import WireError
from webhook.http.common import Services
from webhook.wire.extender import KubeObject
from webhook.wire.fields import NAME_MAX
from webhook.wire.text import shown


class ParsedArgs:
    """ExtenderArgs after parsing: the pod, the candidate names, and the nodes when sent in full."""

    __slots__ = ("candidates", "node_objects", "node_view", "pod")

    def __init__(self, pod: Pod, candidates: list[str], node_view: dict[str, Node] | None,
                 node_objects: dict[str, KubeObject] | None) -> None:
        self.pod = pod
        self.candidates = candidates
        self.node_view = node_view
        self.node_objects = node_objects


class PodCache:
    """``parsing.pod`` of the ExtenderArgs' Pod, once per pod version: kube-scheduler sends the same object to
    /filter, /prioritize and /preempt of one cycle. The key is the pod's exact JSON (orjson writes it in C in
    a few microseconds; parsing takes several times that), so a hit is always the parse of the very same
    input, whatever a caller puts under a reused uid and resourceVersion. Bounded; shared by threads."""

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: dict[bytes, Pod] = {}

    def parse(self, raw: Any, path: str = "Pod") -> Pod:
        try:
            key = orjson.dumps(raw) if isinstance(raw, dict) else b""
        except orjson.JSONEncodeError:
            key = b""  # nothing that deep passes json_body; parse it and let parsing say what is wrong
        pod = self._items.get(key) if key else None
        if pod is not None:
            return pod
        pod = parsing.pod(raw, path)  # a WireError is not kept: every bad request is told again
        if key:
            with self._lock:
                while len(self._items) >= self._size:
                    del self._items[next(iter(self._items))]
                self._items[key] = pod
        return pod


_pods = PodCache()


def node_names(names: Any, labelled: frozenset[str]) -> list[str]:
    """``NodeNames`` checked: a list of strings of at most NAME_MAX characters. Names that are all cached
    nodes with a domain (``labelled``, the common case) are such strings: one set and one subset test in C
    say so, and the names come back with that set (``candidates.CheckedNames``) for the filter to reuse."""
    if not isinstance(names, list):
        raise WireError("NodeNames", "expected a list of node names (strings)")
    try:
        known = set(names)
    except TypeError:
        known = None  # an unhashable item: named below
    # Equal sizes: test labelled <= known, which walks the cache's names in the order they are packed in memory
    # (webhook.domain.placement.candidates) and looks them up in the set just built, not the other way round.
    if known is not None and (labelled <= known if len(known) == len(labelled) else known <= labelled):
        return candidates.CheckedNames(names, known, labelled)
    # set(map(type, ...)) is about twice as fast as all(isinstance(...)) on 5,000 names.
    if not set(map(type, names)) <= {str}:
        raise WireError("NodeNames", "expected a list of node names (strings)")
    if names and max(map(len, names)) > NAME_MAX:
        i = next(i for i, n in enumerate(names) if len(n) > NAME_MAX)
        raise WireError(f"NodeNames[{i}]", f"{shown(names[i])} is longer than {NAME_MAX} characters, the most a "
                        "node name can be")
    return names


def parse_args(body: Mapping[str, Any], svc: Services) -> ParsedArgs:
    if "Pod" not in body or body["Pod"] is None:
        raise WireError("Pod", "missing: ExtenderArgs must carry the pod being scheduled")
    pod = _pods.parse(body["Pod"])
    names = body.get("NodeNames")
    nodes = body.get("Nodes")
    if names is not None:
        return ParsedArgs(pod, node_names(names, svc.engine.labelled_nodes()), None, None)
    if nodes is None:
        raise WireError("NodeNames", "both NodeNames and Nodes are null; one of them must list the candidates")
    if not isinstance(nodes, dict) or not isinstance(nodes.get("items"), list):
        raise WireError("Nodes", "expected a NodeList object with an items list")
    policy = svc.engine.policy
    view: dict[str, Node] = {}
    objects: dict[str, KubeObject] = {}
    candidates = []
    for i, item in enumerate(nodes["items"]):
        node = parsing.node(item, policy.domain_labels, f"Nodes.items[{i}]", policy.block_labels)
        view[node.name] = node
        objects[node.name] = item
        candidates.append(node.name)
    return ParsedArgs(pod, candidates, view, objects)


class ParsedPreemption:
    """ExtenderPreemptionArgs after parsing: the pod, node -> victim UIDs and PDB violations, and the
    victims themselves when the scheduler sent them whole (not nodeCacheCapable)."""

    __slots__ = ("candidates", "pdb_violations", "pod", "victims")

    def __init__(self, pod: Pod, candidates: dict[str, list[str]], pdb_violations: dict[str, int],
                 victims: dict[str, Pod]) -> None:
        self.pod = pod
        self.candidates = candidates
        self.pdb_violations = pdb_violations
        self.victims = victims


_INT64_MAX = 2**63 - 1


def _node_path(key: str, node: str) -> str:
    # A node name is at most 253 characters; a hostile key must not blow up the error body.
    return f"{key}.{node if len(node) <= NAME_MAX else node[:NAME_MAX] + '...'}"


def parse_preemption_args(body: Mapping[str, Any]) -> ParsedPreemption:
    if body.get("Pod") is None:
        raise WireError("Pod", "missing: ExtenderPreemptionArgs must carry the pod that preempts")
    pod = _pods.parse(body["Pod"])
    # kube-scheduler fills NodeNameToMetaVictims when nodeCacheCapable, NodeNameToVictims otherwise.
    meta = body.get("NodeNameToMetaVictims")
    key, table = ("NodeNameToMetaVictims", meta) if meta is not None else ("NodeNameToVictims",
                                                                            body.get("NodeNameToVictims"))
    if table is None:
        raise WireError("NodeNameToMetaVictims", "both NodeNameToMetaVictims and NodeNameToVictims are null; "
                        "one of them must map the candidate nodes to their victims")
    if not isinstance(table, dict):
        raise WireError(key, f"expected an object of node name -> victims, got {type(table).__name__}")
    candidates: dict[str, list[str]] = {}
    violations: dict[str, int] = {}
    victims: dict[str, Pod] = {}
    for node, entry in table.items():
        path = _node_path(key, node)
        if not isinstance(entry, dict):
            raise WireError(path, "expected a victims object with Pods and NumPDBViolations, "
                            f"got {type(entry).__name__}")
        count = entry.get("NumPDBViolations", 0)
        if count is None:
            count = 0  # Go decodes null into an int64 as 0
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= _INT64_MAX:
            raise WireError(f"{path}.NumPDBViolations", f"expected a non-negative 64-bit integer, got {shown(count)}")
        pods = entry.get("Pods")
        if pods is not None and not isinstance(pods, list):
            raise WireError(f"{path}.Pods", f"expected a list of victims, got {type(pods).__name__}")
        uids = []
        for i, item in enumerate(pods or ()):
            ipath = f"{path}.Pods[{i}]"
            if meta is not None:
                if not isinstance(item, dict):
                    raise WireError(ipath, f'expected a MetaPod {{"UID": ...}}, got {type(item).__name__}')
                uid = item.get("UID")
                if not isinstance(uid, str) or not uid or len(uid) > NAME_MAX:
                    raise WireError(f"{ipath}.UID", "expected the victim's pod UID (a non-empty string of at most "
                                    f"{NAME_MAX} characters)")
            else:
                victim = parsing.pod(item, ipath)
                uid = victim.uid
                if not uid:
                    raise WireError(f"{ipath}.metadata.uid", "missing: the reply names victims by pod UID")
                victims[uid] = victim
            uids.append(uid)
        if len(node) > NAME_MAX:  # the reply names the node back
            raise WireError(path, f"a node name is at most {NAME_MAX} characters; this one has {len(node)}")
        candidates[node] = uids
        violations[node] = count
    return ParsedPreemption(pod, candidates, violations, victims)
