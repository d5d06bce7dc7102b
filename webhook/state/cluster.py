"""The in-process view of the cluster that filter and prioritize read: no API call on their path.

Fed by watch events (Kubernetes mode) or by files and recorded bindings (embedded mode). A node's GPUs are
its allocatable ``nvidia.com/gpu`` (device plugin) plus the whole GPUs its DRA ResourceSlices publish
(``webhook.domain.slices``), so DRA-only nodes have capacity too. Every object is
parsed once when it arrives; per-pod derived facts (group, demand, node) are kept and the aggregates
(GPUs used per node, members per group, domains) are updated incrementally, so building a snapshot is a
few shallow copies and happens at most once per change, not once per request.

One object that cannot be parsed or derived never stops the others: whatever it raises (a ``WireError``,
or a ``RecursionError``, ``OverflowError``, ``TypeError``... from a field no one foresaw) skips that object
alone. Skipped objects are kept by kind (``rejected_counts``, the ``imex_webhook_cache_rejected_objects``
gauge) until a later version parses or they are deleted, and each is logged once per resourceVersion,
with its name and the offending field, not again on every relist.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from webhook.domain import capacity, grouping, parsing, slices
from webhook.domain.attachments import Attachment, Phase
from webhook.domain.model import (
    Catalog,
    ClaimSpec,
    ComputeDomain,
    Job,
    Member,
    Node,
    ObjectKey,
    Pod,
    Reservation,
    Snapshot,
)
from webhook.domain.policy import Policy
from webhook.errors import WireError
from webhook.state import workload_tables
from webhook.state.workload_tables import WorkloadTables

log = logging.getLogger(__name__)

KINDS = ("Node", "Pod", "ResourceClaim", "ResourceClaimTemplate", "ComputeDomain", "Job", "ResourceSlice",
         *workload_tables.KINDS)
_SHOWN = 300  # characters of a rejection's explanation that reach the log


@dataclass(frozen=True, slots=True)
class _Derived:
    pod: Pod
    group_id: str | None
    compute_domain: str | None
    gpus: int  # what the pod holds on its node while bound and not terminated
    member: Member | None


def _key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return ("", "")
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    return (namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "")


def _version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def _explain(exc: BaseException) -> str:
    """The field and the problem for a ``WireError``; the exception's type and text for anything else."""
    if isinstance(exc, WireError):
        text = str(exc)
    else:
        try:
            text = f"{type(exc).__name__}: {exc}"
        except Exception:  # an exception whose str() fails still must not stop the watch
            text = type(exc).__name__
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


class ClusterStore:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._lock = threading.RLock()
        self._nodes: dict[str, Node] = {}  # with the GPUs of the node's DRA slices added
        self._node_objects: dict[str, Node] = {}  # as parsed from the Node alone
        self._slices: dict[str, slices.SliceGpus] = {}
        self._dra_gpus: dict[str, int] = defaultdict(int)
        self._pods: dict[ObjectKey, _Derived] = {}
        self._templates: dict[ObjectKey, ClaimSpec] = {}
        self._claims: dict[ObjectKey, ClaimSpec] = {}
        self._cds: dict[str, ComputeDomain] = {}
        self._cd_keys: dict[ObjectKey, str] = {}
        self._jobs: dict[ObjectKey, Job] = {}
        self._workloads = WorkloadTables()  # PodGroups, Workloads, JobSets, training jobs (docs/GROUPS.md)
        self._used: dict[str, int] = defaultdict(int)
        self._node_groups: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._node_cds: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._members: dict[str, dict[ObjectKey, Member]] = defaultdict(dict)
        self._fabric_free: dict[str, int] = {}
        self._attachments: dict[str, Attachment] = {}  # by pod UID
        self._uids: dict[str, ObjectKey] = {}
        self._reservations: dict[str, Reservation] = {}
        self._synced: dict[str, bool] = {}
        self._version = 0
        self._snapshot: Snapshot | None = None
        # The nodes and domains of the last snapshot, rebuilt only after a node changed: their identity marks
        # the node generation that memoized node sets (webhook.state.node_sets) are keyed by.
        self._node_view: tuple[dict[str, Node], dict[str, tuple[str, ...]]] | None = None
        # Objects skipped because they could not be parsed or derived, by kind: key -> resourceVersion.
        self._rejects: dict[str, dict[ObjectKey, str]] = defaultdict(dict)
        self._deferred: set[str] | None = None  # namespaces to re-derive at the end of a relist

    # -- feeding -------------------------------------------------------------------------------------

    def expect(self, kinds: Iterable[str]) -> None:
        """Declare the kinds whose initial list must arrive before the store counts as synced."""
        with self._lock:
            for kind in kinds:
                self._synced.setdefault(kind, False)

    def mark_synced(self, kind: str, synced: bool = True) -> None:
        with self._lock:
            self._synced[kind] = synced

    def sync_state(self) -> dict[str, bool]:
        with self._lock:
            return dict(self._synced)

    @property
    def synced(self) -> bool:
        with self._lock:
            return all(self._synced.values())

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        """A full relist: whatever is not in ``objects`` is gone."""
        objects = list(objects)
        with self._lock:
            present = {_key(o) for o in objects}
            self._deferred = set()
            try:
                for key in [k for k in self._keys(kind) if k not in present]:
                    self._remove(kind, key)
                rejects = self._rejects[kind]
                for key in [k for k in rejects if k not in present]:
                    del rejects[key]
                for obj in objects:
                    self._upsert(kind, obj)
            finally:
                namespaces, self._deferred = self._deferred, None
            for namespace in sorted(namespaces):
                self._rederive(namespace)
            self._changed()

    def apply(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""
        with self._lock:
            if event == "DELETED":
                self._remove(kind, _key(obj))
                self._rejects[kind].pop(_key(obj), None)
            else:
                self._upsert(kind, obj)
            self._changed()

    def set_fabric_free(self, free: Mapping[str, int]) -> None:
        with self._lock:
            if dict(free) != self._fabric_free:
                self._fabric_free = dict(free)
                self._changed()

    def set_reservations(self, reservations: Mapping[str, Reservation]) -> None:
        with self._lock:
            self._reservations = dict(reservations)
            self._changed()

    def replace_attachments(self, items: Iterable[Attachment]) -> None:
        with self._lock:
            self._attachments = {a.pod_uid: a for a in items}
            self._changed()

    def put_attachment(self, att: Attachment) -> None:
        with self._lock:
            self._attachments[att.pod_uid] = att
            self._changed()

    def drop_attachment(self, pod_uid: str) -> None:
        with self._lock:
            if self._attachments.pop(pod_uid, None) is not None:
                self._changed()

    def attachments(self) -> dict[str, Attachment]:
        with self._lock:
            return dict(self._attachments)

    def pod_by_uid(self, uid: str) -> Pod | None:
        with self._lock:
            key = self._uids.get(uid)
            derived = self._pods.get(key) if key else None
            return derived.pod if derived else None

    # -- reading -------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        with self._lock:
            if self._snapshot is None or self._snapshot.version != self._version:
                self._snapshot = self._build()
            return self._snapshot

    def pod(self, namespace: str, name: str) -> Pod | None:
        with self._lock:
            derived = self._pods.get((namespace, name))
            return derived.pod if derived else None

    @property
    def rejected(self) -> int:
        """How many objects are skipped now, all kinds together."""
        with self._lock:
            return sum(len(r) for r in self._rejects.values())

    def rejected_counts(self) -> dict[str, int]:
        """Objects skipped now because they could not be parsed, for every kind the store holds."""
        with self._lock:
            return {kind: len(self._rejects.get(kind) or ()) for kind in KINDS}

    def raw_counts(self) -> dict[str, int]:
        with self._lock:
            return {
                "Node": len(self._nodes), "Pod": len(self._pods), "ResourceClaim": len(self._claims),
                "ResourceClaimTemplate": len(self._templates), "ComputeDomain": len(self._cds),
                "Job": len(self._jobs), "ResourceSlice": len(self._slices), **self._workloads.counts(),
            }

    # -- internals -----------------------------------------------------------------------------------

    def _keys(self, kind: str) -> list[ObjectKey]:
        if kind == "Node":
            return [("", n) for n in self._node_objects]
        if kind == "ResourceSlice":
            return [("", n) for n in self._slices]
        if kind == "ComputeDomain":
            return list(self._cd_keys)
        if kind in workload_tables.KINDS:
            return self._workloads.keys(kind)
        tables: dict[str, dict[ObjectKey, Any]] = {
            "Pod": dict(self._pods), "ResourceClaim": self._claims,
            "ResourceClaimTemplate": self._templates, "Job": self._jobs,
        }
        return list(tables[kind])

    def _changed(self) -> None:
        self._version += 1

    def _upsert(self, kind: str, obj: Mapping[str, Any]) -> None:
        try:
            self._parse_in(kind, obj)
        except Exception as exc:  # any failure of one object skips that object, nothing more
            self._reject(kind, _key(obj), _version(obj), exc)
        else:
            self._rejects[kind].pop(_key(obj), None)

    def _reject(self, kind: str, key: ObjectKey, version: str, exc: BaseException) -> None:
        rejects = self._rejects[kind]
        if key in rejects and rejects[key] == version:
            return  # already logged: the same object again, from a relist
        rejects[key] = version
        name = "/".join(k for k in key if k) or "(unnamed)"
        log.warning("skipping malformed %s %s (resourceVersion %s): %s", kind, name, version or "?", _explain(exc))

    def _parse_in(self, kind: str, obj: Mapping[str, Any]) -> None:
        if not isinstance(obj, Mapping):
            raise WireError(kind, f"expected an object, got {type(obj).__name__}")
        if kind == "Node":
            node = parsing.node(obj, self.policy.domain_labels)
            self._node_objects[node.name] = node
            self._refresh_node(node.name)
        elif kind == "ResourceSlice":
            self._set_slice(_key(obj)[1], slices.resource_slice(obj, self.policy.gpu_drivers))
        elif kind == "Pod":
            self._set_pod(parsing.pod(obj, "pod"))
        elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
            spec = parsing.claim_spec(obj, template=kind == "ResourceClaimTemplate", path=kind)
            table = self._templates if kind == "ResourceClaimTemplate" else self._claims
            table[(spec.namespace, spec.name)] = spec
            self._rederive(spec.namespace)
        elif kind == "ComputeDomain":
            cd = parsing.compute_domain(obj)
            self._cds[cd.uid] = cd
            self._cd_keys[(cd.namespace, cd.name)] = cd.uid
            self._rederive(cd.namespace)
        elif kind == "Job":
            job = parsing.job(obj)
            self._jobs[(job.namespace, job.name)] = job
            self._rederive(job.namespace)
        elif kind in workload_tables.KINDS:
            namespace = self._workloads.upsert(kind, obj, _key(obj))
            if namespace is not None:
                self._rederive(namespace)
        else:
            raise ValueError(f"unknown kind {kind}")

    def _remove(self, kind: str, key: ObjectKey) -> None:
        if kind == "Node":
            self._node_objects.pop(key[1], None)
            self._refresh_node(key[1])
        elif kind == "ResourceSlice":
            self._set_slice(key[1], None)
        elif kind == "Pod":
            self._unset_pod(key)
        elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
            table = self._templates if kind == "ResourceClaimTemplate" else self._claims
            if table.pop(key, None) is not None:
                self._rederive(key[0])
        elif kind == "ComputeDomain":
            uid = self._cd_keys.pop(key, None)
            if uid is not None:
                self._cds.pop(uid, None)
                self._rederive(key[0])
        elif kind == "Job":
            if self._jobs.pop(key, None) is not None:
                self._rederive(key[0])
        elif kind in workload_tables.KINDS:
            namespace = self._workloads.remove(kind, key)
            if namespace is not None:
                self._rederive(namespace)

    def _set_slice(self, name: str, new: slices.SliceGpus | None) -> None:
        old = self._slices.pop(name, None)
        if new is not None:
            self._slices[name] = new
        touched = {s.node for s in (old, new) if s is not None and s.node}
        for s in (old, new):
            if s is not None and s.node:
                self._dra_gpus[s.node] += s.gpus if s is new else -s.gpus
        for node in touched:
            if self._dra_gpus[node] <= 0:
                del self._dra_gpus[node]
            self._refresh_node(node)

    def _refresh_node(self, name: str) -> None:
        self._node_view = None
        parsed = self._node_objects.get(name)
        if parsed is None:
            self._nodes.pop(name, None)
            return
        dra = self._dra_gpus.get(name, 0)
        self._nodes[name] = replace(parsed, gpus=parsed.gpus + dra, dra_gpus=dra) if dra else parsed

    def _catalog(self) -> Catalog:
        w = self._workloads
        return Catalog(self._templates, self._claims, self._cds, self._jobs, w.pod_groups, w.gang_workloads,
                       w.controllers)

    def _derive(self, pod: Pod) -> _Derived:
        catalog = self._catalog()
        resolution = grouping.resolve(pod, catalog, self.policy)
        need = capacity.demand(pod, catalog, self.policy)
        group = resolution.group
        held = 0
        if pod.node_name and not pod.terminated:
            node = self._nodes.get(pod.node_name)
            held = node.gpus if need.whole_node and node else need.gpus
        member = Member(pod, need) if group is not None else None
        return _Derived(pod, group.id if group else None, group.compute_domain if group else None, held, member)

    def _set_pod(self, pod: Pod) -> None:
        self._unset_pod(pod.key)
        derived = self._derive(pod)
        self._pods[pod.key] = derived
        if pod.uid:
            self._uids[pod.uid] = pod.key
        node = pod.node_name
        if node and not pod.terminated:
            self._used[node] += derived.gpus
            if derived.group_id:
                self._node_groups[node][derived.group_id] += 1
            if derived.compute_domain:
                self._node_cds[node][derived.compute_domain] += 1
        if derived.group_id and derived.member is not None:
            self._members[derived.group_id][pod.key] = derived.member

    def _unset_pod(self, key: ObjectKey) -> None:
        old = self._pods.pop(key, None)
        if old is None:
            return
        if old.pod.uid and self._uids.get(old.pod.uid) == key:
            del self._uids[old.pod.uid]
        node = old.pod.node_name
        if node and not old.pod.terminated:
            self._used[node] -= old.gpus
            if self._used[node] <= 0:
                del self._used[node]
            for table, value in ((self._node_groups, old.group_id), (self._node_cds, old.compute_domain)):
                if value:
                    table[node][value] -= 1
                    if table[node][value] <= 0:
                        del table[node][value]
                    if not table[node]:
                        del table[node]
        if old.group_id:
            members = self._members.get(old.group_id)
            if members is not None:
                members.pop(key, None)
                if not members:
                    del self._members[old.group_id]

    def _rederive(self, namespace: str) -> None:
        # Group identity and demand depend on templates, claims, ComputeDomains, Jobs and the gang API's and
        # controllers' objects; pods that arrived before those objects are re-derived when they show up.
        if self._deferred is not None:
            self._deferred.add(namespace)
            return
        for key in [k for k in self._pods if k[0] == namespace]:
            pod = self._pods[key].pod
            try:
                self._set_pod(pod)
            except Exception as exc:  # one pod that no longer derives is skipped, not the rest
                self._unset_pod(key)
                self._reject("Pod", key, "", exc)

    def _nodes_and_domains(self) -> tuple[dict[str, Node], dict[str, tuple[str, ...]]]:
        if self._node_view is None:
            domains: dict[str, list[str]] = defaultdict(list)
            for node in self._nodes.values():
                if node.domain:
                    domains[node.domain].append(node.name)
            self._node_view = dict(self._nodes), {d: tuple(sorted(ns)) for d, ns in domains.items()}
        return self._node_view

    def _build(self) -> Snapshot:
        nodes, domains = self._nodes_and_domains()
        promised: dict[str, int] = defaultdict(int)
        slots_used: dict[str, int] = defaultdict(int)
        for uid, att in self._attachments.items():
            if att.phase is not Phase.DETACHED:
                # Blocks composed or being composed occupy the node's slots until they are detached; a
                # Pending attachment has not picked its blocks yet but will take that many.
                pending = att.gpus if att.phase is Phase.PENDING else 0
                slots_used[att.node] += len(att.blocks) or pending
            key = self._uids.get(uid)
            bound = key is not None and self._pods[key].pod.node_name is not None
            # Ready GPUs sit in the node's allocatable before their pod binds: keep them for that pod.
            if att.phase is Phase.READY and not att.deleting and not bound:
                promised[att.node] += att.gpus
        return Snapshot(
            nodes=nodes,
            used_gpus=dict(self._used),
            node_groups={n: frozenset(g) for n, g in self._node_groups.items()},
            node_compute_domains={n: frozenset(c) for n, c in self._node_cds.items()},
            members={g: tuple(m.values()) for g, m in self._members.items()},
            domains=domains,
            catalog=Catalog(dict(self._templates), dict(self._claims), dict(self._cds), dict(self._jobs),
                            dict(self._workloads.pod_groups), dict(self._workloads.gang_workloads),
                            dict(self._workloads.controllers)),
            fabric_free=dict(self._fabric_free),
            reservations=dict(self._reservations),
            version=self._version,
            attachments=dict(self._attachments),
            promised_gpus=dict(promised),
            attached_blocks=dict(slots_used),
        )

    def bind_locally(self, namespace: str, name: str, node: str) -> Pod:
        """Embedded mode: record a binding as the API server would (set spec.nodeName)."""
        with self._lock:
            derived = self._pods.get((namespace, name))
            if derived is None:
                raise KeyError(f"{namespace}/{name}")
            bound = replace(derived.pod, node_name=node)
            self._set_pod(bound)
            self._changed()
            return bound

    def put_pod(self, pod: Pod) -> None:
        """Embedded mode: remember a pod the scheduler asked about (there is no watch to tell us)."""
        with self._lock:
            current = self._pods.get(pod.key)
            if current is not None and current.pod == pod:
                return
            if current is not None and current.pod.node_name and not pod.node_name:
                return  # our own binding is newer than the scheduler's copy of the pod
            self._set_pod(pod)
            self._changed()
