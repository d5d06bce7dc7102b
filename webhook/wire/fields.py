"""Typed reads of decoded JSON fields, each naming the offending field in its ``WireError``, with
Kubernetes' own length limits on the strings of objects the API server has validated. Every codec in the
project reads its fields through these.

The string bounds are Kubernetes' validation limits, so no object a real API server stores is ever refused;
they exist because requests do not all come from one (a hand-made ExtenderArgs, a fuzzer), and what we
parse is kept, listed by /inspect and quoted in errors. docs/HARDENING.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.errors import WireError
from webhook.wire.text import shown

NAME_MAX = 253  # object names, namespaces, UIDs, node names: a DNS subdomain at most
LABEL_KEY_MAX = 253 + 1 + 63  # DNS-subdomain prefix, "/", name
LABEL_VALUE_MAX = 63
ANNOTATIONS_MAX = 256 * 1024  # all of one object's annotation keys and values together (TotalAnnotationSizeLimitB)


def map_(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WireError(path, f"expected an object, got {type(value).__name__}")
    return value


def list_(value: Any, path: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise WireError(path, f"expected a list, got {type(value).__name__}")
    return value


def str_(value: Any, path: str, default: str = "", limit: int | None = NAME_MAX) -> str:
    """A string field; identifiers (the default) are at most NAME_MAX characters, as Kubernetes has them."""
    if value is None:
        return default
    if not isinstance(value, str):
        raise WireError(path, f"expected a string, got {type(value).__name__}")
    if limit is not None and len(value) > limit:
        raise WireError(path, f"{shown(value)} is longer than {limit} characters, the most Kubernetes allows")
    return value


def str_at(obj: Mapping[str, Any], key: str, path: str, required: bool = False, limit: int | None = None) -> str:
    """``obj[key]`` as a string, "" when absent; ``required``: absent or empty is an error (``path.key``)."""
    where = f"{path}.{key}" if path else key
    value = str_(obj.get(key), where, limit=limit)
    if required and not value:
        raise WireError(where, "missing")
    return value


def int_(value: Any, path: str, default: int = 0) -> int:
    """A non-negative JSON integer (a boolean is not one)."""
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise WireError(path, f"expected a non-negative integer, got {shown(value)}")
    return value


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key if len(key) <= LABEL_KEY_MAX else key[:LABEL_KEY_MAX] + '...'}"


def str_map(value: Any, path: str) -> dict[str, str]:
    raw = map_(value, path)
    for k, v in raw.items():
        if not isinstance(v, str):
            raise WireError(_key_path(path, k), f"expected a string, got {type(v).__name__}")
    return dict(raw)


def label_map(value: Any, path: str, validated: bool = True) -> dict[str, str]:
    labels = str_map(value, path)
    for k, v in labels.items() if validated else ():
        if len(k) > LABEL_KEY_MAX or len(v) > LABEL_VALUE_MAX:
            raise WireError(_key_path(path, k), f"label keys are at most {LABEL_KEY_MAX} characters and values "
                            f"at most {LABEL_VALUE_MAX}, as Kubernetes validates them; got {len(k)} and {len(v)}")
    return labels


def annotation_map(value: Any, path: str, validated: bool = True) -> dict[str, str]:
    annotations = str_map(value, path)
    size = sum(len(k) + len(v) for k, v in annotations.items()) if validated else 0
    if size > ANNOTATIONS_MAX:
        raise WireError(path, f"annotations total {size} characters; Kubernetes allows {ANNOTATIONS_MAX} "
                        "(256 KiB) per object")
    return annotations
