"""What the cluster store gathers for the catalog beside the objects it holds by key: ComputeDomains by UID
(as claims and pods name them), each namespace's GPU quota lines, and the segment size of every preferred
job split into segments. The store calls these under its lock; a change here tells it which namespaces'
pods to derive again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from webhook.domain.model import Catalog, ComputeDomain, GpuQuota, ObjectKey


class CatalogTables:
    def __init__(self) -> None:
        self.compute_domains: dict[str, ComputeDomain] = {}  # by UID
        self.gpu_quotas: dict[str, tuple[GpuQuota, ...]] = {}  # namespace -> its quotas' GPU lines, by name
        self.split_jobs: dict[str, tuple[str, int]] = {}  # preferred job's group id -> (namespace, segment size)

    def compute_domain_changed(self, old: ComputeDomain | None, new: ComputeDomain | None) -> None:
        if old is not None:
            self.compute_domains.pop(old.uid, None)
        if new is not None:
            self.compute_domains[new.uid] = new

    def quota_changed(self, key: ObjectKey, new: GpuQuota | None) -> None:
        """Read only when a group is given a domain (``webhook.domain.placement.quotas``): nothing else derives
        from it. Only the namespace's own quotas are gathered again, so a relist of every namespace's quota
        is linear, not quadratic."""
        namespace, name = key
        others = [q for q in self.gpu_quotas.get(namespace, ()) if q.name != name]
        held = tuple(sorted([*others, new] if new is not None else others, key=lambda q: q.name))
        if held:
            self.gpu_quotas[namespace] = held
        else:
            self.gpu_quotas.pop(namespace, None)

    def split(self, jobs: Mapping[str, tuple[str, int]]) -> set[str] | None:
        """Record the segment size chosen for each split job; the namespaces of the jobs whose entry changed
        (their pods belong to other segments now), or None when nothing changed."""
        if dict(jobs) == self.split_jobs:
            return None
        changed = {ns_size[0] for job, ns_size in jobs.items() if self.split_jobs.get(job) != ns_size}
        changed |= {ns for job, (ns, _) in self.split_jobs.items() if job not in jobs}
        self.split_jobs = dict(jobs)
        return changed

    def catalog(self, objects: Mapping[str, Mapping[ObjectKey, Any]], workloads: Mapping[str, Any],
                copy: bool = False) -> Catalog:
        """``objects``: the templates, claims and Jobs held by key; ``workloads``: the group sources' views.
        The live tables while deriving; copies for a snapshot, which outlives the next change."""
        catalog = Catalog(objects["templates"], objects["claims"], self.compute_domains, objects["jobs"],
                          **workloads, split_jobs={job: size for job, (_, size) in self.split_jobs.items()})
        if not copy:
            return catalog
        return Catalog(**{f.name: dict(getattr(catalog, f.name)) for f in fields(Catalog)})
