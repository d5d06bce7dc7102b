"""The objects the ``ClusterStore`` skips because they cannot be parsed or derived, by kind (logged and
counted under the kind's label).

Each is kept (key -> resourceVersion) until a later version parses or the object is deleted, so the
``imex_webhook_cache_rejected_objects`` gauge counts what is skipped now, and each is logged once per
resourceVersion, with its name and the offending field, not again on every relist.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Set

from webhook.domain.model import ObjectKey
from webhook.errors import WireError
from webhook.wire.kinds import Kind
from webhook.wire.text import ELLIPSIS, clip

log = logging.getLogger(__name__)

SHOWN = 300  # characters of a rejection's explanation that reach the log


def explain(exc: BaseException) -> str:
    """The field and the problem for a ``WireError``; the exception's type and text for anything else."""
    if isinstance(exc, WireError):
        text = str(exc)
    else:
        try:
            text = f"{type(exc).__name__}: {exc}"
        except Exception:  # an exception whose str() fails still must not stop the watch
            text = type(exc).__name__
    return clip(text, SHOWN + len(ELLIPSIS))


class Rejects:
    """Not thread-safe on its own: the store calls it under its lock."""

    def __init__(self) -> None:
        self._by_kind: dict[Kind, dict[ObjectKey, str]] = defaultdict(dict)

    def add(self, kind: Kind, key: ObjectKey, version: str, exc: BaseException) -> None:
        rejects = self._by_kind[kind]
        if key in rejects and rejects[key] == version:
            return  # already logged: the same object again, from a relist
        rejects[key] = version
        name = "/".join(k for k in key if k) or "(unnamed)"
        log.warning("skipping malformed %s %s (resourceVersion %s): %s", kind.label, name, version or "?", explain(exc))

    def clear(self, kind: Kind, key: ObjectKey) -> None:
        self._by_kind[kind].pop(key, None)

    def keep_only(self, kind: Kind, present: Set[ObjectKey]) -> None:
        rejects = self._by_kind[kind]
        for key in [k for k in rejects if k not in present]:
            del rejects[key]

    def total(self) -> int:
        return sum(len(r) for r in self._by_kind.values())

    def counts(self, kinds: Iterable[Kind]) -> dict[str, int]:
        """By label, as the metrics name the kinds."""
        return {kind.label: len(self._by_kind.get(kind) or ()) for kind in kinds}
