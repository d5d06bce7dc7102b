"""Pods and objects shaped as the workload controllers make them, for the tests of docs/GROUPS.md.

Each builder reproduces what one controller release writes (read from its source, never copied): the
labels, annotations, ownerReferences, names and defaults its objects carry when the API server stores them.

- Kubernetes 1.37 (k8s.io/api v0.37.2): the Job controller's gang (Job ``spec.scheduling``) -> Workload and
  PodGroup (scheduling.k8s.io/v1beta1), pods with ``spec.schedulingGroup`` and an ownerReference to it;
  1.36's PodGroup (v1alpha2); 1.35's Workload (v1alpha1) and pods with ``spec.workloadRef``;
- JobSet v0.11.1: the JobSet (defaults of its webhook applied), child Jobs ``<js>-<rjob>-<i>``, their pods;
- LeaderWorkerSet v0.8.0: the leader and worker StatefulSets' pods, before and after LWS's pod webhook;
- training-operator v1.9.3 (PyTorchJob, kubeflow.org/v1) and mpi-operator v0.8.0 (MPIJob v2beta1);
- Kueue v0.17.0: a plain-pod group after Kueue's pod webhook.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from typing import Any

from webhook.demo import cluster as demo
from webhook.domain import keys

NS = "ml"
Obj = dict[str, Any]
IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
GPU_TEMPLATE = "gpu-4"  # a ResourceClaimTemplate asking for 4 whole GPUs


def uid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "controller-objects/" + "/".join(parts)))


def _hex(text: str, algorithm: str = "sha1") -> str:
    return hashlib.new(algorithm, text.encode(), usedforsecurity=False).hexdigest()


def gpu_claim_template(name: str = GPU_TEMPLATE, count: int = 4) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NS, "uid": uid("rct", name)},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}}}}


def pod_spec(gpus: int = 0, claim_template: str | None = None, cd: str | None = None) -> Obj:
    """A pod template's spec: device-plugin GPUs, a GPU claim from a template, a ComputeDomain's channel."""
    resources: Obj = {}
    claims: list[Obj] = []
    if gpus:
        resources = {"limits": {keys.GPU_RESOURCE: str(gpus)}, "requests": {keys.GPU_RESOURCE: str(gpus)}}
    if claim_template:
        claims.append({"name": "gpus", "resourceClaimTemplateName": claim_template})
    if cd:
        claims.append({"name": "imex-channel", "resourceClaimTemplateName": demo.template_name(cd)})
    if claims:
        resources["claims"] = [{"name": c["name"]} for c in claims]
    spec: Obj = {"containers": [{"name": "main", "image": IMAGE, "resources": resources}]}
    if claims:
        spec["resourceClaims"] = claims
    return spec


def _pod(name: str, labels: dict[str, str], annotations: dict[str, str], owners: list[Obj], spec: Obj,
         **extra: Any) -> Obj:
    stored = {"schedulerName": "default-scheduler", "restartPolicy": "Never", **copy.deepcopy(spec), **extra}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid("pod", name), "labels": labels,
                         "annotations": annotations, "ownerReferences": owners},
            "spec": stored, "status": {"phase": "Pending"}}


def owner(api_version: str, kind: str, name: str, controller: bool = True) -> Obj:
    ref: Obj = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid(kind, name)}
    if controller:
        ref.update(controller=True, blockOwnerDeletion=True)
    return ref


def _job_pod_meta(job: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    """What the Job controller adds to an Indexed Job's pod."""
    job_uid = uid("Job", job)
    labels = {"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": job,
              "controller-uid": job_uid, "job-name": job, "batch.kubernetes.io/job-completion-index": str(index)}
    return labels, {"batch.kubernetes.io/job-completion-index": str(index)}


# -- JobSet v0.11.1 ----------------------------------------------------------------------------------------

def jobset(name: str, replicated: list[tuple[str, int, int, Obj]], exclusive: str | None = None) -> Obj:
    """``replicated``: (name, replicas, parallelism, pod spec), as written, with the webhook's defaults."""
    jobs = [{"name": rname, "groupName": "default", "replicas": replicas,
             "template": {"spec": {"parallelism": parallelism, "completions": parallelism,
                                   "completionMode": "Indexed", "backoffLimit": 0,
                                   "template": {"spec": {**copy.deepcopy(spec), "restartPolicy": "OnFailure"}}}}}
            for rname, replicas, parallelism, spec in replicated]
    meta: Obj = {"name": name, "namespace": NS, "uid": uid("JobSet", name)}
    if exclusive:
        meta["annotations"] = {keys.JOBSET_EXCLUSIVE_ANNOTATION: exclusive}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"replicatedJobs": jobs, "successPolicy": {"operator": "All"},
                     "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                     "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True}},
            "status": {"restarts": 0}}


def _jobset_marks(js: Obj, rjob: Obj, index: int) -> dict[str, str]:
    """The labels (and, identically, annotations) JobSet puts on a child Job and its pod template."""
    name, rjobs = js["metadata"]["name"], js["spec"]["replicatedJobs"]
    before = sum(r["replicas"] for r in rjobs[: rjobs.index(rjob)])
    total = str(sum(r["replicas"] for r in rjobs))
    job = f"{name}-{rjob['name']}-{index}"
    return {keys.JOBSET_NAME_LABEL: name, "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"],
            keys.JOBSET_REPLICATED_JOB_LABEL: rjob["name"], "jobset.sigs.k8s.io/restart-attempt": "0",
            "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob["replicas"]),
            "jobset.sigs.k8s.io/global-replicas": total, keys.JOBSET_JOB_INDEX_LABEL: str(index),
            "jobset.sigs.k8s.io/job-key": _hex(f"{NS}/{job}"),
            "jobset.sigs.k8s.io/job-global-index": str(before + index),
            "jobset.sigs.k8s.io/group-name": "default", "jobset.sigs.k8s.io/group-replicas": total,
            "jobset.sigs.k8s.io/job-group-index": str(before + index)}


def jobset_children(js: Obj) -> list[Obj]:
    """The child Jobs and the pods their controller makes, with JobSet's labels and annotations."""
    out: list[Obj] = []
    name = js["metadata"]["name"]
    exclusive = (js["metadata"].get("annotations") or {}).get(keys.JOBSET_EXCLUSIVE_ANNOTATION)
    for rjob in js["spec"]["replicatedJobs"]:
        for i in range(rjob["replicas"]):
            job = f"{name}-{rjob['name']}-{i}"
            marks = _jobset_marks(js, rjob, i)
            annotations = dict(marks, **({keys.JOBSET_EXCLUSIVE_ANNOTATION: exclusive} if exclusive else {}))
            spec = rjob["template"]["spec"]
            out.append({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": job, "namespace": NS, "uid": uid("Job", job), "labels": marks,
                                     "annotations": annotations,
                                     "ownerReferences": [owner("jobset.x-k8s.io/v1alpha2", "JobSet", name)]},
                        "spec": spec | {"suspend": False, "template": {
                            "metadata": {"labels": marks, "annotations": annotations},
                            "spec": copy.deepcopy(spec["template"]["spec"])}}})
            for p in range(spec["parallelism"]):
                labels, extra = _job_pod_meta(job, p)
                out.append(_pod(f"{job}-{p}-{_hex(job + str(p))[:5]}", marks | labels, annotations | extra,
                                [owner("batch/v1", "Job", job)], spec["template"]["spec"],
                                hostname=f"{job}-{p}", subdomain=name))
    return out


# -- LeaderWorkerSet v0.8.0 ---------------------------------------------------------------------------------

def lws_pods(name: str, group: int, size: int, spec: Obj, labelled: bool = True) -> list[Obj]:
    """One group: the leader ``<lws>-<group>`` of the leader StatefulSet and its workers ``<leader>-<j>`` of
    the worker StatefulSet named after the leader. ``labelled``: after LWS's pod webhook (group-index and
    group-key on the leader, worker-index on the workers)."""
    leader = f"{name}-{group}"
    key = _hex(f"{NS}/{leader}")
    revision = "6d4b9f7c8"
    leader_labels = {keys.LWS_WORKER_INDEX_LABEL: "0", keys.LWS_NAME_LABEL: name,
                     "leaderworkerset.sigs.k8s.io/template-revision-hash": revision,
                     "apps.kubernetes.io/pod-index": str(group), "controller-revision-hash": f"{name}-{revision}",
                     "statefulset.kubernetes.io/pod-name": leader}
    if labelled:
        leader_labels |= {keys.LWS_GROUP_INDEX_LABEL: str(group), keys.LWS_GROUP_KEY_LABEL: key}
    size_note = {keys.LWS_SIZE_ANNOTATION: str(size)}
    pods = [_pod(leader, leader_labels, size_note, [owner("apps/v1", "StatefulSet", name)], spec,
                 restartPolicy="Always", hostname=leader, subdomain=name)]
    for j in range(1, size):
        worker = f"{leader}-{j}"
        labels = {keys.LWS_GROUP_INDEX_LABEL: str(group), keys.LWS_NAME_LABEL: name, keys.LWS_GROUP_KEY_LABEL: key,
                  "leaderworkerset.sigs.k8s.io/template-revision-hash": revision,
                  "apps.kubernetes.io/pod-index": str(j), "statefulset.kubernetes.io/pod-name": worker}
        if labelled:
            labels[keys.LWS_WORKER_INDEX_LABEL] = str(j)
        pods.append(_pod(worker, labels, size_note | {keys.LWS_LEADER_NAME_ANNOTATION: leader},
                         [owner("apps/v1", "StatefulSet", leader)], spec, restartPolicy="Always",
                         hostname=worker, subdomain=name))
    return pods


# -- Kubeflow: training-operator v1.9.3 (PyTorchJob), mpi-operator v0.8.0 (MPIJob v2beta1) ---------------------

def pytorchjob(name: str, masters: int, workers: int, spec: Obj) -> Obj:
    def replica() -> Obj:
        return {"restartPolicy": "OnFailure", "template": {"spec": copy.deepcopy(spec)}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": NS, "uid": uid("PyTorchJob", name)},
            "spec": {"runPolicy": {"cleanPodPolicy": "None"},
                     "pytorchReplicaSpecs": {"Master": {"replicas": masters, **replica()},
                                             "Worker": {"replicas": workers, **replica()}}}}


def pytorchjob_pods(job: Obj) -> list[Obj]:
    name = job["metadata"]["name"]
    out = []
    for rtype, rspec in job["spec"]["pytorchReplicaSpecs"].items():
        for i in range(rspec["replicas"]):
            labels = {keys.TRAINING_OPERATOR_LABEL: "pytorchjob-controller", keys.TRAINING_JOB_NAME_LABEL: name,
                      keys.TRAINING_REPLICA_TYPE_LABEL: rtype.lower(), keys.TRAINING_REPLICA_INDEX_LABEL: str(i)}
            if rtype == "Master":
                labels[keys.TRAINING_JOB_ROLE_LABEL] = "master"
            out.append(_pod(f"{name}-{rtype.lower()}-{i}", labels, {},
                            [owner("kubeflow.org/v1", "PyTorchJob", name)], rspec["template"]["spec"],
                            restartPolicy="OnFailure"))
    return out


def mpijob(name: str, workers: int, worker_spec: Obj, launcher_spec: Obj) -> Obj:
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "namespace": NS, "uid": uid("MPIJob", name)},
            "spec": {"slotsPerWorker": 4, "runPolicy": {"cleanPodPolicy": "Running"},
                     "sshAuthMountPath": "/home/mpiuser/.ssh", "mpiImplementation": "OpenMPI",
                     "mpiReplicaSpecs": {
                         "Launcher": {"replicas": 1, "template": {"spec": copy.deepcopy(launcher_spec)}},
                         "Worker": {"replicas": workers, "template": {"spec": copy.deepcopy(worker_spec)}}}}}


def mpijob_pods(job: Obj) -> list[Obj]:
    """The launcher (a pod of the Job ``<name>-launcher``) and the workers ``<name>-worker-<i>``."""
    name, specs = job["metadata"]["name"], job["spec"]["mpiReplicaSpecs"]
    def marks(role: str) -> dict[str, str]:
        return {keys.TRAINING_OPERATOR_LABEL: "mpi-operator", keys.TRAINING_JOB_NAME_LABEL: name,
                keys.TRAINING_JOB_ROLE_LABEL: role}
    launcher = f"{name}-launcher"
    labels, extra = _job_pod_meta(launcher, 0)
    out = [_pod(f"{launcher}-{_hex(launcher)[:5]}", marks("launcher") | labels, extra,
                [owner("batch/v1", "Job", launcher)], specs["Launcher"]["template"]["spec"],
                hostname=launcher, subdomain=name)]
    for i in range(specs["Worker"]["replicas"]):
        out.append(_pod(f"{name}-worker-{i}", marks("worker") | {keys.TRAINING_REPLICA_INDEX_LABEL: str(i)}, {},
                        [owner("kubeflow.org/v2beta1", "MPIJob", name)], specs["Worker"]["template"]["spec"],
                        hostname=f"{name}-worker-{i}", subdomain=name))
    return out


# -- Kueue v0.17.0 -----------------------------------------------------------------------------------------------

def kueue_pods(group: str, total: int, spec: Obj, count: int | None = None, total_text: str | None = None) -> list[Obj]:
    """Plain pods of a Kueue pod group as Kueue's pod webhook leaves them (gated until admitted)."""
    out = []
    for i in range(total if count is None else count):
        labels = {"kueue.x-k8s.io/queue-name": "user-queue", keys.KUEUE_GROUP_NAME_LABEL: group,
                  "kueue.x-k8s.io/managed": "true"}
        annotations = {keys.KUEUE_GROUP_TOTAL_COUNT_ANNOTATION: total_text or str(total),
                       "kueue.x-k8s.io/role-hash": "b4f2a8c1"}
        pod = _pod(f"{group}-{i}", labels, annotations, [], spec,
                   schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
        pod["metadata"]["finalizers"] = ["kueue.x-k8s.io/managed"]
        out.append(pod)
    return out


# -- Kubernetes' gang scheduling: 1.37 (v1beta1, the Job controller), 1.36 (v1alpha2), 1.35 (v1alpha1) -----------

def gang_job(name: str, parallelism: int, spec: Obj, min_count: int | None = None) -> list[Obj]:
    """A 1.37 Job with ``spec.scheduling`` gang, the Workload and PodGroup its controller makes, its pods."""
    workload = f"{name}-{_hex(uid('Job', name), 'sha256')[:10]}"
    template = f"{name}-pgt-0"
    pod_group = f"{workload}-{template}-{_hex(workload + template, 'sha256')[:10]}"
    gang = {"gang": {"minCount": min_count if min_count is not None else parallelism}}
    out: list[Obj] = [
        {"apiVersion": "batch/v1", "kind": "Job",
         "metadata": {"name": name, "namespace": NS, "uid": uid("Job", name)},
         "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                  "scheduling": {"schedulingPolicy": {"gang": {} if min_count is None else {"minCount": min_count}}},
                  "template": {"spec": copy.deepcopy(spec)}}},
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
         "metadata": {"name": workload, "namespace": NS, "uid": uid("Workload", workload),
                      "ownerReferences": [owner("batch/v1", "Job", name)]},
         "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
                  "podGroupTemplates": [{"name": template, "schedulingPolicy": gang}]}},
        pod_group_object(pod_group, gang, [owner("batch/v1", "Job", name),
                                           owner("scheduling.k8s.io/v1beta1", "Workload", workload, False)],
                         workload_ref={"workloadName": workload, "templateName": template}),
    ]
    for i in range(parallelism):
        labels, extra = _job_pod_meta(name, i)
        out.append(_pod(f"{name}-{i}-{_hex(name + str(i))[:5]}", labels, extra,
                        [owner("batch/v1", "Job", name), owner("scheduling.k8s.io/v1beta1", "PodGroup", pod_group,
                                                               False)],
                        spec, schedulingGroup={"podGroupName": pod_group}))
    return out


def pod_group_object(name: str, policy: Obj, owners: list[Obj] | None = None, version: str = "v1beta1",
                     workload_ref: Obj | None = None) -> Obj:
    spec: Obj = {"schedulingPolicy": policy}
    if version == "v1alpha2":
        spec["podGroupTemplateRef"] = {"workload": {"workloadName": "wl", "podGroupTemplateName": "workers"}}
    elif workload_ref:
        spec["workloadRef"] = workload_ref
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS, "uid": uid("PodGroup", name), "ownerReferences": owners or []},
            "spec": spec}


def pod_in_group(name: str, pod_group: str, spec: Obj) -> Obj:
    """A pod of a 1.36+ PodGroup created by hand or by a controller: ``spec.schedulingGroup``."""
    return _pod(name, {}, {}, [], spec, schedulingGroup={"podGroupName": pod_group})


def workload_1_35(name: str, groups: list[tuple[str, int | None]]) -> Obj:
    """A 1.35 scheduling.k8s.io/v1alpha1 Workload; a ``None`` minCount is the basic policy."""
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": NS, "uid": uid("Workload", name)},
            "spec": {"podGroups": [{"name": g, "policy": {"basic": {}} if n is None else {"gang": {"minCount": n}}}
                                   for g, n in groups]}}


def pod_in_workload(name: str, workload: str, pod_group: str, spec: Obj, replica_key: str = "") -> Obj:
    ref = {"name": workload, "podGroup": pod_group} | ({"podGroupReplicaKey": replica_key} if replica_key else {})
    return _pod(name, {}, {}, [], spec, workloadRef=ref)
