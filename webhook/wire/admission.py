"""AdmissionReview ``admission.k8s.io/v1``: the wire types, the envelope's parser and the reply's encoder.

Mirrors ``k8s.io/api/admission/v1/types.go`` (kubernetes/kubernetes ``staging/src/k8s.io/api/admission/v1``):
keys are the Go json tags (camelCase). Fields tagged ``omitempty`` upstream are ``NotRequired`` here; the
ones without it (``uid``, ``kind``, ``resource``, ``operation``, ``userInfo``, ``allowed``) are required.
What the apiserver sends and expects (docs/ADMISSION.md):

- ``request.uid`` identifies one apiserver -> webhook round trip and must be echoed in ``response.uid``;
- ``request.name`` is empty and ``object.metadata`` has no uid for ``generateName`` pods on CREATE;
- ``request.dryRun`` is always set by a v1 apiserver; ``oldObject`` is ``null`` on CREATE;
- ``response.patch`` is an RFC 6902 JSON Patch, serialised, then base64-encoded; ``patchType`` is then
  ``"JSONPatch"`` (the only type), and one without the other is an error;
- ``response.status`` (a ``metav1.Status``) is read only when ``allowed`` is false;
- ``response.warnings`` are shown to the user by kubectl; keep each under 120 characters.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from webhook.errors import WireError
from webhook.wire.fields import NAME_MAX, str_at
from webhook.wire.text import shown

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

# ``Operation``: what the apiserver is doing to the object (may differ from the HTTP verb).
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: tuple[Operation, ...] = ("CREATE", "UPDATE", "DELETE", "CONNECT")

# ``PatchType``: the only patch type admission v1 knows.
PatchType = Literal["JSONPatch"]

# A Kubernetes object as it is on the wire (``runtime.RawExtension``).
RawObject = dict[str, Any]


class GroupVersionKind(TypedDict):
    """``metav1.GroupVersionKind``: ``{"group": "", "version": "v1", "kind": "Pod"}`` for pods."""

    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    """``metav1.GroupVersionResource``: ``{"group": "", "version": "v1", "resource": "pods"}`` for pods."""

    group: str
    version: str
    resource: str


class UserInfo(TypedDict, total=False):
    """``authenticationv1.UserInfo``: who made the request (a controller's service account for Job pods)."""

    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class AdmissionRequest(TypedDict):
    """``AdmissionRequest``: the object under admission and what is being done to it."""

    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: NotRequired[str]
    requestKind: NotRequired[GroupVersionKind]
    requestResource: NotRequired[GroupVersionResource]
    requestSubResource: NotRequired[str]
    name: NotRequired[str]
    namespace: NotRequired[str]
    operation: Operation
    userInfo: UserInfo
    object: NotRequired[RawObject | None]
    oldObject: NotRequired[RawObject | None]
    dryRun: NotRequired[bool | None]
    options: NotRequired[RawObject | None]


class StatusCause(TypedDict, total=False):
    """``metav1.StatusCause``."""

    reason: str
    message: str
    field: str


class StatusDetails(TypedDict, total=False):
    """``metav1.StatusDetails``."""

    name: str
    group: str
    kind: str
    uid: str
    causes: list[StatusCause]
    retryAfterSeconds: int


class Status(TypedDict, total=False):
    """``metav1.Status``: why a request was denied; ``message`` is what kubectl prints to the user."""

    status: Literal["Success", "Failure"]
    message: str
    reason: str
    details: StatusDetails
    code: int


class AdmissionResponse(TypedDict):
    """``AdmissionResponse``: the verdict, and for a mutating webhook the patch to apply."""

    uid: str
    allowed: bool
    status: NotRequired[Status]
    patch: NotRequired[str]  # []byte in Go: base64 of the serialised JSON Patch
    patchType: NotRequired[PatchType]
    auditAnnotations: NotRequired[dict[str, str]]
    warnings: NotRequired[list[str]]


class AdmissionReview(TypedDict):
    """``AdmissionReview``: the envelope of both directions; the reply carries only ``response``."""

    apiVersion: str
    kind: str
    request: NotRequired[AdmissionRequest]
    response: NotRequired[AdmissionResponse]


# RFC 6902 operation; "from" is a Python keyword, hence the functional form.
JSONPatchOp = TypedDict(
    "JSONPatchOp",
    {
        "op": Literal["add", "remove", "replace", "move", "copy", "test"],
        "path": str,
        "value": NotRequired[Any],
        "from": NotRequired[str],
    },
)


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


def _str(obj: Mapping[str, Any], key: str, required: bool = False, where: str = "request") -> str:
    # The uid is echoed in the reply; none of these is longer in Kubernetes than a name.
    return str_at(obj, key, where, required, limit=NAME_MAX)


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


def reply(uid: str, allowed: bool, patch: bytes = b"", status: Status | None = None,
          warnings: Sequence[str] = ()) -> AdmissionReview:
    """The reply envelope: ``uid`` echoed; ``patch`` (a serialised JSON Patch) base64-encoded with its
    ``patchType``, only when there is one; ``status`` and ``warnings`` only when given."""
    response: AdmissionResponse = {"uid": uid, "allowed": allowed}
    if patch:
        response["patch"] = base64.b64encode(patch).decode("ascii")
        response["patchType"] = "JSONPatch"
    if status is not None:
        response["status"] = status
    if warnings:
        response["warnings"] = list(warnings)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def decode_patch(response: Mapping[str, Any]) -> list[Any]:
    """The JSON Patch of a reply, decoded (for tests and ``imex-webhook`` tools); [] when there is none."""
    raw = response.get("patch")
    if not raw:
        return []
    ops = json.loads(base64.b64decode(raw))
    if not isinstance(ops, list):
        raise WireError("response.patch", "expected a JSON Patch (a list of operations)")
    return ops
