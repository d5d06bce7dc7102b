"""Snapshots freeze only what changed: the frozen view of a table equals freezing it whole after any sequence
of changes, a dict handed to a snapshot never changes afterwards, and the store's node groups, ComputeDomains,
members and IMEX holds equal a from-scratch freeze after random pod and claim events."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests import builders
from webhook.state.cluster import ClusterStore
from webhook.state.frozen_views import FrozenView

Table = dict[str, set[str]]


def _whole(table: Table) -> dict[str, frozenset[str]]:
    return {k: frozenset(v) for k, v in table.items() if v}


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from("xyz"), st.booleans()), max_size=40))
def test_the_view_equals_freezing_the_whole_table_after_any_changes(ops: list[tuple[str, str, bool]]) -> None:
    table: Table = {}
    view: FrozenView[str, set[str], frozenset[str]] = FrozenView(frozenset)
    handed: list[tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]] = []
    for key, member, add in ops:
        if add:
            table.setdefault(key, set()).add(member)
        elif key in table:
            table[key].discard(member)
            if not table[key]:
                del table[key]
        view.touch(key)
        got = view.view(table)
        assert got == _whole(table)
        handed.append((got, dict(got)))
    for given_out, copy_then in handed:
        assert given_out == copy_then  # nothing handed out was changed by later changes


def test_the_view_is_the_same_dict_until_a_key_is_touched() -> None:
    table = {"a": {"x"}}
    view: FrozenView[str, set[str], frozenset[str]] = FrozenView(frozenset)
    view.touch("a")
    first = view.view(table)
    assert view.view(table) is first
    table["b"] = {"y"}
    view.touch("b")
    second = view.view(table)
    assert second is not first and first == {"a": frozenset({"x"})} and second == _whole(table)


A = "aaaa-1111.7"
NODES = [f"a-{i:02d}" for i in range(4)]
JOBS = ["j1", "j2"]


def _from_scratch(store: ClusterStore) -> dict[str, Any]:
    index, holds = store._index, store._imex_holds  # the mutable tables the views are kept from
    return {"node_groups": {n: frozenset(g) for n, g in index.node_groups.items()},
            "node_compute_domains": {n: frozenset(c) for n, c in index.node_cds.items()},
            "members": {g: tuple(m.values()) for g, m in index.members.items()},
            "imex_holds": {n: frozenset(c) for n, c in holds._by_node.items()}}


event = st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(JOBS), st.integers(0, 2), st.sampled_from([None, *NODES]),
              st.sampled_from(["Pending", "Running", "Succeeded", "gone"])),
    st.tuples(st.just("claim"), st.sampled_from(["c0", "c1", "c2"]), st.sampled_from(NODES),
              st.sampled_from(JOBS), st.booleans()),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(event, max_size=30))
def test_store_snapshots_equal_a_from_scratch_freeze_after_random_events(events: list[tuple[Any, ...]]) -> None:
    objects = [*builders.rack("a", A, len(NODES)), *builders.cd_objects("j1", 3), *builders.cd_objects("j2", 3)]
    store = builders.store(objects)
    earlier = []
    for kind, *args in events:
        if kind == "pod":
            job, i, node, phase = args
            pod = builders.pod(f"{job}-{i}", cd=job, node=node, phase="Pending" if phase == "gone" else phase)
            store.apply("Pod", "DELETED" if phase == "gone" else "MODIFIED", pod)
        else:
            name, node, job, allocated = args
            claim = builders.allocated_claim(name, node, builders.cd_uid(job))
            store.apply("ResourceClaim", "MODIFIED" if allocated else "DELETED", claim)
        snap = store.snapshot()
        expected = _from_scratch(store)
        assert {k: getattr(snap, k) for k in expected} == expected
        earlier.append((snap, expected))
    for snap, expected in earlier:  # later events changed no snapshot taken before them
        assert {k: getattr(snap, k) for k in expected} == expected
