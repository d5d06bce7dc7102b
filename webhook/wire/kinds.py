"""The one word for a Kubernetes kind: ``Kind``, its API group, version, kind, resource (plural) and scope, and
the store's name for it (its label), modelled on lightkube's ``ResourceDef`` and kopf's ``Resource``.

Every kind the project reads or writes is one ``Kind``: the well-known ones are here, the group sources'
beside their tables (``webhook.domain.groups.group_sources``). From it follow the URL paths the Kubernetes
adapter calls (``path``), the name RBAC rules and API messages use (``qualified``), and the store's table
(``webhook.state.kinds``). The label is what operators see (logs, /readyz, the ``kind`` label of the
metrics) and what files and tests name a kind by: ``by_label`` and ``lookup`` turn it back into the
``Kind`` once, at the boundary.

Also here, written once: an API object's key (namespace, name) and resourceVersion, read leniently (an
object without them is keyed by empty strings), for the store and the adapter's caches alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from urllib.parse import quote

from webhook.errors import ImexWebhookError
from webhook.wire import domain_reservation as dr
from webhook.wire import fabric_attachment as fa


class KindError(ImexWebhookError, ValueError):
    """A label that names no kind of a table (or two); the message names it."""


@dataclass(frozen=True, slots=True)
class Kind:
    """An API group, version and kind, with its resource and scope: what tells Kubernetes' PodGroup from
    Volcano's, and how to address it."""

    group: str  # "" for the core group
    version: str
    kind: str
    plural: str  # the resource: what RBAC grants and URLs name
    _: KW_ONLY
    namespaced: bool = True
    # The store's name for it: the watch's name in logs and /readyz, the kind label of the cache metrics.
    # Operators see it: keep it stable. Defaults to the kind; a second served version of a kind the store
    # also keeps needs its own ("PodGroup.v1alpha2").
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.kind)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The name RBAC rules and API messages use: ``pods``, ``jobs.batch``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        """The URL path; without a namespace a namespaced kind is listed across all namespaces, and a
        cluster-scoped kind ignores the namespace."""
        path = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            path += f"/namespaces/{quote(namespace, safe='')}"
        path += f"/{self.plural}"
        if name:
            path += f"/{quote(name, safe='')}"
        if sub:
            path += f"/{sub}"
        return path

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind}"


NODES = Kind("", "v1", "Node", "nodes", namespaced=False)
PODS = Kind("", "v1", "Pod", "pods")
EVENTS = Kind("events.k8s.io", "v1", "Event", "events")
LEASES = Kind("coordination.k8s.io", "v1", "Lease", "leases")
JOBS = Kind("batch", "v1", "Job", "jobs")
RESOURCE_QUOTAS = Kind("", "v1", "ResourceQuota", "resourcequotas")
RESOURCE_CLAIMS = Kind("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")
RESOURCE_CLAIM_TEMPLATES = Kind("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates")
RESOURCE_SLICES = Kind("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", namespaced=False)
COMPUTE_DOMAINS = Kind("resource.nvidia.com", "v1beta1", "ComputeDomain", "computedomains")
FABRIC_ATTACHMENTS = Kind(fa.GROUP, fa.VERSION, fa.KIND, fa.PLURAL, namespaced=False)
DOMAIN_RESERVATIONS = Kind(dr.GROUP, dr.VERSION, dr.KIND, dr.PLURAL, namespaced=False)


def by_label(kinds: Iterable[Kind]) -> dict[str, Kind]:
    """The kinds by label, in their order; two kinds under one label is an error naming both."""
    table: dict[str, Kind] = {}
    for kind in kinds:
        held = table.setdefault(kind.label, kind)
        if held != kind:
            raise KindError(f"two kinds under the label {kind.label}: {held} and {kind}")
    return table


def lookup(label: str, table: Mapping[str, Kind]) -> Kind:
    """The kind of ``table`` (``by_label``) under ``label``; a ``KindError`` naming it when there is none."""
    found = table.get(label)
    if found is None:
        raise KindError(f"unknown kind {label}; known: {', '.join(table) or 'none'}")
    return found


def object_key(obj: object) -> tuple[str, str]:
    """(namespace, name) of an API object; "" for whichever is absent or not a string (cluster-scoped
    objects have no namespace)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return ("", "")
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    return (namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "")


def resource_version(obj: object) -> str:
    """An API object's resourceVersion, "" when it has none."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
