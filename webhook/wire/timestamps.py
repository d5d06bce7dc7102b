"""RFC 3339 times as Kubernetes writes them, in UTC with a ``Z``: ``metav1.Time`` to the second,
``metav1.MicroTime`` (Events, Leases) to the microsecond, and our own logs and phase times to the
millisecond."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from webhook.errors import WireError

Precision = Literal["s", "ms", "us"]
_TIMESPEC: dict[Precision, str] = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}


def rfc3339(ts: float, precision: Precision) -> str:
    """``ts`` (seconds since the epoch) as ``2025-01-02T03:04:05[.fff[fff]]Z``; digits beyond the
    precision are dropped, not rounded, so a time is never written later than it was."""
    text = datetime.fromtimestamp(ts, UTC).isoformat(timespec=_TIMESPEC[precision])
    return text.removesuffix("+00:00") + "Z"


def parse_rfc3339(text: Any, path: str = "") -> float:
    """Seconds since the epoch of an RFC 3339 time (``Z`` or an offset; a time without one is read as UTC,
    the only zone Kubernetes writes)."""
    if not isinstance(text, str):
        raise WireError(path, f"expected an RFC 3339 time, got {type(text).__name__}")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise WireError(path, f"{text[:64]!r} is not an RFC 3339 time") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
