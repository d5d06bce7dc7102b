"""Label, annotation, resource and device-class names this project reads or writes.

Kept in one place because they are a contract with users (annotations they write), with NVIDIA's DRA
driver and GPU Feature Discovery (labels they write), and with our own node agent.
"""

from __future__ import annotations

from webhook.domain import domain_kinds
from webhook.wire import PREFIX as PREFIX
from webhook.wire import gpu_inventory

INVENTORY_ANNOTATION = gpu_inventory.ANNOTATION  # the GPU inventory our node agent publishes

# Written by users (or by us at admission) on pods.
GROUP_ANNOTATION = f"{PREFIX}/group"
# "true" on a ComputeDomain (or its pods): its group gets an NVLink domain no other ComputeDomain uses, and
# keeps other ComputeDomains out of it while it holds it (webhook.domain.placement.exclusive).
EXCLUSIVE_ANNOTATION = f"{PREFIX}/exclusive-domain"
GROUP_SIZE_ANNOTATION = f"{PREFIX}/group-size"
# "k" on a ComputeDomain (or its pods): the group's reservation holds k more nodes of its domain for
# replacements of failed members (webhook.domain.groups.spares).
SPARE_NODES_ANNOTATION = f"{PREFIX}/spare-nodes"
# "N" on a ComputeDomain (or its pods): a job larger than one NVLink domain is placed as segments of N pods,
# each segment wholly in one domain, members mapped to segments by their rank (webhook.domain.groups.segments).
SEGMENT_SIZE_ANNOTATION = f"{PREFIX}/segment-size"
# "required" (the default) or "preferred" on a ComputeDomain (or its pods): a preferred job takes one domain
# when one fits, else is split into as few domains as possible (webhook.domain.groups.segments).
PLACEMENT_ANNOTATION = f"{PREFIX}/placement"
# A duration ("90m", "4h", "1h30m") on a ComputeDomain (or its pods): how long the group runs at most, as its
# owner states it. Advisory: the extender plans with it and never kills a group that runs longer
# (webhook.domain.groups.walltime).
MAX_RUNTIME_ANNOTATION = f"{PREFIX}/max-runtime"
# Kueue's maximum execution time of a Job it manages, in seconds (a label on the Job; Kueue evicts the job
# past it).
KUEUE_MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
GROUP_LABEL = f"{PREFIX}/group"
# "k" on a pod of a job cut into segments: the pod's segment. The extender writes it at the first filter of
# a member with no rank of its own (webhook.domain.jobs.segment_assignment); a user may set it at creation.
SEGMENT_LABEL = f"{PREFIX}/segment"
# The Indexed Job controller's rank of a pod (annotation and label): a member's segment
# (webhook.domain.groups.segments).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MUTATED_ANNOTATION = f"{PREFIX}/mutated"
GROUP_ID_ANNOTATION = f"{PREFIX}/group-id"  # the resolved identity, written at admission

# Node labels: the first key present names the node's domain (docs/ARCHITECTURE.md, "How it decides").
# Each is defined with its kind of domain (``domain_kinds``); these names stay for their many readers.
CLIQUE_LABEL = domain_kinds.NVLINK.label  # "<clusterUUID>.<cliqueID>", written by GFD or our agent
FABRIC_ZONE_LABEL = domain_kinds.FABRIC.label
DEFAULT_DOMAIN_LABELS: tuple[str, ...] = domain_kinds.DEFAULT_LABELS
# Project-owned copy of the node's domain (the value of the first domain label present), written by the
# extender's node domain labeller. The pod affinity and node requirement added at admission use this key,
# because kube-scheduler's InterPodAffinity rejects every node that lacks a required term's topologyKey:
# one key on every node of every domain (cliques and fabric zones alike) keeps every group schedulable.
DOMAIN_LABEL = f"{PREFIX}/domain"

# How many fabric GPUs a node can still take (free PCIe/CXL slots); absent means none.
FABRIC_SLOTS_ANNOTATION = f"{PREFIX}/fabric-slots"
# Written by our node agent: the fabric health label.
HEALTH_LABEL = f"{PREFIX}/fabric-health"
# Taints the node lifecycle controller and the kubelet set for a node's conditions (not-ready,
# unreachable, memory-pressure, disk-pressure, pid-pressure, network-unavailable, unschedulable).
NODE_CONDITION_TAINT_PREFIX = "node.kubernetes.io/"
REDFISH_SYSTEM_ANNOTATION = f"{PREFIX}/redfish-system"

# NVIDIA DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu): set on a node while a ComputeDomain's
# channel is prepared there, and on the ResourceClaimTemplates the controller creates for a ComputeDomain.
COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
COMPUTE_DOMAIN_TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
DAEMON_TARGET = "Daemon"  # the target label's value on the IMEX daemons' claim template (not "Workload")
COMPUTE_DOMAIN_CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"
COMPUTE_DOMAIN_DAEMON_CONFIG_KIND = "ComputeDomainDaemonConfig"
# The driver of the compute-domain kubelet plugin: one pool per node (named after it) publishing the IMEX
# channel ``channel-0`` (type channel) and ``daemon-0`` (type daemon). One channel per node is why a node
# takes one ComputeDomain's pod at a time; a node without the slice cannot take one at all.
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
IMEX_CHANNEL_TYPE = "channel"

DEFAULT_CHANNEL_DEVICE_CLASSES: tuple[str, ...] = (
    "compute-domain-default-channel.nvidia.com",
    "compute-domain-channel.nvidia.com",
)
DEFAULT_GPU_DEVICE_CLASSES: tuple[str, ...] = ("gpu.nvidia.com",)
# The DRA driver whose ResourceSlices publish whole GPUs per node (NVIDIA names driver and class alike).
DEFAULT_GPU_DRIVERS: tuple[str, ...] = ("gpu.nvidia.com",)
GPU_RESOURCE = "nvidia.com/gpu"

# Written by the workload controllers whose pods may form a group (docs/GROUPS.md): read, never written.
# JobSet (sigs.k8s.io/jobset v0.11), on every pod of every child Job:
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
# Set (on the JobSet or one replicated job) when each child Job gets a topology domain of its own.
JOBSET_EXCLUSIVE_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# LeaderWorkerSet (sigs.k8s.io/lws v0.8): one group = one leader and its workers.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LWS_LEADER_NAME_ANNOTATION = "leaderworkerset.sigs.k8s.io/leader-name"
# Kubeflow training-operator v1 (PyTorchJob, MPIJob v1...) and mpi-operator v2 (MPIJob v2beta1).
TRAINING_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
TRAINING_OPERATOR_LABEL = "training.kubeflow.org/operator-name"
TRAINING_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
TRAINING_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
TRAINING_JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
# Kueue (sigs.k8s.io/kueue v0.17) pod groups of plain pods: written by the user, both on every pod.
KUEUE_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"

# Written by us at admission on a pod whose PodGroup (scheduling.k8s.io, KEP-5732) already keeps the group
# within one value of a domain label: says which PodGroup and label, and that our pod affinity is left out.
UPSTREAM_TOPOLOGY_ANNOTATION = f"{PREFIX}/upstream-topology"
