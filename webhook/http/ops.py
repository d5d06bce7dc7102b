"""/healthz, /readyz, /metrics and /inspect."""

from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.http.common import json_response, services
from webhook.wire.redaction import redact_urls
from webhook.wire.text import clip

blueprint = Blueprint("ops", __name__)


@blueprint.get("/healthz")
def healthz() -> Response:
    checks = {name: check() for name, check in services().liveness.items()}
    if all(live for live, _ in checks.values()):
        return json_response({"status": "ok"})
    body = {"status": "stalled", "checks": {name: {"ok": live, "detail": clip(detail, 512)}
                                            for name, (live, detail) in checks.items()}}
    return json_response(body, 503)


@blueprint.get("/readyz")
def readyz() -> Response:
    svc = services()
    checks = {"cluster": svc.backend.ready(), "tls": svc.tls_ready()}
    checks.update({name: check() for name, check in svc.checks.items()})
    ok = all(passed for passed, _ in checks.values())
    # Anonymous callers read this (kubelet's probe): no URL's credentials, no unbounded error text.
    body = {"ready": ok, "checks": {name: {"ok": p, "detail": clip(redact_urls(d), 512)}
                                    for name, (p, d) in checks.items()}}
    return json_response(body, 200 if ok else 503)


@blueprint.get("/metrics")
def metrics() -> Response:
    svc = services()
    for kind, n in svc.engine.store.rejected_counts().items():
        svc.metrics.cache_rejected.labels(kind).set(n)
    return Response(generate_latest(svc.metrics.registry), mimetype=CONTENT_TYPE_LATEST)


@blueprint.get("/inspect")
def inspect() -> Response:
    svc = services()
    body = svc.engine.inspection(svc.engine.clock())
    body["mode"] = "embedded" if svc.embedded is not None else "kubernetes"
    return json_response(body)
