"""The operator's view in /metrics (``webhook.http.cluster_metrics.ClusterMetrics``): domains' GPUs, groups
waiting by the reason /filter would give, reservations past their TTL, attachments by phase, watch health and
leaked fabric blocks, read at scrape time from the engine. Each case is a small cluster, scraped through the
registry's own exposition and read back with prometheus_client's text parser; the watch health of a replica in
Kubernetes mode against the fake API server (tests/kubefake.py), and the leaked-block count of the fabric
reconciler across a change of leader."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests import builders, serving
from tests.kubefake import KubeFake, eventually
from webhook.adapters.memory import MemoryAttachmentStore, MemoryReservationStore
from webhook.domain import keys
from webhook.domain.fabric_plan import Timeouts
from webhook.domain.model import Pod, Reservation
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.domain.views.figures import MAX_EVALUATED, WAITING_REASONS
from webhook.engine.engine import Engine
from webhook.engine.reconciler import Reconciler
from webhook.errors import DecisionError
from webhook.http.cluster_metrics import ClusterMetrics
from webhook.http.metrics import Metrics
from webhook.state.cluster import ClusterStore
from webhook.wire.fabric_attachment import Attachment, Phase

NOW = 10_000.0
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class NoBinder:
    def read_pod(self, namespace: str, name: str) -> Pod | None:
        return None

    def bind(self, pod: Pod, node: str) -> None:
        raise DecisionError("not in these tests")

    def label_segment(self, pod: Pod, index: int) -> None:
        raise DecisionError("not in these tests")


def engine_for(objects: list[dict[str, Any]], reservations: Sequence[Reservation] = (), *,
               clock: Callable[[], float] = lambda: NOW) -> Engine:
    store = builders.store(objects)
    memory = MemoryReservationStore()
    for res in reservations:
        memory.reserve(res)
    return Engine(store, memory, NoBinder(), Policy(), clock=clock)


def scrape(metrics: Metrics) -> Samples:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class Watches:
    def __init__(self, health: Callable[[], dict[str, tuple[float, bool]]]) -> None:
        self.watch_health = health


def viewed(engine: Engine, backend: Watches | None = None,
           unaccounted: Callable[[], int] | None = None) -> Metrics:
    """``backend``: the watches' health as a backend reports it (none: a backend without watches);
    ``unaccounted``: the fabric reconciler's count of leaked blocks (none: no fabric)."""
    metrics = Metrics()
    metrics.registry.register(ClusterMetrics(engine, (backend or Watches(dict)).watch_health, unaccounted))
    return metrics


def waiting(samples: Samples) -> dict[str, float]:
    return {dict(labels)["reason"]: v for (name, labels), v in samples.items() if name == "imex_webhook_groups_waiting"}


def group_pods(name: str, count: int, gpus: int = 4, size: int | None = None,
               bound: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
    annotations = {keys.GROUP_ANNOTATION: name, keys.GROUP_SIZE_ANNOTATION: str(size or count)}
    return [builders.pod(f"{name}-{i}", gpus=gpus, annotations=annotations, node=(bound or {}).get(i),
                         phase="Running" if (bound or {}).get(i) else "Pending") for i in range(count)]


def reservation(group: str, domain: str, size: int, created: float = NOW) -> Reservation:
    return Reservation(group_id=f"ann:ml/{group}", group_name=group, namespace="ml", domain=domain, size=size,
                       gpus_per_pod=4, one_pod_per_node=False, created_at=created)


RACK = builders.rack("a", "dom-a", 4)  # 4 nodes x 4 GPUs
BUSY = [builders.pod("other", gpus=4, node="a-00", phase="Running")]

CASES = [
    ("a domain fits but the scheduler has not chosen it yet", RACK + group_pods("g", 2), [], "domain-fits"),
    ("no domain holds 8 such pods even empty", RACK + group_pods("g", 8), [], "no-domain-ever"),
    ("the only domain is busy until a running pod finishes", RACK + BUSY + group_pods("g", 4), [], "no-domain-now"),
    ("a group size that is not a number", [*RACK, builders.pod("bad", annotations={
        keys.GROUP_ANNOTATION: "g", keys.GROUP_SIZE_ANNOTATION: "eight"})], [], "invalid-group"),
]


@pytest.mark.parametrize(("what", "objects", "reservations", "reason"), CASES, ids=[c[0] for c in CASES])
def test_a_waiting_group_is_counted_under_the_reason_filter_would_give(
        what: str, objects: list[dict[str, Any]], reservations: list[Reservation], reason: str) -> None:
    counts = waiting(scrape(viewed(engine_for(objects, reservations))))
    assert counts == {r: (1.0 if r == reason else 0.0) for r in WAITING_REASONS}


def test_a_group_with_its_domain_reserved_waits_in_that_domain_and_its_gpus_count_as_reserved() -> None:
    engine = engine_for(RACK + group_pods("g", 3, bound={0: "a-01"}), [reservation("g", "dom-a", 3)])
    samples = scrape(viewed(engine))
    assert waiting(samples)["in-domain"] == 1
    gpus = {dict(labels)["state"]: v for (name, labels), v in samples.items() if name == "imex_webhook_domain_gpus"}
    # 16 GPUs, one member bound (4 used), two members still to place (8 reserved).
    assert gpus == {"free": 12.0, "used": 4.0, "reserved": 8.0, "attachable": 0.0}


def test_groups_whose_pods_are_all_bound_or_finished_are_not_waiting() -> None:
    done = [{**p, "status": {"phase": "Succeeded"}} for p in group_pods("done", 2)]
    engine = engine_for(RACK + group_pods("g", 2, bound={0: "a-00", 1: "a-01"}) + done)
    assert set(waiting(scrape(viewed(engine))).values()) == {0.0}


def test_past_the_evaluation_budget_groups_without_a_domain_are_counted_as_not_evaluated() -> None:
    pods = [p for i in range(MAX_EVALUATED + 3) for p in group_pods(f"g{i}", 1, gpus=1)]
    counts = waiting(scrape(viewed(engine_for(RACK + pods))))
    assert counts["not-evaluated"] == 3 and counts["domain-fits"] == MAX_EVALUATED


def test_a_reservation_past_its_ttl_is_counted_until_housekeeping_releases_it() -> None:
    clock = {"now": NOW}
    engine = engine_for(RACK + group_pods("g", 2), [reservation("g", "dom-a", 2)], clock=lambda: clock["now"])
    metrics = viewed(engine)
    assert scrape(metrics)[("imex_webhook_reservations_expired", ())] == 0
    clock["now"] = NOW + Policy().reservation_ttl + 1
    assert scrape(metrics)[("imex_webhook_reservations_expired", ())] == 1
    engine.housekeep()
    assert scrape(metrics)[("imex_webhook_reservations_expired", ())] == 0


def test_attachments_are_counted_by_phase_with_every_phase_present() -> None:
    engine = engine_for(RACK)
    for i, phase in enumerate((Phase.READY, Phase.READY, Phase.FAILED)):
        engine.store.put_attachment(Attachment(name=f"fa-{i}", node="a-00", pod_namespace="ml", pod_name=f"p{i}",
                                               pod_uid=f"u{i}", zone="z", gpus=1, system="/s", phase=phase))
    samples = scrape(viewed(engine))
    by_phase = {dict(labels)["phase"]: v for (name, labels), v in samples.items()
                if name == "imex_webhook_fabric_attachments"}
    assert by_phase == {p.value: {"Ready": 2.0, "Failed": 1.0}.get(p.value, 0.0) for p in Phase}


def test_watch_health_and_unaccounted_blocks_come_from_their_sources() -> None:
    metrics = viewed(engine_for(RACK), Watches(lambda: {"Pod": (12.5, False), "Node": (400.0, True)}), lambda: 3)
    samples = scrape(metrics)
    assert samples[("imex_webhook_cache_progress_age_seconds", (("kind", "Node"),))] == 400.0
    assert samples[("imex_webhook_cache_stalled", (("kind", "Node"),))] == 1.0
    assert samples[("imex_webhook_cache_stalled", (("kind", "Pod"),))] == 0.0
    assert samples[("imex_webhook_fabric_unaccounted_blocks", ())] == 3.0


def test_without_watches_or_a_fabric_the_families_are_exported_without_samples() -> None:
    text = generate_latest(viewed(engine_for(RACK)).registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("imex_webhook_cache_stalled", "imex_webhook_cache_progress_age_seconds",
                 "imex_webhook_fabric_unaccounted_blocks"):
        assert name in families and families[name].samples == []


def test_a_failing_source_costs_only_its_own_metrics(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> dict[str, tuple[float, bool]]:
        raise RuntimeError("watch table unreadable")

    metrics = viewed(engine_for(RACK + group_pods("g", 8)), Watches(broken), lambda: 1 // 0)
    samples = scrape(metrics)
    assert waiting(samples)["no-domain-ever"] == 1  # the cluster's families are whole
    assert not any(name in ("imex_webhook_cache_stalled", "imex_webhook_fabric_unaccounted_blocks")
                   for name, _ in samples)
    assert "watch health" in caplog.text and "unaccounted fabric blocks" in caplog.text


def test_scrapes_concurrent_with_filters_never_fail_and_see_whole_groups() -> None:
    objects = RACK + builders.rack("b", "dom-b", 4) + [p for i in range(6) for p in group_pods(f"g{i}", 2, gpus=2)]
    engine = engine_for(objects)
    metrics = viewed(engine)
    errors: list[BaseException] = []
    stop = threading.Event()

    def scheduler() -> None:
        try:
            for i in range(6):
                pod = parsing.pod(group_pods(f"g{i}", 2, gpus=2)[0])
                engine.filter(pod, sorted(engine.store.snapshot().nodes))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            stop.set()

    def scraper() -> None:
        try:
            while not stop.is_set():
                counts = waiting(scrape(metrics))
                assert sum(counts.values()) == 6  # every group is waiting, under exactly one reason
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=scheduler)] + [threading.Thread(target=scraper) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert waiting(scrape(metrics))["in-domain"] == 6  # each group's first filter reserved its domain


def _gauge(served: serving.Served, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(served.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def test_a_watch_that_stops_making_progress_shows_as_stalled_and_the_replica_not_ready(tmp_path: Path) -> None:
    fake = KubeFake()
    try:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        with serving.serve(tmp_path / "serve", "--kubeconfig", str(kubeconfig), "--watch-stall-timeout", "1") as served:
            kinds = {"Node", "Pod", "Job", "ResourceClaim", "DomainReservation", "FabricAttachment"}
            assert all(_gauge(served, "imex_webhook_cache_stalled", kind=k) == 0 for k in kinds)
            fake.fail("get", "jobs", 500, "InternalError", "etcdserver: request timed out")
            fake.expire_watches("jobs")  # the open watch ends; every relist now fails
            eventually(lambda: _gauge(served, "imex_webhook_cache_stalled", kind="Job") == 1, 30, "Job stalled")
            assert (_gauge(served, "imex_webhook_cache_progress_age_seconds", kind="Job") or 0) > 1
            assert _gauge(served, "imex_webhook_cache_stalled", kind="Pod") == 0
            assert served.get("/readyz").status_code == 503
    finally:
        fake.close()


class OneLeakedBlock:
    """A fabric with one block composed that no attachment records; detaching it works."""

    def __init__(self) -> None:
        self.blocks = {"/redfish/v1/Systems/n1": {"/blocks/7"}}
        self.detached: list[str] = []

    def composed(self) -> dict[str, set[str]]:
        return {system: set(blocks) for system, blocks in self.blocks.items()}

    def detach(self, system: str, block_ids: list[str], deadline: float) -> None:
        self.detached += block_ids
        self.blocks[system] -= set(block_ids)


def test_only_the_leader_counts_leaked_blocks_and_leading_again_restarts_their_grace() -> None:
    cluster = ClusterStore(Policy())
    fabric, lead, clock = OneLeakedBlock(), {"now": True}, {"now": 0.0}
    reconciler = Reconciler(MemoryAttachmentStore(cluster), fabric, cluster,  # type: ignore[arg-type]
                            Timeouts(orphan_grace=60), leader=lambda: lead["now"], clock=lambda: clock["now"])
    metrics = viewed(engine_for(RACK), unaccounted=reconciler.unaccounted_blocks)
    leaked = ("imex_webhook_fabric_unaccounted_blocks", ())

    reconciler.run_once()
    assert scrape(metrics)[leaked] == 1 and fabric.detached == []
    lead["now"], clock["now"] = False, 30.0  # another replica leads
    reconciler.run_once()
    assert scrape(metrics)[leaked] == 0
    lead["now"], clock["now"] = True, 70.0  # leading again: first seen now, not 70 s ago
    reconciler.run_once()
    assert scrape(metrics)[leaked] == 1 and fabric.detached == []
    clock["now"] = 131.0
    reconciler.run_once()
    assert fabric.detached == ["/blocks/7"]
    reconciler.run_once()
    assert scrape(metrics)[leaked] == 0
