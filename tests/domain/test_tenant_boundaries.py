"""A tenant keeps to its own namespace: a pod never joins, holds or reads another namespace's group.

A ComputeDomain's UID is on every node the NVIDIA driver labels, so any tenant can write a claim template
in its own namespace whose ``domainID`` names another namespace's ComputeDomain. Such a pod is refused at
every verb (admission, filter, preempt, bind) with a reason naming both namespaces, and the victim's
group, reservation and placement stay exactly as they were. Defence in depth: a reservation recorded for
another namespace under a group's identity is never joined either.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests import builders
from webhook.demo import cluster as demo
from webhook.domain.admission import mutating
from webhook.domain.decisions import binding, filtering, preemption
from webhook.domain.groups import grouping
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.errors import DecisionError

POLICY = Policy()
RACK = "aaaa-1111.7"
VICTIM_GROUP = f"cd:{builders.cd_uid('train')}"


def _thief_template() -> dict[str, Any]:
    """A claim template in namespace ``evil`` whose domainID is ml/train's UID, as read off a node label."""
    template = copy.deepcopy(demo.channel_template("train"))
    template["metadata"].update(name=demo.template_name("thief"), namespace="evil",
                                uid=demo.uid("rct", "evil", "thief"))
    return template


def _objects() -> list[dict[str, Any]]:
    return [*builders.rack("a", RACK, 4), *builders.cd_objects("train", 4), _thief_template()]


THIEF = builders.pod("thief-0", cd="thief", namespace="evil")
VICTIM_RESERVATION = Reservation(group_id=VICTIM_GROUP, group_name="train", namespace="ml", domain=RACK, size=4,
                                 gpus_per_pod=4, one_pod_per_node=True, created_at=990.0, version="7")


def test_a_claim_naming_another_namespaces_compute_domain_makes_no_group_and_names_both_namespaces() -> None:
    snap = builders.snapshot(_objects())
    res = grouping.resolve(parsing.pod(THIEF), snap.catalog, POLICY)
    assert res.group is None
    assert len(res.problems) == 1
    assert "ComputeDomain ml/train" in res.problems[0] and "own namespace (evil)" in res.problems[0]


def test_the_same_claim_in_the_compute_domains_own_namespace_joins_it() -> None:
    snap = builders.snapshot(_objects())
    res = grouping.resolve(parsing.pod(builders.pod("train-0", cd="train")), snap.catalog, POLICY)
    assert res.group is not None and res.group.id == VICTIM_GROUP and res.problems == ()


def test_admission_denies_the_pod_with_the_reason_and_no_patch() -> None:
    snap = builders.snapshot(_objects())
    result = mutating.mutate(copy.deepcopy(THIEF), "evil", snap.catalog, snap.nodes, POLICY)
    assert (result.allowed, result.reason, result.patch, result.group_id) == (False, "other-namespace", (), None)
    assert "ComputeDomain ml/train" in result.message


def test_the_filter_refuses_every_node_and_leaves_the_victims_reservation_alone() -> None:
    snap = builders.snapshot(_objects(), {VICTIM_GROUP: VICTIM_RESERVATION})
    out = filtering.filter_nodes(parsing.pod(THIEF), sorted(snap.nodes), DecisionInputs(snap, POLICY, 1000.0))
    assert out.passed == () and not out.failed
    assert set(out.unresolvable) == set(snap.nodes)
    assert all("ml/train" in why for why in out.unresolvable.values())
    assert out.outcome == "invalid-group"
    # The victim's own pod still gets its rack: nothing of the thief's was counted against it.
    victim = filtering.filter_nodes(parsing.pod(builders.pod("train-0", cd="train")), sorted(snap.nodes),
                                    DecisionInputs(snap, POLICY, 1000.0))
    assert len(victim.passed) == 4


def test_preemption_keeps_no_node_for_the_pod() -> None:
    snap = builders.snapshot(_objects(), {VICTIM_GROUP: VICTIM_RESERVATION})
    out = preemption.preempt(parsing.pod(THIEF), {"a-00": ["v"]}, {}, DecisionInputs(snap, POLICY, 1000.0))
    assert out.kept == () and out.reason_class == "invalid-group"


def test_a_bind_is_refused_naming_the_other_namespace() -> None:
    snap = builders.snapshot([*_objects(), THIEF], {VICTIM_GROUP: VICTIM_RESERVATION})
    with pytest.raises(DecisionError, match="ComputeDomain ml/train"):
        binding.plan(parsing.pod(THIEF), THIEF["metadata"]["uid"], "a-00",
                     DecisionInputs(snap, POLICY, 1000.0, holder="r1"))


def test_a_reservation_recorded_for_another_namespace_is_never_joined() -> None:
    # No group source names a group across namespaces; should a stored reservation ever say otherwise (an
    # older version, a hand-edited object), the pod is refused instead of placed in that namespace's domain.
    planted = Reservation(group_id=VICTIM_GROUP, group_name="train", namespace="evil", domain=RACK, size=4,
                          gpus_per_pod=4, one_pod_per_node=True, created_at=990.0, version="7")
    snap = builders.snapshot(_objects(), {VICTIM_GROUP: planted})
    out = filtering.filter_nodes(parsing.pod(builders.pod("train-0", cd="train")), sorted(snap.nodes),
                                 DecisionInputs(snap, POLICY, 1000.0))
    assert out.passed == () and out.outcome == "invalid-group"
    assert all("reserved for namespace evil" in why for why in out.unresolvable.values())


@pytest.mark.parametrize(("case", "annotations"), [
    ("the same group annotation in two namespaces",
     {"imex-webhook.io/group": "train"}),
    ("the same group annotation and a size",
     {"imex-webhook.io/group": "train", "imex-webhook.io/group-size": "2"}),
])
def test_one_group_name_in_two_namespaces_is_two_groups(case: str, annotations: dict[str, str]) -> None:
    snap = builders.snapshot(_objects())
    ours = grouping.resolve(parsing.pod(builders.pod("a", annotations=annotations)), snap.catalog, POLICY)
    theirs = grouping.resolve(parsing.pod(builders.pod("b", annotations=annotations, namespace="evil")),
                              snap.catalog, POLICY)
    assert ours.group is not None and theirs.group is not None, case
    assert ours.group.id != theirs.group.id, case
