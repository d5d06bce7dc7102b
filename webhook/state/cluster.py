"""The in-process view of the cluster that filter and prioritize read: no API call on their path.

Fed by watch events (Kubernetes mode) or by files and recorded bindings (embedded mode). A node's GPUs are
its allocatable ``nvidia.com/gpu`` (device plugin) plus the whole GPUs its DRA ResourceSlices publish
(``webhook.state.node_index``), so DRA-only nodes have capacity too. Every object is parsed once when it
arrives; per-pod derived facts (group, demand, node) are kept and the aggregates (GPUs used per node,
members per group: ``webhook.state.pod_index``) are updated incrementally, so building a snapshot is a few
shallow copies and happens at most once per change, not once per request.

One object that cannot be parsed or derived never stops the others: whatever it raises (a ``WireError``,
or a ``RecursionError``, ``OverflowError``, ``TypeError``... from a field no one foresaw) skips that object
alone (``webhook.state.rejects``).

Every kind is one row of ``webhook.state.kinds.ROWS``, keyed by its ``webhook.wire.kinds.Kind``: how it
parses, how it is keyed, which handler derives again what depends on it. The feeding methods take a
``Kind`` or its label (files and tests name kinds by label); the label becomes its ``Kind`` once, there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from webhook.domain.groups.group_sources import TABLES
from webhook.domain.model import Catalog, ClaimSpec, ComputeDomain, GpuQuota, Node, ObjectKey, Pod, Snapshot
from webhook.domain.policy import Policy
from webhook.domain.reading.slices import SliceGpus
from webhook.errors import WireError
from webhook.state import kinds
from webhook.state.assumed import AssumedBindings
from webhook.state.attachment_table import AttachmentTable
from webhook.state.catalog_tables import CatalogTables
from webhook.state.imex_holds import ImexHolds
from webhook.state.node_index import NodeIndex
from webhook.state.pod_index import PodIndex, derive
from webhook.state.rejects import Rejects
from webhook.state.workload_tables import WorkloadTables
from webhook.wire.fabric_attachment import Attachment
from webhook.wire.kinds import JOBS, NODES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, Kind, object_key
from webhook.wire.kinds import resource_version as _version

# The labels of the kinds the store holds, in its order, as files, tests and the metrics name them.
KINDS: tuple[str, ...] = tuple(kind.label for kind in kinds.KINDS)

T = TypeVar("T")
# What a change of one object derives again: (kind, key, old, new), old or new None when there is none.
Handler = Callable[[Kind, ObjectKey, Any, Any], None]


class ClusterStore:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._lock = threading.RLock()
        self._workloads = WorkloadTables()  # PodGroups, Workloads, JobSets, training jobs (docs/GROUPS.md)
        # The parsed objects of every kind, by key; the workload kinds' tables are those WorkloadTables reads.
        self._objects: dict[Kind, dict[ObjectKey, Any]] = {kind: {} for kind in kinds.KINDS}
        self._objects.update({t.kind: self._workloads.tables[t.kind] for t in TABLES})
        self._node_index = NodeIndex(self._objects[NODES])
        self._imex_holds = ImexHolds()
        self._tables = CatalogTables()  # ComputeDomains by UID, quotas by namespace, split jobs
        self._index = PodIndex()
        self._assumed = AssumedBindings()  # pods this replica is binding, not yet bound in the watch
        self._fabric_free: dict[str, int] = {}
        self._attachments = AttachmentTable()  # fabric attachments by pod UID
        self._synced: dict[str, bool] = {}
        self._version = 0
        self._snapshot: Snapshot | None = None
        self._rejects = Rejects()
        self._deferred: set[str] | None = None  # namespaces to re-derive at the end of a relist
        self._listeners: list[Callable[[], None]] = []
        # Each row's handler (webhook.state.kinds.Derive), bound once.
        handlers: dict[kinds.Derive, Handler] = {
            kinds.Derive.NODE: self._node_changed,
            kinds.Derive.SLICE: self._slice_changed,
            kinds.Derive.POD: self._pod_changed,
            kinds.Derive.CATALOG: self._catalog_changed,
            kinds.Derive.CLAIM: self._claim_changed,
            kinds.Derive.COMPUTE_DOMAIN: self._cd_changed,
            kinds.Derive.QUOTA: self._quota_changed,
            kinds.Derive.WORKLOAD: self._workload_changed,
        }
        self._handlers: dict[Kind, Handler] = {kind: handlers[row.changed] for kind, row in kinds.ROWS.items()}

    # -- feeding -------------------------------------------------------------------------------------

    def expect(self, expected: Iterable[Kind | str]) -> None:
        """Declare the kinds whose initial list must arrive before the store counts as synced."""
        labels = [kinds.kind_of(kind).label for kind in expected]
        with self._lock:
            for label in labels:
                self._synced.setdefault(label, False)

    def mark_synced(self, kind: Kind | str, synced: bool = True) -> None:
        label = kinds.kind_of(kind).label
        with self._lock:
            self._synced[label] = synced

    def sync_state(self) -> dict[str, bool]:
        with self._lock:
            return dict(self._synced)

    @property
    def synced(self) -> bool:
        with self._lock:
            return all(self._synced.values())

    def replace(self, kind: Kind | str, objects: Iterable[Mapping[str, Any]]) -> None:
        """A full relist: whatever is not in ``objects`` is gone."""
        kind = kinds.kind_of(kind)
        row = kinds.ROWS[kind]
        objects = list(objects)
        with self._lock:
            present = {object_key(o) for o in objects}
            kept = {row.table_key(k) for k in present}
            self._deferred = set()
            try:
                for key in [k for k in self._objects[kind] if k not in kept]:
                    self._put(kind, key, None)
                self._rejects.keep_only(kind, present)
                for obj in objects:
                    self._upsert(kind, obj)
            finally:
                namespaces, self._deferred = self._deferred, None
            for namespace in sorted(namespaces):
                self._rederive(namespace)
            self._changed()

    def apply(self, kind: Kind | str, event: str, obj: Mapping[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""
        kind = kinds.kind_of(kind)
        with self._lock:
            if event == "DELETED":
                self._put(kind, kinds.ROWS[kind].table_key(object_key(obj)), None)
                self._rejects.clear(kind, object_key(obj))
            else:
                self._upsert(kind, obj)
            self._changed()

    def modify(self, kind: Kind | str, key: ObjectKey, change: Callable[[T | None], T | None]) -> T | None:
        """Read-modify-write of one parsed object under the store's lock, for a feeder that holds parsed
        objects, not API objects (the embedded cluster's bindings): ``change`` gets the object held (None:
        none) and returns what to hold, the same object to change nothing, None to hold none."""
        kind = kinds.kind_of(kind)
        with self._lock:
            current = self._objects[kind].get(key)
            new = change(current)
            if new is not current:
                self._put(kind, key, new)
                self._changed()
            return new

    def assume_bound(self, pod: Pod, node: str, refuse: Callable[[Snapshot], str | None] | None = None) -> str | None:
        """Show ``pod`` on ``node`` from now on, before the binding is asked for (``webhook.state.assumed``);
        a pod the watch has not brought yet is held as the bind verb read it. ``refuse`` reads the snapshot
        under the same lock first, so two binds cannot both pass it: a reason from it assumes nothing and is
        returned."""
        with self._lock:
            why = refuse(self.snapshot()) if refuse is not None else None
            current = self._objects[PODS].get(pod.key)
            held = current if current is not None and current.uid == pod.uid else pod
            if why is None and held.node_name is None:
                self._assumed.add(held, node)
                self._put(PODS, held.key, held)
                self._changed()
            return why

    def withdraw_bound(self, pod: Pod, node: str) -> None:
        """The binding ``assume_bound`` announced failed: the pod is on no node again, unless the watch has
        shown it bound meanwhile (then the API server did bind it, and the watch is right)."""
        with self._lock:
            current = self._objects[PODS].get(pod.key)
            if self._assumed.withdraw(pod, node) and current is not None and current.node_name == node:
                self._put(PODS, pod.key, replace(current, node_name=None))
                self._changed()

    @property
    def assumed_bindings(self) -> int:
        with self._lock:
            return len(self._assumed)

    def set_fabric_free(self, free: Mapping[str, int]) -> None:
        with self._lock:
            if dict(free) != self._fabric_free:
                self._fabric_free = dict(free)
                self._changed()

    def replace_attachments(self, items: Iterable[Attachment]) -> None:
        with self._lock:
            self._attachments.replace(items)
            self._changed()

    def put_attachment(self, att: Attachment) -> None:
        with self._lock:
            self._attachments.put(att)
            self._changed()

    def drop_attachment(self, pod_uid: str) -> None:
        with self._lock:
            if self._attachments.drop(pod_uid):
                self._changed()

    def attachments(self) -> dict[str, Attachment]:
        with self._lock:
            return self._attachments.view()

    def set_split_jobs(self, jobs: Mapping[str, tuple[str, int]]) -> bool:
        """The segment size chosen for each preferred job split into segments (job's group id -> its
        namespace and size), as its segments' reservations say; the pods of a job whose entry changed are
        derived again, into their segments. Whether anything changed."""
        with self._lock:
            changed = self._tables.split(jobs)
            if changed is None:
                return False
            for namespace in sorted(changed):
                self._rederive(namespace)
            self._changed()
            return True

    def forget_ended(self, group_ids: Iterable[str]) -> None:
        """Housekeeping has handled these ended groups (released their reservations, or found none)."""
        with self._lock:
            if [g for g in group_ids if self._index.forget_ended(g)]:
                self._changed()

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change from now on, under the store's lock: it must only take
        note (set an event), never read the store or block."""
        with self._lock:
            self._listeners.append(listener)

    # -- reading -------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        with self._lock:
            if self._snapshot is None or self._snapshot.version != self._version:
                self._snapshot = self._build()
            return self._snapshot

    def pod(self, namespace: str, name: str) -> Pod | None:
        with self._lock:
            return self._index.pod((namespace, name))

    def pod_by_uid(self, uid: str) -> Pod | None:
        with self._lock:
            return self._index.by_uid(uid)

    @property
    def rejected(self) -> int:
        """How many objects are skipped now, all kinds together."""
        with self._lock:
            return self._rejects.total()

    def rejected_counts(self) -> dict[str, int]:
        """Objects skipped now because they could not be parsed, for every kind the store holds."""
        with self._lock:
            return self._rejects.counts(kinds.KINDS)

    def raw_counts(self) -> dict[str, int]:
        with self._lock:
            return {kind.label: len(self._objects[kind]) for kind in kinds.KINDS}

    # -- internals -----------------------------------------------------------------------------------

    def _changed(self) -> None:
        self._version += 1
        for listener in self._listeners:
            listener()

    def _upsert(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        try:
            if not isinstance(obj, Mapping):
                raise WireError(kind.label, f"expected an object, got {type(obj).__name__}")
            row = kinds.ROWS[kind]
            parsed = row.parse(self.policy, obj)
            if parsed is None:  # not one of ours after all (another API group's kind of the same name)
                self._put(kind, row.table_key(object_key(obj)), None)
            else:
                self._put(kind, row.key(parsed), parsed)
        except Exception as exc:  # any failure of one object skips that object, nothing more
            self._rejects.add(kind, object_key(obj), _version(obj), exc)
        else:
            self._rejects.clear(kind, object_key(obj))

    def _put(self, kind: Kind, key: ObjectKey, new: Any) -> None:
        """Hold ``new`` under ``key`` (None: hold nothing) and derive again what depends on it."""
        if kind == PODS and len(self._assumed):
            new = self._assumed.merge(key, new)
        table = self._objects[kind]
        old = table.pop(key, None)
        if new is not None:
            table[key] = new
        if old is None and new is None:
            return
        try:
            self._handlers[kind](kind, key, old, new)
        except Exception:
            table.pop(key, None)  # an object whose derived facts cannot be kept is not kept either
            raise

    def _node_changed(self, kind: Kind, key: ObjectKey, old: Node | None, new: Node | None) -> None:
        self._node_index.refresh(key[1])

    def _slice_changed(self, kind: Kind, key: ObjectKey, old: SliceGpus | None, new: SliceGpus | None) -> None:
        self._node_index.slice_changed(old, new)

    def _pod_changed(self, kind: Kind, key: ObjectKey, old: Pod | None, new: Pod | None) -> None:
        self._index.unset(key)
        if new is not None:
            self._index.set(derive(new, self._catalog(), self.policy, self._node_index.nodes))

    def _catalog_changed(self, kind: Kind, key: ObjectKey, old: object, new: object) -> None:
        self._rederive(key[0])

    def _claim_changed(self, kind: Kind, key: ObjectKey, old: ClaimSpec | None, new: ClaimSpec | None) -> None:
        self._imex_holds.changed(old, new)
        # Only pods that name the claim resolve through it (a template's pods read the template); a claim of
        # a template changes several times per pod (allocation, reservedFor), and deriving the namespace
        # again each time costs the square of its pods.
        if self._deferred is not None:
            self._deferred.add(key[0])
            return
        for pod in self._index.naming_claim(*key):
            self._put_again(pod)

    def _cd_changed(self, kind: Kind, key: ObjectKey, old: ComputeDomain | None, new: ComputeDomain | None) -> None:
        self._tables.compute_domain_changed(old, new)
        self._rederive(key[0])

    def _quota_changed(self, kind: Kind, key: ObjectKey, old: GpuQuota | None, new: GpuQuota | None) -> None:
        self._tables.quota_changed(key, new)

    def _workload_changed(self, kind: Kind, key: ObjectKey, old: object, new: object) -> None:
        if old != new:  # a status-only update parses to the same object: nothing to derive again
            self._workloads.publish(kind, key)
            self._rederive(key[0])

    def _catalog(self, copy: bool = False) -> Catalog:
        o = self._objects
        held = {"templates": o[RESOURCE_CLAIM_TEMPLATES], "claims": o[RESOURCE_CLAIMS], "jobs": o[JOBS]}
        return self._tables.catalog(held, self._workloads.views, copy)

    def _rederive(self, namespace: str) -> None:
        # Group identity and demand depend on templates, claims, ComputeDomains, Jobs and the gang API's and
        # controllers' objects; pods that arrived before those objects are re-derived when they show up.
        if self._deferred is not None:
            self._deferred.add(namespace)
            return
        for pod in self._index.in_namespace(namespace):
            self._put_again(pod)

    def _put_again(self, pod: Pod) -> None:
        try:
            self._put(PODS, pod.key, pod)
        except Exception as exc:  # one pod that no longer derives is skipped, not the rest
            self._rejects.add(PODS, pod.key, "", exc)

    def _build(self) -> Snapshot:
        nodes, domains = self._node_index.view()
        index = self._index
        promised, slots_used = self._attachments.figures(index.by_uid)
        return Snapshot(
            nodes=nodes,
            used_gpus=dict(index.used),
            node_groups=index.groups_by_node(),
            node_compute_domains=index.compute_domains_by_node(),
            members=index.members_by_group(),
            domains=domains,
            catalog=self._catalog(copy=True),
            fabric_free=dict(self._fabric_free),
            reservations={},
            version=self._version,
            attachments=self._attachments.view(),
            promised_gpus=promised,
            attached_blocks=slots_used,
            ended_groups=frozenset(index.ended),
            channel_nodes=self._node_index.channel_nodes(),
            imex_holds=self._imex_holds.view(),
            gpu_quotas=dict(self._tables.gpu_quotas),
        )
