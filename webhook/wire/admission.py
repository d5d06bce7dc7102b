"""AdmissionReview ``admission.k8s.io/v1`` wire types.

Mirrors ``k8s.io/api/admission/v1/types.go`` (kubernetes/kubernetes ``staging/src/k8s.io/api/admission/v1``):
keys are the Go json tags (camelCase). Fields tagged ``omitempty`` upstream are ``NotRequired`` here; the
ones without it (``uid``, ``kind``, ``resource``, ``operation``, ``userInfo``, ``allowed``) are required.
What the apiserver sends and expects (reference/extender-webhook.md section 2):

- ``request.uid`` identifies one apiserver -> webhook round trip and must be echoed in ``response.uid``;
- ``request.name`` is empty and ``object.metadata`` has no uid for ``generateName`` pods on CREATE;
- ``request.dryRun`` is always set by a v1 apiserver; ``oldObject`` is ``null`` on CREATE;
- ``response.patch`` is an RFC 6902 JSON Patch, serialised, then base64-encoded; ``patchType`` is then
  ``"JSONPatch"`` (the only type), and one without the other is an error;
- ``response.status`` (a ``metav1.Status``) is read only when ``allowed`` is false;
- ``response.warnings`` are shown to the user by kubectl; keep each under 120 characters.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

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
