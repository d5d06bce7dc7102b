"""What a pod says about the groups Kubernetes' gang scheduling and the workload controllers put it in
(docs/GROUPS.md), read once when the pod is parsed: a few strings, not the pod's foreign labels.

- ``spec.schedulingGroup.podGroupName`` (Kubernetes 1.36+) and ``spec.workloadRef`` (1.35);
- JobSet's ``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index`` labels and the
  ``alpha.jobset.sigs.k8s.io/exclusive-topology`` annotation;
- LeaderWorkerSet's ``leaderworkerset.sigs.k8s.io/name`` and ``group-key`` labels, ``size`` and
  ``leader-name`` annotations. The leader gets its group-key from LWS's own pod webhook, which may run
  after ours: the key is then computed as that webhook computes it, so both invocations agree;
- the Kubeflow ``training.kubeflow.org/job-name`` and ``operator-name`` labels;
- Kueue's ``kueue.x-k8s.io/pod-group-name`` label and ``pod-group-total-count`` annotation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from webhook.domain import keys
from webhook.domain.model import WorkloadRefs
from webhook.wire.fields import NAME_MAX, map_, str_

RAW_MAX = 64  # characters of a size annotation kept, enough to quote it in a message
# A pod in a controller's group carries at least one of these labels (the annotations come with them).
_LABELS = frozenset({keys.JOBSET_NAME_LABEL, keys.LWS_NAME_LABEL, keys.TRAINING_JOB_NAME_LABEL,
                     keys.KUEUE_GROUP_NAME_LABEL})

# The training-operator's controller names (training.kubeflow.org/operator-name) and mpi-operator's.
TRAINING_OPERATORS: Mapping[str, str] = {
    "pytorchjob-controller": "PyTorchJob", "mpijob-controller": "MPIJob", "mpi-operator": "MPIJob",
    "tfjob-controller": "TFJob", "jaxjob-controller": "JAXJob", "xgboostjob-controller": "XGBoostJob",
    "paddlejob-controller": "PaddleJob",
}


def lws_group_key(namespace: str, leader: str) -> str:
    """The key LeaderWorkerSet's pod webhook gives a group: the hex SHA-1 of "<namespace>/<leader pod>"."""
    return hashlib.sha1(f"{namespace}/{leader}".encode(), usedforsecurity=False).hexdigest()


def _raw(value: str | None) -> str | None:
    return None if value is None else value[:RAW_MAX]


def _name(value: str | None) -> str:
    # A foreign value beyond a name's length (a pod not validated yet) names nothing we could look up.
    return value if value is not None and len(value) <= NAME_MAX else ""


def _replica(labels: Mapping[str, str]) -> str:
    kind, index = labels.get(keys.TRAINING_REPLICA_TYPE_LABEL, ""), labels.get(keys.TRAINING_REPLICA_INDEX_LABEL, "")
    return f"{kind[:RAW_MAX]}/{index[:RAW_MAX]}" if kind and index else ""


def pod_refs(namespace: str, name: str, labels: Mapping[str, str], annotations: Mapping[str, str],
             spec: Mapping[str, Any], path: str = "pod.spec") -> WorkloadRefs | None:
    """What the pod says about the groups others put it in; ``None`` when nothing does."""
    if spec.get("schedulingGroup") is None and spec.get("workloadRef") is None and labels.keys().isdisjoint(_LABELS):
        return None  # most pods: nothing more to read, nothing kept
    group = map_(spec.get("schedulingGroup"), f"{path}.schedulingGroup")
    ref = map_(spec.get("workloadRef"), f"{path}.workloadRef")
    lws = _name(labels.get(keys.LWS_NAME_LABEL))
    leader = group_key = ""
    if lws:
        leader = _name(annotations.get(keys.LWS_LEADER_NAME_ANNOTATION))
        if not leader and name and labels.get(keys.LWS_WORKER_INDEX_LABEL, "0") == "0":
            leader = name  # the leader itself (worker-index 0, or not labelled yet by LWS's webhook)
        group_key = _name(labels.get(keys.LWS_GROUP_KEY_LABEL)) or (lws_group_key(namespace, leader) if leader else "")
    operator = labels.get(keys.TRAINING_OPERATOR_LABEL, "")
    refs = WorkloadRefs(
        pod_group=str_(group.get("podGroupName"), f"{path}.schedulingGroup.podGroupName"),
        workload=str_(ref.get("name"), f"{path}.workloadRef.name"),
        workload_pod_group=str_(ref.get("podGroup"), f"{path}.workloadRef.podGroup"),
        workload_replica_key=str_(ref.get("podGroupReplicaKey"), f"{path}.workloadRef.podGroupReplicaKey"),
        jobset=_name(labels.get(keys.JOBSET_NAME_LABEL)),
        replicated_job=_name(labels.get(keys.JOBSET_REPLICATED_JOB_LABEL)),
        job_index=_name(labels.get(keys.JOBSET_JOB_INDEX_LABEL)),
        jobset_exclusive=keys.JOBSET_EXCLUSIVE_ANNOTATION in annotations,
        lws=lws,
        lws_group_key=group_key,
        lws_leader=leader,
        lws_size=_raw(annotations.get(keys.LWS_SIZE_ANNOTATION)),
        training_job=_name(labels.get(keys.TRAINING_JOB_NAME_LABEL)),
        training_kind=TRAINING_OPERATORS.get(operator, operator[:RAW_MAX]),
        training_replica=_replica(labels) if labels.get(keys.TRAINING_JOB_NAME_LABEL) else "",
        lws_worker_index=_name(labels.get(keys.LWS_WORKER_INDEX_LABEL)) if lws else "",
        kueue_group=_name(labels.get(keys.KUEUE_GROUP_NAME_LABEL)),
        kueue_total=_raw(annotations.get(keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION)),
    )
    return None if refs == WorkloadRefs() else refs
