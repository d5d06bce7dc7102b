"""Every API resource the project reads or writes, in one table: kind, group, version, plural and scope,
and the URL paths built from them. RBAC (manifests/rbac-*.yaml) grants exactly these."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from webhook.domain.groups import group_sources
from webhook.wire import domain_reservation as dr
from webhook.wire import fabric_attachment as fa


@dataclass(frozen=True, slots=True)
class Resource:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def qualified(self) -> str:
        """The name RBAC rules and API messages use: ``pods``, ``jobs.batch``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        """The URL path; without a namespace a namespaced resource is listed across all namespaces."""
        path = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            path += f"/namespaces/{quote(namespace, safe='')}"
        path += f"/{self.plural}"
        if name:
            path += f"/{quote(name, safe='')}"
        if sub:
            path += f"/{sub}"
        return path


NODES = Resource("Node", "", "v1", "nodes", False)
PODS = Resource("Pod", "", "v1", "pods", True)
EVENTS = Resource("Event", "events.k8s.io", "v1", "events", True)
LEASES = Resource("Lease", "coordination.k8s.io", "v1", "leases", True)
FABRIC_ATTACHMENTS = Resource(fa.KIND, fa.GROUP, fa.VERSION, fa.PLURAL, False)
DOMAIN_RESERVATIONS = Resource(dr.KIND, dr.GROUP, dr.VERSION, dr.PLURAL, False)
COMPUTE_DOMAINS = Resource("ComputeDomain", "resource.nvidia.com", "v1beta1", "computedomains", True)
# What a namespace may still request bounds what it may reserve for pods not created (webhook.domain.placement.quotas).
RESOURCE_QUOTAS = Resource("ResourceQuota", "", "v1", "resourcequotas", True)

# What the extender's ClusterStore is fed from, one watch each (webhook.adapters.kube.backend).
CLUSTER_RESOURCES = (
    NODES,
    PODS,
    Resource("Job", "batch", "v1", "jobs", True),
    RESOURCE_QUOTAS,
    Resource("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", True),
    Resource("ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", True),
    COMPUTE_DOMAINS,
    # GPUs of DRA-only nodes exist only as devices of the GPU driver's slices.
    Resource("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", False),
    # Groups from Kubernetes' gang scheduling and the workload controllers (docs/GROUPS.md): PodGroups as
    # Kubernetes 1.37 (beta) and 1.36 (alpha) serve them, 1.35's Workloads, JobSets, training jobs; one
    # watch per table of the group sources, under the table's label.
    *(Resource(t.label, t.gvk.group, t.gvk.version, t.plural, True) for t in group_sources.TABLES),
)

# NVIDIA's device plugin, whose pod the agent restarts after a hot-add (the settings can name others): the
# Helm chart of NVIDIA/k8s-device-plugin labels its pods app.kubernetes.io/name=nvidia-device-plugin; the GPU
# Operator's DaemonSet app=nvidia-device-plugin-daemonset.
DEFAULT_DEVICE_PLUGIN_SELECTORS = ("app.kubernetes.io/name=nvidia-device-plugin", "app=nvidia-device-plugin-daemonset")
