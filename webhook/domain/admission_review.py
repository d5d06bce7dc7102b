"""AdmissionReview v1 in and out: parse and check the envelope, dispatch to ``mutating``, build the reply.

Two error channels (reference/style-anchors.md lesson 4):

- a malformed review (wrong ``apiVersion``/``kind``, no ``request``, no ``uid``, fields of the wrong
  type) raises ``WireError`` naming the field; the HTTP layer answers 400;
- a pod we refuse is a normal reply: ``allowed: false`` with a ``status`` whose ``message`` says what
  to fix; a pod we fail on ourselves (``internal_error``) is denied too, with a short message and code
  500, when it may belong to a group: admitted unmodified it would go to default-scheduler and be split
  across domains. A pod that cannot belong to a group (no claims, no group annotation) is admitted.

Only Pod CREATE (no subresource) is looked at; every other review is allowed unchanged.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.domain import mutating
from webhook.domain.limits import NAME_MAX, shown
from webhook.domain.model import Catalog, Node
from webhook.domain.mutating import MutationResult
from webhook.domain.policy import Policy
from webhook.errors import WireError
from webhook.wire.admission import API_VERSION, KIND, AdmissionResponse, AdmissionReview

DENY_CODE = 400
DENY_REASON = "BadRequest"
NOT_POD_CREATE = MutationResult(True, reason="not-pod-create")


@dataclass(frozen=True, slots=True)
class Review:
    """The parts of an ``AdmissionRequest`` the webhook uses."""

    uid: str
    operation: str
    resource_group: str
    resource: str
    sub_resource: str
    namespace: str
    name: str
    dry_run: bool
    object: Mapping[str, Any] | None

    @property
    def is_pod_create(self) -> bool:
        return (self.operation == "CREATE" and self.resource_group == "" and self.resource == "pods"
                and not self.sub_resource)

    @property
    def pod_ref(self) -> str:
        """``namespace/name`` for logs; ``namespace/<generateName>*`` before the name is generated."""
        name = self.name
        if not name and self.object is not None:
            meta = self.object.get("metadata")
            if isinstance(meta, Mapping):
                name = str(meta.get("name") or "") or (str(meta.get("generateName") or "") + "*")
        return f"{self.namespace}/{name}"


def _str(request: Mapping[str, Any], key: str, required: bool = False, where: str = "request") -> str:
    value = request.get(key)
    if value is None or (required and value == ""):
        if required:
            raise WireError(f"{where}.{key}", "missing")
        return ""
    if not isinstance(value, str):
        raise WireError(f"{where}.{key}", f"expected a string, got {type(value).__name__}")
    if len(value) > NAME_MAX:  # the uid is echoed in the reply; none of these is longer in Kubernetes
        raise WireError(f"{where}.{key}", f"{shown(value)} is longer than {NAME_MAX} characters")
    return value


def parse(body: Any) -> Review:
    """Check the envelope of an ``admission.k8s.io/v1`` AdmissionReview and pick out the request."""
    if not isinstance(body, Mapping):
        raise WireError("", f"expected an AdmissionReview object, got {type(body).__name__}")
    if body.get("apiVersion") != API_VERSION:
        raise WireError("apiVersion", f"expected {API_VERSION!r}, got {shown(body.get('apiVersion'))}")
    if body.get("kind") != KIND:
        raise WireError("kind", f"expected {KIND!r}, got {shown(body.get('kind'))}")
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise WireError("request", "missing: an AdmissionReview sent to a webhook carries a request")
    resource = request.get("resource")
    if not isinstance(resource, Mapping):
        raise WireError("request.resource", "missing or not an object")
    obj = request.get("object")
    if obj is not None and not isinstance(obj, Mapping):
        raise WireError("request.object", f"expected an object, got {type(obj).__name__}")
    dry_run = request.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise WireError("request.dryRun", f"expected a boolean, got {type(dry_run).__name__}")
    return Review(
        uid=_str(request, "uid", required=True),
        operation=_str(request, "operation", required=True),
        resource_group=_str(resource, "group", where="request.resource"),
        resource=_str(resource, "resource", where="request.resource"),
        sub_resource=_str(request, "subResource"),
        namespace=_str(request, "namespace"),
        name=_str(request, "name"),
        dry_run=bool(dry_run),
        object=obj,
    )


def admit(review: Review, catalog: Catalog, nodes: Mapping[str, Node], policy: Policy) -> MutationResult:
    """The verdict on one review; ``dryRun`` changes nothing, since admission has no side effects."""
    if not review.is_pod_create:
        return NOT_POD_CREATE
    if review.object is None:
        raise WireError("request.object", "missing: a Pod CREATE carries the pod")
    return mutating.mutate(review.object, review.namespace, catalog, nodes, policy)


INTERNAL_CODE = 500
INTERNAL_REASON = "InternalError"


def internal_error(review: Review, exc: BaseException) -> MutationResult:
    """Our own failure. Never admit a pod that may belong to a group unmodified (it would go to
    default-scheduler and be split across domains): deny it, briefly; the creator (a controller, or
    kubectl's user) retries. Anything else is admitted: we would have left it alone anyway."""
    if not review.is_pod_create or not mutating.might_be_group(review.object):
        return MutationResult(True, outcome="error", reason="internal")
    message = (f"imex-webhook failed on this pod ({type(exc).__name__}) and did not admit it, so that it cannot "
               "be placed outside its NVLink domain; retry, and report it if it persists")
    return MutationResult(False, (), (), message, outcome="error", reason="internal")


def respond(uid: str, result: MutationResult) -> AdmissionReview:
    """The reply: ``uid`` echoed; a base64 JSON Patch only when there is something to change."""
    response: AdmissionResponse = {"uid": uid, "allowed": result.allowed}
    if result.allowed and result.patch:
        response["patch"] = base64.b64encode(orjson.dumps(result.patch)).decode("ascii")
        response["patchType"] = "JSONPatch"
    if not result.allowed:
        internal = result.outcome == "error"
        response["status"] = {"status": "Failure", "code": INTERNAL_CODE if internal else DENY_CODE,
                              "reason": INTERNAL_REASON if internal else DENY_REASON, "message": result.message}
    if result.warnings:
        response["warnings"] = list(result.warnings)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def decode_patch(response: Mapping[str, Any]) -> list[Any]:
    """The JSON Patch of a reply, decoded (for tests and ``imex-webhook`` tools); [] when there is none."""
    raw = response.get("patch")
    if not raw:
        return []
    ops = orjson.loads(base64.b64decode(raw))
    if not isinstance(ops, list):
        raise WireError("response.patch", "expected a JSON Patch (a list of operations)")
    return ops
