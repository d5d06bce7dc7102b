"""imex-webhook.io/placement: preferred through the engine (docs/SCHEDULER.md, "Jobs larger than one NVLink
domain"): one domain when one holds the job; else the largest segments that fit now, by rank, never a member
alone; the split is stored with the segments' reservations, and the job's pods are derived into their
segments from then on."""

from __future__ import annotations

from tests import builders
from tests.engine.test_engine_events import Clock, Kept
from webhook.adapters import embedded
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.domain.groups import segments
from webhook.domain.model import Pod
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state.cluster import ClusterStore

DOMAINS = {"a": "aaaa-1111.7", "b": "bbbb-2222.7", "c": "cccc-3333.7"}


# Pods arrive one at a time here, as each test needs them; a job's controller creates them together, so the
# bound on what a namespace holds for pods not created yet is lifted (tests/domain/test_tenant_quota.py).
POLICY = Policy(max_reserved_share=1.0)


class Cluster:
    def __init__(self, racks: dict[str, int], size: int, **annotations: str) -> None:
        nodes = [n for prefix, count in racks.items() for n in builders.rack(prefix, DOMAINS[prefix], count)]
        cd = builders.cd_objects("train", size)
        cd[0]["metadata"]["annotations"] = {keys.PLACEMENT_ANNOTATION: "preferred", **annotations}
        self.store = ClusterStore(POLICY)
        backend = embedded.EmbeddedBackend(self.store, [*nodes, *cd], "test")
        backend.start()
        self.engine = builders.engine(backend, POLICY, holder="t", clock=Clock(),
                             events=Kept())
        self.job = f"cd:{builders.cd_uid('train')}"

    def pod(self, rank: int | None) -> Pod:
        extra = {segments.COMPLETION_INDEX: str(rank)} if rank is not None else {}
        pod = parsing.pod(builders.pod(f"train-{rank}", "train", annotations=extra))
        embedded.put_pod(self.store, pod)
        return pod

    def racks(self, rank: int) -> set[str]:
        return {n[0] for n in self.engine.filter(self.pod(rank), sorted(self.store.snapshot().nodes)).passed}

    def reserved(self) -> dict[str, tuple[str, int]]:
        return {g: (r.domain[0], r.size) for g, r in self.engine.reservations.all().items()}


def test_a_preferred_job_one_domain_holds_is_placed_whole_as_required() -> None:
    c = Cluster({"a": 4, "b": 6}, 5)
    assert c.racks(0) == {"b"} and c.reserved() == {c.job: ("b", 5)}


def test_a_preferred_job_no_domain_holds_is_split_into_the_largest_segments_that_fit() -> None:
    c = Cluster({"a": 5, "b": 4, "c": 3}, 8)
    assert c.racks(6) == {"c"}  # ranks 5-7: the second segment, in the best fit for 3
    assert c.reserved() == {f"{c.job}#s0": ("a", 5), f"{c.job}#s1": ("c", 3)}
    reservation = c.engine.reservations.all()[f"{c.job}#s0"]
    assert reservation.segment is not None and reservation.segment.preferred and reservation.segment.size == 5
    # The split reaches the catalog: the job's pods now derive into their segments.
    c.engine.snapshot()
    assert c.store.snapshot().catalog.split_jobs == {c.job: 5}
    assert c.racks(0) == {"a"}
    assert set(c.store.snapshot().members) >= {f"{c.job}#s0", f"{c.job}#s1"}


def test_no_split_leaves_a_member_alone_in_a_domain() -> None:
    c = Cluster({"a": 6, "b": 6}, 7)  # 6 + 1 would; 5 + 2 does not
    c.racks(0)
    assert sorted(size for _, size in c.reserved().values()) == [2, 5]


def test_the_asked_segment_size_is_the_largest_tried() -> None:
    c = Cluster({"a": 9, "b": 9}, 12, **{keys.SEGMENT_SIZE_ANNOTATION: "4"})
    c.racks(0)
    assert sorted(size for _, size in c.reserved().values()) == [4, 4, 4]


def test_a_member_without_a_rank_of_a_preferred_job_that_must_be_split_is_given_the_first_segment() -> None:
    c = Cluster({"a": 3, "b": 3}, 6)
    out = c.engine.filter(c.pod(None), sorted(c.store.snapshot().nodes))
    assert c.reserved() == {f"{c.job}#s0": ("a", 3), f"{c.job}#s1": ("b", 3)}
    assert {n[0] for n in out.passed} == {"a"}
    pod = c.store.pod("ml", "train-None")
    assert pod is not None and pod.labels[keys.SEGMENT_LABEL] == "0"


def test_admission_gives_a_preferred_job_no_pod_affinity_and_the_jobs_label() -> None:
    c = Cluster({"a": 3, "b": 3}, 6)
    snap = c.engine.snapshot()
    obj = builders.pod("train-0", "train", annotations={segments.COMPLETION_INDEX: "0"})
    result = mutating.mutate(obj, "ml", snap.catalog, snap.nodes, Policy())
    added = {op["path"]: op.get("value") for op in result.patch}
    assert result.allowed and not any("podAffinity" in str(v) for v in added.values())
    assert mutating.group_label_value(c.job) in str(added)
