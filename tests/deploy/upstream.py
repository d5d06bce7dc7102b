"""Peers we did not write, for the deploy tests: kustomize, and the CRD schemas of cert-manager and the
Prometheus Operator, all through the Go module proxy (the only route to them from these machines).

- ``kustomize``: ``sigs.k8s.io/kustomize/kustomize/v5`` built with the machine's Go, the same kustomize that
  ``kubectl kustomize`` embeds; about 30 s once, then cached.
- CRDs: each project's module zip carries its CRDs as plain YAML: cert-manager in ``deploy/crds`` (the
  same schemas its Helm chart and its released ``cert-manager.crds.yaml`` carry, only without the chart's
  templating), the Prometheus Operator in ``example/prometheus-operator-crd``. The zip's ``h1:`` sum is
  pinned, so a module that changed under its version fails instead of validating against other rules.

Everything lands under ``~/.cache/imex-webhook/`` (``IMEX_UPSTREAM_CACHE`` overrides), like the Go build of
the real-cluster suite. Without Go the tests skip, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

KUSTOMIZE_MODULE = "sigs.k8s.io/kustomize/kustomize/v5"
KUSTOMIZE_VERSION = "v5.8.2"  # v5.8.3 needs Go 1.27
# A cold cache builds kustomize and downloads the CRDs inside the first test that needs them: about four
# minutes on two busy cores, past pytest's default per-test timeout.
COLD_CACHE = pytest.mark.timeout(900)
REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"


@dataclass(frozen=True)
class CrdModule:
    path: str
    version: str
    sum: str  # the module zip's h1: hash, as the Go checksum database records it
    crd_dir: str

    @property
    def cache_name(self) -> str:
        return f"{self.path.rsplit('/', 1)[-1]}@{self.version}"


CERT_MANAGER = CrdModule("github.com/cert-manager/cert-manager", "v1.21.2",
                         "h1:UWgoYM+KLNtRlqmoWOKjKBOBUPVHeepQ6/ac3ERJW68=", "deploy/crds")
PROMETHEUS_OPERATOR = CrdModule("github.com/prometheus-operator/prometheus-operator", "v0.88.0",
                                "h1:3T/dCQdk7CUVRqVfwRHoC5g66fC/ML6XQQLtQVL6Q5o=", "example/prometheus-operator-crd")


def cache_root() -> Path:
    base = os.environ.get("IMEX_UPSTREAM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "imex-webhook")
    return Path(base)


def unavailable(why: str) -> None:
    """Skip where a developer lacks the tool; fail in CI, where it must be there."""
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        unavailable("the Go toolchain is not on PATH: kustomize and the CRD schemas come from the Go module proxy")
    assert go is not None
    return go


def _run_go(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([_go(), *args], cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {})}, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"go {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def kustomize() -> Path:
    target = cache_root() / "kustomize" / f"kustomize-{KUSTOMIZE_VERSION}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        _run_go(["install", "-trimpath", "-ldflags=-s -w", f"{KUSTOMIZE_MODULE}@{KUSTOMIZE_VERSION}"], Path(tmp),
                {"GOBIN": tmp, "CGO_ENABLED": "0"})
        (Path(tmp) / "kustomize").rename(target)
    return target


def render(*components: Path, base: Path = MANIFESTS) -> list[dict[str, Any]]:
    """``kustomize build`` of an overlay with ``base`` and ``components``, as docs/DEPLOYING.md's overlay is."""
    with tempfile.TemporaryDirectory() as tmp:
        overlay = Path(tmp)
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(base, overlay)],
            "components": [os.path.relpath(c, overlay) for c in components]}))
        proc = subprocess.run([str(kustomize()), "build", str(overlay)], capture_output=True, text=True,
                              check=False, timeout=120)
    assert proc.returncode == 0, f"kustomize build failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def crd_files(module: CrdModule) -> Path:
    """The module's CRD directory, downloaded once through the Go module proxy."""
    target = cache_root() / "crds" / module.cache_name
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        # Outside any module, with a module cache of its own, so the user's settings and cache play no part.
        info = json.loads(_run_go(["mod", "download", "-json", f"{module.path}@{module.version}"], Path(tmp),
                                  {"GOMODCACHE": str(Path(tmp) / "mod"), "GOFLAGS": "-modcacherw"}))
        assert info.get("Sum") == module.sum, f"{module.cache_name}: sum {info.get('Sum')}, pinned {module.sum}"
        source = Path(info["Dir"]) / module.crd_dir
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
        for crd in sorted(source.glob("*.yaml")):
            shutil.copyfile(crd, partial / crd.name)
        try:
            partial.rename(target)
        except OSError:  # another test run filled the cache meanwhile; its copy is the same
            shutil.rmtree(partial)
    return target


Schemas = dict[tuple[str, str], dict[str, Any]]  # (apiVersion, kind) -> openAPIV3Schema


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.2 as Kubernetes reads it: a plain ``=`` (a relabel action in an enum) is the string "=",
    not PyYAML's YAML 1.1 "value" tag."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def schemas(module: CrdModule) -> Schemas:
    out: Schemas = {}
    for path in sorted(crd_files(module).glob("*.yaml")):
        for crd in yaml.load_all(path.read_text(), Loader=_CrdLoader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served", True):
                    out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = \
                        strict(version["schema"]["openAPIV3Schema"])
    return out


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as kubectl's default server-side field validation (Strict) applies it: a field the
    schema does not name is an error, unless the schema keeps unknown fields."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


def problems(obj: dict[str, Any], known: Schemas) -> list[str]:
    """What the API server would refuse in a custom resource (its schema; metadata is checked apart)."""
    schema = known.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if schema is None:
        return [f"no CRD serves {obj.get('apiVersion')} {obj.get('kind')}"]
    body = {k: v for k, v in obj.items() if k != "metadata"}
    validator = jsonschema.Draft7Validator(schema)
    return [f"{obj['kind']}/{obj['metadata']['name']} at {'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}"
            for e in validator.iter_errors(body)]
