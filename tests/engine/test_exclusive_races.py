"""Exclusive ComputeDomains chosen at once (webhook.domain.placement.exclusive through the engine's choose-and-record):
eight exclusive groups filtering together over four racks end with at most one ComputeDomain per rack, and
the groups left out are refused with the holder's name; an exclusive group and a plain ComputeDomain group
racing for the one rack both fitting it never share it."""

from __future__ import annotations

from collections import Counter

from tests import builders
from tests.concurrency import or_error, run_together
from webhook.adapters import embedded
from webhook.domain import keys
from webhook.domain.decisions.filtering import FilterOutcome
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.engine.engine import Engine
from webhook.state.cluster import ClusterStore

RACKS = [f"{i:04x}-rack.7" for i in range(4)]


def _engine(objects: list[dict[str, object]], policy: Policy) -> Engine:
    store = ClusterStore(policy)
    backend = embedded.EmbeddedBackend(store, objects, "test")  # type: ignore[arg-type]
    backend.start()
    return builders.engine(backend, policy, holder="t", clock=lambda: 1000.0)


def _first_pods(engine: Engine, names: list[str]) -> list[FilterOutcome | Exception]:
    pods = [parsing.pod(builders.pod(f"{n}-0", cd=n)) for n in names]
    for pod in pods:
        embedded.put_pod(engine.store, pod)
    nodes = sorted(engine.store.snapshot().nodes)
    return run_together(len(pods), or_error(lambda k: engine.filter(pods[k], nodes)))


def test_eight_exclusive_groups_at_once_take_at_most_one_rack_each() -> None:
    objects: list[dict[str, object]] = [n for i, r in enumerate(RACKS) for n in builders.rack(f"r{i}", r, 4)]
    names = [f"job{i}" for i in range(8)]
    for name in names:
        objects += builders.cd_objects(name, 2)
    engine = _engine(objects, Policy(exclusive_domains=True))
    results = _first_pods(engine, names)
    assert not [r for r in results if isinstance(r, Exception)], results
    per_domain = Counter(res.domain for res in engine.reservations.all().values())
    assert len(per_domain) == 4 and set(per_domain.values()) == {1}, per_domain
    refused = [r for r in results if isinstance(r, FilterOutcome) and not r.passed]
    assert len(refused) == 4
    assert all(r.context is not None and "exclusive" in r.context.reason for r in refused)


def test_an_exclusive_group_and_a_plain_one_racing_for_one_rack_never_share_it() -> None:
    objects: list[dict[str, object]] = [*builders.rack("r0", RACKS[0], 4)]
    solo = builders.cd_objects("solo", 2)
    solo[0]["metadata"]["annotations"] = {keys.EXCLUSIVE_ANNOTATION: "true"}  # type: ignore[index]
    objects += solo + builders.cd_objects("plain", 2)
    for _ in range(5):
        engine = _engine(objects, Policy())
        _first_pods(engine, ["solo", "plain"])
        assert len(engine.reservations.all()) == 1, engine.reservations.all()
