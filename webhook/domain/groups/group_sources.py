"""The sources of groups after imex-webhook's own, in one ordered tuple (docs/GROUPS.md): Kubernetes' gang
scheduling and the workload controllers.

``SOURCES`` is the order: the first source that puts a pod in a group wins, the others are compared with
it (``controller_groups.disagreements``). Each source is how it reads a pod (its candidate function in
``controller_groups``) and the API objects it reads, if any: one ``Table`` per API group, version and kind
(a ``webhook.wire.kinds.Kind``, whose label names the store's table), each with its parser and the catalog
mapping it feeds. Where several tables feed one mapping (the PodGroups of two served versions), the first
table that holds an object wins.

Everything else follows from a table: the ClusterStore's table and what it derives again
(``webhook.state.workload_tables``, ``webhook.state.cluster``), the watch, optional and allowed to be
forbidden (``webhook.adapters.kube.resources``, ``backend``), the objects embedded mode reads from files
(``webhook.adapters.embedded``). Adding a source is one entry here, its parser, its candidate function and
what a pod says about it (docs/GROUPS.md, "Adding a group source").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook.domain.groups import controller_groups
from webhook.domain.groups.controller_groups import Candidate, Member
from webhook.domain.model import Catalog, ControllerObject, GangGroup, GangWorkload, ObjectKey, Pod, WorkloadRefs
from webhook.domain.reading import workload_parsing
from webhook.wire.kinds import Kind

Parsed = GangGroup | GangWorkload | ControllerObject
CandidateOf = Callable[[Pod, WorkloadRefs, Catalog, Member, int], Candidate | None]


@dataclass(frozen=True, slots=True)
class View:
    """A mapping of the ``Catalog`` that grouping reads (``webhook.domain.model.Catalog``)."""

    field: str  # the Catalog field's name
    by_kind: bool = False  # keyed (kind, namespace, name): one mapping holds objects of several kinds


POD_GROUPS = View("pod_groups")
GANG_WORKLOADS = View("gang_workloads")
CONTROLLERS = View("controllers", by_kind=True)


@dataclass(frozen=True, slots=True)
class Table:
    """One API object kind a source reads, as the ClusterStore keeps it."""

    # Its API group, version and kind, the resource watched (manifests/rbac-webhook.yaml grants get, list,
    # watch on it) and the store's name for the table (its label: the watch's name in logs and /readyz, the
    # kind label of imex_webhook_cache_rejected_objects and of the watch metrics; operators see it).
    kind: Kind
    # (object, path for messages) -> parsed; None: an object of another API group under the same kind.
    # Raises WireError on a malformed object.
    parse: Callable[[Any, str], Parsed | None]
    view: View

    def view_key(self, key: ObjectKey) -> tuple[str, ...]:
        return (self.kind.kind, *key) if self.view.by_kind else key


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    candidate: CandidateOf  # None: the pod names no group of this source (or one that is no group)
    tables: tuple[Table, ...] = ()


def _training_job(version: str, kind: str, plural: str) -> Table:
    return Table(Kind("kubeflow.org", version, kind, plural),
                 lambda obj, path: workload_parsing.training_job(obj, kind, path), CONTROLLERS)


SOURCES: tuple[Source, ...] = (
    # Kubernetes 1.37 serves PodGroups as v1beta1, 1.36 as v1alpha2: the beta's object wins when both are.
    Source("gang", controller_groups.gang, (
        Table(Kind("scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups"), workload_parsing.pod_group, POD_GROUPS),
        Table(Kind("scheduling.k8s.io", "v1alpha2", "PodGroup", "podgroups", label="PodGroup.v1alpha2"),
              workload_parsing.pod_group, POD_GROUPS),
        Table(Kind("scheduling.k8s.io", "v1alpha1", "Workload", "workloads"), workload_parsing.gang_workload,
              GANG_WORKLOADS),
    )),
    Source("JobSet", controller_groups.jobset, (
        Table(Kind("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"), workload_parsing.jobset, CONTROLLERS),
    )),
    Source("LeaderWorkerSet", controller_groups.lws),  # the pods' labels and annotations say it all
    Source("training job", controller_groups.training, (
        _training_job("v1", "PyTorchJob", "pytorchjobs"),
        _training_job("v2beta1", "MPIJob", "mpijobs"),
    )),
    Source("Kueue", controller_groups.kueue),  # last: Kueue may label pods after they were admitted
)

TABLES: tuple[Table, ...] = tuple(t for s in SOURCES for t in s.tables)


def candidates(pod: Pod, catalog: Catalog, joins: Member, max_size: int) -> list[Candidate]:
    """Every group the gang API and the controllers put the pod in, the first source's first; ``joins``
    tells which of a controller's pods count in its size."""
    refs = pod.workload
    if refs is None:
        return []
    return [c for s in SOURCES if (c := s.candidate(pod, refs, catalog, joins, max_size)) is not None]


def table_for(api_version: object, kind: str) -> Table | None:
    """The table an object read from a file goes to: the first of its API group and kind (a file may hold
    any version its group serves; the parsers read them alike), else the first of its kind, whose parser
    tells an object of another API group apart (and one without apiVersion is taken for ours)."""
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else None
    of_kind = [t for t in TABLES if t.kind.kind == kind]
    return next((t for t in of_kind if t.kind.group == group), of_kind[0] if of_kind else None)
