"""One structured log line per decision (filter, preempt, bind, release), on ``imex_webhook.decisions``."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("imex_webhook.decisions")


def decision_log(verb: str, pod: str, **fields: Any) -> None:
    if log.isEnabledFor(logging.INFO):
        log.info("decision", extra={"decision": {"verb": verb, "pod": pod, **fields}})
