"""Registry messages, Redfish error replies, and request bodies read once at the boundary.

MessageIds are ``<Registry>.<major>.<minor>.<Key>`` (DSP0266 section 9.7) from the DMTF registries the
simulator speaks: Base 1.22.1, Composition 1.1.3 and TaskEvent 1.0.5 (texts as the published registries
word them, so clients and operators see what a real service would send).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from webhook.errors import ImexWebhookError
from webhook.wire.text import clip

BASE = "Base.1.22"
COMPOSITION = "Composition.1.1"
TASK_EVENT = "TaskEvent.1.0"

# key -> (registry prefix, message, severity, resolution)
_REGISTRY: dict[str, tuple[str, str, str, str]] = {
    "Success": (BASE, "The request completed successfully.", "OK", "None."),
    "GeneralError": (BASE, "A general error has occurred.  See Resolution for information on how to resolve the "
                           "error, or @Message.ExtendedInfo if Resolution is not provided.", "Critical", "None."),
    "MalformedJSON": (BASE, "The request body submitted was malformed JSON and could not be parsed by the "
                            "receiving service.", "Critical",
                      "Ensure that the request body is valid JSON and resubmit the request."),
    "ActionParameterMissing": (BASE, "The action %1 requires the parameter %2 to be present in the request body.",
                               "Critical", "Supply the action with the required parameter in the request body when "
                                           "the request is resubmitted."),
    "ActionParameterUnknown": (BASE, "The action %1 was submitted with the invalid parameter %2.", "Warning",
                               "Correct the invalid action parameter and resubmit the request if the operation "
                               "failed."),
    "ActionParameterValueError": (BASE, "The value for the parameter %1 in the action %2 is invalid.", "Warning",
                                  "Correct the value for the parameter in the request body and resubmit the "
                                  "request if the operation failed."),
    "ActionNotSupported": (BASE, "The action %1 is not supported by the resource.", "Critical",
                           "Check the Actions property in the resource for the supported actions."),
    "PropertyNotWritable": (BASE, "The property %1 is a read-only property and cannot be assigned a value.",
                            "Warning", "Remove the property from the request body and resubmit the request if the "
                                       "operation failed."),
    "PropertyValueTypeError": (BASE, "The value '%1' for the property %2 is not a type that the property can "
                                     "accept.", "Warning",
                               "Correct the value for the property in the request body and resubmit the request if "
                               "the operation failed."),
    "ResourceNotFound": (BASE, "The requested resource of type %1 named '%2' was not found.", "Critical",
                         "Provide a valid resource identifier and resubmit the request."),
    "ResourceInUse": (BASE, "The change to the requested resource failed because the resource is in use or in "
                            "transition.", "Warning",
                      "Remove the condition and resubmit the request if the operation failed."),
    "ResourceExhaustion": (BASE, "The resource '%1' was unable to satisfy the request due to unavailability of "
                                 "resources.", "Critical",
                           "Ensure that the resources are available and resubmit the request."),
    "PreconditionFailed": (BASE, "The ETag supplied did not match the ETag required to change this resource.",
                           "Critical", "Try the operation again using the appropriate ETag."),
    "PreconditionRequired": (BASE, "A precondition header or annotation is required to change this resource.",
                             "Critical", "Try the operation again using an If-Match or If-None-Match header and "
                                         "appropriate ETag."),
    "AccessUnauthorized": (BASE, "Unauthorized.", "Critical", "Resubmit the request with valid credentials."),
    "NoValidSession": (BASE, "There is no valid session established with the implementation.", "Critical",
                       "Establish a session before attempting any operations."),
    "SessionLimitExceeded": (BASE, "The session establishment failed due to the number of simultaneous sessions "
                                   "exceeding the limit of the implementation.", "Critical",
                             "Reduce the number of other sessions before trying to establish the session or "
                             "increase the limit of simultaneous sessions, if supported."),
    "SessionTerminated": (BASE, "The session was successfully terminated.", "OK", "None."),
    "ServiceDisabled": (BASE, "The operation failed because the service at %1 is disabled and cannot accept "
                              "requests.", "Warning", "Enable the service and resubmit the request if the "
                                                      "operation failed."),
    "PropertyMissing": (BASE, "The property %1 is a required property and must be included in the request.",
                        "Warning", "Ensure that the property is in the request body and has a valid value and "
                                   "resubmit the request if the operation failed."),
    "PropertyUnknown": (BASE, "The property %1 is not in the list of valid properties for the resource.", "Warning",
                        "Remove the unknown property from the request body and resubmit the request if the "
                        "operation failed."),
    "PropertyValueOutOfRange": (BASE, "The value '%1' for the property %2 is not in the supported range of "
                                      "acceptable values.", "Warning",
                                "Correct the value for the property in the request body and resubmit the request "
                                "if the operation failed."),
    "OperationNotAllowed": (BASE, "The HTTP method is not allowed on this resource.", "Critical", "None."),
    "QueryNotSupported": (BASE, "Querying is not supported by the implementation.", "Warning",
                          "Remove the query parameters and resubmit the request if the operation failed."),
    "InternalError": (BASE, "The request failed due to an internal service error.  The service is still "
                            "operational.", "Critical",
                      "Resubmit the request.  If the problem persists, consider resetting the service."),
    "OperationFailed": (BASE, "An error occurred internal to the service as part of the overall request.  Partial "
                              "results may have been returned.", "Warning",
                        "Resubmit the request.  If the problem persists, consider resetting the service or "
                        "provider."),
    "ServiceTemporarilyUnavailable": (BASE, "The service is temporarily unavailable.  Retry in %1 seconds.",
                                      "Critical", "Wait for the indicated retry duration and retry the operation."),
    "ResourceBlockInUse": (COMPOSITION, "Resource block '%1' cannot be part of any new compositions.", "Warning",
                           "Remove the resource block from the request and resubmit the request."),
    "ResourceBlockInvalid": (COMPOSITION, "Resource block '%1' is not valid.", "Critical",
                             "Remove the resource block and resubmit the request."),
    "ResourceBlockNotFound": (COMPOSITION, "Resource block '%1' was not found.", "Critical",
                              "Remove the resource block and resubmit the request."),
    "IncompatibleZone": (COMPOSITION, "The requested resource blocks span multiple resource zones.", "Critical",
                         "Request resource blocks from the same resource zone."),
    "ResourceBlockCompositionStateChanged": (COMPOSITION, "The composition status of the resource block '%1' has "
                                                          "changed.", "OK", "None."),
    "TaskStarted": (TASK_EVENT, "The task with Id '%1' has started.", "OK", "None."),
    "TaskCompletedOK": (TASK_EVENT, "The task with Id '%1' has completed.", "OK", "None."),
    "TaskAborted": (TASK_EVENT, "The task with Id '%1' has completed with errors.", "Critical", "None."),
    "TaskCancelled": (TASK_EVENT, "Work on the task with Id '%1' was halted prior to completion due to an explicit "
                                  "request.", "Warning", "None."),
}


def message(key: str, *args: str, legacy_severity: bool = True) -> dict[str, Any]:
    """One Message object. ``Severity`` is deprecated but many clients still read it, so error bodies carry
    both; resources the validator checks (Task.Messages) leave it out (``legacy_severity=False``)."""
    prefix, text, severity, resolution = _REGISTRY[key]
    args = tuple(clip(arg, MAX_ARG) for arg in args)  # echoed request data must not make a reply huge
    for i, arg in enumerate(args, start=1):
        text = text.replace(f"%{i}", arg)
    out: dict[str, Any] = {
        "@odata.type": "#Message.v1_3_0.Message",
        "MessageId": f"{prefix}.{key}",
        "Message": text,
        "MessageArgs": list(args),
        "MessageSeverity": severity,
        "Resolution": resolution,
    }
    if legacy_severity:
        out["Severity"] = severity
    return out


@dataclass
class Reply:
    """An HTTP answer computed by the model, before the view turns it into a Flask response."""

    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


class RedfishError(ImexWebhookError):
    """A refused request: the HTTP status and the registry messages that say why."""

    def __init__(self, status: int, *messages: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__("; ".join(m["Message"] for m in messages))
        self.status = status
        self.messages = list(messages)
        self.headers = headers or {}

    def reply(self) -> Reply:
        return Reply(self.status, error_body(self.messages), dict(self.headers))


def error_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    # DSP0266 9.7: the top-level code is Base.GeneralError; the detail is in @Message.ExtendedInfo.
    first = messages[0]["Message"] if messages else "A general error has occurred."
    return {"error": {"code": f"{BASE}.GeneralError", "message": first, "@Message.ExtendedInfo": messages}}


def not_found(kind: str, name: str) -> RedfishError:
    return RedfishError(404, message("ResourceNotFound", kind, name))


MAX_ARG = 200  # characters of request data echoed in a MessageArg
MAX_DEPTH = 32  # nesting of arrays and objects in a request body; Redfish bodies need a handful


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _acceptable(value: Any) -> bool:
    """No deeper than MAX_DEPTH and no non-finite number (1e999 parses as inf); walked without recursion,
    because the body may be arbitrarily deep."""
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level >= MAX_DEPTH:
                return False
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
        elif isinstance(item, float) and not math.isfinite(item):
            return False
    return True


def parse_body(raw: bytes) -> Any:
    """A request body as JSON: None when empty; RedfishError 400 MalformedJSON for anything that is not
    strict JSON (NaN and Infinity included), nests deeper than MAX_DEPTH or holds an infinite number."""
    if not raw.strip():
        return None
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # RecursionError: thousands of nested brackets
        raise RedfishError(400, message("MalformedJSON")) from exc
    if not _acceptable(value):
        raise RedfishError(400, message("MalformedJSON"))
    return value
