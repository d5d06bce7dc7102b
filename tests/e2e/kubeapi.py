"""A small REST client for the test's own calls to the real API server (objects as plain dicts).

The service under test uses its own adapter; the tests talk to kube-apiserver directly, so what they
create and read is exactly what the API server stores, defaults and admission included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import requests

from tests.e2e.controlplane import Identity

T = TypeVar("T")

# kind -> (API prefix, plural, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("api/v1", "namespaces", False),
    "Node": ("api/v1", "nodes", False),
    "Pod": ("api/v1", "pods", True),
    "ServiceAccount": ("api/v1", "serviceaccounts", True),
    "Event": ("apis/events.k8s.io/v1", "events", True),
    "Job": ("apis/batch/v1", "jobs", True),
    "PriorityClass": ("apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "PodGroup": ("apis/scheduling.k8s.io/v1beta1", "podgroups", True),
    "ClusterRole": ("apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "CustomResourceDefinition": ("apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "ValidatingAdmissionPolicy": ("apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("apis/admissionregistration.k8s.io/v1",
                                         "validatingadmissionpolicybindings", False),
    "MutatingWebhookConfiguration": ("apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations",
                                     False),
    "DeviceClass": ("apis/resource.k8s.io/v1", "deviceclasses", False),
    "ResourceSlice": ("apis/resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": ("apis/resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "ComputeDomain": ("apis/resource.nvidia.com/v1beta1", "computedomains", True),
    "DomainReservation": ("apis/imex-webhook.io/v1alpha1", "domainreservations", False),
    "FabricAttachment": ("apis/imex-webhook.io/v1alpha1", "fabricattachments", False),
}


class ApiCallError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: {status} {body[:600]}")
        self.status = status
        self.body = body


class KubeApi:
    def __init__(self, server: str, ca_file: str, identity: Identity) -> None:
        self.server = server
        self.session = requests.Session()
        # verify goes with each request: REQUESTS_CA_BUNDLE in the environment overrides a session's verify.
        self.ca_file = ca_file
        self.session.cert = (str(identity.cert), str(identity.key))

    @staticmethod
    def path(kind: str, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        prefix, plural, namespaced = RESOURCES[kind]
        parts = [prefix]
        if namespaced and namespace:
            parts += ["namespaces", namespace]
        parts.append(plural)
        if name:
            parts.append(name)
        if sub:
            parts.append(sub)
        return "/" + "/".join(parts)

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
             params: Mapping[str, str] | None = None) -> Any:
        reply = self.session.request(method, self.server + path, json=body, params=params, timeout=30,
                                     verify=self.ca_file, headers={"Content-Type": content_type})
        if reply.status_code >= 300:
            raise ApiCallError(reply.status_code, method, path, reply.text)
        return reply.json()

    def create(self, obj: Mapping[str, Any], *, exist_ok: bool = False) -> dict[str, Any]:
        meta = obj["metadata"]
        path = self.path(obj["kind"], meta.get("namespace"))
        try:
            created: dict[str, Any] = self.call("POST", path, obj)
            return created
        except ApiCallError as err:
            if exist_ok and err.status == 409:
                return self.get(obj["kind"], meta.get("namespace"), meta["name"])
            raise

    def create_all(self, objects: Iterable[Mapping[str, Any]]) -> None:
        for obj in objects:
            self.create(obj, exist_ok=True)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.call("GET", self.path(kind, namespace, name))
        return found

    def list(self, kind: str, namespace: str | None = None, **params: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.call("GET", self.path(kind, namespace), params=params)["items"]
        return items

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        try:
            self.call("DELETE", self.path(kind, namespace, name), {"gracePeriodSeconds": 0})
        except ApiCallError as err:
            if err.status != 404:
                raise

    def merge_patch(self, kind: str, namespace: str | None, name: str, patch: Mapping[str, Any],
                    sub: str | None = None, strategic: bool = False) -> dict[str, Any]:
        """An RFC 7386 merge patch, or with ``strategic`` Kubernetes' strategic merge (lists merged by key)."""
        kind_of_patch = "strategic-merge-patch" if strategic else "merge-patch"
        patched: dict[str, Any] = self.call("PATCH", self.path(kind, namespace, name, sub), patch,
                                            content_type=f"application/{kind_of_patch}+json")
        return patched


def eventually(probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2,
               what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last value: {last!r}")
