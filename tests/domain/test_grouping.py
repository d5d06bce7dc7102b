"""Group identity (annotation > ComputeDomain > shared channel claim), group size (annotation >
numNodes > Job parallelism > unknown), and the contradictions the user has to fix."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.groups import grouping
from webhook.domain.model import GroupKind
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing

POLICY = Policy()


def _shared_claim(name: str, device_class: str, uid: str = "claim-uid") -> dict[str, Any]:
    return {"kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml", "uid": uid},
            "spec": {"devices": {"requests": [{"name": "ch", "exactly": {"deviceClassName": device_class}}]}}}


def _job(name: str, parallelism: int) -> dict[str, Any]:
    return {"kind": "Job", "metadata": {"name": name, "namespace": "ml", "uid": "job-uid"},
            "spec": {"parallelism": parallelism}}


def _resolve(pod: dict[str, Any], objects: list[dict[str, Any]]) -> grouping.GroupResolution:
    snap = builders.snapshot(objects)
    return grouping.resolve(parsing.pod(pod), snap.catalog, POLICY)


CATALOG = [*builders.cd_objects("train", 8), *builders.cd_objects("other", 2), *builders.cd_objects("sizeless", 0),
           _shared_claim("shared-channel", keys.DEFAULT_CHANNEL_DEVICE_CLASSES[1]),
           _shared_claim("plain-gpus", "gpu.nvidia.com", uid="gpu-claim"), _job("trainer", 6)]


def _with_claims(p: dict[str, Any], claims: list[dict[str, str]]) -> dict[str, Any]:
    p["spec"]["resourceClaims"] = claims
    return p


@pytest.mark.parametrize(("case", "pod", "group_id", "kind", "size", "source"), [
    ("a ComputeDomain template makes the group",
     builders.pod("p", cd="train"), f"cd:{builders.cd_uid('train')}", GroupKind.COMPUTE_DOMAIN, 8,
     "computeDomain.numNodes"),
    ("the annotation wins over the ComputeDomain and keeps its size",
     builders.pod("p", cd="train", annotations={keys.GROUP_ANNOTATION: "train"}), "ann:ml/train",
     GroupKind.ANNOTATION, 8, "computeDomain.numNodes"),
    ("an annotation alone makes a group of unknown size",
     builders.pod("p", annotations={keys.GROUP_ANNOTATION: "job-a"}), "ann:ml/job-a", GroupKind.ANNOTATION, None,
     "unknown"),
    ("the size annotation wins over numNodes",
     builders.pod("p", cd="train", annotations={keys.GROUP_SIZE_ANNOTATION: "3"}),
     f"cd:{builders.cd_uid('train')}", GroupKind.COMPUTE_DOMAIN, 3, "annotation"),
    ("a shared claim asking for an IMEX channel makes the group",
     _with_claims(builders.pod("p"), [{"name": "ch", "resourceClaimName": "shared-channel"}]), "claim:claim-uid",
     GroupKind.SHARED_CLAIM, None, "unknown"),
])
def test_group_identity_and_size(case: str, pod: dict[str, Any], group_id: str, kind: GroupKind,
                                 size: int | None, source: str) -> None:
    res = _resolve(pod, CATALOG)
    assert res.group is not None, case
    assert (res.group.id, res.group.kind, res.size, res.size_source) == (group_id, kind, size, source), case
    assert res.problems == ()


def test_the_owning_jobs_parallelism_sizes_a_group_when_numnodes_is_zero() -> None:
    pod = builders.pod("p", cd="sizeless")
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "trainer", "uid": "job-uid", "controller": True,
                                           "apiVersion": "batch/v1"}]
    res = _resolve(pod, CATALOG)
    assert (res.size, res.size_source) == (6, "job.parallelism")


def test_a_pod_without_claims_or_annotation_is_not_in_a_group() -> None:
    assert _resolve(builders.pod("p"), CATALOG).group is None


def test_a_shared_claim_for_plain_gpus_is_not_a_group() -> None:
    pod = _with_claims(builders.pod("p"), [{"name": "g", "resourceClaimName": "plain-gpus"}])
    assert _resolve(pod, CATALOG).group is None


def test_a_compute_domain_group_places_one_pod_per_node() -> None:
    res = _resolve(builders.pod("p", cd="train"), CATALOG)
    assert res.group is not None and res.group.one_pod_per_node


def test_claims_of_two_compute_domains_are_a_problem_naming_both() -> None:
    pod = _with_claims(builders.pod("p"), [
        {"name": "a", "resourceClaimTemplateName": "train-channel"},
        {"name": "b", "resourceClaimTemplateName": "other-channel"},
    ])
    res = _resolve(pod, CATALOG)
    assert len(res.problems) == 1
    assert builders.cd_uid("train") in res.problems[0] and builders.cd_uid("other") in res.problems[0]


def test_an_annotation_contradicting_the_compute_domain_is_a_problem() -> None:
    res = _resolve(builders.pod("p", cd="train", annotations={keys.GROUP_ANNOTATION: "something-else"}), CATALOG)
    assert res.problems and "contradicts" in res.problems[0]


def test_a_template_not_cached_yet_is_a_warning_not_a_problem() -> None:
    res = _resolve(builders.pod("p", cd="not-created-yet"), CATALOG)
    assert res.group is None and res.problems == ()
    assert "not-created-yet-channel" in res.warnings[0]


def test_a_bad_size_annotation_is_a_problem() -> None:
    res = _resolve(builders.pod("p", cd="train", annotations={keys.GROUP_SIZE_ANNOTATION: "lots"}), CATALOG)
    assert res.problems and "positive whole number" in res.problems[0]
