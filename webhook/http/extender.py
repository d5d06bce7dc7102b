"""POST /filter, /prioritize, /bind, /preempt: the kube-scheduler extender protocol, translated to and from
the engine.

Keys are the Go field names (see webhook.wire.extender). Two error channels: a malformed request gets a
400 JSON body naming the field; anything we cannot serve, including our own bugs, gets a 200 reply with
``Error`` set, because kube-scheduler drops the body of every non-200 reply and the reason would be lost.
/preempt's reply has no ``Error``: our own failure there is a 200 that accepts no candidate, so nothing
is evicted (see webhook.domain.preemption).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Response, current_app

from webhook.domain import parsing
from webhook.domain.errors import DecisionError, WireError
from webhook.domain.model import Node, Pod
from webhook.http.common import json_body, json_response, services, timed
from webhook.wire.extender import (
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionResult,
    HostPriority,
    KubeObject,
    MetaVictims,
    NodeList,
)

log = logging.getLogger(__name__)
blueprint = Blueprint("extender", __name__)


def _body() -> Mapping[str, Any]:
    body = json_body()
    if not isinstance(body, dict):
        raise WireError("", f"request body must be a JSON object, got {type(body).__name__}")
    return body


class ParsedArgs:
    """ExtenderArgs after parsing: the pod, the candidate names, and the nodes when sent in full."""

    __slots__ = ("candidates", "node_objects", "node_view", "pod")

    def __init__(self, pod: Pod, candidates: list[str], node_view: dict[str, Node] | None,
                 node_objects: dict[str, KubeObject] | None) -> None:
        self.pod = pod
        self.candidates = candidates
        self.node_view = node_view
        self.node_objects = node_objects


def parse_args(body: Mapping[str, Any]) -> ParsedArgs:
    if "Pod" not in body or body["Pod"] is None:
        raise WireError("Pod", "missing: ExtenderArgs must carry the pod being scheduled")
    pod = parsing.pod(body["Pod"], "Pod")
    names = body.get("NodeNames")
    nodes = body.get("Nodes")
    if names is not None:
        # set(map(type, ...)) is about twice as fast as all(isinstance(...)) on 5,000 names.
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise WireError("NodeNames", "expected a list of node names (strings)")
        return ParsedArgs(pod, names, None, None)
    if nodes is None:
        raise WireError("NodeNames", "both NodeNames and Nodes are null; one of them must list the candidates")
    if not isinstance(nodes, dict) or not isinstance(nodes.get("items"), list):
        raise WireError("Nodes", "expected a NodeList object with an items list")
    policy = current_app.extensions["imex"].engine.policy
    view: dict[str, Node] = {}
    objects: dict[str, KubeObject] = {}
    candidates = []
    for i, item in enumerate(nodes["items"]):
        node = parsing.node(item, policy.domain_labels, f"Nodes.items[{i}]")
        view[node.name] = node
        objects[node.name] = item
        candidates.append(node.name)
    return ParsedArgs(pod, candidates, view, objects)


def _filter_reply(args: ParsedArgs | None, passed: list[str], failed: dict[str, str],
                  unresolvable: dict[str, str], error: str = "") -> ExtenderFilterResult:
    node_list: NodeList | None = None
    names: list[str] | None = None
    if not error and args is not None:
        if args.node_objects is not None:
            node_list = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                         "items": [args.node_objects[n] for n in passed]}
        else:
            names = passed
    return {"Nodes": node_list, "NodeNames": names, "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable, "Error": error}


@blueprint.post("/filter")
@timed("filter")
def filter_view() -> Response:
    args = parse_args(_body())
    svc = services()
    try:
        svc.backend.note_pod(args.pod)
        result = svc.engine.filter(args.pod, args.candidates, args.node_view)
    except DecisionError as exc:
        # Not a bug: the group's reservation could not be stored (API server failing, every domain chosen
        # taken by other replicas first). The Error becomes the pod's FailedScheduling message and the
        # scheduler retries the pod after its backoff.
        svc.metrics.decisions.labels("filter", "error", "reservation").inc()
        return json_response(_filter_reply(args, [], {}, {}, str(exc)))
    except Exception as exc:  # our own fault: report it where the scheduler shows it
        return _internal_error("filter", exc, _filter_reply(args, [], {}, {}, _error_text(exc)))
    svc.metrics.decisions.labels("filter", result.outcome, result.reason_class).inc()
    return json_response(_filter_reply(args, list(result.passed), result.failed, result.unresolvable))


@blueprint.post("/prioritize")
@timed("prioritize")
def prioritize_view() -> Response:
    args = parse_args(_body())
    svc = services()
    try:
        scores = svc.engine.prioritize(args.pod, args.candidates, args.node_view)
    except Exception as exc:
        # The scheduler ignores prioritize errors and adds nothing; neutral scores say the same in-band.
        neutral: list[HostPriority] = [{"Host": n, "Score": 0} for n in args.candidates]
        return _internal_error("prioritize", exc, neutral)
    reply: list[HostPriority] = [{"Host": host, "Score": score} for host, score in scores]
    return json_response(reply)


def _binding_args(body: Mapping[str, Any]) -> tuple[str, str, str, str]:
    values = []
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = body.get(key)
        if not isinstance(value, str) or (key != "PodUID" and not value):
            raise WireError(key, "missing or not a string: ExtenderBindingArgs needs PodName, PodNamespace, "
                            "PodUID and Node")
        values.append(value)
    return values[0], values[1], values[2], values[3]


@blueprint.post("/bind")
@timed("bind")
def bind_view() -> Response:
    name, namespace, uid, node = _binding_args(_body())
    svc = services()
    try:
        outcome = svc.engine.bind(namespace, name, uid, node)
    except DecisionError as exc:
        svc.metrics.decisions.labels("bind", "error", "refused").inc()
        failed: ExtenderBindingResult = {"Error": str(exc)}
        return json_response(failed)
    except Exception as exc:
        return _internal_error("bind", exc, {"Error": _error_text(exc)})
    svc.metrics.decisions.labels("bind", outcome.outcome, "attach" if outcome.attached else "local").inc()
    ok: ExtenderBindingResult = {"Error": ""}
    return json_response(ok)


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
    return f"{key}.{node if len(node) <= 253 else node[:253] + '...'}"


def parse_preemption_args(body: Mapping[str, Any]) -> ParsedPreemption:
    if body.get("Pod") is None:
        raise WireError("Pod", "missing: ExtenderPreemptionArgs must carry the pod that preempts")
    pod = parsing.pod(body["Pod"], "Pod")
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
            raise WireError(f"{path}.NumPDBViolations", f"expected a non-negative 64-bit integer, got {count!r:.40}")
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
                if not isinstance(uid, str) or not uid:
                    raise WireError(f"{ipath}.UID", "expected the victim's pod UID (a non-empty string)")
            else:
                victim = parsing.pod(item, ipath)
                uid = victim.uid
                if not uid:
                    raise WireError(f"{ipath}.metadata.uid", "missing: the reply names victims by pod UID")
                victims[uid] = victim
            uids.append(uid)
        candidates[node] = uids
        violations[node] = count
    return ParsedPreemption(pod, candidates, violations, victims)


def _preemption_reply(args: ParsedPreemption | None, kept: tuple[str, ...]) -> ExtenderPreemptionResult:
    # Always the meta form, whatever the request's mode: kube-scheduler maps the UIDs back to its pods.
    out: dict[str, MetaVictims] = {}
    if args is not None:
        for node in kept:
            out[node] = {"Pods": [{"UID": uid} for uid in args.candidates[node]],
                         "NumPDBViolations": args.pdb_violations[node]}
    return {"NodeNameToMetaVictims": out}


@blueprint.post("/preempt")
@timed("preempt")
def preempt_view() -> Response:
    args = parse_preemption_args(_body())
    svc = services()
    try:
        svc.backend.note_pod(args.pod)
        result = svc.engine.preempt(args.pod, args.candidates, args.victims)
    except Exception as exc:
        # No Error field in the reply: accepting no candidate evicts nothing, whatever `ignorable` says.
        return _internal_error("preempt", exc, _preemption_reply(None, ()))
    svc.metrics.decisions.labels("preempt", result.outcome, result.reason_class).inc()
    return json_response(_preemption_reply(args, result.kept))


def _error_text(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return f"imex-webhook internal error ({type(exc).__name__}): {text[:256]}"


def _internal_error(verb: str, exc: Exception, reply: Any) -> Response:
    log.exception("%s failed", verb)
    services().metrics.internal_errors.labels(verb).inc()
    return json_response(reply)
