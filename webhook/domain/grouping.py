"""Which group a pod belongs to, and how large that group is (DESIGN section 3).

Identity, first match wins: the ``imex-webhook.io/group`` annotation; the ComputeDomain UID reached
through the pod's ResourceClaimTemplate or ResourceClaim; the UID of a shared ResourceClaim that asks
for an IMEX channel device class. Contradictions (two ComputeDomains, an annotation that disagrees with
the ComputeDomain) are reported as problems, never silently resolved.
"""

from __future__ import annotations

from webhook.domain import keys
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

    annotation = pod.annotations.get(keys.GROUP_ANNOTATION, "").strip()
    group: Group | None = None
    if annotation:
        group = Group(
            id=f"ann:{pod.namespace}/{annotation}",
            kind=GroupKind.ANNOTATION,
            namespace=pod.namespace,
            name=annotation,
            compute_domain=cd_uid,
            one_pod_per_node=cd_uid is not None and not _claims_shared(pod),
        )
        if cd_uid and _annotation_contradicts(annotation, cd_uid, cd):
            problems.append(
                f"annotation {keys.GROUP_ANNOTATION}={annotation!r} contradicts the pod's ComputeDomain "
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
    if group is None:
        return GroupResolution(None, None, "unknown", tuple(problems), tuple(warnings))
    size, source, size_problem = _size(pod, catalog, cd)
    if size_problem:
        problems.append(size_problem)
    return GroupResolution(group, size, source, tuple(problems), tuple(warnings))


def _claims_shared(pod: Pod) -> bool:
    # Pods that share one ResourceClaim share its channel, so they may share a node (issue #309 upstream).
    return any(ref.claim for ref in pod.claims) and not any(ref.template for ref in pod.claims)


def _annotation_contradicts(annotation: str, cd_uid: str, cd: ComputeDomain | None) -> bool:
    # The annotation may name the ComputeDomain by name or by UID; anything else is a second identity.
    return annotation not in {cd_uid, cd.name if cd else cd_uid}


def _cd_label(uid: str, cd: ComputeDomain | None) -> str:
    return f"{cd.namespace}/{cd.name} ({uid})" if cd else uid


def _size(pod: Pod, catalog: Catalog, cd: ComputeDomain | None) -> tuple[int | None, str, str | None]:
    raw = pod.annotations.get(keys.GROUP_SIZE_ANNOTATION)
    if raw is not None:
        text = raw.strip()
        if text.isdigit() and int(text) > 0:
            return int(text), "annotation", None
        return None, "unknown", (
            f"annotation {keys.GROUP_SIZE_ANNOTATION}={raw!r} is not a positive whole number of pods"
        )
    if cd is not None and cd.num_nodes > 0:
        return cd.num_nodes, "computeDomain.numNodes", None
    for owner in pod.owners:
        if owner.kind == "Job" and owner.controller:
            job = catalog.jobs.get((pod.namespace, owner.name))
            if job is not None and job.parallelism:
                return job.parallelism, "job.parallelism", None
    return None, "unknown", None
