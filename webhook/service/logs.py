"""Logging to stdout, plain or JSON lines; decisions carry their fields as structured data. The userinfo of
any URL in a message (``https://user:password@host``) is replaced by ``***`` on the way out."""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson

from webhook.wire.redaction import redact_urls
from webhook.wire.timestamps import rfc3339


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": rfc3339(record.created, "ms"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact_urls(record.getMessage()),
        }
        decision = getattr(record, "decision", None)
        if decision:
            entry.update(decision)
        if record.exc_info:
            entry["exc"] = redact_urls(self.formatException(record.exc_info))
        return orjson.dumps(entry, default=str).decode()


class PlainFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        decision = getattr(record, "decision", None)
        if decision:
            text += " " + " ".join(f"{k}={v}" for k, v in decision.items() if v not in (None, ""))
        return redact_urls(text)  # a URL's user:password never reaches a log, whoever logged it


def configure(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(PlainFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # Record fields that no format here or in gunicorn prints, which the logging module would otherwise gather
    # for every record, one decision line per request: the caller's frame, the thread's and the multiprocessing
    # process's names (the logging HOWTO's "Optimization" section). The process id stays: gunicorn prints it.
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The official client logs every request body at DEBUG; keep it at WARNING unless asked.
    logging.getLogger("kubernetes").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("urllib3").setLevel(max(logging.WARNING, root.level))
