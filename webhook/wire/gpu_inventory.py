"""The ``imex-webhook.io/gpus`` Node annotation: the GPU inventory our node agent publishes and the
extender reads. Compact JSON, keys sorted, empty fields left out, so that equal inventories are equal text
and an unchanged node is never patched::

    {"clique": "<uuid>.<id>" | null, "reason": "...", "health": "healthy",
     "gpus": [{"uuid": "GPU-...", "pci": "0000:41:00.0", "clique": "...", "health": "healthy",
               "flags": ["degradedBandwidth"], "owner": "fa-...", "releasing": true, "error": "..."}]}

``owner`` names the FabricAttachment a fabric GPU belongs to; ``releasing`` marks GPUs being released,
which the extender must no longer count as free.

orjson decodes: the extender parses this annotation on every Node of a NodeList /filter, where it is
about twice as fast as ``json``, and it refuses hostile nesting without recursing. ``json`` encodes, with
``\\u`` escapes, so the text the agents already published stays the text they publish.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict, cast

import orjson

from webhook.errors import WireError
from webhook.wire import PREFIX
from webhook.wire.fields import list_, map_

ANNOTATION = f"{PREFIX}/gpus"


class GpuEntry(TypedDict):
    uuid: NotRequired[str]
    pci: NotRequired[str]  # domain:bus:device.function, lower case
    clique: NotRequired[str]  # only when the GPU's fabric probe completed and succeeded
    health: NotRequired[str]  # healthy / degraded / unhealthy / unknown
    flags: NotRequired[list[str]]
    owner: NotRequired[str]
    releasing: NotRequired[bool]
    error: NotRequired[str]


class GpuInventory(TypedDict):
    clique: str | None  # the node's clique, or None with ``reason`` saying why
    reason: str
    health: str
    gpus: list[GpuEntry]


def encode(inventory: GpuInventory) -> str:
    return json.dumps(inventory, separators=(",", ":"), sort_keys=True)


def parse(text: Any, path: str = ANNOTATION) -> GpuInventory:
    """The inventory as published: an object whose ``gpus`` (if present) is a list of objects. Fields are
    kept as they are; readers take what they know."""
    if not isinstance(text, str):
        raise WireError(path, f"expected a JSON string, got {type(text).__name__}")
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise WireError(path, f"not JSON: {str(exc)[:80]}") from None
    if not isinstance(doc, dict):
        raise WireError(path, f"expected a JSON object, got {type(doc).__name__}")
    for i, gpu in enumerate(list_(doc.get("gpus"), f"{path}.gpus")):
        map_(gpu, f"{path}.gpus[{i}]")
    return cast(GpuInventory, doc)


def of_node(node: Mapping[str, Any]) -> GpuInventory | None:
    """The inventory a Node object carries; None when it has none or it is unreadable."""
    meta = node.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    text = annotations.get(ANNOTATION) if isinstance(annotations, Mapping) else None
    if text is None:
        return None
    try:
        return parse(text)
    except WireError:
        return None


def releasing(inventory: GpuInventory) -> int:
    """How many GPUs the agent is releasing."""
    return sum(1 for gpu in inventory.get("gpus", ()) if gpu.get("releasing") is True)
