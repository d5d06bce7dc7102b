"""What every fuzzed reply of the extender/webhook service must be, in-process or over TLS: never a 500,
always JSON (but /metrics' exposition), counted once in imex_webhook_requests_total, and no internal error."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from webhook.http.metrics import VERBS, verb_of

Sampler = Callable[[], dict[tuple[str, str], float]]


def check_reply(path: str, method: str, status: int, content_type: str, body: bytes,
                before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> None:
    route = path.split("?", 1)[0]
    assert status != 500 and (status < 500 or (route == "/readyz" and status == 503)), (status, body[:300])
    if not (route == "/metrics" and status == 200):
        assert content_type.startswith("application/json"), (status, content_type, body[:200])
        if method != "HEAD":
            json.loads(body)  # raises on anything but JSON
    changed = {label: after.get(("requests", label), 0.0) - before.get(("requests", label), 0.0)
               for kind, label in set(after) | set(before) if kind == "requests"}
    changed = {label: n for label, n in changed.items() if n}
    # Exactly one reply counted, with its status; under the route's verb when the path is plainly one
    # ("//filter" is /filter to gunicorn but a host name to the test client, so odd paths name no verb).
    assert len(changed) == 1 and list(changed.values()) == [1.0], changed
    verb, code = next(iter(changed)).split("/")
    assert code == str(status), (changed, status)
    if route in VERBS:
        assert verb == verb_of(route), (changed, route)
    errors = sum(v for (kind, _), v in after.items() if kind == "internal") - \
        sum(v for (kind, _), v in before.items() if kind == "internal")
    assert errors == 0, (status, body[:300])


def counters(samples: list[Any]) -> dict[tuple[str, str], float]:
    """(kind, label) -> value from prometheus_client metric families (registry.collect() or a text parse)."""
    out: dict[tuple[str, str], float] = {}
    for family in samples:
        for sample in family.samples:
            if sample.name == "imex_webhook_requests_total":
                out[("requests", f"{sample.labels['verb']}/{sample.labels['code']}")] = sample.value
            elif sample.name == "imex_webhook_internal_errors_total":
                out[("internal", sample.labels["verb"])] = sample.value
    return out
