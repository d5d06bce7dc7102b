"""POST /mutate: the mutating admission webhook (AdmissionReview ``admission.k8s.io/v1``).

Translation only: the envelope is ``webhook.wire.admission``; the verdict comes from
``webhook.domain.admission.admission_review`` and ``mutating``, over the cached catalog and nodes (no API call,
nothing written, so ``sideEffects: None`` holds and ``dryRun`` needs no special case). A malformed review
gets a 400 JSON error naming the field (``webhook.http.common.answered``); our own failure denies a pod
that may belong to a group (never admits it unmodified: it would go to default-scheduler) and counts in
``imex_webhook_internal_errors_total``.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from flask import Blueprint, Response

from webhook.domain.admission import admission_review
from webhook.engine.decision_log import log as decisions
from webhook.errors import WireError
from webhook.http.common import Services, answered, json_body, services
from webhook.wire import admission

log = logging.getLogger(__name__)
blueprint = Blueprint("admission", __name__)


def mutate_answer(doc: Any, svc: Services) -> bytes:
    """The AdmissionReview reply for one decoded body (served by Flask below and by webhook.http.fast)."""
    review = admission.parse(doc)
    try:
        result = svc.engine.admit(review)
    except WireError:
        raise
    except Exception as exc:  # our fault: deny a possible group pod rather than let it be split
        log.exception("mutate failed for %s", review.pod_ref)
        svc.metrics.internal_errors.labels("mutate").inc()
        result = admission_review.internal_error(review, exc)
    svc.metrics.decisions.labels("mutate", result.outcome, result.reason).inc()
    if review.is_pod_create and decisions.isEnabledFor(logging.INFO):
        decisions.info("decision", extra={"decision": {
            "verb": "mutate", "pod": review.pod_ref, "group": result.group_id, "outcome": result.outcome,
            "reason": result.reason, "patch_ops": len(result.patch), "warnings": len(result.warnings),
            "dry_run": review.dry_run, "uid": review.uid}})
    return orjson.dumps(admission_review.respond(review.uid, result))


@blueprint.post("/mutate")
def mutate_view() -> Response:
    svc = services()
    status, body = answered("mutate", svc.metrics, lambda: mutate_answer(json_body(), svc))
    return Response(body, status=status, mimetype="application/json")
