"""POST /filter, /prioritize, /bind, /preempt: the kube-scheduler extender protocol, translated to and from
the engine.

Keys are the Go field names (see webhook.wire.extender). Two error channels: a malformed request gets a
400 JSON body naming the field; anything we cannot serve, including our own bugs, gets a 200 reply with
``Error`` set, because kube-scheduler drops the body of every non-200 reply and the reason would be lost.
/preempt's reply has no ``Error``: our own failure there is a 200 that accepts no candidate, so nothing
is evicted (see webhook.domain.decisions.preemption).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from flask import Blueprint, Response

from webhook.errors import DecisionError, WireError
from webhook.http.common import Services, answered, json_body, services
from webhook.http.extender_args import ParsedArgs, ParsedPreemption, parse_args, parse_preemption_args
from webhook.wire.extender import (
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionResult,
    HostPriority,
    MetaVictims,
    NodeList,
)
from webhook.wire.fields import NAME_MAX
from webhook.wire.text import shown

log = logging.getLogger(__name__)
blueprint = Blueprint("extender", __name__)


def _object(doc: Any) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise WireError("", f"request body must be a JSON object, got {type(doc).__name__}")
    return doc


def _view(verb: str, answer: Callable[[Any, Services], bytes]) -> Callable[[], Response]:
    """The Flask view of a verb whose reply ``answer(body, services)`` builds; ``webhook.http.fast`` calls
    the same ``answer`` without Flask."""

    def view() -> Response:
        svc = services()
        status, body = answered(verb, svc.metrics, lambda: answer(json_body(), svc))
        return Response(body, status=status, mimetype="application/json")

    view.__name__ = f"{verb}_view"
    return view


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


def filter_answer(doc: Any, svc: Services) -> bytes:
    args = parse_args(_object(doc), svc)
    try:
        if svc.embedded is not None:
            svc.embedded.note_pod(args.pod)
        result = svc.engine.filter(args.pod, args.candidates, args.node_view)
    except DecisionError as exc:
        # Not a bug: the group's reservation could not be stored (API server failing, every domain chosen
        # taken by other replicas first). The Error becomes the pod's FailedScheduling message and the
        # scheduler retries the pod after its backoff.
        svc.metrics.decisions.labels("filter", "error", "reservation").inc()
        return orjson.dumps(_filter_reply(args, [], {}, {}, str(exc)))
    except Exception as exc:  # our own fault: report it where the scheduler shows it
        return _internal_error(svc, "filter", exc, _filter_reply(args, [], {}, {}, _error_text(exc)))
    svc.metrics.decisions.labels("filter", result.outcome, result.reason_class).inc()
    return orjson.dumps(_filter_reply(args, list(result.passed), result.failed, result.unresolvable))


def prioritize_answer(doc: Any, svc: Services) -> bytes:
    args = parse_args(_object(doc), svc)
    try:
        scores = svc.engine.scores(args.pod, args.candidates, args.node_view)
    except Exception as exc:
        # The scheduler ignores prioritize errors and adds nothing; neutral scores say the same in-band.
        neutral: list[HostPriority] = [{"Host": n, "Score": 0} for n in args.candidates]
        return _internal_error(svc, "prioritize", exc, neutral)
    return scores_json(args.candidates, scores)


_ZERO = '","Score":0},{"Host":"'


def scores_json(candidates: Sequence[str], scores: Mapping[str, int]) -> bytes:
    """``[{"Host": name, "Score": scores.get(name, 0)}, ...]`` for every candidate, exactly as orjson writes
    that list, without building a dict per candidate (most score 0: they are outside the group's domain).

    When orjson writes the names with no backslash, none of them needs escaping, so runs of candidates
    that score 0 are joined into the objects as strings, and only the scored ones are encoded one by one.
    Kubernetes node names always qualify; other names take the plain way."""
    if not candidates:
        return b"[]"
    if b"\\" in orjson.dumps(candidates):
        return orjson.dumps([{"Host": name, "Score": scores.get(name, 0)} for name in candidates])
    parts: list[bytes] = []
    start = 0
    flags = list(map(scores.__contains__, candidates)) if scores else []
    while True:
        try:
            at = flags.index(True, start)
        except ValueError:
            at = len(candidates)
        if at > start:
            parts.append(('{"Host":"' + _ZERO.join(candidates[start:at]) + '","Score":0}').encode())
        if at == len(candidates):
            return b"[" + b",".join(parts) + b"]"
        name = candidates[at]
        parts.append(orjson.dumps({"Host": name, "Score": scores[name]}))
        start = at + 1


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


def bind_answer(doc: Any, svc: Services) -> bytes:
    name, namespace, uid, node = _binding_args(_object(doc))
    try:
        outcome = svc.engine.bind(namespace, name, uid, node)
    except DecisionError as exc:
        svc.metrics.decisions.labels("bind", "error", "refused").inc()
        failed: ExtenderBindingResult = {"Error": str(exc)}
        return orjson.dumps(failed)
    except Exception as exc:
        return _internal_error(svc, "bind", exc, {"Error": _error_text(exc)})
    svc.metrics.decisions.labels("bind", outcome.outcome, "attach" if outcome.attached else "local").inc()
    ok: ExtenderBindingResult = {"Error": ""}
    return orjson.dumps(ok)


def _preemption_reply(args: ParsedPreemption | None, kept: tuple[str, ...]) -> ExtenderPreemptionResult:
    # Always the meta form, whatever the request's mode: kube-scheduler maps the UIDs back to its pods.
    out: dict[str, MetaVictims] = {}
    if args is not None:
        for node in kept:
            out[node] = {"Pods": [{"UID": uid} for uid in args.candidates[node]],
                         "NumPDBViolations": args.pdb_violations[node]}
    return {"NodeNameToMetaVictims": out}


def preempt_answer(doc: Any, svc: Services) -> bytes:
    args = parse_preemption_args(_object(doc))
    try:
        if svc.embedded is not None:
            svc.embedded.note_pod(args.pod)
        result = svc.engine.preempt(args.pod, args.candidates, args.victims)
    except Exception as exc:
        # No Error field in the reply: accepting no candidate evicts nothing, whatever `ignorable` says.
        return _internal_error(svc, "preempt", exc, _preemption_reply(None, ()))
    svc.metrics.decisions.labels("preempt", result.outcome, result.reason_class).inc()
    return orjson.dumps(_preemption_reply(args, result.kept))


def _error_text(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return f"imex-webhook internal error ({type(exc).__name__}): {text[:256]}"


def _internal_error(svc: Services, verb: str, exc: Exception, reply: Any) -> bytes:
    log.exception("%s failed", verb)
    svc.metrics.internal_errors.labels(verb).inc()
    return orjson.dumps(reply)


# Verb -> the reply of one call: served by Flask here and by webhook.http.fast without it.
ANSWERS: dict[str, Callable[[Any, Services], bytes]] = {
    "filter": filter_answer, "prioritize": prioritize_answer, "bind": bind_answer, "preempt": preempt_answer,
}
for _verb, _answer in ANSWERS.items():
    blueprint.add_url_rule(f"/{_verb}", endpoint=f"{_verb}_view", view_func=_view(_verb, _answer), methods=["POST"])
