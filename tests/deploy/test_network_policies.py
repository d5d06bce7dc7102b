"""The NetworkPolicies of the rendered base, and of the overlay docs/HARDENING.md shows, evaluated the way the
NetworkPolicy API defines them: a pod selected by an ingress policy admits only what one of its rules
admits (sources by pod and namespace labels or address block, destinations by port); a rule without
``from`` admits every source. Table-driven: who may reach the webhook's 8443, kube-scheduler's 10259 and
the agent's 8081, with the defaults and once the overlay narrows the API server's rule and moves
Prometheus. Also: every pod we ship is selected (no pod left open), and each port a policy opens is the
port its container serves, so a moved port cannot leave a stale hole or lock out its callers.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from tests.deploy.upstream import MANIFESTS, REPO, kustomize, render
from webhook.service import deploy

WEBHOOK = {"app.kubernetes.io/name": "imex-webhook", "app.kubernetes.io/component": "webhook"}
SCHEDULER = {"app.kubernetes.io/name": "imex-webhook", "app.kubernetes.io/component": "scheduler"}
AGENT = {"app.kubernetes.io/name": "imex-webhook", "app.kubernetes.io/component": "agent"}
NAMESPACE = "imex-system"


@dataclass(frozen=True)
class Source:
    """Who opens the connection: a pod (its labels and its namespace's) or a bare address."""

    namespace: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = ""

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace}


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _peer_admits(peer: dict[str, Any], source: Source, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        if not source.ip:
            return False  # address blocks are for sources outside the pod network (the API's own advice)
        address = ipaddress.ip_address(source.ip)
        block = peer["ipBlock"]
        inside = address in ipaddress.ip_network(block["cidr"])
        return inside and not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])
    if not source.namespace:
        return False
    if "namespaceSelector" in peer:
        namespace_ok = selects(peer["namespaceSelector"], source.namespace_labels)
    else:
        namespace_ok = source.namespace == policy_namespace
    return namespace_ok and selects(peer.get("podSelector"), source.labels)


def _port_admits(ports: list[dict[str, Any]] | None, port: int) -> bool:
    if not ports:
        return True
    return any(p.get("protocol", "TCP") == "TCP" and p["port"] <= port <= p.get("endPort", p["port"]) for p in ports)


def admitted(objects: list[dict[str, Any]], target: dict[str, str], port: int, source: Source) -> bool:
    applying = [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == NAMESPACE
                and "Ingress" in o["spec"].get("policyTypes", ["Ingress"])
                and selects(o["spec"]["podSelector"], target)]
    if not applying:
        return True  # a pod no policy selects accepts everything
    return any(_port_admits(rule.get("ports"), port)
               and (not rule.get("from") or any(_peer_admits(p, source, NAMESPACE) for p in rule["from"]))
               for policy in applying for rule in policy["spec"].get("ingress") or [])


def _hardening_overlay() -> str:
    """The overlay docs/HARDENING.md tells operators to write, as it stands there."""
    text = (REPO / "docs" / "HARDENING.md").read_text()
    section = text.split("## Network exposure", 1)[1].split("\n## ", 1)[0]
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if "imex-webhook-from-apiserver" in b]
    return block


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def narrowed(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("overlay")
    overlay = yaml.safe_load(_hardening_overlay())
    assert overlay["resources"] == ["../manifests"]
    overlay["resources"] = [os.path.relpath(MANIFESTS, tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    proc = subprocess.run([str(kustomize()), "build", str(tmp_path)], capture_output=True, text=True, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


SCHEDULER_POD = Source(NAMESPACE, SCHEDULER)
AGENT_POD = Source(NAMESPACE, AGENT)
WEBHOOK_POD = Source(NAMESPACE, WEBHOOK)
PROMETHEUS = Source("monitoring", {"app.kubernetes.io/name": "prometheus"})
MOVED_PROMETHEUS = Source("observability", {"app.kubernetes.io/name": "prometheus"})
TENANT_POD = Source("ml-team", {"app": "trainer"})
CONTROL_PLANE = Source(ip="10.0.0.12")  # inside the documented example's 10.0.0.0/24
ELSEWHERE = Source(ip="10.0.7.12")

# (who, to which pod, port, admitted by the base, admitted once the documented overlay is applied)
CASES = [
    ("scheduler -> extender verbs", SCHEDULER_POD, WEBHOOK, 8443, True, True),
    ("a tenant pod -> webhook, until narrowed", TENANT_POD, WEBHOOK, 8443, True, False),
    ("an address outside the control plane -> webhook", ELSEWHERE, WEBHOOK, 8443, True, False),
    ("the control plane -> /mutate", CONTROL_PLANE, WEBHOOK, 8443, True, True),
    ("Prometheus -> webhook metrics", PROMETHEUS, WEBHOOK, 8081, True, False),
    ("moved Prometheus -> webhook metrics", MOVED_PROMETHEUS, WEBHOOK, 8081, False, True),
    ("a tenant pod -> webhook probe port", TENANT_POD, WEBHOOK, 8081, False, False),
    ("the scheduler -> webhook probe port", SCHEDULER_POD, WEBHOOK, 8081, False, False),
    ("an address -> webhook probe port", ELSEWHERE, WEBHOOK, 8081, False, False),
    ("Prometheus -> scheduler metrics", PROMETHEUS, SCHEDULER, 10259, True, False),
    ("moved Prometheus -> scheduler metrics", MOVED_PROMETHEUS, SCHEDULER, 10259, False, True),
    ("Prometheus -> agent metrics", PROMETHEUS, AGENT, 8081, True, False),
    ("moved Prometheus -> agent metrics", MOVED_PROMETHEUS, AGENT, 8081, False, True),
    ("Prometheus -> a port nobody serves", PROMETHEUS, AGENT, 9999, False, False),
    ("a tenant pod -> agent", TENANT_POD, AGENT, 8081, False, False),
    ("a tenant pod -> scheduler", TENANT_POD, SCHEDULER, 10259, False, False),
    ("an address -> agent", ELSEWHERE, AGENT, 8081, False, False),
    ("the control plane -> agent", CONTROL_PLANE, AGENT, 8081, False, False),
    ("the agent -> scheduler", AGENT_POD, SCHEDULER, 10259, False, False),
    ("the webhook -> agent", WEBHOOK_POD, AGENT, 8081, False, False),
    ("the scheduler -> agent", SCHEDULER_POD, AGENT, 8081, False, False),
]


@pytest.mark.parametrize(("source", "target", "port", "by_default", "once_narrowed"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_who_may_connect_with_the_defaults_and_with_the_documented_overlay(
        source: Source, target: dict[str, str], port: int, by_default: bool, once_narrowed: bool,
        base: list[dict[str, Any]], narrowed: list[dict[str, Any]]) -> None:
    assert admitted(base, target, port, source) is by_default
    assert admitted(narrowed, target, port, source) is once_narrowed


def _pod_templates(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"]["template"] for o in objects
            if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")}


def test_every_pod_we_ship_is_isolated_for_ingress(base: list[dict[str, Any]]) -> None:
    objects = base
    templates = _pod_templates(objects)
    assert set(templates) == {"imex-webhook", "imex-scheduler", "imex-agent"}
    for name, template in templates.items():
        # A port nothing listens on is refused exactly when some policy selects the pod.
        assert not admitted(objects, template["metadata"]["labels"], 1, TENANT_POD), name


def test_the_default_deny_covers_the_whole_namespace(base: list[dict[str, Any]]) -> None:
    (deny,) = [o for o in base if o["kind"] == "NetworkPolicy" and o["spec"]["podSelector"] == {}]
    assert deny["spec"]["policyTypes"] == ["Ingress"] and not deny["spec"].get("ingress")


def test_each_opened_port_is_the_port_its_container_serves(base: list[dict[str, Any]]) -> None:
    objects = base
    templates = _pod_templates(objects)
    webhook = templates["imex-webhook"]["spec"]["containers"][0]
    assert [p["containerPort"] for p in webhook["ports"]] == [deploy.CONTAINER_PORT, deploy.PROBE_PORT]
    assert f"--probe-bind=0.0.0.0:{deploy.PROBE_PORT}" in webhook["args"]
    for probe in ("livenessProbe", "readinessProbe"):  # the kubelet probes the probe port, over plain HTTP
        assert (webhook[probe]["httpGet"]["port"], webhook[probe]["httpGet"]["scheme"]) == ("probes", "HTTP")
    agent = templates["imex-agent"]["spec"]["containers"][0]
    assert "--listen=0.0.0.0:8081" in agent["args"] and agent["ports"][0]["containerPort"] == 8081
    scheduler = templates["imex-scheduler"]["spec"]["containers"][0]
    assert scheduler["readinessProbe"]["httpGet"]["port"] == 10259  # kube-scheduler's secure port
    opened = {(p["metadata"]["name"], port["port"]) for p in objects if p["kind"] == "NetworkPolicy"
              for rule in p["spec"].get("ingress") or [] for port in rule.get("ports") or []}
    assert opened == {("imex-webhook-from-scheduler", 8443), ("imex-webhook-from-apiserver", 8443),
                      ("imex-metrics-from-prometheus", 10259), ("imex-metrics-from-prometheus", 8081)}


def test_the_extender_url_reaches_the_port_the_scheduler_is_admitted_to(base: list[dict[str, Any]]) -> None:
    (extender,) = deploy.scheduler_config()["extenders"]
    assert extender["urlPrefix"].endswith(f":{deploy.SERVICE_PORT}")
    (service,) = [o for o in base if o["kind"] == "Service" and o["metadata"]["name"] == deploy.SERVICE_NAME]
    assert service["spec"]["ports"][0]["targetPort"] == "https"  # the container's 8443
    assert admitted(base, WEBHOOK, deploy.CONTAINER_PORT, SCHEDULER_POD)
