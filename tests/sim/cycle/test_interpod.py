"""InterPodAffinity's required terms: the topology-key rule, the first-pod exception, anti-affinity both
ways, assumed pods, namespaces. Cases computed by hand from the plugin's PreFilter counts and Filter.

Cluster: ``a1``, ``a2`` in clique A, ``b1`` in clique B, ``x1`` with no clique label at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.cycle import objects as o
from webhook.sim.cycle import parse_cluster
from webhook.sim.cycle.cluster import ClusterState, node_infos
from webhook.sim.cycle.filters import filter_node, prefilter
from webhook.sim.cycle.interpod import AFFINITY_NOT_MATCH, ANTI_AFFINITY_NOT_MATCH, EXISTING_ANTI_AFFINITY_NOT_MATCH
from webhook.sim.cycle.model import parse_pod
from webhook.sim.cycle.status import Status

NODES = [o.node("a1", labels={o.CLIQUE: "A"}), o.node("a2", labels={o.CLIQUE: "A"}),
         o.node("b1", labels={o.CLIQUE: "B"}), o.node("x1")]
GROUP = {"group": "g"}
AFFINE = o.pod_affinity(o.affinity_term(GROUP))
ANTI = o.pod_affinity(o.affinity_term(GROUP), anti=True)


def verdicts(pod_raw: dict[str, Any], cluster: ClusterState) -> dict[str, str | None]:
    infos = node_infos(cluster)
    ctx = prefilter(parse_pod(pod_raw), cluster, o.config(), infos)
    assert not isinstance(ctx, Status)
    out: dict[str, str | None] = {}
    for info in infos:
        status, _ = filter_node(ctx, info)
        out[info.name] = None if status is None else status.message
    return out


def fits(*names: str, reason: str = AFFINITY_NOT_MATCH) -> dict[str, str | None]:
    return {n: None if n in names else reason for n in ("a1", "a2", "b1", "x1")}


@pytest.mark.parametrize(("bound", "incoming", "expected"), [
    pytest.param([], o.pod("p", labels=GROUP, spec=AFFINE), fits("a1", "a2", "b1"),
                 id="the first pod of a group passes on every node that has the topology key"),
    pytest.param([], o.pod("p", labels={"group": "other"}, spec=AFFINE), fits(),
                 id="a first pod that does not match its own term passes nowhere"),
    pytest.param([o.pod("m", labels=GROUP, on="b1")], o.pod("p", labels=GROUP, spec=AFFINE), fits("b1"),
                 id="once a member runs in clique B only clique B passes"),
    pytest.param([o.pod("m", labels=GROUP, on="a2")], o.pod("p", labels=GROUP, spec=AFFINE), fits("a1", "a2"),
                 id="a member on a2 admits every node of its clique"),
    pytest.param([o.pod("m", labels=GROUP, on="x1")], o.pod("p", labels=GROUP, spec=AFFINE),
                 fits("a1", "a2", "b1"),
                 id="a member on a node without the key counts for nothing: still the first-pod case"),
    pytest.param([o.pod("m", labels=GROUP, namespace="other", on="b1")], o.pod("p", labels=GROUP, spec=AFFINE),
                 fits("a1", "a2", "b1"), id="a term selects pods of the pod's own namespace only"),
    pytest.param([o.pod("m", labels=GROUP, on="a2")],
                 o.pod("p", labels=GROUP, spec=o.pod_affinity(o.affinity_term(GROUP), o.affinity_term(
                     GROUP, "kubernetes.io/hostname"))), fits("a2"),
                 id="with a clique term and a hostname term only the member's own node satisfies both"),
])
def test_required_pod_affinity(bound: list[dict[str, Any]], incoming: dict[str, Any],
                               expected: dict[str, str | None]) -> None:
    assert verdicts(incoming, parse_cluster(NODES, bound)) == expected


def test_a_node_lacking_the_topology_key_fails_even_for_the_first_pod() -> None:
    assert verdicts(o.pod("p", labels=GROUP, spec=AFFINE), parse_cluster(NODES))["x1"] == AFFINITY_NOT_MATCH


def test_a_pod_only_assumed_on_a_node_counts_like_a_bound_one() -> None:
    cluster = parse_cluster(NODES, assumed=[(o.pod("m", labels=GROUP), "b1")])
    assert verdicts(o.pod("p", labels=GROUP, spec=AFFINE), cluster) == fits("b1")


@pytest.mark.parametrize(("bound", "incoming", "expected"), [
    pytest.param([o.pod("m", labels=GROUP, on="a1")], o.pod("p", spec=ANTI),
                 fits("b1", "x1", reason=ANTI_AFFINITY_NOT_MATCH),
                 id="anti-affinity rejects the whole clique of a matching pod, not nodes lacking the key"),
    pytest.param([o.pod("m", labels=GROUP, on="a1", spec=ANTI)], o.pod("p", labels=GROUP),
                 fits("b1", "x1", reason=EXISTING_ANTI_AFFINITY_NOT_MATCH),
                 id="an existing pod's anti-affinity rejects an incoming pod it matches"),
    pytest.param([o.pod("m", labels={"group": "other"}, on="a1")], o.pod("p", spec=ANTI),
                 fits("a1", "a2", "b1", "x1"), id="anti-affinity ignores pods its selector does not match"),
])
def test_required_pod_anti_affinity(bound: list[dict[str, Any]], incoming: dict[str, Any],
                                    expected: dict[str, str | None]) -> None:
    assert verdicts(incoming, parse_cluster(NODES, bound)) == expected


def test_a_namespace_selector_reaches_pods_of_matching_namespaces() -> None:
    term = {**o.affinity_term(GROUP), "namespaceSelector": {"matchLabels": {"team": "ml"}}}
    cluster = parse_cluster(NODES, [o.pod("m", labels=GROUP, namespace="other", on="b1")],
                            namespaces=[{"metadata": {"name": "other", "labels": {"team": "ml"}}}])
    assert verdicts(o.pod("p", labels=GROUP, spec=o.pod_affinity(term)), cluster) == fits("b1")
