"""Which group a pod belongs to, and how large that group is (docs/GROUPS.md).

Identity, first match wins: the ``imex-webhook.io/group`` annotation; the ComputeDomain UID reached
through the pod's ResourceClaimTemplate or ResourceClaim; the UID of a shared ResourceClaim that asks
for an IMEX channel device class. Contradictions (two ComputeDomains, an annotation that disagrees with
the ComputeDomain) are reported as problems, never silently resolved. After these, Kubernetes' gang
scheduling and the workload controllers (JobSet, LeaderWorkerSet, Kubeflow, Kueue) name groups and sizes,
in the order of ``group_sources.SOURCES`` (``controller_groups``, docs/GROUPS.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from webhook.domain import keys
from webhook.domain.groups import controller_groups, group_sources, segments, spares, walltime
from webhook.domain.model import (
    Catalog,
    ClaimSpec,
    ComputeDomain,
    Group,
    GroupKind,
    GroupResolution,
    Pod,
)
from webhook.domain.policy import Policy
from webhook.wire.fields import LABEL_VALUE_MAX
from webhook.wire.text import shown

# The group-size annotation: a whole number of pods written in ASCII digits, 1..MAX_GROUP_SIZE. The bound
# keeps int() away from thousands of digits (Python refuses over 4,300) and nonsense sizes out of the plan.
MAX_GROUP_SIZE = 100_000
_SIZE = re.compile(r"[0-9]{1,6}")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")


def name_problem(annotation: str) -> str | None:
    """Why an ``imex-webhook.io/group`` value cannot name a group, or None. A group's name is repeated in its
    reservation, in every node's reason, in Events and in /inspect, so it is held to what a label value
    may hold: at most 63 characters, letters, digits, '-', '_' and '.', beginning and ending with a letter
    or digit. No control character, bidirectional override or 100,000-character name reaches a reason."""
    if len(annotation) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(annotation):
        return None
    return (f"annotation {keys.GROUP_ANNOTATION}={shown(annotation)} is not a group name: use at most "
            f"{LABEL_VALUE_MAX} letters, digits, '-', '_' and '.', beginning and ending with a letter or digit "
            "(what a label value may hold)")


def group_size(raw: str) -> int | None:
    """The ``imex-webhook.io/group-size`` annotation as a number of pods; ``None`` when it is not one."""
    text = raw.strip()
    if not _SIZE.fullmatch(text):  # ASCII digits only: "²".isdigit() is true, but int("²") fails
        return None
    size = int(text)
    return size if 0 < size <= MAX_GROUP_SIZE else None


def size_problem(annotations: Mapping[str, str]) -> str | None:
    """Why the pod's group-size annotation is unusable, for the user; ``None`` when absent or valid."""
    raw = annotations.get(keys.GROUP_SIZE_ANNOTATION)
    if raw is None or group_size(raw) is not None:
        return None
    return (f"annotation {keys.GROUP_SIZE_ANNOTATION}={shown(raw)} is not a group size: write the number of "
            f"pods in the group as a positive whole number up to {MAX_GROUP_SIZE}, in digits (e.g. '8'), or "
            "remove the annotation")


def exclusive_requested(raw: str | None, where: str = "the pod's") -> tuple[bool, str | None]:
    """(whether ``imex-webhook.io/exclusive-domain`` asks for an NVLink domain of its own, why the value is
    unusable or None). Only "true" and "false" are values: a "yes" or "TRUE" read as false would quietly
    share a domain the user asked to keep."""
    if raw is None or raw in ("true", "false"):
        return raw == "true", None
    return False, (f"{where} annotation {keys.EXCLUSIVE_ANNOTATION}={shown(raw)} is not \"true\" or \"false\": "
                   "write one of them, in lower case")


def unresolved_claims(pod: Pod, catalog: Catalog) -> list[str]:
    """The pod's claims whose ResourceClaimTemplate or ResourceClaim is not in the catalog (not cached yet,
    or not created yet), described for a message."""
    return [f"ResourceClaimTemplate {ref.template}" if ref.template else f"ResourceClaim {ref.claim}"
            for ref in pod.claims
            if (ref.template or ref.claim) and _claim_spec(pod, catalog, ref.template, ref.claim) is None]


def _claim_spec(pod: Pod, catalog: Catalog, template: str | None, claim: str | None) -> ClaimSpec | None:
    if template:
        return catalog.templates.get((pod.namespace, template))
    if claim:
        return catalog.claims.get((pod.namespace, claim))
    return None


def _is_channel_claim(spec: ClaimSpec, policy: Policy) -> bool:
    return any(r.device_class in policy.channel_device_classes for r in spec.requests)


def resolve(pod: Pod, catalog: Catalog, policy: Policy) -> GroupResolution:
    """The pod's group, its size and anything the user should know; pure and cheap (a few lookups)."""
    problems: list[str] = []
    warnings: list[str] = []
    compute_domains: dict[str, str] = {}  # CD UID -> which claim said so
    shared_channel: ClaimSpec | None = None
    for ref in pod.claims:
        spec = _claim_spec(pod, catalog, ref.template, ref.claim)
        if spec is None:
            source = f"ResourceClaimTemplate {ref.template}" if ref.template else f"ResourceClaim {ref.claim}"
            if ref.template or ref.claim:
                warnings.append(f"{source} (claim {ref.name!r}) not known yet; group resolved again at scheduling")
            continue
        if spec.compute_domain:
            compute_domains.setdefault(spec.compute_domain, ref.name)
        elif ref.claim and shared_channel is None and _is_channel_claim(spec, policy):
            shared_channel = spec
    if len(compute_domains) > 1:
        listed = ", ".join(f"{uid} (claim {claim!r})" for uid, claim in compute_domains.items())
        problems.append(
            f"the pod's claims belong to {len(compute_domains)} different ComputeDomains: {listed}; "
            "a pod can join only one ComputeDomain (the driver allows one per node)"
        )
    cd_uid = next(iter(compute_domains), None)
    cd = catalog.compute_domains.get(cd_uid) if cd_uid else None
    if cd is not None and cd.namespace != pod.namespace:
        problems.append(foreign(cd, compute_domains[cd.uid], pod.namespace))
        return GroupResolution(None, None, "unknown", tuple(problems), tuple(warnings))

    annotation = pod.annotations.get(keys.GROUP_ANNOTATION, "").strip()
    group: Group | None = None
    if annotation:
        problem = name_problem(annotation)
        if problem:
            return GroupResolution(None, None, "unknown", (*problems, problem), tuple(warnings))
        name = annotation
        group = Group(
            id=f"ann:{pod.namespace}/{name}",
            kind=GroupKind.ANNOTATION,
            namespace=pod.namespace,
            name=name,
            compute_domain=cd_uid,
            one_pod_per_node=cd_uid is not None and not _claims_shared(pod),
        )
        if cd_uid and _annotation_contradicts(annotation, cd_uid, cd):
            problems.append(
                f"annotation {keys.GROUP_ANNOTATION}={shown(annotation)} contradicts the pod's ComputeDomain "
                f"{_cd_label(cd_uid, cd)}; remove the annotation or set it to the ComputeDomain's name"
            )
    elif cd_uid:
        group = Group(
            id=f"cd:{cd_uid}",
            kind=GroupKind.COMPUTE_DOMAIN,
            namespace=pod.namespace,
            name=cd.name if cd else cd_uid,
            compute_domain=cd_uid,
            one_pod_per_node=not _claims_shared(pod),
        )
    elif shared_channel is not None:
        group = Group(
            id=f"claim:{shared_channel.uid or shared_channel.namespace + '/' + shared_channel.name}",
            kind=GroupKind.SHARED_CLAIM,
            namespace=pod.namespace,
            name=shared_channel.name,
            compute_domain=None,
            one_pod_per_node=False,
        )
    if group is not None and group.compute_domain:
        on_cd, cd_problem = exclusive_requested(cd.exclusive if cd is not None else None,
                                                f"ComputeDomain {cd.namespace}/{cd.name}'s" if cd else "")
        on_pod, pod_problem = exclusive_requested(pod.annotations.get(keys.EXCLUSIVE_ANNOTATION))
        problems.extend(p for p in (cd_problem, pod_problem) if p)
        if policy.exclusive_domains or on_cd or on_pod:
            group = replace(group, exclusive=True)
    if group is None:
        # Only once every claim is known: a claim not cached yet may still make a ComputeDomain group.
        if not problems and not unresolved_claims(pod, catalog):
            found = _from_controllers(pod, catalog, policy)
            if found is not None and found.group is not None:
                count, problem = spares.requested(pod.annotations, None)
                bound, bound_problem = walltime.requested(pod, catalog, None)
                group, size, cut = segments.segmented(replace(found.group, spares=count, walltime=bound), found.size,
                                                      pod, None, catalog)
                stated = tuple(p for p in (problem, bound_problem) if p)
                return replace(found, group=group, size=size, problems=found.problems + stated + tuple(cut))
            if found is not None:
                return found
        return GroupResolution(None, None, "unknown", tuple(problems), tuple(warnings))
    count, problem = spares.requested(pod.annotations, cd)
    bound, bound_problem = walltime.requested(pod, catalog, cd)
    problems.extend(p for p in (problem, bound_problem) if p)
    group = replace(group, spares=count, walltime=bound)
    size, source, size_problem = _size(pod, catalog, cd)
    if size_problem:
        problems.append(size_problem)
    if pod.workload is not None:
        size, source = _with_controllers(pod, catalog, policy, group, size, source, warnings, problems)
    if not problems:
        group, size, cut = segments.segmented(group, size, pod, cd, catalog)
        problems.extend(cut)
    return GroupResolution(group, size, source, tuple(problems), tuple(warnings))


def foreign(cd: ComputeDomain, claim: str, namespace: str) -> str:
    """Why a pod of ``namespace`` may not join ``cd``: a ComputeDomain's UID is on every node the driver
    labels, so a claim template in any namespace can name it; its group is its own namespace's alone."""
    return (f"the pod's claim {shown(claim)} names ComputeDomain {cd.namespace}/{cd.name} ({cd.uid}), which is in "
            f"namespace {cd.namespace}; a pod joins only a ComputeDomain of its own namespace ({namespace})")


def foreign_compute_domain(pod: Pod, catalog: Catalog) -> str | None:
    """Why the pod names another namespace's ComputeDomain in one of its claims, or None."""
    for ref in pod.claims:
        spec = _claim_spec(pod, catalog, ref.template, ref.claim)
        cd = catalog.compute_domains.get(spec.compute_domain) if spec is not None and spec.compute_domain else None
        if cd is not None and cd.namespace != pod.namespace:
            return foreign(cd, ref.name, pod.namespace)
    return None


def _claims_shared(pod: Pod) -> bool:
    # Pods that share one ResourceClaim share its channel, so they may share a node (issue #309 upstream).
    return any(ref.claim for ref in pod.claims) and not any(ref.template for ref in pod.claims)


def _annotation_contradicts(annotation: str, cd_uid: str, cd: ComputeDomain | None) -> bool:
    # The annotation may name the ComputeDomain by name or by UID; anything else is a second identity.
    return annotation not in {cd_uid, cd.name if cd else cd_uid}


def _cd_label(uid: str, cd: ComputeDomain | None) -> str:
    return f"{cd.namespace}/{cd.name} ({uid})" if cd else uid


def _size(pod: Pod, catalog: Catalog, cd: ComputeDomain | None) -> tuple[int | None, str, str | None]:
    declared, source, what = _declared(pod, catalog, cd)
    raw = pod.annotations.get(keys.GROUP_SIZE_ANNOTATION)
    if raw is not None:
        size = group_size(raw)
        if size is not None:
            return size, "annotation", raised(size, declared, what)
        return None, "unknown", size_problem(pod.annotations)
    return declared, source, None


def _declared(pod: Pod, catalog: Catalog, cd: ComputeDomain | None) -> tuple[int | None, str, str]:
    """(the size the pod's ComputeDomain or Job declares, its source, how a person names it)."""
    if cd is not None and cd.num_nodes > 0:
        return cd.num_nodes, "computeDomain.numNodes", f"ComputeDomain {cd.namespace}/{cd.name}'s numNodes"
    for owner in pod.owners:
        if owner.kind == "Job" and owner.controller:
            job = catalog.jobs.get((pod.namespace, owner.name))
            if job is not None and job.parallelism:
                return job.parallelism, "job.parallelism", f"Job {pod.namespace}/{owner.name}'s parallelism"
    return None, "unknown", ""


def raised(written: int | None, declared: int | None, what: str) -> str | None:
    """Why a group-size annotation above the size a controller object declares is refused, or None. The
    controller creates that many pods at most; a larger size would only reserve a domain's room for pods
    that never come (and a tenant's pod could hold any amount of capacity that way)."""
    if written is None or declared is None or written <= declared:
        return None
    return (f"annotation {keys.GROUP_SIZE_ANNOTATION}={written} is larger than {what} ({declared}): the annotation "
            "may lower a group's size, never raise it above what its controller creates")


# -- Groups from Kubernetes' gang scheduling and the workload controllers (controller_groups) ----------

def _from_controllers(pod: Pod, catalog: Catalog, policy: Policy) -> GroupResolution | None:
    """The group the first gang API or controller source puts the pod in, when no source of ours does."""
    if pod.workload is None or not controller_groups.asks(pod.gpu_limit, pod.claims, pod.namespace, catalog,
                                                          policy):
        return None  # only pods that ask for GPUs or an IMEX channel are members
    found = group_sources.candidates(pod, catalog, controller_groups.member(pod.namespace, catalog, policy),
                                     MAX_GROUP_SIZE)
    if not found:
        return None
    first = found[0]
    if first.waiting:
        return GroupResolution(None, None, "unknown", (), (first.waiting,), pending=True)
    size, source = first.size, first.size_source
    problems = [first.problem] if first.problem else []
    warnings = [first.note] if first.note else []
    raw = pod.annotations.get(keys.GROUP_SIZE_ANNOTATION)
    if raw is not None:  # the user's own size wins over the controller's, even over one it cannot count
        written = group_size(raw)
        size, source = (written, "annotation") if written is not None else (None, "unknown")
        problem = raised(written, first.size, first.what) if written is not None else size_problem(pod.annotations)
        problems = [problem] if problem else []
        warnings = []
    warnings.extend(controller_groups.disagreements(first.what, first.group.name, size, found[1:]))
    return GroupResolution(first.group, size, source if size is not None else "unknown", tuple(problems),
                           tuple(warnings))


def _with_controllers(pod: Pod, catalog: Catalog, policy: Policy, group: Group, size: int | None, source: str,
                      warnings: list[str], problems: list[str]) -> tuple[int | None, str]:
    """A group of our own sources whose pods a gang API or controller groups too: the first such source
    sizes it when nothing above did (ComputeDomain numNodes is deprecated and usually 0), counting only
    the pods of that group; the others that disagree are warned about."""
    if group.compute_domain:
        joins = controller_groups.joins_compute_domain(group.compute_domain, pod.namespace, catalog)
    elif group.kind is GroupKind.SHARED_CLAIM:
        joins = controller_groups.shares_claim(group.name)
    else:
        joins = controller_groups.member(pod.namespace, catalog, policy)
    found = group_sources.candidates(pod, catalog, joins, MAX_GROUP_SIZE)
    if source == "annotation":
        problems.extend(p for c in found if not c.problem and not c.waiting
                        and (p := raised(size, c.size, c.what)) is not None)
    if source in ("unknown", "job.parallelism") and keys.GROUP_SIZE_ANNOTATION not in pod.annotations:
        lender = next((c for c in found if c.size is not None and not c.problem and not c.waiting), None)
        if lender is not None:
            size, source = lender.size, lender.size_source
    warnings.extend(controller_groups.disagreements(controller_groups.describe(group), group.name, size, found))
    return size, source
