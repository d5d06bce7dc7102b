"""Reading PromQL with ``promql-parser`` (the Rust parser of the PromQL grammar, from PyPI): every selector
an expression reads, the labels its result carries, and its comparison threshold. Also the Grafana
variables a dashboard's queries use, replaced the way Grafana replaces them before PromQL sees them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import promql_parser as pp

# Labels Prometheus adds to every series of a target found through a ServiceMonitor or a PodMonitor,
# and the node label the PodMonitor's relabeling adds.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "service", "endpoint", "container", "node"})
# Series Prometheus makes itself for every target, not exported by anyone.
SYNTHETIC = frozenset({"up"})
# Grafana's built-in interval variable, at least four scrape intervals; the dashboard's own variables are
# label values inside quotes and stay as they are.
GRAFANA_VARIABLES = {"$__rate_interval": "2m", "$__interval": "30s", "$__range": "6h"}


def parse(expr: str) -> Any:
    return pp.parse(grafana_free(expr))


def grafana_free(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def children(node: Any) -> list[Any]:
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.AggregateExpr):
        return [node.expr] + ([node.param] if node.param is not None else [])
    if isinstance(node, pp.Call):
        return list(node.args)
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, pp.ParenExpr | pp.SubqueryExpr | pp.UnaryExpr):
        return [node.expr]
    return []


def walk(node: Any) -> Iterator[Any]:
    yield node
    for child in children(node):
        yield from walk(child)


def metric_name(selector: Any) -> str:
    if selector.name:
        return str(selector.name)
    named = [m.value for m in selector.matchers.matchers if m.name == "__name__"]
    assert named, f"selector {selector} names no metric"
    return str(named[0])


def selectors(expr: str) -> list[Any]:
    return [n for n in walk(parse(expr)) if isinstance(n, pp.VectorSelector)]


def matched_labels(selector: Any) -> set[str]:
    return {m.name for m in selector.matchers.matchers if m.name != "__name__"}


def grouping_labels(expr: str) -> set[str]:
    """Labels named in ``by (...)``, ``without (...)``, ``on (...)`` and ``ignoring (...)``."""
    out: set[str] = set()
    for node in walk(parse(expr)):
        if isinstance(node, pp.AggregateExpr) and node.modifier is not None:
            out.update(node.modifier.labels)
        if isinstance(node, pp.BinaryExpr) and node.modifier is not None and node.modifier.matching is not None:
            out.update(node.modifier.matching.labels)
    return out


def result_labels(expr: str, labels_of: Callable[[str], set[str]]) -> set[str]:
    """The labels an alert's series carry, so ``{{ $labels.x }}`` in its annotations has something to show.

    ``labels_of``: a metric's labels as exported, with the target's labels."""

    def of(node: Any) -> set[str]:
        if isinstance(node, pp.VectorSelector):
            return labels_of(metric_name(node))
        if isinstance(node, pp.MatrixSelector):
            return of(node.vector_selector)
        if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
            return of(node.expr)
        if isinstance(node, pp.AggregateExpr):
            kept = set(node.modifier.labels) if node.modifier is not None else set()
            if node.modifier is not None and node.modifier.type == pp.AggModifierType.Without:
                return of(node.expr) - kept
            return kept
        if isinstance(node, pp.BinaryExpr):
            if isinstance(node.lhs, pp.NumberLiteral):
                return of(node.rhs)
            return of(node.lhs)  # comparison with a number, arithmetic, and, unless: the left side's labels
        if isinstance(node, pp.Call):
            name = node.func.name
            if name == "absent":
                (inner,) = node.args
                return {m.name for s in walk(inner) if isinstance(s, pp.VectorSelector)
                        for m in s.matchers.matchers if m.op == pp.MatchOp.Equal and m.name != "__name__"}
            if name == "histogram_quantile":
                return of(node.args[1]) - {"le"}
            vectors = [a for a in node.args if not isinstance(a, pp.NumberLiteral | pp.StringLiteral)]
            return of(vectors[0]) if vectors else set()
        return set()

    return of(parse(expr))


def threshold(expr: str) -> tuple[str, float]:
    """``(operator, number)`` of an expression that ends in a comparison with a number."""
    top = parse(expr)
    assert isinstance(top, pp.BinaryExpr) and isinstance(top.rhs, pp.NumberLiteral), f"{expr} compares with no number"
    return str(top.op), float(top.rhs.val)


TEMPLATE_LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")


def template_labels(annotations: Mapping[str, str]) -> set[str]:
    return {m for text in annotations.values() for m in TEMPLATE_LABEL.findall(text)}
