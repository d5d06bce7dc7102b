"""What the real-cluster suite and the real-scheduler benchmark install before the service starts: the
project's namespace, CRDs, RBAC and the webhook's admission policy from ``manifests/``, and NVIDIA's ComputeDomain
CRD."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from tests.e2e import objects
from tests.e2e.kubeapi import KubeApi, eventually

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
CRDS = ("domainreservations.imex-webhook.io", "fabricattachments.imex-webhook.io", "computedomains.resource.nvidia.com")


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def established(api: KubeApi, crd: str) -> bool:
    conditions = api.get("CustomResourceDefinition", None, crd).get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def install_project(api: KubeApi) -> None:
    """The namespace, the CRDs (once established), the webhook's RBAC and the admission policy that narrows it,
    as a deployment applies them."""
    api.create_all(documents(MANIFESTS / "namespace.yaml"))
    for crd in ("crd-domainreservations.yaml", "crd-fabricattachments.yaml"):
        api.create_all(documents(MANIFESTS / crd))
    api.create(objects.computedomain_crd(), exist_ok=True)
    api.create_all(documents(MANIFESTS / "rbac-webhook.yaml"))
    api.create_all(documents(MANIFESTS / "webhook-admission-policy.yaml"))
    for crd in CRDS:
        eventually(functools.partial(established, api, crd), what=f"CRD {crd} established")
