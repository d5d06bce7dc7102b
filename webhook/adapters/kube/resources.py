"""What feeds the extender's ``ClusterStore``, one watch per kind: the well-known kinds of
``webhook.wire.kinds`` (whose ``path`` builds the URLs) and the group sources'. RBAC (manifests/rbac-*.yaml)
grants exactly these and the kinds the adapter writes (Events, Leases, FabricAttachments,
DomainReservations)."""

from __future__ import annotations

from webhook.domain.groups import group_sources
from webhook.wire.kinds import (
    COMPUTE_DOMAINS,
    JOBS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_QUOTAS,
    RESOURCE_SLICES,
    Kind,
)

# What the extender's ClusterStore is fed from, one watch each (webhook.adapters.kube.backend).
CLUSTER_KINDS: tuple[Kind, ...] = (
    NODES,
    PODS,
    JOBS,
    # What a namespace may still request bounds what it may reserve for pods not created
    # (webhook.domain.placement.quotas).
    RESOURCE_QUOTAS,
    RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
    COMPUTE_DOMAINS,
    # GPUs of DRA-only nodes exist only as devices of the GPU driver's slices.
    RESOURCE_SLICES,
    # Groups from Kubernetes' gang scheduling and the workload controllers (docs/GROUPS.md): PodGroups as
    # Kubernetes 1.37 (beta) and 1.36 (alpha) serve them, 1.35's Workloads, JobSets, training jobs; one
    # watch per table of the group sources, under the label of the table's kind.
    *(t.kind for t in group_sources.TABLES),
)

# NVIDIA's device plugin, whose pod the agent restarts after a hot-add (the settings can name others): the
# Helm chart of NVIDIA/k8s-device-plugin labels its pods app.kubernetes.io/name=nvidia-device-plugin; the GPU
# Operator's DaemonSet app=nvidia-device-plugin-daemonset.
DEFAULT_DEVICE_PLUGIN_SELECTORS = ("app.kubernetes.io/name=nvidia-device-plugin", "app=nvidia-device-plugin-daemonset")
