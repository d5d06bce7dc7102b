"""The whole group's claims, per domain, before committing (docs/SCHEDULER.md, "What a domain can take"): every
node of a candidate domain is judged on GPU source, health, the IMEX channel, the one-ComputeDomain-per-node lock
(node label, bound members, allocated channel and daemon claims) and capacity together; a group is given a
domain only when all of it fits, and a refusal counts which constraint ran out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.decisions import filtering
from webhook.domain.groups import grouping
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Demand, Reservation
from webhook.domain.placement import placement
from webhook.domain.policy import Policy
from webhook.domain.reading import claim_parsing, parsing
from webhook.errors import WireError
from webhook.sim.dra_objects import channel_slice

RACK = "aaaa-1111.7"
NOW = 1000.0


def cluster(nodes: int = 18, *, channels: bool = True) -> list[dict[str, Any]]:
    objects = builders.rack("n", RACK, nodes)
    if channels:
        objects += [channel_slice(f"n-{i:02d}") for i in range(nodes)]
    return objects + builders.cd_objects("train", 16) + builders.cd_objects("cd-a", 3, namespace="other")


def unhealthy(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["labels"][keys.HEALTH_LABEL] = "unhealthy"
    return obj


def choose(objects: list[dict[str, Any]], size: int = 16) -> placement.Choice:
    snap = builders.snapshot([*objects, builders.pod("train-0", "train")])
    pod = parsing.pod(builders.pod("train-0", "train"))
    group = grouping.resolve(pod, snap.catalog, Policy()).group
    assert group is not None
    return placement.choose(group, size, Demand(4), snap, {}, pending_self=False)


def test_the_refusal_counts_each_constraint_that_ran_out_in_the_domain() -> None:
    objects = cluster()
    other = builders.cd_uid("cd-a")  # the builders name the uid before the namespace is set
    objects[0]["metadata"]["labels"][keys.COMPUTE_DOMAIN_LABEL] = other  # the driver's lock label
    # A channel allocated for a pod still binding, and the IMEX daemon's claim in the driver's namespace.
    objects.append(builders.allocated_claim("a-1", "n-01", other, namespace="other"))
    objects.append(builders.allocated_claim("a-2", "n-02", other, target=keys.DAEMON_TARGET, namespace="nvidia-dra"))
    unhealthy(objects[3])
    unhealthy(objects[4])
    choice = choose(objects)
    assert choice.domain is None
    assert f"domain {RACK}: 18 nodes, 3 held by ComputeDomain other/cd-a, 2 with an unhealthy NVLink fabric, " \
           "13 < 16 needed" in choice.reason, choice.reason
    (offer,) = choice.offers
    assert offer.nodes == 18 and sum(n for _, n in offer.ruled_out) + offer.pods == 18


def test_the_same_domain_is_chosen_once_nothing_but_gpus_constrains_it() -> None:
    choice = choose(cluster())
    assert choice.domain == RACK, choice.reason


@pytest.mark.parametrize(("publish", "missing", "fits"), [
    (True, 0, True),
    (True, 3, False),  # the plugin publishes elsewhere: a node without a channel takes no ComputeDomain pod
    (False, 18, True),  # published nowhere (host-managed IMEX, no driver): channels are not checked
], ids=["every node has a channel", "three nodes lack one", "no plugin anywhere"])
def test_a_node_without_an_imex_channel_takes_no_compute_domain_member(publish: bool, missing: int, fits: bool) -> None:
    objects = builders.rack("n", RACK, 18)
    if publish:
        objects += [channel_slice(f"n-{i:02d}") for i in range(missing, 18)]
    choice = choose(objects + builders.cd_objects("train", 16))
    assert (choice.domain == RACK) is fits, choice.reason
    if not fits:
        assert "3 without an IMEX channel" in choice.reason and "15 < 16 needed" in choice.reason


def test_the_groups_own_claims_do_not_hold_its_nodes_against_it() -> None:
    objects = cluster() + [builders.allocated_claim(f"t-{i}", f"n-{i:02d}", builders.cd_uid("train")) for i in range(4)]
    assert choose(objects).domain == RACK


def test_an_unattributed_claim_names_itself_as_the_holder() -> None:
    objects = cluster() + [builders.allocated_claim(f"x-{i}", f"n-{i:02d}", None, namespace="lab") for i in range(3)]
    choice = choose(objects)
    assert "1 held by ResourceClaim lab/x-0, 1 held by ResourceClaim lab/x-1" in choice.reason, choice.reason
    assert "15 < 16 needed" in choice.reason


@pytest.mark.parametrize(("extra", "reason"), [
    (builders.allocated_claim("a-1", "n-00", builders.cd_uid("cd-a"), namespace="other"),
     "IMEX channel or daemon device is allocated to ComputeDomain other/cd-a"),
    (None, "node publishes no IMEX channel"),
], ids=["channel held by another ComputeDomain's claim", "no channel published"])
def test_the_filter_refuses_such_a_node_for_good_and_says_why(extra: dict[str, Any] | None, reason: str) -> None:
    objects = cluster(4) + builders.cd_objects("pair", 2)
    if extra is not None:
        objects.append(extra)
    else:
        objects = [o for o in objects if o["metadata"]["name"] != "n-00-compute-domain.nvidia.com"]
    objects.append(builders.pod("pair-0", "pair"))
    snap = builders.snapshot(objects)
    # The scheduler asks about the one node left; the group's domain was chosen earlier.
    reservation = Reservation("cd:" + builders.cd_uid("pair"), "pair", "ml", RACK, 2, 4, True, NOW, version="1")
    held = replace(snap, reservations={reservation.group_id: reservation})
    out = filtering.filter_nodes(parsing.pod(builders.pod("pair-0", "pair")), sorted(snap.nodes),
                                 DecisionInputs(held, Policy(), NOW))
    assert reason in out.unresolvable.get("n-00", ""), out
    assert set(out.passed) == {"n-01", "n-02", "n-03"}


def test_a_daemon_claim_holds_its_node_but_makes_no_group() -> None:
    body = builders.allocated_claim("computedomain-daemon-x", "n-00", "cd-uid", target=keys.DAEMON_TARGET)
    spec = claim_parsing.claim_spec(body, template=False)
    assert (spec.compute_domain, spec.daemon_for, spec.imex_nodes) == (None, "cd-uid", ("n-00",))


def test_a_daemon_config_without_labels_still_names_its_compute_domain() -> None:
    body = builders.allocated_claim("d", "n-00", None)
    body["spec"]["devices"]["config"] = [{"opaque": {"driver": keys.COMPUTE_DOMAIN_DRIVER, "parameters": {
        "kind": keys.COMPUTE_DOMAIN_DAEMON_CONFIG_KIND, "domainID": "cd-uid"}}}]
    spec = claim_parsing.claim_spec(body, template=False)
    assert (spec.compute_domain, spec.daemon_for) == (None, "cd-uid")


def test_only_the_compute_domain_drivers_allocations_hold_a_node() -> None:
    body = builders.allocated_claim("g", "n-00", None)
    body["status"]["allocation"]["devices"]["results"].append(
        {"request": "r", "driver": "gpu.nvidia.com", "pool": "n-05", "device": "gpu-0"})
    assert claim_parsing.claim_spec(body, template=False).imex_nodes == ("n-00",)


@pytest.mark.parametrize(("status", "field"), [
    ({"allocation": []}, "claim.status.allocation"),
    ({"allocation": {"devices": {"results": "all"}}}, "claim.status.allocation.devices.results"),
    ({"allocation": {"devices": {"results": [7]}}}, "claim.status.allocation.devices.results[0]"),
    ({"allocation": {"devices": {"results": [{"driver": keys.COMPUTE_DOMAIN_DRIVER, "pool": 12}]}}},
     "claim.status.allocation.devices.results[0].pool"),
    ({"allocation": {"devices": {"results": [{"driver": {"deep": [[[]]]}}]}}},
     "claim.status.allocation.devices.results[0].driver"),
], ids=["allocation a list", "results a string", "a result a number", "pool a number", "driver an object"])
def test_a_malformed_allocation_names_the_field(status: dict[str, Any], field: str) -> None:
    body = builders.allocated_claim("c", "n-00", None)
    body["status"] = status
    with pytest.raises(WireError) as err:
        claim_parsing.claim_spec(body, template=False)
    assert err.value.path == field


def test_a_huge_pool_name_is_refused_by_the_name_bounds() -> None:
    body = builders.allocated_claim("c", "x" * 100_000, None)
    with pytest.raises(WireError):
        claim_parsing.claim_spec(body, template=False)
