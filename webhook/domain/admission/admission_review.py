"""The verdict on an AdmissionReview: dispatch to ``mutating``, and the reply for a verdict. The envelope
itself (parsing it, encoding the reply) is ``webhook.wire.admission``.

Two error channels:

- a malformed review (wrong ``apiVersion``/``kind``, no ``request``, no ``uid``, fields of the wrong
  type) raises ``WireError`` naming the field; the HTTP layer answers 400;
- a pod we refuse is a normal reply: ``allowed: false`` with a ``status`` whose ``message`` says what
  to fix; a pod we fail on ourselves (``internal_error``) is denied too, with a short message and code
  500, when it may belong to a group: admitted unmodified it would go to default-scheduler and be split
  across domains. A pod that cannot belong to a group (no claims, no group annotation) is admitted.

Only Pod CREATE (no subresource) is looked at; every other review is allowed unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from webhook.domain.admission import mutating
from webhook.domain.admission.mutating import MutationResult
from webhook.domain.model import Catalog, Node
from webhook.domain.policy import Policy
from webhook.errors import WireError
from webhook.wire.admission import AdmissionReview, Review, Status, reply

DENY_CODE = 400
DENY_REASON = "BadRequest"
INTERNAL_CODE = 500
INTERNAL_REASON = "InternalError"
NOT_POD_CREATE = MutationResult(True, reason="not-pod-create")


def admit(review: Review, catalog: Catalog, nodes: Mapping[str, Node], policy: Policy) -> MutationResult:
    """The verdict on one review; ``dryRun`` changes nothing, since admission has no side effects."""
    if not review.is_pod_create:
        return NOT_POD_CREATE
    if review.object is None:
        raise WireError("request.object", "missing: a Pod CREATE carries the pod")
    return mutating.mutate(review.object, review.namespace, catalog, nodes, policy)


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
    """The reply to a verdict: a JSON Patch only when the pod is admitted with changes, a ``status`` only
    when it is denied (code 500 when the denial is our own failure)."""
    status: Status | None = None
    if not result.allowed:
        internal = result.outcome == "error"
        status = {"status": "Failure", "code": INTERNAL_CODE if internal else DENY_CODE,
                  "reason": INTERNAL_REASON if internal else DENY_REASON, "message": result.message}
    patch = orjson.dumps(result.patch) if result.allowed and result.patch else b""
    return reply(uid, result.allowed, patch, status, result.warnings)
