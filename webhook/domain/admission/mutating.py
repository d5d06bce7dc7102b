"""Pod CREATE -> the JSON Patch that makes the scheduler keep the pod's group inside one NVLink domain.

Pure: the raw pod JSON, the pod's namespace and the cached catalog and nodes in, a ``MutationResult``
out; nothing is written anywhere, so ``dryRun`` requests behave exactly like the others.

Only pods that reference resource claims or carry the ``imex-webhook.io/group`` annotation (the
webhook configuration's ``matchConditions``) are looked at; every other pod is allowed untouched, except,
under ``--pack-plain-gpu-pods`` (``Policy.pack_plain_gpu_pods``; the kustomize component
``manifests/components/pack-plain-gpu-pods`` widens the matchConditions to match), a pod asking for
``nvidia.com/gpu`` in no group: it gets ``spec.schedulerName`` of the dedicated profile and the ``mutated``
marker, nothing else (``_pack``).

For a pod that belongs to a group (``grouping.resolve``), each of these is added only if missing, so
the patch of an already mutated pod is empty (``reinvocationPolicy: IfNeeded``) and a pod whose
affinity another webhook edited gets back only the missing pieces:

1. label ``imex-webhook.io/group`` = ``group_label_value(group.id)``: a valid label value, readable for
   short identities and hashed deterministically for long or unusual ones;
2. a *required* pod affinity term on that label with ``topologyKey: imex-webhook.io/domain``
   (``Policy.affinity_topology_key``, for every group kind), so the scheduler itself keeps members
   together, including members assumed but not bound yet. The extender's node domain labeller puts that
   label, valued with the node's domain, on every node of every domain: kube-scheduler rejects any node
   that lacks a required term's topologyKey, so the clique label would shut fabric-zone groups out.
   Left out when the pod's PodGroup already keeps it within one value of a domain label
   (``upstream_topology``: Kubernetes 1.37 topology-aware workload scheduling, docs/GROUPS.md), which
   annotation ``imex-webhook.io/upstream-topology`` records; the extender still holds the group to its
   reserved domain;
3. ``imex-webhook.io/domain Exists`` in every non-empty required nodeSelectorTerm (terms are ORed:
   adding a term would loosen the user's constraint; an empty term matches no node, so it stays as it
   is), or one new term holding only that expression when there is no required node affinity;
4. ``spec.schedulerName`` = the imex scheduler when it is ``default-scheduler`` or absent; a custom
   scheduler is left alone and reported in a warning;
5. annotations: ``imex-webhook.io/group-id`` (the identity), ``imex-webhook.io/group-size`` when the
   size is known and the user did not write one, ``imex-webhook.io/mutated`` (our marker). The user's
   ``imex-webhook.io/group`` annotation is an *input* of the identity and is never added.

Terms written by an older version (``topologyKey: nvidia.com/gpu.clique``, ``nvidia.com/gpu.clique
Exists``) are kept: the patch only adds, and the new terms are added next to them.

A pod whose claims may make a group but whose templates or claims are not cached yet cannot be fully
resolved: it still gets ``spec.schedulerName`` (over the default) and the ``mutated`` marker, with a
warning, because the default scheduler would place it anywhere; the extender resolves the group at
scheduling time. So does a pod whose group depends on a PodGroup not cached yet (``GroupResolution.pending``).
A pod that two sources put in different groups (docs/GROUPS.md) is admitted with a warning naming both.

Denied (``allowed: false``), because only the user can resolve them: an ``imex-webhook.io/group-size``
that is not a whole number from 1 to ``grouping.MAX_GROUP_SIZE``, an empty group annotation, claims of
two ComputeDomains, a group annotation that contradicts the ComputeDomain
(``GroupResolution.problems``), a group label written with another group's value, and a pod pinned by
``spec.nodeName`` to a known node in no domain. An unknown node is a warning, and the pod is admitted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from webhook import __version__
from webhook.domain import keys
from webhook.domain.admission.patches import APPEND, PatchBuilder, dotted
from webhook.domain.groups import grouping
from webhook.domain.model import Catalog, Node, Pod
from webhook.domain.placement import plain_pods
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import WireError
from webhook.wire.admission import JSONPatchOp
from webhook.wire.text import clip, shown

GROUP_ID_ANNOTATION = keys.GROUP_ID_ANNOTATION
MUTATED_MARKER = f"v{__version__}"
DEFAULT_SCHEDULER = "default-scheduler"
WHERE = "request.object"

_POD_AFFINITY = ("spec", "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
_NODE_TERMS = ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
               "nodeSelectorTerms")
_LABEL_MAX = 63
# Identities shown as they are (":" and the one "/" become "."): "<kind>:<uid>" without dots, or
# "<kind>:<namespace>/<value>" where the namespace has no dot. Both are inverted by splitting at the
# first two dots, so no two such identities share a value; hashed values always contain "_" and
# readable ones never do, so the two forms cannot collide either.
_READABLE = re.compile(
    r"[a-z]+:(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?/[A-Za-z0-9](?:[-A-Za-z0-9.]*[A-Za-z0-9])?"
    r"|[A-Za-z0-9](?:[-A-Za-z0-9]*[A-Za-z0-9])?)"
)
_SLUG_JUNK = re.compile(r"[^-A-Za-z0-9.]+")
_DIGEST_CHARS = 16
MESSAGE_MAX = 1024  # characters of a denial message: kube-apiserver hands it to the user as is
WARNING_MAX = 256  # kube-apiserver may truncate warnings over 256 characters; cut them ourselves, visibly
WARNINGS_MAX = 16  # warnings in one reply; the last one says how many more there were
# Required nodeSelectorTerms of a group pod. The patch adds the domain expression to every term (terms are
# ORed), one op each, so the reply grows with them: 157,000 terms in a 3.1 MB review made a 42 MB reply.
# Kubernetes sets no bound; the workload controllers whose pods we group write none or one, and a person
# writes a handful. A pod with more is denied with this bound in the message, and no reply of ours grows
# with what the pod carries (one term's op is about 120 bytes: 64 of them stay under 8 KiB).
MAX_NODE_SELECTOR_TERMS = 64


@dataclass(frozen=True, slots=True)
class MutationResult:
    """The verdict on one pod. ``outcome`` and ``reason`` are small fixed sets (metric labels)."""

    allowed: bool
    patch: tuple[JSONPatchOp, ...] = ()
    warnings: tuple[str, ...] = ()
    message: str = ""  # why it was denied, written for the user to act on
    group_id: str | None = None
    outcome: str = "skipped"  # mutated | unchanged | skipped | denied | error
    reason: str = "not-a-group"


def group_label_value(group_id: str) -> str:
    """A valid label value (<= 63 chars) that names ``group_id`` and no other identity."""
    if len(group_id) <= _LABEL_MAX and _READABLE.fullmatch(group_id):
        return group_id.replace(":", ".", 1).replace("/", ".", 1)
    kind, _, rest = group_id.partition(":")
    prefix = kind if kind.isascii() and kind.isalpha() and len(kind) <= 8 else "g"
    digest = hashlib.sha256(group_id.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    room = _LABEL_MAX - len(prefix) - 2 - _DIGEST_CHARS
    slug = _SLUG_JUNK.sub("-", rest)[:room]
    return f"{prefix}.{slug}_{digest}" if slug else f"{prefix}_{digest}"


def might_be_group(obj: Any) -> bool:
    """Whether a raw pod can belong to a group: it references resource claims or carries the group
    annotation (the MutatingWebhookConfiguration's ``matchConditions``). Never raises, whatever ``obj`` is."""
    try:
        if not isinstance(obj, Mapping):
            return False
        spec, meta = obj.get("spec"), obj.get("metadata")
        claims = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        return bool(claims) or (isinstance(annotations, Mapping) and keys.GROUP_ANNOTATION in annotations)
    except Exception:  # a hostile mapping type: assume the worst
        return True


def _deny(message: str, reason: str, group_id: str | None, warnings: list[str]) -> MutationResult:
    return MutationResult(False, (), _bounded(warnings), clip(message, MESSAGE_MAX), group_id, "denied", reason)


def _bounded(warnings: list[str]) -> tuple[str, ...]:
    if len(warnings) <= WARNINGS_MAX:
        return tuple(warnings)
    return (*warnings[:WARNINGS_MAX - 1], f"and {len(warnings) - WARNINGS_MAX + 1} more warnings")


def _too_many_node_terms(obj: Mapping[str, Any]) -> str | None:
    terms = PatchBuilder(obj, WHERE).get(_NODE_TERMS)
    if not isinstance(terms, list) or len(terms) <= MAX_NODE_SELECTOR_TERMS:
        return None
    return (f"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution has {len(terms)} "
            f"nodeSelectorTerms; imex-webhook adds its domain requirement to each and accepts at most "
            f"{MAX_NODE_SELECTOR_TERMS} in a group pod: merge the terms (they are ORed) or drop the ones no node "
            "of the group's domains matches")


def mutate(obj: Mapping[str, Any], namespace: str, catalog: Catalog, nodes: Mapping[str, Node],
           policy: Policy) -> MutationResult:
    """The verdict and patch for a pod being created in ``namespace`` (``request.namespace``)."""
    pod = parsing.pod(obj, WHERE, validated=False)  # admission runs before the API server validates
    if namespace and pod.namespace != namespace:
        pod = replace(pod, namespace=namespace)
    candidate = bool(pod.claims) or keys.GROUP_ANNOTATION in pod.annotations
    if not candidate:
        if policy.pack_plain_gpu_pods and plain_pods.asks_gpus(pod):
            return _pack(obj, pod, catalog, policy)
        return MutationResult(True)  # no claims, no group annotation: nothing of ours, whatever else it says
    size_problem = grouping.size_problem(pod.annotations)
    if size_problem:
        return _deny(size_problem, "bad-group-size", None, [])
    named = pod.annotations.get(keys.GROUP_ANNOTATION, "").strip()
    name_problem = grouping.name_problem(named) if named else None
    if name_problem:
        return _deny(name_problem, "bad-group-annotation", None, [])
    exclusive_problem = grouping.exclusive_requested(pod.annotations.get(keys.EXCLUSIVE_ANNOTATION))[1]
    if exclusive_problem:
        return _deny(exclusive_problem, "bad-exclusive-domain", None, [])
    foreign = grouping.foreign_compute_domain(pod, catalog)
    if foreign:
        return _deny(foreign, "other-namespace", None, [])
    resolution = grouping.resolve(pod, catalog, policy)
    warnings = [clip(w, WARNING_MAX) for w in resolution.warnings]
    group = resolution.group
    if resolution.problems:
        return _deny("; ".join(resolution.problems), "conflicting-group", group.id if group else None, warnings)
    if group is None:
        if keys.GROUP_ANNOTATION in pod.annotations:
            return _deny(f"annotation {keys.GROUP_ANNOTATION} is empty: set it to the name of the pod's group, "
                         "or remove it", "bad-group-annotation", None, warnings)
        if resolution.pending or grouping.unresolved_claims(pod, catalog):
            return _defer(obj, pod, policy, warnings)
        return MutationResult(True, (), _bounded(warnings))  # every claim is known and none makes a group
    too_many = _too_many_node_terms(obj)
    if too_many:
        return _deny(too_many, "too-many-node-terms", group.id, warnings)
    if pod.node_name:
        node = nodes.get(pod.node_name)
        if node is None:
            warnings.append(f"spec.nodeName {shown(pod.node_name)} is not a node imex-webhook knows; "
                            "its NVLink domain is not checked")
        elif node.domain is None:
            return _deny(
                f"spec.nodeName pins the pod to node {pod.node_name!r}, which is in no NVLink domain (no "
                f"{' or '.join(policy.domain_labels)} label), but it belongs to group "
                f"{shown(group.name)}; remove spec.nodeName or name a node of the group's domain",
                "pinned-outside-domain", group.id, warnings)
    # A preferred job's segments are chosen at its first filter, after some pods were admitted: its pods carry
    # the job's label and identity, and no pod affinity (the job may be split; the extender keeps each part).
    # So does a member without a rank: its segment is given at its first filter (segment_assignment).
    identity = group.segment.job_id if group.preferred and group.segment is not None else group.id
    if group.unassigned_per:
        warnings.append(clip(f"no rank and no {keys.SEGMENT_LABEL} label: imex-webhook gives the pod a segment of "
                             f"job {group.name} when it is scheduled; the extender, not a pod affinity, keeps it "
                             "there", WARNING_MAX))
    label = group_label_value(identity)
    written = pod.labels.get(keys.GROUP_LABEL)
    if written is not None and written != label:
        return _deny(
            f"label {keys.GROUP_LABEL}={shown(written)} is set by imex-webhook and names another group; "
            f"remove it (this pod's group {shown(group.name)} is labelled {label!r})",
            "label-conflict", group.id, warnings)

    patch = PatchBuilder(obj, WHERE)
    if written is None:
        patch.add(("metadata", "labels", keys.GROUP_LABEL), label)
    topology_key = policy.affinity_topology_key
    upstream = upstream_topology(pod, catalog, policy)
    if upstream is None and not group.preferred and not group.unassigned_per:
        _require_pod_affinity(patch, topology_key, label)
    _require_domain_node(patch, topology_key)
    _schedule_with(patch, policy.scheduler_name, warnings)
    annotations = pod.annotations
    if upstream is not None:
        _record(patch, keys.UPSTREAM_TOPOLOGY_ANNOTATION, upstream.note, annotations)
    if GROUP_ID_ANNOTATION not in annotations:
        patch.add(("metadata", "annotations", GROUP_ID_ANNOTATION), identity)
    if resolution.size is not None and keys.GROUP_SIZE_ANNOTATION not in annotations:
        # The whole job's size for a segment: the segment is derived from it again at every read.
        size = group.segment.job_size if group.segment is not None else resolution.size
        patch.add(("metadata", "annotations", keys.GROUP_SIZE_ANNOTATION), str(size))
    if keys.MUTATED_ANNOTATION not in annotations:
        patch.add(("metadata", "annotations", keys.MUTATED_ANNOTATION), MUTATED_MARKER)
    if not patch.ops:
        return MutationResult(True, (), _bounded(warnings), "", group.id, "unchanged", "already-mutated")
    return MutationResult(True, tuple(patch.ops), _bounded(warnings), "", group.id, "mutated", "patched")


@dataclass(frozen=True, slots=True)
class UpstreamTopology:
    """A PodGroup whose topology constraint keeps its pods within one value of a domain label."""

    pod_group: str
    key: str

    @property
    def note(self) -> str:
        """Why the pod has no pod affinity of ours, for ``imex-webhook.io/upstream-topology``."""
        return f"PodGroup {self.pod_group} constrains topology to {self.key}; imex-webhook's pod affinity left out"


def domain_keys(policy: Policy) -> frozenset[str]:
    """Node labels one value of which is one of our domains (or its copy, the affinity topology key)."""
    return frozenset({keys.CLIQUE_LABEL, keys.FABRIC_ZONE_LABEL, keys.DOMAIN_LABEL, policy.affinity_topology_key,
                      *policy.domain_labels})


def upstream_topology(pod: Pod, catalog: Catalog, policy: Policy) -> UpstreamTopology | None:
    """The pod's PodGroup (``spec.schedulingGroup``), when kube-scheduler's topology-aware workload scheduling
    already keeps its pods within one value of a domain label: our pod affinity would be a second
    constraint on the same placement. Only the first key counts: kube-scheduler 1.37 applies only the first.
    A PodGroup not cached yet, or constrained on another label (a rack, a block), constrains nothing of ours."""
    refs = pod.workload
    if refs is None or not refs.pod_group:
        return None
    group = catalog.pod_groups.get((pod.namespace, refs.pod_group))
    if group is None or not group.topology_keys or group.topology_keys[0] not in domain_keys(policy):
        return None
    return UpstreamTopology(refs.pod_group, group.topology_keys[0])


def _record(patch: PatchBuilder, annotation: str, value: str, annotations: Mapping[str, str]) -> None:
    current = annotations.get(annotation)
    if current is None:
        patch.add(("metadata", "annotations", annotation), value)
    elif current != value:
        patch.replace(("metadata", "annotations", annotation), value)


def _defer(obj: Mapping[str, Any], pod: Pod, policy: Policy, warnings: list[str]) -> MutationResult:
    """A pod whose claims may make a group, but whose templates or claims are not cached yet: the
    default scheduler would place it anywhere, so it goes to the imex scheduler, whose extender resolves
    the group at scheduling time (the claims exist by then). Marked, so the reinvocation adds nothing."""
    patch = PatchBuilder(obj, WHERE)
    if _schedule_with(patch, policy.scheduler_name, warnings):
        warnings.append(f"group not resolved at admission; {policy.scheduler_name!r} resolves it at scheduling time")
    if keys.MUTATED_ANNOTATION not in pod.annotations:
        patch.add(("metadata", "annotations", keys.MUTATED_ANNOTATION), MUTATED_MARKER)
    outcome = "mutated" if patch.ops else "unchanged"
    return MutationResult(True, tuple(patch.ops), _bounded(warnings), "", None, outcome, "group-deferred")


def _pack(obj: Mapping[str, Any], pod: Pod, catalog: Catalog, policy: Policy) -> MutationResult:
    """A GPU pod in no group under ``--pack-plain-gpu-pods``: to the dedicated profile, whose extender packs it
    into domains already in use (``webhook.domain.placement.plain_pods``). A pod a controller or gang API puts in a
    group, or one whose group cannot be told yet, is left as it is, as without the setting; so is one that
    names a scheduler of its own (the user chose it)."""
    resolution = grouping.resolve(pod, catalog, policy)
    if resolution.group is not None or resolution.pending:
        return MutationResult(True)
    patch = PatchBuilder(obj, WHERE)
    if not _schedule_with(patch, policy.scheduler_name, []):  # its warning speaks of groups: not shown here
        return MutationResult(True, (), (), "", None, "skipped", "custom-scheduler")
    if keys.MUTATED_ANNOTATION not in pod.annotations:
        patch.add(("metadata", "annotations", keys.MUTATED_ANNOTATION), MUTATED_MARKER)
    return MutationResult(True, tuple(patch.ops), (), "", None, "mutated" if patch.ops else "unchanged",
                          "plain-gpu-pod")


def _present(value: Any) -> bool:
    return value is not None and value != [] and value != {}


def _is_group_term(term: Any, wanted: Mapping[str, Any]) -> bool:
    """The term is ours, give or take empty fields a later webhook or a round trip may add."""
    if not isinstance(term, Mapping):
        return False
    selector = term.get("labelSelector")
    if not isinstance(selector, Mapping):
        return False
    term_rest = {k: v for k, v in term.items() if k != "labelSelector" and _present(v)}
    selector_rest = {k: v for k, v in selector.items() if _present(v)}
    return term_rest == {"topologyKey": wanted["topologyKey"]} and selector_rest == wanted["labelSelector"]


def _require_pod_affinity(patch: PatchBuilder, topology_key: str, label: str) -> None:
    wanted = {"labelSelector": {"matchLabels": {keys.GROUP_LABEL: label}}, "topologyKey": topology_key}
    terms = patch.get(_POD_AFFINITY)
    if isinstance(terms, list) and any(_is_group_term(t, wanted) for t in terms):
        return
    patch.add((*_POD_AFFINITY, APPEND), wanted)


def _require_domain_node(patch: PatchBuilder, topology_key: str) -> None:
    terms = patch.get(_NODE_TERMS)
    if not isinstance(terms, list) or not terms:
        # None: create the whole path; [] (rejected by the apiserver anyway): the list gets the one term.
        patch.add((*_NODE_TERMS, APPEND), {"matchExpressions": [{"key": topology_key, "operator": "Exists"}]})
        return
    for i, term in enumerate(terms):
        if not isinstance(term, Mapping):
            raise WireError(dotted(WHERE, (*_NODE_TERMS, i)), "expected an object (a NodeSelectorTerm)")
        expressions = term.get("matchExpressions")
        if not expressions and not term.get("matchFields"):
            continue  # an empty term selects no node; giving it an expression would loosen the constraint
        if isinstance(expressions, list) and any(
            isinstance(e, Mapping) and e.get("key") == topology_key and e.get("operator") == "Exists"
            for e in expressions
        ):
            continue
        patch.add((*_NODE_TERMS, i, "matchExpressions", APPEND), {"key": topology_key, "operator": "Exists"})


def _schedule_with(patch: PatchBuilder, scheduler: str, warnings: list[str]) -> bool:
    """Send the pod to ``scheduler`` unless it names a custom one; whether it goes there."""
    current = patch.get(("spec", "schedulerName"))
    if current == scheduler:
        return True
    if current in (None, "", DEFAULT_SCHEDULER):
        if current is None:
            patch.add(("spec", "schedulerName"), scheduler)
        else:
            patch.replace(("spec", "schedulerName"), scheduler)
        return True
    warnings.append(clip(f"spec.schedulerName {shown(current)} left as is: only {scheduler!r} reserves a domain "
                         "for the whole group", WARNING_MAX))
    return False

