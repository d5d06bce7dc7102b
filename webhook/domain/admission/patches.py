"""RFC 6902 JSON Patch building against a document that is never copied or changed.

A mutating webhook shares the pod with other webhooks and with its own reinvocations
(``reinvocationPolicy: IfNeeded``, docs/ADMISSION.md): it should patch only the fields it owns and never
rewrite a whole array another webhook may have extended, so this module only *adds*:

- ``PatchBuilder.add(path, value)`` puts ``value`` at ``path``; a last token ``"-"`` appends to a list.
  Parents that are absent or ``null`` are created by one ``add`` of the smallest missing parent
  (an ``add`` under a missing map fails on the apiserver); later additions under a parent created in
  the same patch are merged into that op's value instead of producing ops that would fail.
- ``PatchBuilder.replace(path, value)`` for the rare field that exists with another value.
- ``pointer(tokens)`` writes an RFC 6901 JSON Pointer: ``~`` -> ``~0``, ``/`` -> ``~1``, so the label
  ``imex-webhook.io/group`` is ``/metadata/labels/imex-webhook.io~1group``.

A parent of the wrong JSON type (a list where an object is expected) raises ``WireError`` naming the
field, which the HTTP layer turns into a 400.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.errors import WireError
from webhook.wire.admission import JSONPatchOp

Token = str | int
Path = tuple[Token, ...]
APPEND = "-"


def _is_map(value: Any) -> bool:
    # JSON decodes to dict; the ABC check of isinstance(..., Mapping) is the slow path for the rest.
    return type(value) is dict or isinstance(value, Mapping)


def escape(token: Token) -> str:
    """One RFC 6901 reference token: ``~`` first, then ``/``, as the RFC requires."""
    text = str(token)
    if "~" in text:
        text = text.replace("~", "~0")
    if "/" in text:
        text = text.replace("/", "~1")
    return text


def pointer(tokens: Sequence[Token]) -> str:
    return "".join("/" + escape(t) for t in tokens)


def dotted(where: str, tokens: Sequence[Token]) -> str:
    """The field path as error messages name it: ``request.object.spec.affinity``."""
    out = where
    for t in tokens:
        out += f"[{t}]" if isinstance(t, int) else f".{t}"
    return out


def _nest(tokens: Sequence[Token], value: Any) -> Any:
    """The value that, added at a missing parent, holds ``value`` at ``tokens`` below it."""
    for token in reversed(tokens):
        value = [value] if token == APPEND else {token: value}
    return value


class PatchBuilder:
    """Collects ``add`` and ``replace`` ops for ``doc``; ``ops`` is the patch, in the order added."""

    __slots__ = ("_created", "_doc", "_where", "ops")

    def __init__(self, doc: Mapping[str, Any], where: str = "object") -> None:
        self._doc = doc
        self._where = where
        self._created: dict[Path, Any] = {}  # path of an op's value we created -> that (mutable) value
        self.ops: list[JSONPatchOp] = []

    def get(self, tokens: Sequence[Token]) -> Any:
        """The value at ``tokens`` in the original document; ``None`` when absent, null or not reachable."""
        node: Any = self._doc
        for token in tokens:
            if isinstance(token, int):
                if not isinstance(node, list) or token >= len(node):
                    return None
                node = node[token]
            elif _is_map(node):
                node = node.get(token)
            else:
                return None
        return node

    def _child(self, node: Any, token: Token, tokens: Path) -> Any:
        if isinstance(token, int):
            if not isinstance(node, list):
                raise WireError(dotted(self._where, tokens[:-1]), "expected a list")
            if token >= len(node):
                raise WireError(dotted(self._where, tokens), "no such list item")
            return node[token]
        if not _is_map(node):
            raise WireError(dotted(self._where, tokens[:-1]), "expected an object")
        return node.get(token)

    def add(self, path: Sequence[Token], value: Any) -> None:
        """Add ``value`` at ``path`` (last token ``"-"``: append), creating missing parents."""
        tokens = tuple(path)
        node: Any = self._doc
        ours = False  # True once ``node`` is a value we created in this patch (changed in place)
        for i in range(len(tokens) - 1):
            here = tokens[: i + 1]
            if not ours and here in self._created:
                node, ours = self._created[here], True
                continue
            child = self._child(node, tokens[i], here)
            if child is None:
                created = _nest(tokens[i + 1:], value)
                if ours:
                    node[tokens[i]] = created
                else:
                    self.ops.append({"op": "add", "path": pointer(here), "value": created})
                    self._created[here] = created
                return
            node = child
        last = tokens[-1]
        if not (isinstance(node, list) if last == APPEND else _is_map(node)):
            raise WireError(dotted(self._where, tokens[:-1]), "expected a list" if last == APPEND else
                            "expected an object")
        if ours:  # a list or dict created by an earlier op of this patch: extend that op's value
            created_node: Any = node
            if last == APPEND:
                created_node.append(value)
            else:
                created_node[last] = value
            return
        self.ops.append({"op": "add", "path": pointer(tokens), "value": value})
        if last != APPEND and isinstance(value, dict | list):
            self._created[tokens] = value

    def replace(self, path: Sequence[Token], value: Any) -> None:
        self.ops.append({"op": "replace", "path": pointer(path), "value": value})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes a key, anything else replaces.
    Returns a new value; ``target`` is not changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
