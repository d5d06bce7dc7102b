"""Seeded chaos runs of the extender in Kubernetes mode against the wire-level API-server fake (issue 12).

Each run (one seed, one test) builds a small cluster in ``tests.kubefake`` (3 cliques x 3 nodes x 4 GPUs),
two ``KubeBackend`` replicas with an ``Engine`` each (connected through a kubeconfig as ``serve
--kubeconfig`` does), and plays a seeded random sequence of:

- group arrivals (annotated groups of 1-3 pods x 4 GPUs, created in the fake);
- scheduling steps: one kube-scheduler, emulated as it behaves around an extender: its own NodeResourcesFit
  (allocatable minus bound and *assumed* pods) runs first and only the feasible nodes go to a random
  replica's filter, then prioritize; the best node is assumed and bound; scheduling cycles are serial
  (one lock), binding is asynchronous (outside the lock), as kube-scheduler's binding goroutine is. An
  error or exception leaves the pod pending, retried later;
- group completions (every member deleted) and housekeeping rounds;
- faults: 500/429 on reads (GET pods, GET domainreservations) and on writes (reservation/ledger
  create/update, pods/binding) for 1-3 calls; a timeout (the request held past the client's 1 s
  timeout, then served: the write may land after the client gave up); open watches closed mid-stream
  (ERROR 410); an API-server restart with the watch history compacted (the next watch answers 410);
  a replica "killed" (stopped, a new one connected in its place) right after a filter stored the
  reservation but before the binding exists, or right after the binding exists; the two replicas racing:
  the same pod filtered by both at the same instant (kube-scheduler retrying a filter that timed out on
  one replica), or one pod's bind on one replica while the next pod's cycle runs on the other.

After every run the faults are cleared and both replicas' caches must match the API server's objects
within ``CONVERGE_S`` seconds (pods: uid and node; reservations: group -> domain); then the invariants
are checked on the API server's state: no group split across domains, no domain (or node) over-committed,
at most one reservation per group and none lost while a group has bound and unbound members, ledger
promises within capacity, every bound pod inside its group's reserved domain. Counts of runs, steps and
faults by type are printed, and asserted non-zero over the whole session.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import kmock
import pytest

from tests import builders
from tests.adapters.kube.conftest import Connect
from tests.adapters.kube.test_reservation_races import at_once
from tests.kubefake import KINDS, KubeFake
from webhook.adapters.kube.backend import KubeBackend
from webhook.adapters.kube.watch_settings import WatchSettings
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.engine.engine import Engine
from webhook.errors import DecisionError

T = TypeVar("T")

# 8 runs in CI; CHAOS_SEEDS=FIRST-LAST runs more by hand (say 1-200) when hunting a timing-dependent bug.
_FIRST, _, _LAST = os.environ.get("CHAOS_SEEDS", "1-8").partition("-")
SEEDS = list(range(int(_FIRST), int(_LAST or _FIRST) + 1))
STEPS = 45
CLIQUES, NODES, GPUS = 3, 3, 4
CAPACITY = NODES * GPUS
DR = "domainreservations"
REQUEST_TIMEOUT = 1.0
# The stated bound: once the faults are cleared, caches match the API server within the longest relist
# pause after repeated failures (WatchSettings.backoff_max; 30 s in production, 2 s here) plus a relist
# or two on a loaded machine.
WATCH = WatchSettings(absent_recheck=5.0, backoff_max=2.0)
CONVERGE_S = 10.0

TOTALS: Counter[str] = Counter()

OVER_PROMISED = "GPUs > capacity"
LEDGER_OVER = "promises more than its capacity"


def domain(c: int) -> str:
    return f"clique-{c}.1"


class CountedFault:
    """The next ``times`` matching requests are answered with ``status`` or, with ``hold``, held that many
    seconds and then served (past the client's timeout: the write may land after the client gave up); later
    requests pass on. An interceptor of the fake (not a kmock reaction, which would re-filter the whole
    request history on every request of a long run)."""

    def __init__(self, fake: KubeFake, method: str, plural: str, status: int, reason: str, times: int,
                 subresource: str | None = None, hold: float = 0.0) -> None:
        self.left = times
        self.hold = hold
        self.holding = 0
        resource = KINDS[plural].resource
        verb = method.upper()

        async def intercept(request: kmock.Request) -> Any:
            if self.left <= 0 or request.method.upper() != verb or request.resource != resource \
                    or (request.subresource or None) != subresource:
                return None
            self.left -= 1
            if hold:
                self.holding += 1
                try:
                    await asyncio.sleep(hold)
                finally:
                    self.holding -= 1
                return None
            return await fake.emulator._render_error(kmock.KubernetesError(
                status=status, reason=reason, details={}, message=f"chaos: injected {status} {reason}"))

        fake._call(fake.emulator.interceptors.append, intercept)

    def clear(self) -> None:
        self.left = 0


class Replica:
    def __init__(self, connect: Connect, holder: str) -> None:
        self.holder = holder
        self.backend: KubeBackend = connect(holder, request_timeout=REQUEST_TIMEOUT, sync=False, watch=WATCH)
        self.engine = Engine(self.backend.store, self.backend.reservations, self.backend.binder, Policy(),
                             holder=holder)

    def stop(self) -> None:
        self.backend.stop()


class Run:
    def __init__(self, seed: int, fake: KubeFake, connect: Connect) -> None:
        self.rng = random.Random(seed)
        self.fake = fake
        self.connect = connect
        self.counts: Counter[str] = Counter()
        self.seconds: dict[str, float] = defaultdict(float)
        self.faults: list[CountedFault] = []
        self.groups: dict[str, int] = {}  # group (= namespace) -> size
        self.generation = 0
        self.unexpected: list[str] = []
        fake.emulator.history_limit = 200
        # The scheduler's own state: cycles are serial; a pod chosen for a node is assumed there until
        # its binding shows in the API server (or its bind failed).
        self.cycle = threading.Lock()
        self.assumed: dict[tuple[str, str], str] = {}
        for c in range(CLIQUES):
            for n in range(NODES):
                fake.create("nodes", {"apiVersion": "v1", **builders.node(f"c{c}-{n}", GPUS, domain=domain(c))})
        self.replicas = [self._new_replica(), self._new_replica()]
        for r in self.replicas:
            _wait(functools.partial(lambda r: r.backend.ready()[0], r), 10.0, f"{r.holder} synced")

    def _new_replica(self) -> Replica:
        self.generation += 1
        return Replica(self.connect, f"replica-{self.generation}")

    # -- workload -------------------------------------------------------------------------------------

    def arrive(self) -> None:
        group = f"g{len(self.groups)}"
        size = self.rng.randint(1, 3)
        self.groups[group] = size
        for i in range(size):
            annotations = {keys.GROUP_ANNOTATION: group, keys.GROUP_SIZE_ANNOTATION: str(size)}
            self.fake.create("pods", builders.pod(f"{group}-{i}", gpus=GPUS, annotations=annotations,
                                                  namespace=group))
        self.counts["arrivals"] += 1

    def pending(self) -> list[dict[str, Any]]:
        return [p for p in self.fake.items("pods") if not p["spec"].get("nodeName")]

    def complete(self) -> None:
        done = [g for g in self.groups if any(p["metadata"]["namespace"] == g and p["spec"].get("nodeName")
                                              for p in self.fake.items("pods"))]
        if not done:
            return
        group = self.rng.choice(sorted(done))
        for p in self.fake.items("pods"):
            if p["metadata"]["namespace"] == group:
                self.fake.delete("pods", group, p["metadata"]["name"])
        self.counts["completions"] += 1

    def housekeep(self) -> None:
        try:
            self.rng.choice(self.replicas).engine.housekeep()
        except DecisionError:
            pass
        except Exception as exc:
            self.counts["housekeep-exceptions"] += 1
            self.unexpected.append(f"housekeep: {exc!r}"[:200])
        self.counts["housekeeps"] += 1

    def feasible(self) -> list[str]:
        """kube-scheduler's NodeResourcesFit before the extender: nodes with room for one more pod of
        ``GPUS`` once bound pods (the API server's) and assumed pods (chosen, bind in flight) are counted."""
        used: Counter[str] = Counter()
        bound = set()
        for p in self.fake.items("pods"):
            node = p["spec"].get("nodeName")
            if node and p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                used[node] += GPUS
                bound.add((p["metadata"]["namespace"], p["metadata"]["name"]))
        for key, node in self.assumed.items():
            if key not in bound:
                used[node] += GPUS
        names = [n["metadata"]["name"] for n in self.fake.items("nodes")]
        return sorted(n for n in names if used[n] + GPUS <= GPUS)

    def filter(self, replica: Replica, ns: str, name: str) -> str | None:
        """The scheduler's filter + prioritize for one pod on ``replica``: the node to bind, or None."""
        pod = replica.backend.store.pod(ns, name)
        if pod is None or pod.node_name:
            return None
        nodes = self.feasible()
        if not nodes:
            self.counts["filter-no-node"] += 1
            return None
        result = self.attempt("filter", f"{ns}/{name}", lambda: replica.engine.filter(pod, nodes))
        if result is None:
            return None
        if not result.passed:
            self.counts["filter-no-node"] += 1
            return None
        scores = self.attempt("filter", f"{ns}/{name}", lambda: replica.engine.prioritize(pod, list(result.passed)))
        if scores is None:
            return None
        return max(scores, key=lambda s: (s[1], s[0]))[0] if scores else result.passed[0]

    def attempt(self, verb: str, ref: str, call: Callable[[], T]) -> T | None:
        """The call's result; None after a DecisionError (the reply the scheduler retries) or anything else,
        which through HTTP would be a 500 (kept in ``unexpected``)."""
        try:
            return call()
        except DecisionError:
            self.counts[f"{verb}-errors"] += 1
        except Exception as exc:
            self.counts[f"{verb}-exceptions"] += 1
            self.unexpected.append(f"{verb} {ref}: {exc!r}"[:200])
        return None

    def bind(self, replica: Replica, ns: str, name: str, node: str) -> bool:
        pod = replica.backend.store.pod(ns, name)
        if pod is None:
            return False
        if self.attempt("bind", f"{ns}/{name}", lambda: replica.engine.bind(ns, name, pod.uid, node)) is None:
            return False
        self.counts["binds"] += 1
        return True

    def cycle_for(self, replica: Replica, ns: str, name: str) -> str | None:
        """One scheduling cycle (serial): filter and prioritize on ``replica``, assume the chosen node."""
        with self.cycle:
            if (ns, name) in self.assumed:
                return None  # already chosen, its bind in flight
            node = self.filter(replica, ns, name)
            if node is not None:
                self.assumed[(ns, name)] = node
            return node

    def binding(self, replica: Replica, ns: str, name: str, node: str) -> bool:
        """The binding cycle (asynchronous in kube-scheduler); the assumption ends either way."""
        try:
            return self.bind(replica, ns, name, node)
        finally:
            with self.cycle:
                self.assumed.pop((ns, name), None)

    def schedule(self, replica: Replica | None = None, pod: dict[str, Any] | None = None) -> bool:
        pending = self.pending()
        if pod is None:
            if not pending:
                return False
            pod = self.rng.choice(pending)
        replica = replica or self.rng.choice(self.replicas)
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        node = self.cycle_for(replica, ns, name)
        self.counts["schedule-attempts"] += 1
        return node is not None and self.binding(replica, ns, name, node)

    # -- faults ---------------------------------------------------------------------------------------

    def fault(self) -> None:
        kind = self.rng.choice([
            "read-error", "write-error", "timeout", "watch-closed", "restart-410", "kill-before-bind",
            "kill-after-bind", "race",
        ])
        self.counts[f"fault:{kind}"] += 1
        began = time.monotonic()
        status, reason = self.rng.choice([(500, "InternalError"), (429, "TooManyRequests")])
        times = self.rng.randint(1, 3)
        if kind == "read-error":
            plural = self.rng.choice(["pods", DR])
            self.faults.append(CountedFault(self.fake, "get", plural, status, reason, times))
        elif kind == "write-error":
            method, plural, sub = self.rng.choice([
                ("post", DR, None), ("put", DR, None), ("patch", DR, None), ("post", "pods", "binding")])
            self.faults.append(CountedFault(self.fake, method, plural, status, reason, times, sub))
        elif kind == "timeout":
            method, plural, sub = self.rng.choice([
                ("post", DR, None), ("put", DR, None), ("post", "pods", "binding"), ("get", "pods", None)])
            self.faults.append(CountedFault(self.fake, method, plural, 0, "", 1, sub, hold=REQUEST_TIMEOUT + 0.3))
        elif kind == "watch-closed":
            self.fake.expire_watches(self.rng.choice(["pods", "nodes", DR]))
        elif kind == "restart-410":
            # A request held open across the stop leaves its socket unclosed (a ResourceWarning in the fake,
            # not the product): let held requests finish first.
            _wait(lambda: not any(f.holding for f in self.faults), 3.0, "held requests served")
            for plural in ("pods", "nodes", DR):
                self.fake.expire_watches(plural, as_status=True)
            self.fake.restart(down_for=self.rng.uniform(0.05, 0.4))
        elif kind in ("kill-before-bind", "kill-after-bind"):
            k = self.rng.randrange(2)
            victim = self.replicas[k]
            pending = self.pending()
            if pending:
                pod = self.rng.choice(pending)
                ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
                node = self.cycle_for(victim, ns, name)  # the filter stored the reservation (first member)
                if node is not None and kind == "kill-after-bind" and self.binding(victim, ns, name, node):
                    self.counts["killed-with-binding"] += 1
                elif node is not None:
                    # The bind never comes: kube-scheduler's bind call fails and it forgets the assumption.
                    with self.cycle:
                        self.assumed.pop((ns, name), None)
                    self.counts["killed-between-filter-and-bind"] += kind == "kill-before-bind"
            victim.stop()
            self.replicas[k] = self._new_replica()  # the process restarted: a new replica, cold caches
        elif kind == "race":
            pending = self.pending()
            if len(pending) >= 1 and self.rng.random() < 0.5:
                self.race_same_pod(self.rng.choice(pending))
            elif len(pending) >= 2:
                self.race_bind_and_cycle(*self.rng.sample(pending, 2))
        self.seconds[f"fault:{kind}"] += time.monotonic() - began

    def race_same_pod(self, pod: dict[str, Any]) -> None:
        """Both replicas filter one pod at once (the scheduler retried a filter that timed out on the
        first); the scheduler binds through the replica whose answer it used."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        answers = at_once([functools.partial(self.filter, r, ns, name) for r in self.replicas])
        for replica, node in zip(self.replicas, answers, strict=True):
            if isinstance(node, str):
                with self.cycle:
                    if node not in self.feasible():
                        return
                    self.assumed[(ns, name)] = node
                self.binding(replica, ns, name, node)
                return

    def race_bind_and_cycle(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        """One pod's bind on one replica while the next pod's scheduling cycle runs on the other."""
        a, b = self.replicas
        ns, name = first["metadata"]["namespace"], first["metadata"]["name"]
        node = self.cycle_for(a, ns, name)
        if node is None:
            return
        at_once([functools.partial(self.binding, a, ns, name, node), functools.partial(self.schedule, b, second)])

    def clear(self) -> None:
        for f in self.faults:
            f.clear()

    # -- the run --------------------------------------------------------------------------------------

    def play(self, steps: int) -> None:
        for _ in range(steps):
            roll = self.rng.random()
            began = time.monotonic()
            if roll < 0.15 and len(self.groups) < 12:
                action: Callable[[], Any] = self.arrive
            elif roll < 0.55:
                action = self.schedule
            elif roll < 0.62:
                action = self.complete
            elif roll < 0.68:
                action = self.housekeep
            else:
                action = self.fault
            action()
            self.kubelet()
            self.seconds[action.__name__] += time.monotonic() - began
            self.counts["steps"] += 1
        self.clear()
        _wait(lambda: not any(f.holding for f in self.faults), 3.0, "held requests served")
        self.kubelet()

    def kubelet(self) -> None:
        """The kubelets' admission: a pod bound to a node without room for it fails (OutOfnvidia.com/gpu).
        kube-scheduler can bind one when a bind timed out but landed later: it forgot the assumption and
        gave the node to the next pod (seen in these runs); the kubelet is what stops it, not the extender."""
        running: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for p in self.fake.items("pods"):
            if p["spec"].get("nodeName") and p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                running[p["spec"]["nodeName"]].append(p)
        for pods in running.values():
            pods.sort(key=lambda p: int(p["metadata"]["resourceVersion"]))  # the binding wrote it last
            for p in pods[1:]:  # every pod asks for all of a node's GPUS
                status = {**p.get("status", {}), "phase": "Failed", "reason": "OutOfnvidia.com/gpu"}
                self.fake.replace_status("pods", {**p, "status": status})
                self.counts["kubelet-rejected"] += 1


def _wait(check: Callable[[], Any], timeout: float, what: str | Callable[[], str]) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout}s: {what if isinstance(what, str) else what()}")
        time.sleep(0.02)
    return time.monotonic() - started


# -- invariants (on the API server's objects) -----------------------------------------------------------


def reservations(fake: KubeFake) -> list[dict[str, Any]]:
    return [o["spec"] for o in fake.items(DR) if o["metadata"]["name"].startswith("r-")]


def ledgers(fake: KubeFake) -> dict[str, list[dict[str, Any]]]:
    return {o["spec"]["domain"]: o["spec"].get("promises") or [] for o in fake.items(DR)
            if o["metadata"]["name"].startswith("d-")}


def cache_diff(fake: KubeFake, replica: Replica) -> list[str]:
    """How ``replica``'s caches differ from the API server's objects (pods: uid, node; reservations)."""
    diff: list[str] = []
    pods = fake.items("pods")
    store = replica.backend.store
    if store.raw_counts()["Pod"] != len(pods):
        diff.append(f"{store.raw_counts()['Pod']} pods cached, {len(pods)} in the API server")
    for p in pods:
        ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
        cached = store.pod(ns, name)
        want = (p["metadata"]["uid"], p["spec"].get("nodeName"))
        have = (cached.uid, cached.node_name) if cached else None
        if have != want:
            diff.append(f"pod {ns}/{name}: cached {have}, API server {want}")
    want_r = {(s["groupId"], s["domain"]) for s in reservations(fake)}
    have_r = {(g, r.domain) for g, r in replica.backend.reservations.all().items()}
    if want_r != have_r:
        diff.append(f"reservations: cached {sorted(have_r)}, API server {sorted(want_r)}")
    return diff


def violations(fake: KubeFake, groups: dict[str, int]) -> list[str]:
    found: list[str] = []
    node_domain = {n["metadata"]["name"]: n["metadata"]["labels"][keys.CLIQUE_LABEL] for n in fake.items("nodes")}
    pods = fake.items("pods")
    bound = [p for p in pods if p["spec"].get("nodeName")
             and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
    per_node: Counter[str] = Counter()
    per_domain: Counter[str] = Counter()
    group_domains: dict[str, set[str]] = defaultdict(set)
    for p in bound:
        node = p["spec"]["nodeName"]
        per_node[node] += GPUS
        per_domain[node_domain[node]] += GPUS
        group_domains[p["metadata"]["namespace"]].add(node_domain[node])
    for group, doms in group_domains.items():
        if len(doms) > 1:
            found.append(f"group {group} split across domains {sorted(doms)}")
    for node, used in per_node.items():
        if used > GPUS:
            found.append(f"node {node} over-committed: {used} GPUs bound")
    for dom, used in per_domain.items():
        if used > CAPACITY:
            found.append(f"domain {dom} over-committed: {used} GPUs bound")
    specs = reservations(fake)
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for s in specs:
        by_group[(s.get("namespace", ""), s.get("groupName", ""))].append(s)
    for key, items in by_group.items():
        if len(items) > 1:
            found.append(f"group {key} has {len(items)} reservations: {[s['domain'] for s in items]}")
    reserved_gpus: Counter[str] = Counter()
    for s in specs:
        reserved_gpus[s["domain"]] += s["size"] * s["gpusPerPod"]
    for dom, gpus in reserved_gpus.items():
        if gpus > CAPACITY:
            found.append(f"domain {dom}: reservations for {gpus} {OVER_PROMISED} {CAPACITY}")
    by_id = {s["groupId"]: s for s in specs}
    for dom, promises in ledgers(fake).items():
        live = [p for p in promises if by_id.get(p["groupId"], {}).get("domain", dom) == dom]
        if sum(p["size"] * p["gpusPerPod"] for p in live) > CAPACITY:
            found.append(f"ledger of {dom} {LEDGER_OVER}: {promises}")
    for group in groups:
        members = [p for p in pods if p["metadata"]["namespace"] == group]
        placed = [p for p in members if p["spec"].get("nodeName")]
        reserved = by_group.get((group, group), [])
        if placed and len(placed) < len(members) and not reserved:
            found.append(f"group {group}: reservation lost with {len(placed)}/{len(members)} members bound")
        for p in placed:
            dom = node_domain[p["spec"]["nodeName"]]
            if reserved and all(s["domain"] != dom for s in reserved):
                found.append(f"pod {group}/{p['metadata']['name']} bound in {dom} outside its reserved domain "
                             f"{[s['domain'] for s in reserved]}")
    return found


def describe(fake: KubeFake) -> str:
    """The API server's reservations, ledgers and pods, for a failure's message."""
    lines = [f"reservation {s.get('namespace')}/{s.get('groupName')} -> {s['domain']} size {s['size']} "
             f"holder {s.get('holder')} created {s.get('createdAt')} placed {s.get('placedAt')}"
             for s in reservations(fake)]
    lines += [f"ledger {dom}: {[(p['groupId'], p['size'], p.get('holder')) for p in promises]}"
              for dom, promises in ledgers(fake).items()]
    lines += [f"pod {p['metadata']['namespace']}/{p['metadata']['name']} on {p['spec'].get('nodeName')}"
              for p in fake.items("pods")]
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\nchaos totals: {dict(sorted(TOTALS.items()))}")
    if TOTALS["runs"] == len(SEEDS) >= 8:  # the whole set ran: it must have done something of every kind
        kinds = [k for k in TOTALS if k.startswith("fault:")]
        assert len(kinds) == 8 and TOTALS["binds"] > 0 and TOTALS["arrivals"] > 0, TOTALS


@pytest.mark.timeout(60)
# The fake's HTTP server, stopped by KubeFake.restart while a client connection is open, can leave that
# socket to the garbage collector (a ResourceWarning in the test harness, not in the extender).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_chaos_run_keeps_every_invariant(seed: int, fake: KubeFake, connect_backend: Connect) -> None:
    started = time.monotonic()
    run = Run(seed, fake, connect_backend)
    run.play(STEPS)

    # Convergence (the stated bound): both live replicas' caches match the API server's objects.
    waited = 0.0
    for r in run.replicas:
        waited = max(waited, _wait(lambda: not cache_diff(fake, r), CONVERGE_S,  # noqa: B023 - called at once
                                   lambda: f"{r.holder} caches converge: {cache_diff(fake, r)}"))  # noqa: B023
    found = violations(fake, run.groups)

    faults = sum(v for k, v in run.counts.items() if k.startswith("fault:"))
    TOTALS.update(run.counts)
    TOTALS["runs"] += 1
    TOTALS["violations"] += len(found)
    print(f"\nseed {seed}: {time.monotonic() - started:.1f}s, {faults} faults, converged in {waited:.2f}s, "
          f"{dict(sorted(run.counts.items()))}")
    print("  seconds by step:", {k: round(v, 2) for k, v in run.seconds.items()})
    for u in run.unexpected:
        print("  unexpected:", u)
    assert run.counts["steps"] == STEPS and faults > 0 and run.counts["arrivals"] > 0
    if found:
        print(f"  VIOLATIONS seed {seed}: {found}")
        print("  " + describe(fake).replace("\n", "\n  "))
    assert found == [], found
    assert run.unexpected == [], f"exceptions other than a DecisionError (a 500 through HTTP): {run.unexpected}"
