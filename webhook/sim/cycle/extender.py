"""The extender, reached through a small protocol object, and what kube-scheduler makes of its replies.

An ``Extender`` takes and returns the wire dicts exactly as kube-scheduler sends and decodes them (keys
are Go field names): tests plug in an in-process fake or a TLS client. A client that gets no 200 reply
raises ``ExtenderCallFailed`` with kube-scheduler's text (``http_failure``).

- filter: ``{"Pod", "Nodes", "NodeNames"}``; with ``nodeCacheCapable`` only ``NodeNames`` (``Nodes``
  null), else a NodeList (``{"metadata": {}, "items": [...]}``). A non-empty ``Error`` (or a failed
  call) aborts the cycle with that text as the message, unless the extender is ``ignorable``. Kept
  nodes come from ``NodeNames`` when cache-capable and non-null (a name that was not sent is an error),
  otherwise from ``Nodes`` (these carry no pods in kube-scheduler's later steps: in-tree scores then see
  empty nodes), otherwise none. ``FailedAndUnresolvableNodes`` win over ``FailedNodes``; a node in
  neither and not kept gets no reason at all.
- prioritize: same request; ``[{"Host", "Score"}]``; any failure only drops this extender's scores.
- bind: ``{"PodName", "PodNamespace", "PodUID", "Node"}`` -> ``{"Error"}``.
- preempt: ``{"Pod", "NodeNameToVictims", "NodeNameToMetaVictims"}`` (``MetaVictims`` of pod UIDs when
  cache-capable) -> ``{"NodeNameToMetaVictims"}``; a UID not on that node, a node without victims or an
  unknown node is an error.
Reply keys are matched as Go's JSON decoder matches them: exactly, else case-insensitively.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from webhook.errors import ImexWebhookError
from webhook.sim.cycle.cluster import NodeInfo, node_info
from webhook.sim.cycle.config import ExtenderConfig
from webhook.sim.cycle.model import Pod, parse_node
from webhook.sim.cycle.status import UNRESOLVABLE, UNSCHEDULABLE, Status


class Extender(Protocol):
    def filter(self, args: dict[str, Any]) -> Any: ...

    def prioritize(self, args: dict[str, Any]) -> Any: ...

    def bind(self, args: dict[str, Any]) -> Any: ...

    def preempt(self, args: dict[str, Any]) -> Any: ...


class ExtenderCallFailed(ImexWebhookError):
    """The call produced no decodable 200 reply; ``str()`` is what kube-scheduler reports."""


def http_failure(config: ExtenderConfig, verb: str, code: int) -> ExtenderCallFailed:
    url = config.url_prefix.rstrip("/") + "/" + verb
    return ExtenderCallFailed(f"failed {verb} with extender at URL {url}, code {code}")


def field(obj: Mapping[str, Any], name: str) -> Any:
    if name in obj:
        return obj[name]
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == name.lower():
            return value
    return None


def _decode_error(what: str) -> str:
    return f"json: cannot unmarshal {what}"


def _args(config: ExtenderConfig, pod: Pod, infos: Sequence[NodeInfo]) -> dict[str, Any]:
    if config.node_cache_capable:
        return {"Pod": dict(pod.raw), "Nodes": None, "NodeNames": [i.name for i in infos]}
    return {"Pod": dict(pod.raw), "Nodes": {"metadata": {}, "items": [dict(i.node.raw) for i in infos]},
            "NodeNames": None}


def _failed(raw: Any, name: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(v, str) for v in raw.values()):
        raise ValueError(_decode_error(f"{raw!r} into Go struct field ExtenderFilterResult.{name}"))
    return {str(k): v for k, v in raw.items()}


def call_filter(config: ExtenderConfig, extender: Extender, pod: Pod, infos: Sequence[NodeInfo],
                ) -> tuple[list[NodeInfo], dict[str, Status]] | str:
    """(kept nodes, statuses of failed nodes), or the error that aborts the cycle."""
    if not config.filter_verb:
        return list(infos), {}
    try:
        reply = extender.filter(_args(config, pod, infos))
        if not isinstance(reply, Mapping):
            raise ValueError(_decode_error(f"{type(reply).__name__} into Go value of type ExtenderFilterResult"))
        error = field(reply, "Error")
        if error:
            raise ExtenderCallFailed(str(error))
        by_name = {i.name: i for i in infos}
        names, nodes = field(reply, "NodeNames"), field(reply, "Nodes")
        kept: list[NodeInfo] = []
        if config.node_cache_capable and names is not None:
            for name in names:
                if name not in by_name:
                    raise ExtenderCallFailed(f'extender "{config.url_prefix}" claims a filtered node "{name}" '
                                             "which is not found in the input node list")
                kept.append(by_name[name])
        elif nodes is not None:
            kept = [node_info(parse_node(n), ()) for n in field(nodes, "items") or []]
        unresolvable = _failed(field(reply, "FailedAndUnresolvableNodes"), "FailedAndUnresolvableNodes")
        failed = _failed(field(reply, "FailedNodes"), "FailedNodes")
    except (ExtenderCallFailed, ValueError) as exc:
        return _skip_or(config, str(exc), infos)
    statuses = {name: Status(UNRESOLVABLE, (message,)) for name, message in unresolvable.items()}
    statuses.update({name: Status(UNSCHEDULABLE, (message,)) for name, message in failed.items()
                     if name not in unresolvable})
    return kept, statuses


def _skip_or(config: ExtenderConfig, error: str, infos: Sequence[NodeInfo],
             ) -> tuple[list[NodeInfo], dict[str, Status]] | str:
    return (list(infos), {}) if config.ignorable else error


def call_prioritize(config: ExtenderConfig, extender: Extender, pod: Pod,
                    infos: Sequence[NodeInfo]) -> tuple[list[tuple[str, int]], int] | None:
    """([(Host, Score)], weight), or ``None`` when the call failed (the scores are then dropped)."""
    if not config.prioritize_verb:
        return [(i.name, 0) for i in infos], 0
    try:
        reply = extender.prioritize(_args(config, pod, infos))
    except ExtenderCallFailed:
        return None
    if reply is None:
        return [], config.weight
    if not isinstance(reply, list):
        return None
    scores: list[tuple[str, int]] = []
    for item in reply:
        host = field(item, "Host") if isinstance(item, Mapping) else None
        score = field(item, "Score") if isinstance(item, Mapping) else None
        if not isinstance(host, str) or isinstance(score, bool) or not isinstance(score, int):
            return None
        scores.append((host, score))
    return scores, config.weight


def call_bind(config: ExtenderConfig, extender: Extender, pod: Pod, node: str) -> str:
    """The bind error text; empty on success."""
    args = {"PodName": pod.name, "PodNamespace": pod.namespace, "PodUID": pod.uid, "Node": node}
    try:
        reply = extender.bind(args)
    except ExtenderCallFailed as exc:
        return str(exc)
    if not isinstance(reply, Mapping):
        return _decode_error(f"{type(reply).__name__} into Go value of type ExtenderBindingResult")
    return str(field(reply, "Error") or "")


Victims = Mapping[str, tuple[tuple[Pod, ...], int]]
"""Node name -> (victim pods, number of PDB violations)."""


def call_preempt(config: ExtenderConfig, extender: Extender, pod: Pod, victims: Victims,
                 pods_on: Mapping[str, Sequence[Pod]]) -> dict[str, tuple[tuple[Pod, ...], int]] | str:
    """What the extender kept, or the error text."""
    meta = {node: {"Pods": [{"UID": p.uid} for p in pods], "NumPDBViolations": pdb}
            for node, (pods, pdb) in victims.items()}
    full = {node: {"Pods": [dict(p.raw) for p in pods], "NumPDBViolations": pdb}
            for node, (pods, pdb) in victims.items()}
    args = ({"Pod": dict(pod.raw), "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
            if config.node_cache_capable else
            {"Pod": dict(pod.raw), "NodeNameToVictims": full, "NodeNameToMetaVictims": None})
    try:
        reply = extender.preempt(args)
    except ExtenderCallFailed as exc:
        return str(exc)
    if not isinstance(reply, Mapping):
        return _decode_error(f"{type(reply).__name__} into Go value of type ExtenderPreemptionResult")
    kept: dict[str, tuple[tuple[Pod, ...], int]] = {}
    for node, entry in (field(reply, "NodeNameToMetaVictims") or {}).items():
        if node not in pods_on:
            return f'nodeinfo not found for node name "{node}"'
        entry = entry if isinstance(entry, Mapping) else {}
        chosen = []
        for meta_pod in field(entry, "Pods") or []:
            uid = str(field(meta_pod, "UID") or "") if isinstance(meta_pod, Mapping) else ""
            match = next((p for p in pods_on[node] if p.uid == uid), None)
            if match is None:
                return (f"extender: {config.url_prefix} claims to preempt pod (UID: &{{{uid}}}) on node: {node}, "
                        "but the pod is not found on that node")
            chosen.append(match)
        pdb = field(entry, "NumPDBViolations")
        kept[str(node)] = (tuple(chosen), pdb if isinstance(pdb, int) else 0)
    return kept
