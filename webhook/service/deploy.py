"""The one source of truth for how the pieces find and trust each other in a cluster.

The manifests in ``manifests/`` and the scheduler configuration are checked against these values by the
tests (tests/deploy), so the Service port, the extender verbs, the TLS names and the timeouts cannot drift
apart from what ``serve`` actually does.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from certs import cli as certs_cli
from webhook.domain.keys import GPU_RESOURCE
from webhook.service import settings

SERVICE_NAME = "imex-webhook"
NAMESPACE = "imex-system"
CONTAINER_PORT = 8443
PROBE_PORT = 8081  # serve --probe-bind: /healthz, /readyz and /metrics over plain HTTP
SERVICE_PORT = 443
SCHEDULER_NAME = "imex-scheduler"
SCHEDULER_CONFIG_MAP = certs_cli.SCHEDULER_CONFIG_MAP_NAME
SCHEDULER_CONFIG_KEY = certs_cli.SCHEDULER_CONFIG_KEY
SCHEDULER_CONFIG_DIR = "/etc/imex-scheduler/config"
EXTENDER_CA_FILE = certs_cli.EXTENDER_CA_FILE
# The scheduler's client certificate, which the extender verbs require (serve --client-ca).
SCHEDULER_CLIENT_CERT_FILE = certs_cli.SCHEDULER_CLIENT_CERT_FILE
SCHEDULER_CLIENT_KEY_FILE = certs_cli.SCHEDULER_CLIENT_KEY_FILE
# The webhook verifies it against the CA in its serving Secret (created with ca.crt; cert-manager adds it).
WEBHOOK_TLS_DIR = "/etc/imex-webhook/tls"
WEBHOOK_CLIENT_CA_FILE = f"{WEBHOOK_TLS_DIR}/ca.crt"
WEBHOOK_CONFIGURATION = certs_cli.WEBHOOK_CONFIGURATION_NAME
WEBHOOK_NAME = "pods.imex-webhook.io"
WEBHOOK_PATH = "/mutate"

# The extender verbs are the Flask routes of webhook.http.extender.
VERBS = {"filterVerb": "filter", "prioritizeVerb": "prioritize", "bindVerb": "bind", "preemptVerb": "preempt"}
# One HTTP client timeout covers every verb, bind included: it must exceed our bind budget (attach +
# binding) so the scheduler never abandons a bind we are still completing.
EXTENDER_HTTP_TIMEOUT_S = int(settings.DEFAULT_BIND_BUDGET) + 10
# kube-scheduler's score plugins with their default weights in the release the end-to-end suite runs
# (docs/SCHEDULER.md; DynamicResources is there since DRA is GA). Each plugin scores 0..100, so together
# they can move a node by at most sum(weights) x 100 = 1,400 points.
IN_TREE_SCORE_WEIGHTS = {
    "TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1, "PodTopologySpread": 2,
    "InterPodAffinity": 2, "NodeResourcesBalancedAllocation": 1, "ImageLocality": 1, "DynamicResources": 2,
}
IN_TREE_SCORE_SPAN = sum(IN_TREE_SCORE_WEIGHTS.values()) * 100
# The scheduler adds our Score (0..10) x weight x 10 (MaxNodeScore / MaxExtenderPriority). One point of
# ours must outweigh everything the in-tree plugins can add, or they could reorder the nodes we rank inside
# the group's domain: 10 x weight > 1,400, so weight = 141. Pods outside any group score 0 everywhere from
# us, and the in-tree plugins alone decide for them.
EXTENDER_WEIGHT = IN_TREE_SCORE_SPAN // 10 + 1
# Mutating admission runs in series on every matched pod CREATE; 5 s bounds the damage of a slow replica
# far below the API server's 30 s limit while leaving room for a cold cache.
WEBHOOK_TIMEOUT_S = 5


def service_dns() -> str:
    return f"{SERVICE_NAME}.{NAMESPACE}.svc"


def scheduler_config(ca_pem: bytes | None = None, fabric: bool = False) -> dict[str, Any]:
    """The KubeSchedulerConfiguration of the dedicated scheduler.

    Without ``ca_pem`` the extender's CA comes from the mounted Secret file, so a missing CA fails closed
    (kube-scheduler refuses to start) instead of falling back to an unverified connection, which is what
    it does with ``enableHTTPS`` and no CA at all. ``imex-webhook certs --kustomize`` inlines it as caData.
    The client certificate is always a mounted file (``certFile``/``keyFile``): a key has no place in a
    ConfigMap, and without it the extender verbs answer 403.

    The extender has no ``managedResources``: kube-scheduler then calls it for every pod of the profile.
    With a list, it would call filter, prioritize and bind only for pods whose containers request a listed
    resource, and a ComputeDomain pod that gets its GPUs from a ``gpu.nvidia.com`` claim requests none: the
    default binder would bind it with no domain reservation.

    The profile packs (NodeResourcesFit ``MostAllocated``): the default ``LeastAllocated`` spreads pods and
    works against the extender's tighter-packing score.

    ``fabric``: nodes get GPUs attached at bind time, so their allocatable does not show them yet and
    NodeResourcesFit (which runs before extenders) must not judge ``nvidia.com/gpu``: the profile's
    ``ignoredResources`` hands that arithmetic to the extender. Without a fabric the scheduler keeps its own
    check, a second safety net.
    """
    tls: dict[str, Any] = {"serverName": service_dns(), "certFile": SCHEDULER_CLIENT_CERT_FILE,
                           "keyFile": SCHEDULER_CLIENT_KEY_FILE}
    if ca_pem is None:
        tls["caFile"] = EXTENDER_CA_FILE
    else:
        tls["caData"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": True, "resourceNamespace": NAMESPACE, "resourceName": SCHEDULER_NAME},
        # kube-scheduler ignores --profiling once --config is given; the pprof handlers are off here instead.
        "enableProfiling": False,
        # Every node must reach the extender: a sample would hide most of a domain from the domain choice.
        "percentageOfNodesToScore": 100,
        "profiles": [{
            "schedulerName": SCHEDULER_NAME,
            "percentageOfNodesToScore": 100,
            "pluginConfig": [{"name": "NodeResourcesFit", "args": node_resources_fit_args(fabric)}],
        }],
        "extenders": [{
            "urlPrefix": f"https://{service_dns()}:{SERVICE_PORT}",
            **VERBS,
            "weight": EXTENDER_WEIGHT,
            "enableHTTPS": True,
            "nodeCacheCapable": True,
            "httpTimeout": f"{EXTENDER_HTTP_TIMEOUT_S}s",
            "ignorable": False,
            "tlsConfig": tls,
        }],
    }


def node_resources_fit_args(fabric: bool = False) -> dict[str, Any]:
    """NodeResourcesFitArgs of the dedicated profile: pack, and leave fabric GPUs to the extender."""
    resources = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
    args: dict[str, Any] = {"scoringStrategy": {"type": "MostAllocated", "resources": resources}}
    if fabric:
        args["ignoredResources"] = [GPU_RESOURCE]
    else:
        resources.append({"name": GPU_RESOURCE, "weight": 1})
    return args


def render_scheduler_config(ca_pem: bytes | None = None, fabric: bool = False) -> str:
    return yaml.safe_dump(scheduler_config(ca_pem, fabric), sort_keys=False)


class _Literal(str):
    """A multi-line string written as a YAML block, so the embedded config stays readable."""


class _Dumper(yaml.SafeDumper):
    pass


def _literal(dumper: yaml.SafeDumper, data: _Literal) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")


_Dumper.add_representer(_Literal, _literal)


def render_manifest(obj: dict[str, Any]) -> str:
    head = "# Rendered from webhook/service/deploy.py (the tests check that they agree): edit that file.\n"
    return head + yaml.dump(obj, Dumper=_Dumper, sort_keys=False)


def scheduler_config_map(ca_pem: bytes | None = None, fabric: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SCHEDULER_CONFIG_MAP, "namespace": NAMESPACE},
        "data": {SCHEDULER_CONFIG_KEY: _Literal(render_scheduler_config(ca_pem, fabric))},
    }


SCHEDULER_CA_PATCH_FILE = "scheduler-config-cadata.yaml"


def add_scheduler_ca_to_component(component_dir: Path, ca_pem: bytes, fabric: bool = False) -> Path:
    """Extend the kustomize component ``certs --kustomize`` wrote: inline the CA as the extender's caData.

    The base keeps ``caFile`` (fail closed if the Secret is missing); with the component applied, the
    rendered config carries ``caData`` and the scheduler no longer depends on the mounted file.
    """
    kustomization_path = component_dir / certs_cli.KUSTOMIZATION_FILE
    kustomization: dict[str, Any] = yaml.safe_load(kustomization_path.read_text())
    patch_path = component_dir / SCHEDULER_CA_PATCH_FILE
    patch_path.write_text(render_manifest(scheduler_config_map(ca_pem, fabric)))
    patches = kustomization.setdefault("patches", [])
    if not any(p.get("path") == SCHEDULER_CA_PATCH_FILE for p in patches):
        patches.append({"path": SCHEDULER_CA_PATCH_FILE})
    kustomization_path.write_text("# Generated by `imex-webhook certs --kustomize`; re-run it to rotate the CA.\n"
                                  + yaml.safe_dump(kustomization, sort_keys=False))
    return patch_path
