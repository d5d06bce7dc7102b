"""Label selectors, node selectors, taints and tolerations, with kube-scheduler's matching rules.

- Label selector (pod affinity terms, namespace selectors): ``null`` selects nothing, ``{}`` everything;
  ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists, DoesNotExist) are ANDed.
- Node selector terms are ORed; inside a term ``matchExpressions`` (also Gt and Lt, integer compare of
  the label value) and ``matchFields`` (only ``metadata.name``, In/NotIn with exactly one value) are ANDed;
  an empty term selects nothing, and a term that does not parse (unknown operator, Gt without exactly
  one integer, In without values) is skipped. NotIn and DoesNotExist match a node lacking the label.
- A taint with effect NoSchedule or NoExecute must be tolerated: a toleration matches on effect (empty =
  any), key (empty = any, with Exists) and value (Equal, the default) or any value (Exists). Lt/Gt
  tolerations match nothing (their feature gate is off by default in the release we build).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NAME_FIELD = "metadata.name"
_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_NODE_OPERATORS = (*_LABEL_OPERATORS, "Gt", "Lt")


def _int(text: str) -> int | None:
    try:
        return int(text, 10)
    except ValueError:
        return None


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def valid(self) -> bool:
        if self.operator in ("In", "NotIn"):
            return bool(self.values)
        if self.operator in ("Exists", "DoesNotExist"):
            return not self.values
        if self.operator in ("Gt", "Lt"):
            return len(self.values) == 1 and _int(self.values[0]) is not None
        return False

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        have = _int(labels[self.key]) if present else None
        want = _int(self.values[0])
        if have is None or want is None:
            return False
        return have > want if self.operator == "Gt" else have < want


def _requirement(raw: Any, where: str) -> Requirement:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object")
    values = raw.get("values") or []
    if not isinstance(values, list):
        raise ValueError(f"{where}.values: expected a list")
    return Requirement(str(raw.get("key", "")), str(raw.get("operator", "")), tuple(str(v) for v in values))


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.nothing and all(r.matches(labels) for r in self.requirements)


NOTHING = LabelSelector((), nothing=True)
EVERYTHING = LabelSelector(())


def parse_label_selector(raw: Any, where: str) -> LabelSelector:
    if raw is None:
        return NOTHING
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object")
    reqs = [Requirement(str(k), "In", (str(v),)) for k, v in (raw.get("matchLabels") or {}).items()]
    for i, item in enumerate(raw.get("matchExpressions") or []):
        req = _requirement(item, f"{where}.matchExpressions[{i}]")
        if req.operator not in _LABEL_OPERATORS or not req.valid():
            raise ValueError(f"{where}.matchExpressions[{i}]: invalid requirement {req}")
        reqs.append(req)
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...] | None
    fields: tuple[Requirement, ...] | None
    valid: bool

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.valid:
            return False
        if self.expressions is not None and not all(r.matches(labels) for r in self.expressions):
            return False
        node_fields = {NAME_FIELD: name} if name else {}
        if self.fields is not None and node_fields:
            for req in self.fields:
                value = node_fields.get(req.key, "")
                if (value == req.values[0]) != (req.operator == "In"):
                    return False
        return True


@dataclass(frozen=True)
class NodeSelector:
    terms: tuple[NodeSelectorTerm, ...]
    name_sets: tuple[frozenset[str] | None, ...]
    """Per raw term, the node names its ``metadata.name In`` fields allow (``None``: no such field)."""

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return any(term.matches(name, labels) for term in self.terms)


def parse_node_selector(raw: Any, where: str) -> NodeSelector:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object")
    terms: list[NodeSelectorTerm] = []
    name_sets: list[frozenset[str] | None] = []
    for i, term in enumerate(raw.get("nodeSelectorTerms") or []):
        at = f"{where}.nodeSelectorTerms[{i}]"
        if not isinstance(term, Mapping):
            raise ValueError(f"{at}: expected an object")
        exprs = [_requirement(e, f"{at}.matchExpressions[{j}]")
                 for j, e in enumerate(term.get("matchExpressions") or [])]
        fields = [_requirement(f, f"{at}.matchFields[{j}]") for j, f in enumerate(term.get("matchFields") or [])]
        names: frozenset[str] | None = None
        for req in fields:
            if req.key == NAME_FIELD and req.operator == "In":
                names = frozenset(req.values) if names is None else names & frozenset(req.values)
        name_sets.append(names)
        if not exprs and not fields:
            continue
        valid = (all(r.operator in _NODE_OPERATORS and r.valid() for r in exprs)
                 and all(r.operator in ("In", "NotIn") and len(r.values) == 1 for r in fields))
        terms.append(NodeSelectorTerm(tuple(exprs) if exprs else None, tuple(fields) if fields else None, valid))
    return NodeSelector(tuple(terms), tuple(name_sets))


def node_name_selector(node: str) -> dict[str, Any]:
    """The node selector DRA writes into an allocation of node-local devices."""
    return {"nodeSelectorTerms": [{"matchFields": [{"key": NAME_FIELD, "operator": "In", "values": [node]}]}]}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


def parse_taints(raw: Any) -> tuple[Taint, ...]:
    return tuple(Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
                 for t in raw or [] if isinstance(t, Mapping))


def parse_tolerations(raw: Any) -> tuple[Toleration, ...]:
    return tuple(Toleration(str(t.get("key", "")), str(t.get("operator", "")), str(t.get("value", "")),
                            str(t.get("effect", "")))
                 for t in raw or [] if isinstance(t, Mapping))


def untolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration matches."""
    for taint in taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None
