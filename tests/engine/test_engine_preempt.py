"""Preemption through the engine: the domain a group's first preemption chooses is stored before anything
is evicted, so every member preempts in that one domain. kube-scheduler preempts for one pod at a time,
each with its own candidates; without the record, members chose different racks (seen with the real
scheduler: pods evicted in two domains, and the group fit in neither)."""

from __future__ import annotations

from tests import builders
from webhook.adapters.embedded import EmbeddedBackend, put_pod
from webhook.domain import keys
from webhook.domain.model import Pod
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine

A, B = "aaaa-0001.7", "bbbb-0002.7"
GROUP = {keys.GROUP_ANNOTATION: "urgent", keys.GROUP_SIZE_ANNOTATION: "3"}


def _engine() -> tuple[Engine, dict[str, Pod]]:
    objects = builders.rack("a", A, 4) + builders.rack("b", B, 3)
    fillers = [builders.pod(f"filler-{n}", node=n, phase="Running")
               for n in [f"a-{i:02d}" for i in range(4)] + [f"b-{i:02d}" for i in range(3)]]
    store = builders.store(objects + fillers)
    backend = EmbeddedBackend(store, [], "test")
    engine = builders.engine(backend, holder="test", clock=lambda: 1000.0)
    victims = {p.node_name or "": p for p in (parsing.pod(f) for f in fillers)}
    return engine, victims


def _member(engine: Engine, i: int) -> Pod:
    pod = parsing.pod(builders.pod(f"urgent-{i}", annotations=GROUP))
    put_pod(engine.store, pod)
    return pod


def test_the_first_preemption_stores_the_groups_domain_and_later_members_preempt_only_there() -> None:
    engine, victims = _engine()
    everywhere = {n: [v.uid] for n, v in victims.items()}
    first = engine.preempt(_member(engine, 0), everywhere, {})
    assert set(first.kept) == {"b-00", "b-01", "b-02"}, "rack B, emptied, fits the group exactly"
    (stored,) = engine.reservations.all().values()
    assert stored.domain == B and stored.version, "stored before anything is evicted"
    # The next member's candidates: rack A, and one node of B (the scheduler nominated the first
    # member to b-00; its own dry run offers what is left).
    later = {n: [victims[n].uid] for n in ("a-00", "a-01", "a-02", "a-03", "b-01")}
    second = engine.preempt(_member(engine, 1), later, {})
    assert second.kept == ("b-01",)
    assert set(second.dropped) == {"a-00", "a-01", "a-02", "a-03"}


def test_a_group_whose_domain_another_group_took_meanwhile_evicts_nothing() -> None:
    engine, victims = _engine()
    everywhere = {n: [v.uid] for n, v in victims.items()}
    other = parsing.pod(builders.pod("rival-0", annotations={keys.GROUP_ANNOTATION: "rival",
                                                             keys.GROUP_SIZE_ANNOTATION: "3"}))
    put_pod(engine.store, other)
    assert set(engine.preempt(other, everywhere, {}).kept) == {"b-00", "b-01", "b-02"}
    # Rack B is promised to the rival now; rack A (4 nodes) still hosts 3 pods once emptied.
    result = engine.preempt(_member(engine, 0), everywhere, {})
    assert set(result.kept) == {"a-00", "a-01", "a-02", "a-03"}
    domains = {r.group_name: r.domain for r in engine.reservations.all().values()}
    assert domains == {"rival": B, "urgent": A}
