"""The field's scanners on what we ship: checkov on the rendered manifests (the base; with the component
`imex-webhook certs --kustomize` writes, alone and with fabric mode; with each component under
manifests/components) and on the Dockerfile, hadolint on the Dockerfile. Any finding fails, unless the
object carries a skip that names the check and says why (a ``checkov.io/skip-*`` annotation; in the
Dockerfile a ``checkov:skip`` or ``hadolint ignore`` comment with its reason).

The scanners are pinned in .ci/run, in a virtual environment of their own under the cache directory
(checkov pins dozens of libraries that would fight ours); ``IMEX_SCANNERS_VENV`` names another. Where they
are missing the scanner tests skip, except in CI (``CI=true``), where they fail. The skips' own form and
the claims their reasons make are checked without the scanners.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.upstream import MANIFESTS, REPO, render, unavailable
from webhook import cli
from webhook.service import deploy

COMPONENTS = sorted(p.parent.name for p in (MANIFESTS / "components").glob("*/kustomization.yaml"))
# Fabric mode is rendered the way it is deployed, with the certs component; the other components alone.
RENDERS = ["base", "certs", "certs+fabric", *(c for c in COMPONENTS if c != "fabric")]
SKIP_PREFIX = "checkov.io/skip"
CHECK_ID = re.compile(r"CKV2?_[A-Z0-9]+_\d+")


def scanner(name: str) -> Path:
    venv = Path(os.environ.get("IMEX_SCANNERS_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "imex-webhook", "scanners"))
    for candidate in (venv / "bin" / name, shutil.which(name)):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    unavailable(f"{name} is not installed: .ci/run installs the pinned scanners into {venv}")
    raise AssertionError("unreachable")


def _certs_component(tmp_path: Path) -> Path:
    component = tmp_path / "certs-component"
    code = cli.main(["certs", "--service", deploy.SERVICE_NAME, "--namespace", deploy.NAMESPACE,
                     "--out", str(tmp_path / "tls"), "--kustomize", str(component)])
    assert code == 0
    return component


def rendered(name: str, tmp_path: Path) -> list[dict[str, Any]]:
    if name == "base":
        return render()
    if name == "certs":
        return render(_certs_component(tmp_path))
    if name == "certs+fabric":
        return render(_certs_component(tmp_path), MANIFESTS / "components" / "fabric")
    return render(MANIFESTS / "components" / name)


def checkov(target: Path, framework: str) -> dict[str, Any]:
    # --skip-download: nothing leaves the machine (checkov would fetch guidelines from its vendor otherwise).
    proc = subprocess.run([str(scanner("checkov")), "--file", str(target), "--framework", framework,
                           "--skip-download", "--output", "json"],
                          capture_output=True, text=True, check=False, timeout=600, cwd=target.parent)
    assert proc.returncode in (0, 1), f"checkov failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    report: Any = json.loads(proc.stdout)
    (result,) = report if isinstance(report, list) else [report]
    assert isinstance(result, dict) and result["check_type"] == framework, proc.stdout[:500]
    return result


def _findings(result: dict[str, Any]) -> list[str]:
    return [f"{c['check_id']} {c['check_name']} on {c['resource']}" for c in result["results"]["failed_checks"]]


def _unexplained_skips(result: dict[str, Any]) -> list[str]:
    out = []
    for check in result["results"]["skipped_checks"]:
        reason = (check["check_result"].get("suppress_comment") or "").strip()
        if reason == "No comment provided" or len(reason) < 30:
            out.append(f"{check['check_id']} on {check['resource']}: {reason!r}")
    return out


@pytest.mark.parametrize("name", RENDERS)
def test_checkov_finds_nothing_unexplained_in_the_rendered_manifests(name: str, tmp_path: Path) -> None:
    target = tmp_path / f"{name}.yaml"
    target.write_text(yaml.safe_dump_all(rendered(name, tmp_path), sort_keys=False))

    result = checkov(target, "kubernetes")

    summary = result["summary"]
    assert summary["parsing_errors"] == 0 and summary["resource_count"] >= 20 and summary["passed"] > 200
    assert _findings(result) == []
    assert _unexplained_skips(result) == []


def test_checkov_finds_nothing_unexplained_in_the_dockerfile(tmp_path: Path) -> None:
    target = tmp_path / "Dockerfile"
    shutil.copyfile(REPO / "Dockerfile", target)

    result = checkov(target, "dockerfile")

    assert result["summary"]["parsing_errors"] == 0 and result["summary"]["passed"] > 50
    assert _findings(result) == []
    assert _unexplained_skips(result) == []


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    proc = subprocess.run([str(scanner("hadolint")), "--format", "json", "--failure-threshold", "style",
                           str(REPO / "Dockerfile")], capture_output=True, text=True, check=False, timeout=120)

    findings = json.loads(proc.stdout or "[]")
    assert [f"line {f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings] == []
    assert proc.returncode == 0, proc.stderr


def test_every_exception_in_the_dockerfile_says_why() -> None:
    lines = (REPO / "Dockerfile").read_text().splitlines()
    for number, line in enumerate(lines):
        if "hadolint ignore=" in line:
            before = lines[number - 1].strip() if number else ""
            assert before.startswith("#") and "ignore=" not in before and len(before) > 30, \
                f"line {number + 1}: a hadolint ignore needs a comment above it that says why"
        if "checkov:skip=" in line:
            check, _, reason = line.partition("checkov:skip=")[2].partition(":")
            assert CHECK_ID.fullmatch(check.strip()) and len(reason.strip()) > 30, f"line {number + 1}: {line}"


def _skips(obj: dict[str, Any]) -> dict[str, str]:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if SKIP_PREFIX in k}


@pytest.mark.parametrize("name", ["base", "certs+fabric"])
def test_every_skip_annotation_names_one_check_and_says_why(name: str, tmp_path: Path) -> None:
    objects = rendered(name, tmp_path)
    skips = {f"{o['kind']}/{o['metadata']['name']}": _skips(o) for o in objects if _skips(o)}
    assert set(skips) >= {"DaemonSet/imex-agent", "Deployment/imex-webhook", "Deployment/imex-scheduler"}
    for owner, by_key in skips.items():
        checks = []
        for key, value in by_key.items():
            # checkov splits the value at "=" into exactly two parts, and fails on a second "=".
            parts = value.split("=")
            assert len(parts) == 2, f"{owner} {key}: one '=' between the check and the reason"
            check, reason = parts
            assert CHECK_ID.fullmatch(check), f"{owner} {key}: {check!r} is not a check id"
            assert len(reason) > 30, f"{owner} {key}: say why"
            checks.append(check)
        assert len(checks) == len(set(checks)), f"{owner}: a check skipped twice"


def _container(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    container: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return container


def test_only_the_agent_keeps_privilege_and_the_others_stay_unprivileged() -> None:
    objects = render()
    skipped = {o["metadata"]["name"]: {v.split("=")[0] for v in _skips(o).values()} for o in objects if _skips(o)}
    privilege = {"CKV_K8S_16", "CKV_K8S_17", "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_40"}
    assert skipped["imex-agent"] >= privilege
    assert not skipped["imex-webhook"] & privilege and not skipped["imex-scheduler"] & privilege
    agent = _container(objects, "DaemonSet", "imex-agent")
    assert agent["securityContext"]["privileged"] is True  # what the exceptions are for


def test_every_container_has_cpu_and_memory_limits_and_a_fixed_tag() -> None:
    objects = render()
    for kind, name in (("DaemonSet", "imex-agent"), ("Deployment", "imex-webhook"),
                       ("Deployment", "imex-scheduler")):
        container = _container(objects, kind, name)
        assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name
        image = container["image"]
        assert re.search(r":v?\d+\.\d+\.\d+$", image), f"{name}: {image} has no fixed release tag"
        assert container["imagePullPolicy"] == "IfNotPresent"


def test_the_profiling_exception_holds_the_scheduler_configuration_turns_profiling_off() -> None:
    # The skip of CKV_K8S_114 says so: kube-scheduler ignores --profiling once --config is given.
    config = deploy.scheduler_config()
    assert config.get("enableProfiling") is False
    assert config.get("enableContentionProfiling") is not True


def test_the_bind_address_exception_holds_the_scheduler_port_is_only_open_to_prometheus() -> None:
    objects = render()
    scheduler = _container(objects, "Deployment", "imex-scheduler")
    assert not any(a.startswith("--bind-address") for a in scheduler["command"])
    probes = {scheduler[p]["httpGet"]["port"] for p in ("livenessProbe", "readinessProbe")}
    assert probes == {10259}  # the kubelet probes the pod IP: a loopback bind would fail them
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    opening_10259 = [p["metadata"]["name"] for p in policies for rule in p["spec"].get("ingress", [])
                     if any(port.get("port") == 10259 for port in rule.get("ports", []))]
    assert opening_10259 == ["imex-metrics-from-prometheus"]
