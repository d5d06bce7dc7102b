"""Splitting a group pod's candidates by the group's domain: the C-pass split against the plain per-node
rule, memoized node sets against computed ones, over random clusters and candidate lists (unknown nodes,
nodes in no domain, duplicates, any order), and one full explanation per kind of refusal."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests import builders
from webhook.domain.decisions import filtering
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Group, GroupKind, Node
from webhook.domain.placement import candidates
from webhook.domain.placement.candidates import DERIVED, NO_DOMAIN, OUTSIDE_DOMAIN, CheckedNames, Reasons
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state.node_sets import NodeSets

POLICY = Policy()
GROUP = Group(id="cd:x", kind=GroupKind.COMPUTE_DOMAIN, namespace="ml", name="train", compute_domain="x",
              one_pod_per_node=True)
DOMAINS = ("aaaa.1", "bbbb.2", "cccc.3")


def _nodes(domains: Sequence[str | None]) -> dict[str, Node]:
    return {f"n-{i:03d}": Node(f"n-{i:03d}", d, "nvidia.com/gpu.clique" if d else None, 4, None, 0, None)
            for i, d in enumerate(domains)}


def _members(nodes: Mapping[str, Node], domain: str) -> list[str]:
    return sorted(name for name, node in nodes.items() if node.domain == domain)


def _expected(cands: list[str], nodes: Mapping[str, Node], domain: str) -> tuple[list[str], dict[str, str]]:
    """The rule, one node at a time: in the domain, or why not (the full text goes to one node of a kind)."""
    inside = [c for c in cands if c in nodes and nodes[c].domain == domain]
    why = {c: (candidates.MISSING if c not in nodes else NO_DOMAIN if nodes[c].domain is None else OUTSIDE_DOMAIN)
           for c in cands if c not in inside}
    return inside, why


clusters = st.lists(st.sampled_from([*DOMAINS, None]), min_size=0, max_size=60)


@settings(max_examples=300, deadline=None)
@given(clusters, st.data())
def test_the_split_follows_the_per_node_rule_whatever_the_candidates(domains: list[str | None],
                                                                     data: st.DataObject) -> None:
    nodes = _nodes(domains)
    names = [*nodes, "ghost-1", "ghost-2"]
    cands = data.draw(st.one_of(st.permutations(list(nodes)),
                                st.lists(st.sampled_from(names), max_size=80) if names else st.just([])))
    domain = data.draw(st.sampled_from(DOMAINS))
    why = Reasons.of(domain, GROUP, POLICY)
    inside, reasons = candidates.split(cands, nodes, domain, _members(nodes, domain), DERIVED, why)
    want_inside, want_kinds = _expected(cands, nodes, domain)
    assert inside == want_inside
    assert set(reasons) == set(want_kinds)
    longs = {OUTSIDE_DOMAIN: why.other_domain, NO_DOMAIN: why.no_domain}
    for kind, full in longs.items():
        refused = [c for c, k in want_kinds.items() if k == kind]
        # Exactly one node of each kind carries the whole explanation; the others the short shared text.
        assert sorted(reasons[c] for c in refused) == sorted(([full] if refused else []) + [kind] * (len(refused) - 1))
    assert all(reasons[c] == candidates.MISSING for c, k in want_kinds.items() if k == candidates.MISSING)


@settings(max_examples=200, deadline=None)
@given(clusters, st.data())
def test_memoized_node_sets_give_the_split_the_same_result_as_computed_ones(domains: list[str | None],
                                                                          data: st.DataObject) -> None:
    nodes = _nodes(domains)
    memo = NodeSets()
    cands = data.draw(st.one_of(st.permutations(list(nodes)), st.lists(st.sampled_from([*nodes, "x"]), max_size=70)))
    for domain in DOMAINS:
        why = Reasons.of(domain, GROUP, POLICY)
        members = _members(nodes, domain)
        computed = candidates.split(cands, nodes, domain, members, DERIVED, why)
        assert candidates.split(cands, nodes, domain, members, memo, why) == computed
        assert candidates.split(cands, nodes, domain, members, memo, why) == computed  # served from the memo now
        checked = memo.labelled(nodes)
        if set(cands) <= checked:
            named = CheckedNames(cands, set(cands), checked)
            assert candidates.split(named, nodes, domain, members, memo, why) == computed


def test_the_memo_follows_a_new_nodes_mapping_and_not_an_equal_looking_old_one() -> None:
    memo = NodeSets()
    before = _nodes(["aaaa.1", "aaaa.1", "bbbb.2"])
    assert memo.labelled(before) == frozenset(before)
    assert dict(memo.outside(before, "aaaa.1")) == {"n-002": OUTSIDE_DOMAIN}
    built = memo.computed
    assert memo.outside(before, "aaaa.1") is memo.outside(before, "aaaa.1") and memo.computed == built
    after = _nodes(["aaaa.1", None, "aaaa.1"])  # the cache changed: a node lost its label, another moved
    assert memo.labelled(after) == {"n-000", "n-002"}
    assert dict(memo.outside(after, "aaaa.1")) == {}
    assert dict(memo.outside(after, "bbbb.2")) == {"n-000": OUTSIDE_DOMAIN, "n-002": OUTSIDE_DOMAIN}
    assert memo.computed > built


def test_threads_reading_the_memo_while_the_nodes_change_always_get_the_values_of_their_nodes() -> None:
    memo = NodeSets()
    generations = [_nodes([DOMAINS[(i + k) % 3] if (i + k) % 7 else None for i in range(40)]) for k in range(6)]
    wrong: list[str] = []

    def reader(k: int) -> None:
        for j in range(300):
            nodes = generations[(k + j) % len(generations)]
            if memo.labelled(nodes) != candidates.labelled_nodes(nodes):
                wrong.append("labelled")
            domain = DOMAINS[j % 3]
            if dict(memo.outside(nodes, domain)) != candidates.outside_reasons(nodes, domain):
                wrong.append("outside")

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_every_labelled_node_as_candidates_reuses_the_kept_reasons_with_one_full_explanation() -> None:
    nodes = _nodes(["aaaa.1"] * 3 + ["bbbb.2"] * 4 + ["cccc.3"] * 2)
    why = Reasons.of("aaaa.1", GROUP, POLICY)
    cands = list(reversed(nodes))
    inside, reasons = candidates.split(cands, nodes, "aaaa.1", _members(nodes, "aaaa.1"), NodeSets(), why)
    assert inside == ["n-002", "n-001", "n-000"]  # the candidates' order
    assert list(reasons.values()).count(why.other_domain) == 1 and len(reasons) == 6
    assert "outside domain aaaa.1" in why.other_domain and "ml/train" in why.other_domain


def test_five_thousand_refused_nodes_fit_in_a_small_reply_with_a_reason_each() -> None:
    # The bench cluster's node names and domain values (36 characters + a clique number), 278 domains.
    from webhook.tools.bench import payloads

    objects: list[dict[str, Any]] = [payloads.lean_node(i) for i in range(5000)]
    snap = builders.snapshot(objects)
    domain = snap.nodes[payloads.node_name(0)].domain
    assert domain is not None
    names = sorted(snap.nodes)
    inside, reasons = candidates.split(names, snap.nodes, domain, snap.domains[domain], DERIVED,
                                       Reasons.of(domain, GROUP, POLICY))
    assert len(inside) == 18 and len(reasons) == 4982 and all(reasons.values())
    import orjson

    assert len(orjson.dumps({"NodeNames": inside, "FailedAndUnresolvableNodes": reasons})) <= 300 * 1024


def test_filter_nodes_with_the_engine_memo_matches_the_computed_sets_on_a_real_snapshot() -> None:
    objects = [*builders.rack("a", "aaaa.1", 4), *builders.rack("b", "bbbb.2", 5), builders.node("hgx", 8),
               *builders.cd_objects("job", 3)]
    snap = builders.snapshot(objects)
    pod = parsing.pod(builders.pod("job-0", cd="job"))
    for cands in (sorted(snap.nodes), [*sorted(snap.nodes), "ghost"], ["b-01", "a-02", "a-00", "b-03"]):
        plain = filtering.filter_nodes(pod, cands, DecisionInputs(snap, POLICY, 1000.0))
        memo = filtering.filter_nodes(pod, cands, DecisionInputs(snap, POLICY, 1000.0, sets=NodeSets()))
        assert (memo.passed, memo.failed, memo.unresolvable, memo.outcome) == \
            (plain.passed, plain.failed, plain.unresolvable, plain.outcome)
