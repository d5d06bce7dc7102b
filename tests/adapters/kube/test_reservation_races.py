"""The first filter of a group stores its reservation in the (fake) API server; replicas never promise one
domain's capacity twice; API-server faults on the two writes never over-commit or lose a reservation.

Covered, with engines over ``KubeBackend`` replicas of the wire-level fake:
- the first filter makes exactly two writes (the domain's ledger, the reservation) and later members'
  filters no API call at all; bind only confirms (one update of placedAt);
- two replicas racing for the last free domain: exactly one wins it, the other is told no domain can host
  its group (it re-chose after losing the ledger's compare-and-swap); every domain contested at once by
  two replicas; two replicas with room for every group: all fit, none over-commits, all members place;
  two replicas choosing for one group agree on one reservation and one promise;
- faults on the ledger write and the reservation create (500, 429, a timeout, 409): one retried success,
  or a 200 ``/filter`` reply whose ``Error`` names the step, and a later filter that completes the
  reservation in the domain still promised; never more promised than a domain holds;
- a replica killed between the two writes: its promise keeps other groups out while it lives, another
  replica finishes the reservation for the same group, and once the proposal TTL has passed the promise
  stops counting, is dropped by the next ledger write, and housekeeping prunes it;
- both object shapes as the code writes them validate against the CRD's schema.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kmock
import pytest
import yaml

from tests import builders
from tests.adapters.kube.conftest import Connect
from tests.concurrency import or_error, run_together
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube.backend import KubeBackend
from webhook.adapters.kube.reservations import KubeReservationStore
from webhook.domain import keys
from webhook.domain.decisions.filtering import FilterOutcome
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy
from webhook.errors import DecisionError
from webhook.http.app import create_app
from webhook.wire import domain_reservation
from webhook.wire.domain_reservation import ledger_name, reservation_name

DR = "domainreservations"
GPUS = 4
MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def seed(fake: KubeFake, cliques: int, nodes: int, groups: dict[str, int]) -> None:
    """``cliques`` domains of ``nodes`` nodes x 4 GPUs; annotated groups (namespace = name) of the given sizes."""
    for c in range(cliques):
        for n in range(nodes):
            fake.create("nodes", {"apiVersion": "v1", **builders.node(f"c{c}-{n}", GPUS, domain=domain(c))})
    for group, size in groups.items():
        for i in range(size):
            annotations = {keys.GROUP_ANNOTATION: group, keys.GROUP_SIZE_ANNOTATION: str(size)}
            fake.create("pods", builders.pod(f"{group}-{i}", gpus=GPUS, annotations=annotations, namespace=group),
                        keep_uid=True)


def domain(c: int) -> str:
    return f"clique-{c}.1"


class Replica:
    def __init__(self, backend: KubeBackend, holder: str, clock: Clock | None = None) -> None:
        self.backend = backend
        self.clock = clock or Clock()
        self.engine = builders.engine(backend, holder=holder,
                             clock=self.clock)

    def filter(self, group: str, i: int = 0) -> FilterOutcome:
        pod = self.backend.store.pod(group, f"{group}-{i}")
        assert pod is not None, f"{group}-{i} not in the cache"
        return self.engine.filter(pod, sorted(self.backend.store.snapshot().nodes))

    def domain_of(self, result: FilterOutcome) -> str:
        nodes = self.backend.store.snapshot().nodes
        (found,) = {nodes[n].domain for n in result.passed}
        assert found is not None
        return found


@pytest.fixture
def replicas(connect_backend: Connect) -> Callable[..., list[Replica]]:
    def make(count: int = 2) -> list[Replica]:
        return [Replica(connect_backend(f"replica-{chr(97 + i)}"), f"replica-{chr(97 + i)}") for i in range(count)]
    return make


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run every call in its own thread, released at the same instant; results or exceptions, in order."""
    return run_together(len(calls), or_error(lambda k: calls[k]()))


def stored(fake: KubeFake) -> dict[str, dict[str, Any]]:
    """The reservations the API server holds, by group id."""
    return {o["spec"]["groupId"]: o["spec"] for o in fake.items(DR) if o["metadata"]["name"].startswith("r-")}


def ledgers(fake: KubeFake) -> dict[str, list[dict[str, Any]]]:
    """Every domain's promises as the API server holds them."""
    return {o["spec"]["domain"]: o["spec"]["promises"] for o in fake.items(DR)
            if o["metadata"]["name"].startswith("d-")}


def assert_never_over_committed(fake: KubeFake, nodes: int) -> None:
    """Per domain, the GPUs of the reservations in it, and separately of its live promises, fit its nodes."""
    capacity = nodes * GPUS
    promised: dict[str, int] = defaultdict(int)
    for spec in stored(fake).values():
        promised[spec["domain"]] += spec["size"] * spec["gpusPerPod"]
    assert all(v <= capacity for v in promised.values()), promised
    reservations = stored(fake)
    for dom, promises in ledgers(fake).items():
        live = [p for p in promises if reservations.get(p["groupId"], {}).get("domain", dom) == dom]
        assert sum(p["size"] * p["gpusPerPod"] for p in live) <= capacity, (dom, promises)
    # Every reservation's promise is in its own domain's ledger: no capacity was taken without one.
    for group, spec in reservations.items():
        assert group in {p["groupId"] for p in ledgers(fake).get(spec["domain"], [])}, (group, spec)


def dr_calls(fake: KubeFake) -> list[str]:
    """Every DomainReservation request but lists and watches, as 'METHOD name'."""
    resource = kmock.resource("imex-webhook.io", "v1alpha1", DR)

    def calls() -> list[str]:
        out = []
        for r in fake.emulator:
            if r.resource != resource or r.action in (kmock.action.LIST, kmock.action.WATCH):
                continue
            name = r.name or ((r.data or {}).get("metadata") or {}).get("name", "")
            out.append(f"{r.method.value} {name[:2]}")
        return out
    return fake._call(calls)


class Fault:
    """Answers the matching DomainReservation requests with an error (or holds them ``delay`` seconds and
    then serves them) while ``left`` > 0; ``prefix`` "d-" targets ledgers, "r-" reservations."""

    def __init__(self, fake: KubeFake, method: str, prefix: str, status: int, reason: str, times: int = 1,
                 delay: float = 0.0) -> None:
        self.left = times
        self.hits = 0
        criteria = kmock.K8sCriteria(method=kmock.method(method.upper()), resource=kmock.resource(
            "imex-webhook.io", "v1alpha1", DR))

        async def react(request: kmock.Request) -> None:
            name = request.name or ((request.data or {}).get("metadata") or {}).get("name", "")
            if self.left > 0 and name.startswith(prefix):
                self.left -= 1
                self.hits += 1
                if not delay:
                    raise kmock.KubernetesError(status=status, reason=reason, details={},
                                                message=f"injected {status} {reason}")
                await asyncio.sleep(delay)
            # A reaction that passes a request on is used up (kmock): stay armed for the next one.
            fake.emulator[criteria] << react
            return None

        fake._call(lambda: fake.emulator[criteria] << react)

    def clear(self) -> None:
        self.left = 0


# -- the contract: the first filter writes, later filters do not ----------------------------------------


def test_the_first_filter_stores_the_reservation_and_later_filters_make_no_api_call(
        fake: KubeFake, replicas: Callable[..., list[Replica]]) -> None:
    seed(fake, 2, 4, {"job": 4})
    (a,) = replicas(1)

    first = a.filter("job", 0)
    assert dr_calls(fake) == ["POST d-", "POST r-"]  # the ledger, then the reservation
    spec = stored(fake)["ann:job/job"]
    assert spec["domain"] == a.domain_of(first) and spec["holder"] == "replica-a" and "placedAt" not in spec
    assert [p["groupId"] for p in ledgers(fake)[spec["domain"]]] == ["ann:job/job"]

    calls = len(dr_calls(fake))
    for i in range(1, 4):
        assert a.domain_of(a.filter("job", i)) == spec["domain"]
    assert len(dr_calls(fake)) == calls  # later members read the cache

    pod = a.backend.store.pod("job", "job-0")
    assert pod is not None
    a.engine.bind("job", "job-0", pod.uid, first.passed[0])
    assert dr_calls(fake)[calls:] == ["PUT r-"]  # bind confirms: placedAt, nothing else
    assert_never_over_committed(fake, 4)


# -- replicas ---------------------------------------------------------------------------------------------


def test_two_replicas_racing_for_the_last_domain_exactly_one_wins(
        fake: KubeFake, replicas: Callable[..., list[Replica]]) -> None:
    seed(fake, 2, 4, {"early": 4, "g1": 4, "g2": 4})
    a, b = replicas(2)
    taken = a.domain_of(a.filter("early"))
    eventually(lambda: "ann:early/early" in b.backend.reservations.all(), what="b sees the first reservation")

    one, two = at_once([lambda: a.filter("g1"), lambda: b.filter("g2")])

    assert isinstance(one, FilterOutcome) and isinstance(two, FilterOutcome), (one, two)
    (winner,) = [r for r in (one, two) if r.passed]
    (loser,) = [r for r in (one, two) if not r.passed]
    last = a.domain_of(winner)
    assert last != taken
    assert loser.outcome == "no-domain" and loser.context is not None
    assert "no domain can host 4 pods" in loser.context.reason
    assert sorted(spec["domain"] for spec in stored(fake).values()) == sorted([taken, last])
    assert len(ledgers(fake)[last]) == 1
    assert_never_over_committed(fake, 4)


def test_every_domain_contested_by_two_replicas_at_once_goes_to_exactly_one_group(
        fake: KubeFake, replicas: Callable[..., list[Replica]]) -> None:
    cliques = 4
    groups = [f"g{k}" for k in range(2 * cliques)]
    seed(fake, cliques, 4, dict.fromkeys(groups, 4))
    a, b = replicas(2)
    owners = [a if k % 2 == 0 else b for k in range(len(groups))]

    results = at_once([lambda r=r, g=g: r.filter(g) for r, g in zip(owners, groups, strict=True)])

    assert_never_over_committed(fake, 4)
    # A loser re-chose and found no room (or ran out of tries: an Error the scheduler retries on).
    assert all(isinstance(r, FilterOutcome) or isinstance(r, DecisionError) for r in results), results
    retried = [owners[k].filter(g) for k, (g, r) in enumerate(zip(groups, results, strict=True))
               if not (isinstance(r, FilterOutcome) and r.passed)]
    assert all(not r.passed for r in retried)
    assert sorted(spec["domain"] for spec in stored(fake).values()) == [domain(c) for c in range(cliques)]


def test_two_replicas_with_room_for_every_group_fit_them_all(fake: KubeFake,
                                                             replicas: Callable[..., list[Replica]]) -> None:
    cliques = 6
    groups = [f"g{k:02d}" for k in range(2 * cliques)]  # 2 pods x 4 GPUs: two groups per 4-node clique
    seed(fake, cliques, 4, dict.fromkeys(groups, 2))
    a, b = replicas(2)
    owners = [a if k % 2 == 0 else b for k in range(len(groups))]

    results = at_once([lambda r=r, g=g: r.filter(g) for r, g in zip(owners, groups, strict=True)])
    for k, result in enumerate(results):  # the scheduler retries an Error; nothing was lost meanwhile
        if not isinstance(result, FilterOutcome):
            assert isinstance(result, DecisionError), result
            results[k] = owners[k].filter(groups[k])

    assert all(isinstance(r, FilterOutcome) and r.passed for r in results), results
    assert len(stored(fake)) == len(groups)
    assert_never_over_committed(fake, 4)
    for owner, group in zip(owners, groups, strict=True):
        for i in range(2):
            eventually(lambda o=owner, g=group, i=i: o.backend.store.pod(g, f"{g}-{i}") is not None)
            result = owner.filter(group, i)
            assert result.passed, (group, i, result.context)
            pod = owner.backend.store.pod(group, f"{group}-{i}")
            assert pod is not None
            owner.engine.bind(group, pod.name, pod.uid, result.passed[0])
            eventually(lambda o=owner, g=group, i=i: (p := o.backend.store.pod(g, f"{g}-{i}")) and p.node_name,
                       what="bound in the cache")
        nodes = owner.backend.store.snapshot().nodes
        placed = {nodes[p.node_name].domain for i in range(2)
                  if (p := owner.backend.store.pod(group, f"{group}-{i}")) and p.node_name}
        assert placed == {stored(fake)[f"ann:{group}/{group}"]["domain"]}


def test_two_replicas_choosing_for_one_group_agree(fake: KubeFake, replicas: Callable[..., list[Replica]]) -> None:
    seed(fake, 3, 4, {"job": 4})
    a, b = replicas(2)

    one, two = at_once([lambda: a.filter("job", 0), lambda: b.filter("job", 1)])

    assert isinstance(one, FilterOutcome) and isinstance(two, FilterOutcome), (one, two)
    assert a.domain_of(one) == b.domain_of(two)
    (spec,) = stored(fake).values()
    assert spec["domain"] == a.domain_of(one)
    promised = [d for d, promises in ledgers(fake).items() if any(p["groupId"] == "ann:job/job" for p in promises)]
    assert promised == [spec["domain"]]


# -- faults -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "prefix", "status", "reason"), [
    ("post", "d-", 500, "InternalError"), ("post", "d-", 429, "TooManyRequests"),
    ("post", "r-", 500, "InternalError"), ("post", "r-", 429, "TooManyRequests"),
    ("post", "d-", 409, "AlreadyExists"), ("put", "d-", 409, "Conflict"), ("put", "d-", 500, "InternalError"),
])
def test_one_transient_fault_is_retried_within_the_filter(fake: KubeFake, replicas: Callable[..., list[Replica]],
                                                          method: str, prefix: str, status: int, reason: str) -> None:
    seed(fake, 2, 4, {"early": 2, "job": 2})  # best fit: "job" next to "early", in its ledger
    (a,) = replicas(1)
    if method == "put":  # the ledger exists: the next promise in it is a replace
        a.filter("early")
    fault = Fault(fake, method, prefix, status, reason)

    result = a.filter("job")

    assert fault.hits == 1 and result.passed
    assert stored(fake)["ann:job/job"]["domain"] == a.domain_of(result)
    assert_never_over_committed(fake, 4)


@pytest.mark.parametrize(("method", "prefix", "status", "reason", "says"), [
    ("post", "d-", 500, "InternalError", "could not promise domain"),
    ("post", "d-", 429, "TooManyRequests", "could not promise domain"),
    ("post", "r-", 500, "InternalError", "could not store the domain reservation"),
    ("post", "r-", 429, "TooManyRequests", "could not store the domain reservation"),
    ("put", "d-", 409, "Conflict", "ledger kept changing"),
    ("post", "r-", 409, "AlreadyExists", "deleted repeatedly"),
])
def test_a_persistent_fault_is_a_200_filter_reply_with_an_error_and_the_next_filter_completes(
        fake: KubeFake, replicas: Callable[..., list[Replica]],
        method: str, prefix: str, status: int, reason: str, says: str) -> None:
    seed(fake, 2, 4, {"early": 2, "job": 2})  # best fit: "job" next to "early", in its ledger
    (a,) = replicas(1)
    if method == "put":
        a.filter("early")
    fault = Fault(fake, method, prefix, status, reason, times=100)
    app = create_app(a.engine, a.backend)
    pod = fake.get("pods", "job", "job-0")
    body = {"Pod": pod, "NodeNames": sorted(a.backend.store.snapshot().nodes), "Nodes": None}

    reply = app.test_client().post("/filter", json=body)

    assert reply.status_code == 200
    error = reply.get_json()["Error"]
    assert says in error and "the scheduler retries" in error, error
    if status != 409:
        assert str(status) in error, error
    assert "ann:job/job" not in stored(fake)
    assert_never_over_committed(fake, 4)
    promises = {p["groupId"]: d for d, ps in ledgers(fake).items() for p in ps}
    if prefix == "r-":  # the promise was made: the domain stays held for the group until it is stored
        assert "ann:job/job" in promises

    fault.clear()
    result = a.filter("job")
    assert result.passed
    spec = stored(fake)["ann:job/job"]
    assert spec["domain"] == a.domain_of(result)
    if prefix == "r-":
        assert spec["domain"] == promises["ann:job/job"]  # completed in the domain promised before
    assert_never_over_committed(fake, 4)


def test_a_reservation_create_that_times_out_is_retried_or_reported_never_doubled(
        fake: KubeFake, connect_backend: Connect) -> None:
    seed(fake, 2, 4, {"job": 4})
    a = Replica(connect_backend("replica-a", request_timeout=2.0), "replica-a")  # each call reads 1.2 s at most
    fault = Fault(fake, "post", "r-", 0, "", delay=1.5)  # held past our timeout, then created after all

    started = time.monotonic()
    try:
        first: FilterOutcome | DecisionError = a.filter("job")
    except DecisionError as exc:
        first = exc
        assert "did not answer in time" in str(exc) or "out of time" in str(exc), exc
    assert time.monotonic() - started < 2.0  # inside the scheduler's wait
    assert fault.hits == 1

    eventually(lambda: "ann:job/job" in stored(fake), what="the held create done")
    again = a.filter("job")
    (spec,) = stored(fake).values()
    assert again.passed and spec["domain"] == a.domain_of(again)
    if isinstance(first, FilterOutcome):
        assert a.domain_of(first) == spec["domain"]
    assert_never_over_committed(fake, 4)


# -- a replica killed between the two writes ------------------------------------------------------------------


def kill_between_writes(replica: Replica, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replica's process dies right after its ledger write, before it creates the reservation."""
    store = replica.backend.reservations
    assert isinstance(store, KubeReservationStore)

    def killed(proposal: Reservation, budget: Any) -> Reservation:
        raise SystemExit("killed between the ledger write and the reservation create")
    monkeypatch.setattr(store, "_create", killed)


def test_a_promise_left_by_a_killed_replica_holds_until_its_ttl_then_is_repaired(
        fake: KubeFake, replicas: Callable[..., list[Replica]], monkeypatch: pytest.MonkeyPatch) -> None:
    seed(fake, 2, 4, {"dead": 4, "g2": 4, "g3": 4})
    a, b = replicas(2)
    kill_between_writes(a, monkeypatch)
    with pytest.raises(SystemExit):
        a.filter("dead")
    (held,) = ledgers(fake)
    assert [p["groupId"] for p in ledgers(fake)[held]] == ["ann:dead/dead"] and stored(fake) == {}
    eventually(lambda: held in b.backend.reservations.promises(), what="b sees the promise")

    # While it lives, the promise keeps other groups out of its domain.
    assert b.domain_of(b.filter("g2")) != held
    assert not b.filter("g3").passed  # the only other domain is full

    # Its TTL passes with no reservation: it stops counting, and the next write of its ledger drops it.
    b.clock.now += Policy().proposal_ttl + 1
    assert b.domain_of(b.filter("g3")) == held
    assert [p["groupId"] for p in ledgers(fake)[held]] == ["ann:g3/g3"]
    assert_never_over_committed(fake, 4)


def test_another_replica_finishes_the_reservation_a_killed_one_promised(
        fake: KubeFake, replicas: Callable[..., list[Replica]], monkeypatch: pytest.MonkeyPatch) -> None:
    seed(fake, 3, 4, {"job": 4})
    a, b = replicas(2)
    kill_between_writes(a, monkeypatch)
    with pytest.raises(SystemExit):
        a.filter("job", 0)
    (held,) = ledgers(fake)
    eventually(lambda: held in b.backend.reservations.promises(), what="b sees the promise")

    result = b.filter("job", 1)  # the scheduler retries the group's pods; b gets one of them

    assert b.domain_of(result) == held
    (spec,) = stored(fake).values()
    assert spec["domain"] == held and spec["holder"] == "replica-b"
    assert_never_over_committed(fake, 4)


def test_housekeeping_prunes_dead_promises(fake: KubeFake, replicas: Callable[..., list[Replica]],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    seed(fake, 2, 4, {"dead": 2, "alive": 2})
    a, b = replicas(2)
    b.filter("alive")
    eventually(lambda: "ann:alive/alive" in a.backend.reservations.all(), what="a sees b's reservation")
    kill_between_writes(a, monkeypatch)
    with pytest.raises(SystemExit):
        a.filter("dead")  # best fit: next to "alive", in the same ledger
    eventually(lambda: "ann:dead/dead" in {g for p in b.backend.reservations.promises().values() for g in p},
               what="b sees the dead promise")

    assert b.engine.housekeep() == []
    assert sorted(p["groupId"] for ps in ledgers(fake).values() for p in ps) == ["ann:alive/alive", "ann:dead/dead"]
    b.clock.now += Policy().proposal_ttl + 1
    b.engine.housekeep()

    assert {d: [p["groupId"] for p in ps] for d, ps in ledgers(fake).items()} == {
        stored(fake)["ann:alive/alive"]["domain"]: ["ann:alive/alive"]}


def test_a_release_withdraws_the_promise_even_from_a_ledger_changed_behind_its_cache(
        fake: KubeFake, replicas: Callable[..., list[Replica]]) -> None:
    seed(fake, 1, 4, {"done": 2, "next": 2})
    (a,) = replicas(1)
    dom = a.domain_of(a.filter("done"))
    # Another writer changes the ledger; this replica's watch has not told it yet (a stale resourceVersion).
    fake.patch(DR, None, ledger_name(dom), {"metadata": {"annotations": {"note": "kept"}}}, emit=False)

    a.backend.reservations.release("ann:done/done")

    assert "ann:done/done" not in stored(fake) and ledgers(fake) == {}  # re-read, withdrawn, empty ledger gone
    assert a.domain_of(a.filter("next")) == dom


# -- the CRD ----------------------------------------------------------------------------------------------------


def test_both_shapes_as_the_code_writes_them_match_the_crd() -> None:
    crd = yaml.safe_load((MANIFESTS / "crd-domainreservations.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    res = Reservation("ann:ml/job", "job", "ml", "clique-0.1", 4, 4, False, 1_700_000_000.0, placed_at=1_700_000_001.0)
    reservation = domain_reservation.reservation_object(res, "replica-a")
    ledger = domain_reservation.ledger_object("clique-0.1", [res, Reservation(
        "cd:uid", "train", "ml", "clique-0.1", 2, 4, True, 1_700_000_000.0, holder="replica-b")])
    for obj in (reservation, ledger):
        jsonschema.validate(obj, schema)
    assert reservation["metadata"]["name"] == reservation_name("ann:ml/job")
    assert ledger["metadata"]["name"] == ledger_name("clique-0.1")
    assert domain_reservation.parse_ledger(ledger, Reservation).promises["cd:uid"].one_pod_per_node
    # The rules the API server enforces (CEL): exactly one of the two shapes.
    rules = {r["rule"] for r in schema["properties"]["spec"]["x-kubernetes-validations"]}
    assert rules == {"has(self.groupId) != has(self.promises)", "!has(self.groupId) || has(self.size)"}
