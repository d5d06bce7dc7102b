"""How text is cut and how a caller's value is quoted back: never whole when long, never deep."""

from __future__ import annotations

from typing import Any

SHOWN_MAX = 40  # characters of a caller's value quoted in a message
ELLIPSIS = "..."


def clip(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters, visibly cut: the ellipsis counts toward the limit."""
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)] + ELLIPSIS


def clip_bytes(text: str, limit: int) -> str:
    """At most ``limit`` bytes of UTF-8, cut on a character boundary, with the ellipsis inside the limit
    (Kubernetes bounds some fields, such as an Event's note, in bytes)."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: limit - len(ELLIPSIS)].decode("utf-8", "ignore") + ELLIPSIS


def shown(value: Any, limit: int = SHOWN_MAX) -> str:
    """A caller's value for a message: a string quoted and cut to ``limit`` characters (its length said
    when cut); a list or object described by its size, never printed (it may be huge or deeply nested)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        # str() of an int over 4,300 digits raises; JSON numbers never get there, other callers might.
        return repr(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object with {len(value)} keys"
    return f"a {type(value).__name__}"
