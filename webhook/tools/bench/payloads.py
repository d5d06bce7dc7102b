"""The cluster and the request bodies the benchmark sends, built from the demo object builders.

Two shapes of a node exist on purpose. The ``--cluster`` file that ``serve`` loads holds lean nodes (the
embedded loader parses YAML in pure Python, and only labels, annotations and allocatable matter to
the decisions). The NodeList that kube-scheduler sends without ``nodeCacheCapable`` holds whole Node
objects as the API server stores them on a GPU node: dozens of GPU Feature Discovery labels, images,
conditions, managedFields; about 5 KiB each, so a 5,000-node NodeList is ~25 MiB, the size the
upstream issues about full-NodeList extenders complain of. Both shapes carry the same domain labels
and GPU counts, so the decisions agree whichever one the service reads.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from webhook.demo import cluster as demo
from webhook.domain import keys

NAMESPACE = "bench"
CLIQUE_SIZE = 18
GPUS_PER_NODE = 4
MEASURED_CD = "bench-train"  # the group whose second pod the HTTP benchmark filters
MEASURED_SIZE = 8
FRESH_CD = "bench-fresh"  # a group no pod of which has been placed: the domain choice runs
FRESH_SIZE = 16
# A job larger than one domain (docs/SCHEDULER.md, "Jobs larger than one NVLink domain"): 5,000 pods of 4 GPUs,
# one per tray, in segments of one clique. Smaller clusters get the job their free cliques hold.
SEGMENTED_CD = "bench-huge"
SEGMENTED_PODS = 5000
SEGMENT_SIZE = CLIQUE_SIZE

# The bench also measures kube-scheduler's full NodeList mode (nodeCacheCapable: false): 5,000 Nodes are more
# than the default --max-body admits, so the service (in-process too) and the baseline run as such a deployment
# must (docs/HARDENING.md).
NODELIST_MAX_BODY = 64 * 1024 * 1024

Obj = dict[str, Any]


def node_name(i: int) -> str:
    return f"gpu-{i // CLIQUE_SIZE:03d}-{i % CLIQUE_SIZE:02d}"


def clique_value(i: int) -> str:
    clique = i // CLIQUE_SIZE
    return f"{demo.uid('bench-cluster', str(clique))}.{32766 - clique % 4}"


def lean_node(i: int) -> Obj:
    name = node_name(i)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": demo.uid("node", name),
                     "labels": {"kubernetes.io/hostname": name, keys.CLIQUE_LABEL: clique_value(i)}},
        "spec": {},
        "status": {"allocatable": {keys.GPU_RESOURCE: str(GPUS_PER_NODE), "cpu": "140", "memory": "860Gi"}},
    }


def full_node(i: int) -> Obj:
    """A Node as kube-scheduler marshals it from its informer: everything the API server stores."""
    node = lean_node(i)
    name = node["metadata"]["name"]
    gfd = {f"nvidia.com/{k}": v for k, v in {
        "cuda.driver.major": "570", "cuda.driver.minor": "124", "cuda.driver.rev": "06", "cuda.runtime.major": "12",
        "cuda.runtime.minor": "8", "gfd.timestamp": "1764670503", "gpu.compute.major": "10",
        "gpu.compute.minor": "0", "gpu.count": str(GPUS_PER_NODE), "gpu.family": "blackwell",
        "gpu.machine": "GB200-NVL72", "gpu.memory": "189471", "gpu.mode": "compute",
        "gpu.product": "NVIDIA-GB200", "gpu.replicas": "1", "gpu.sharing-strategy": "none", "mig.capable": "true",
        "mig.strategy": "single", "mps.capable": "false", "vgpu.present": "false", "gpu.present": "true",
        "gpu-driver-upgrade-state": "upgrade-done", "gpu.deploy.container-toolkit": "true",
        "gpu.deploy.dcgm": "true", "gpu.deploy.dcgm-exporter": "true", "gpu.deploy.device-plugin": "true",
        "gpu.deploy.driver": "pre-installed", "gpu.deploy.gpu-feature-discovery": "true",
        "gpu.deploy.node-status-exporter": "true", "gpu.deploy.operator-validator": "true",
    }.items()}
    node["metadata"]["labels"].update({
        **gfd, "beta.kubernetes.io/arch": "arm64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
        "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "gb200-nvl72-tray",
        "topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": f"hall-{i // 1000}",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "ARM", "feature.node.kubernetes.io/kernel-version.full":
        "6.8.0-1021-nvidia-64k", "feature.node.kubernetes.io/pci-10de.present": "true",
    })
    node["metadata"].update({
        "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach":
                        "true", "nfd.node.kubernetes.io/feature-labels": "cpu-model.vendor_id,kernel-version.full",
                        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock"},
        "resourceVersion": str(100000 + i), "creationTimestamp": "2026-11-01T00:00:00Z",
        "managedFields": [{"manager": m, "operation": "Update", "apiVersion": "v1", "time": "2026-12-01T10:00:00Z",
                           "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}
                          for m in ("kubelet", "kube-controller-manager", "gpu-feature-discovery", "nfd-worker")],
    })
    node["spec"] = {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24", "providerID": f"baremetal://{name}"}
    quantities = {"cpu": "144", "memory": "905164Mi", "ephemeral-storage": "3750000000Ki", "hugepages-2Mi": "0",
                  keys.GPU_RESOURCE: str(GPUS_PER_NODE), "pods": "110"}
    conditions = [{"type": t, "status": s, "lastHeartbeatTime": "2026-12-02T10:14:00Z",
                   "lastTransitionTime": "2026-11-01T00:02:00Z", "reason": r, "message": msg}
                  for t, s, r, msg in (
                      ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
                      ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                      ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                      ("Ready", "True", "KubeletReady", "kubelet is posting ready status"))]
    images = [{"names": [f"nvcr.io/nvidia/{img}@sha256:{demo.uid(img).replace('-', '')}",
                         f"nvcr.io/nvidia/{img}:25.0{k % 9}"], "sizeBytes": 1_000_000 * (k + 7)}
              for k, img in enumerate(("pytorch", "nemo", "tritonserver", "cuda", "k8s-device-plugin", "dcgm-exporter",
                                       "gpu-feature-discovery", "k8s-dra-driver-gpu", "gpu-operator-validator",
                                       "container-toolkit", "driver", "cloud-native/k8s-mig-manager"))]
    node["status"] = {
        "capacity": quantities, "allocatable": {**quantities, "cpu": "140", "memory": "880588Mi"},
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256 % 256}.{i % 256}"},
                      {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": demo.uid("machine", name).replace("-", ""), "systemUUID": demo.uid("sys", name),
                     "bootID": demo.uid("boot", name), "kernelVersion": "6.8.0-1021-nvidia-64k",
                     "osImage": "Ubuntu 24.04.2 LTS", "containerRuntimeVersion": "containerd://2.1.4",
                     "kubeletVersion": "v1.34.2", "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": "arm64"},
        "images": images,
    }
    return node


def cd_objects(name: str, num_nodes: int) -> list[Obj]:
    """A ComputeDomain and its channel template in the bench namespace (UIDs stay those of the demo)."""
    out = [demo.compute_domain(name, num_nodes), demo.channel_template(name)]
    for obj in out:
        obj["metadata"]["namespace"] = NAMESPACE
    return out


def pod(name: str, cd: str | None, node: str | None = None, phase: str = "Pending") -> Obj:
    return demo.pod(name, cd, GPUS_PER_NODE, node=node, phase=phase, namespace=NAMESPACE)


def busy_trays(clique: int) -> int:
    """Trays of ``clique`` that running jobs use: every third clique fully, every other one partly."""
    return CLIQUE_SIZE if clique % 3 == 0 else (clique * 7) % CLIQUE_SIZE if clique % 2 else 0


def segmented_job_pods(nodes: int) -> int:
    """Pods of the segmented job on a cluster of ``nodes``: 5,000, or what its wholly free cliques hold
    (a segment takes a whole clique, one pod per tray) where that is less."""
    free = sum(1 for clique in range(nodes // CLIQUE_SIZE) if busy_trays(clique) == 0)
    return min(SEGMENTED_PODS, free * SEGMENT_SIZE)


def segmented_cd_objects(nodes: int) -> list[Obj]:
    """The segmented job's ComputeDomain, annotated with its segment size, and its channel template."""
    out = cd_objects(SEGMENTED_CD, max(segmented_job_pods(nodes), 1))
    out[0]["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: str(SEGMENT_SIZE)}
    return out


def cluster_objects(nodes: int) -> list[Obj]:
    """``nodes`` lean nodes in cliques of 18, the measured ComputeDomains, and running jobs that fill
    about half of the cliques (``busy_trays``), so the domain choice has to look at used and free
    capacity, as in a busy cluster."""
    out: list[Obj] = [lean_node(i) for i in range(nodes)]
    out += cd_objects(MEASURED_CD, MEASURED_SIZE) + cd_objects(FRESH_CD, FRESH_SIZE)
    out += segmented_cd_objects(nodes)
    cliques = (nodes + CLIQUE_SIZE - 1) // CLIQUE_SIZE
    for clique in range(cliques):
        used = busy_trays(clique)
        members = [i for i in range(clique * CLIQUE_SIZE, min(nodes, (clique + 1) * CLIQUE_SIZE))][:used]
        if not members:
            continue
        cd = f"running-{clique:03d}"
        out += cd_objects(cd, len(members))
        out += [pod(f"{cd}-{k}", cd, node=node_name(i), phase="Running") for k, i in enumerate(members)]
    return out


def write_cluster(path: Path, nodes: int) -> Path:
    """The ``--cluster`` file: a JSON ``List`` (JSON is YAML, which the embedded loader reads)."""
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster_objects(nodes)}))
    return path


def names(nodes: int) -> list[str]:
    return [node_name(i) for i in range(nodes)]


def extender_args(pod_obj: Obj, nodes: int, full: bool) -> Obj:
    """ExtenderArgs as kube-scheduler marshals them: Go field names, the unused field null."""
    if full:
        node_list = {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "918273"},
                     "items": [full_node(i) for i in range(nodes)]}
        return {"Pod": pod_obj, "Nodes": node_list, "NodeNames": None}
    return {"Pod": pod_obj, "Nodes": None, "NodeNames": names(nodes)}


def scheduled_pod(name: str, cd: str) -> Obj:
    """A group pod as the scheduler sees it: admitted (mutated), with a UID and the imex scheduler."""
    obj = pod(name, cd)
    obj["metadata"].update({"resourceVersion": "918273", "creationTimestamp": "2026-12-02T10:15:03Z",
                            "generateName": f"{cd}-"})
    obj["spec"].update({"serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
                        "dnsPolicy": "ClusterFirst", "priority": 0, "enableServiceLinks": True})
    return obj


def segment_pod(rank: int) -> Obj:
    """Member ``rank`` of the segmented job as an Indexed Job's pod reaches the scheduler: its completion
    index as annotation and label, which puts it in segment floor(rank / 18)."""
    obj = scheduled_pod(f"{SEGMENTED_CD}-{rank}", SEGMENTED_CD)
    meta = obj["metadata"]
    meta["annotations"][keys.COMPLETION_INDEX] = str(rank)
    meta["labels"].update({keys.COMPLETION_INDEX: str(rank), "batch.kubernetes.io/job-name": SEGMENTED_CD})
    return obj


def admission_review(cd: str = MEASURED_CD) -> Obj:
    """A Pod CREATE review for a Job pod of ``cd`` as kube-apiserver sends it: no name or UID yet."""
    obj = copy.deepcopy(pod("x", cd))
    meta = obj["metadata"]
    del meta["name"], meta["uid"]
    meta.update({"generateName": f"{cd}-0-", "creationTimestamp": None,
                 "labels": {"batch.kubernetes.io/job-name": cd, "job-name": cd,
                            "batch.kubernetes.io/job-completion-index": "0"},
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": cd, "controller": True,
                                      "uid": demo.uid("job", NAMESPACE, cd), "blockOwnerDeletion": True}]})
    obj["spec"]["schedulerName"] = "default-scheduler"
    return {
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": demo.uid("review", cd), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NAMESPACE, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                         "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }
