"""kube-apiserver's rules for events.k8s.io/v1 Events, made part of the fake API server (tests/kubefake.py).

The fake stores whatever it is sent; ``enforce`` adds an interceptor that answers 422 Invalid, as
kube-apiserver does, to an Event create or patch that breaks the rules of its events validation
(restated here from Kubernetes' pkg/apis/core/validation, events.go, for events.k8s.io/v1 and newer):

- create: ``metadata.name`` a DNS subdomain, the namespace a DNS label; ``eventTime`` set; ``type`` Normal
  or Warning; the deprecated fields unset; ``reportingController`` set and a qualified name;
  ``reportingInstance``, ``action`` and ``reason`` set and at most 128 characters; ``note`` at most
  1,024 bytes; a regarding object without namespace only in ``default`` or ``kube-system``; a series with
  ``count`` of at least 2 and a ``lastObservedTime``;
- update: the same series rule when the series changes, and every other field immutable.

``shape_problems`` checks a stored Event against rules we did not write: the OpenAPI schema of
Kubernetes 1.34 (kubernetes-validate, unknown fields refused) and the official client's model.
"""

from __future__ import annotations

import re
from typing import Any

import kmock
import kubernetes_validate
import pydantic
from kubernetes.client.models.events_v1_event import EventsV1Event

from tests.kubefake import KINDS, KubeFake
from webhook.domain.admission.patches import merge_patch

Obj = dict[str, Any]
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
IMMUTABLE = ("regarding", "reason", "note", "type", "eventTime", "action", "related", "reportingController",
             "reportingInstance", "deprecatedSource", "deprecatedFirstTimestamp", "deprecatedLastTimestamp",
             "deprecatedCount")


def _qualified(name: str) -> bool:
    prefix, _, local = name.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(local) <= 63 and bool(_QUALIFIED_NAME.fullmatch(local))


def _series_problems(event: Obj) -> list[str]:
    series = event.get("series")
    if series is None:
        return []
    out = []
    if not isinstance(series.get("count"), int) or series["count"] < 2:
        out.append("series.count: Invalid value: should be at least 2")
    if not series.get("lastObservedTime"):
        out.append("series.lastObservedTime: Required value")
    return out


def create_problems(event: Obj) -> list[str]:
    out = []
    meta = event.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    if not name or len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        out.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain")
    if not _LABEL.fullmatch(namespace) or len(namespace) > 63:
        out.append(f"metadata.namespace: Invalid value: {namespace!r}")
    if not event.get("eventTime"):
        out.append("eventTime: Required value")
    if event.get("type") not in ("Normal", "Warning"):
        out.append(f"type: Invalid value: has invalid value: {event.get('type')}")
    for deprecated in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount", "deprecatedSource"):
        if event.get(deprecated):
            out.append(f"{deprecated}: Invalid value: needs to be unset")
    regarding = event.get("regarding") or {}
    if not regarding.get("namespace") and namespace not in ("default", "kube-system"):
        out.append("regarding.namespace: Invalid value: does not match event.namespace")
    controller = str(event.get("reportingController") or "")
    if not controller:
        out.append("reportingController: Required value")
    elif not _qualified(controller):
        out.append(f"reportingController: Invalid value: {controller!r}: not a qualified name")
    for field in ("reportingInstance", "action", "reason"):
        value = str(event.get(field) or "")
        if not value:
            out.append(f"{field}: Required value")
        elif len(value) > 128:
            out.append(f"{field}: Invalid value: can have at most 128 characters")
    if len(str(event.get("note") or "").encode("utf-8")) > 1024:  # Go's len(): bytes
        out.append("note: Invalid value: can have at most 1024 characters")
    return out + _series_problems(event)


def update_problems(old: Obj, new: Obj) -> list[str]:
    out = [f"{field}: Invalid value: field is immutable" for field in IMMUTABLE if old.get(field) != new.get(field)]
    if old.get("series") != new.get("series"):
        out += _series_problems(new)
    return out


def enforce(fake: KubeFake) -> list[str]:
    """Refuse Events that break the rules; returns the list every refusal is appended to."""
    refused: list[str] = []
    kind = KINDS["events"]
    emulator = fake.emulator

    async def intercept(request: kmock.Request) -> Any:
        if request.resource != kind.resource or request.method.upper() not in ("POST", "PATCH", "PUT"):
            return None
        body = request.data if isinstance(request.data, dict) else {}
        if request.method.upper() == "POST":
            problems = create_problems(body)
        else:
            current = emulator.current(kind, request.namespace, request.name or "")
            if current is None:
                return None  # the fake answers 404 itself
            problems = update_problems(current, merge_patch(current, body) if request.method.upper() == "PATCH"
                                       else body)
        if not problems:
            return None
        refused.extend(problems)
        return await emulator._render_error(kmock.KubernetesError(
            status=422, reason="Invalid", details={}, message=f'Event.events.k8s.io is invalid: {"; ".join(problems)}'))

    fake._call(emulator.interceptors.append, intercept)
    return refused


def shape_problems(event: Obj) -> list[str]:
    """What the 1.34 OpenAPI schema (strict) and the official client's model say about a stored Event."""
    out = []
    try:
        kubernetes_validate.validate(event, "1.34.0", strict=True)
    except kubernetes_validate.ValidationError as exc:
        out.append(f"schema: {exc.message}")
    try:
        EventsV1Event.model_validate(event)
    except pydantic.ValidationError as exc:
        out.append(f"client model: {exc}")
    return out
