"""The import-linter contracts of pyproject.toml hold for the tree, and each one would break on a wrong import.

A contract that no import can break guards nothing: for every contract, one import it forbids is added to the
real import graph (grimp's, as ``lint-imports`` builds it) and the contract must then report itself broken;
for the layers contract, every upward pair of layers is tried. The checks run the contracts' own code
(import-linter's ``LayersContract`` and ``ForbiddenContract``), not a reading of ours."""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter import configuration
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.independence import IndependenceContract
from importlinter.contracts.layers import LayersContract
from importlinter.domain.contract import Contract, ContractCheck

configuration.configure()  # what lint-imports sets up before it checks (a timer, the readers)
ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
KINDS: dict[str, type[Contract]] = {"layers": LayersContract, "forbidden": ForbiddenContract,
                                    "independence": IndependenceContract}


def _text(value: Any) -> Any:
    # The contracts parse their options from configuration text, as lint-imports reads them.
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def contract(raw: dict[str, Any]) -> Contract:
    session = {k: _text(v) for k, v in CONFIG.items() if k != "contracts"}
    options = {k: _text(v) for k, v in raw.items() if k not in ("name", "type")}
    return KINDS[raw["type"]](raw["name"], session, options)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*CONFIG["root_packages"], include_external_packages=CONFIG["include_external_packages"])


def check(raw: dict[str, Any], graph: grimp.ImportGraph) -> ContractCheck:
    # A check may change the graph it is given (it drops the contract's ignored imports): each gets a copy.
    return contract(raw).check(copy.deepcopy(graph), verbose=False)


def importing(graph: grimp.ImportGraph, importer: str, imported: str) -> grimp.ImportGraph:
    """A copy of ``graph`` in which ``importer`` imports ``imported`` (a module of the tree, or a package)."""
    wrong = copy.deepcopy(graph)
    wrong.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    return wrong


def a_module_of(graph: grimp.ImportGraph, package: str) -> str:
    """A module inside ``package`` (the package itself when it has no children, or is an external package),
    for the wrong import: the contracts about siblings judge the modules below a package, not its
    ``__init__``."""
    if package not in graph.modules or graph.is_module_squashed(package):
        return package
    children = sorted(graph.find_children(package))
    return children[0] if children else package


NAMES = [c["name"] for c in CONFIG["contracts"]]


def test_every_contract_has_a_kind_these_tests_can_break() -> None:
    assert {c["type"] for c in CONFIG["contracts"]} <= set(KINDS)
    assert len(NAMES) == len(set(NAMES)) >= 10


@pytest.mark.parametrize("raw", CONFIG["contracts"], ids=NAMES)
def test_the_tree_keeps_the_contract(raw: dict[str, Any], graph: grimp.ImportGraph) -> None:
    result = check(raw, graph)
    assert result.kept, (raw["name"], result.metadata)


def _wrong_imports(raw: dict[str, Any]) -> list[tuple[str, str]]:
    if raw["type"] == "layers":
        # "a | b" are independent siblings, "a : b" siblings that may import each other; within a container
        # the names are relative to it.
        prefixes = [f"{c}." for c in raw.get("containers", ())] or [""]
        layers = [([prefix + p.strip() for p in re.split(r"[|:]", layer)], "|" in layer) for layer in raw["layers"]
                  for prefix in prefixes]
        # Every lower layer importing every higher one: each pair must be caught, not only the extremes.
        wrong = [(low[0], high[0]) for i, (high, _) in enumerate(layers) for low, _ in layers[i + 1:]]
        return wrong + [(a, b) for layer, independent in layers if independent for a in layer for b in layer if a != b]
    if raw["type"] == "forbidden":
        return [(source, forbidden) for source in raw["source_modules"] for forbidden in raw["forbidden_modules"]
                if not forbidden.startswith(source + ".") and source != forbidden]
    modules = raw["modules"]
    return [(a, b) for a in modules for b in modules if a != b]


@pytest.mark.parametrize("raw", CONFIG["contracts"], ids=NAMES)
def test_the_contract_breaks_on_each_import_it_forbids(raw: dict[str, Any], graph: grimp.ImportGraph) -> None:
    wrong = _wrong_imports(raw)
    assert wrong, raw["name"]
    for source, target in wrong:
        importer = a_module_of(graph, source)
        imported = a_module_of(graph, target)
        if raw.get("ignore_imports") and f"{importer} -> {imported}" in raw["ignore_imports"]:
            continue
        assert not check(raw, importing(graph, importer, imported)).kept, f"{importer} -> {imported}: {raw['name']}"


def _named(prefix: str) -> dict[str, Any]:
    (raw,) = [c for c in CONFIG["contracts"] if c["name"].startswith(prefix)]
    return raw


# The imports the HTTP server had before the composition root handed it what it needs (issue 39): each
# one breaks its contract again.
@pytest.mark.parametrize(("importer", "imported"), [
    ("webhook.serving.reading", "webhook.domain.limits"),  # the body limit of each route
    ("webhook.serving.thread_side", "webhook.http.metrics"),  # the verb label of a path, for its counts
    ("webhook.serving.worker", "webhook.http.common"),  # giving a large response's memory back
    ("webhook.serving.callers", "webhook.service.settings"),  # the default caller subjects
    ("webhook.serving.worker", "webhook.engine.engine"),
    ("webhook.serving.reading", "webhook.state.cluster"),
    ("webhook.serving.worker", "webhook.adapters.embedded"),
])
def test_the_http_server_imports_nothing_of_what_it_serves(importer: str, imported: str,
                                                           graph: grimp.ImportGraph) -> None:
    raw = _named("The HTTP server imports no")
    assert raw["source_modules"] == ["webhook.serving"]
    assert check(raw, graph).kept
    assert not check(raw, importing(graph, importer, imported)).kept, f"{importer} -> {imported}"


@pytest.mark.parametrize(("importer", "imported"), [
    ("webhook.http.app", "webhook.serving.worker"),  # the views know no server
    ("webhook.serving.thread_side", "webhook.http.metrics"),
    ("webhook.serving.worker", "webhook.service.server"),  # the server is below its composition root
    ("webhook.wire.addresses", "webhook.serving.framing"),  # and above the wire formats
])
def test_the_http_server_sits_beside_the_views_below_the_service(importer: str, imported: str,
                                                                 graph: grimp.ImportGraph) -> None:
    raw = _named("Layers: cli >")
    assert "webhook.http | webhook.serving" in raw["layers"]
    assert not check(raw, importing(graph, importer, imported)).kept, f"{importer} -> {imported}"
