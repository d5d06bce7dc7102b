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

import orjson
from flask import Blueprint, Response

from webhook.domain.errors import DecisionError, WireError
from webhook.domain.limits import NAME_MAX, shown
from webhook.http.common import json_body, json_response, services, timed
from webhook.http.extender_args import ParsedArgs, ParsedPreemption, parse_args, parse_preemption_args
from webhook.wire.extender import (
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionResult,
    HostPriority,
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
    return Response(scores_json(scores), mimetype="application/json")


def scores_json(scores: list[tuple[str, int]]) -> bytes:
    """``[{"Host": ..., "Score": ...}, ...]`` exactly as orjson writes the list of dicts, without building it.

    orjson encodes the pairs as ``[["a",0],["b",5]]``. When that holds no backslash (so no name has a quote or
    a control character) and no comma but the separators (no name has one), every ``",`` ends a name and
    every ``],["`` starts the next pair, and two replacements make the objects. Kubernetes node names always
    qualify; any other name takes the plain way."""
    if not scores:
        return b"[]"
    pairs = orjson.dumps(scores)
    if b"\\" in pairs or pairs.count(b",") != 2 * len(scores) - 1:
        return orjson.dumps([{"Host": host, "Score": score} for host, score in scores])
    return b'[{"Host":' + pairs[2:-2].replace(b'",', b'","Score":').replace(b'],["', b'},{"Host":"') + b"}]"


def _binding_args(body: Mapping[str, Any]) -> tuple[str, str, str, str]:
    values = []
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = body.get(key)
        if not isinstance(value, str) or (key != "PodUID" and not value):
            raise WireError(key, "missing or not a string: ExtenderBindingArgs needs PodName, PodNamespace, "
                            "PodUID and Node")
        if len(value) > NAME_MAX:
            raise WireError(key, f"{shown(value)} is longer than {NAME_MAX} characters, the most Kubernetes allows")
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
