"""The bench's job larger than one domain (webhook/tools/bench/segmented*.py): its size on each cluster, the
segment its members fall in, and ``bench --only segments``, which measures it alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from webhook.adapters.embedded import EmbeddedBackend
from webhook.domain.groups import grouping, segments
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.state.cluster import ClusterStore
from webhook.tools import cli
from webhook.tools.bench import payloads, segmented, segmented_report


@pytest.mark.parametrize(("nodes", "pods", "count"), [
    (60, 18, 1),  # one wholly free clique: the job fits one domain
    (200, 72, 4),
    (5000, 1656, 92),  # the busy cluster's free cliques hold fewer than 5,000 pods
    (20000, 5000, 278),
])
def test_the_job_is_5000_pods_or_what_the_free_cliques_hold(nodes: int, pods: int, count: int) -> None:
    shape = segmented.job_shape(nodes)
    assert (shape["pods"], shape["segments"]) == (pods, count)
    assert bool(segmented.unsegmented(nodes)) == (count < 2)


def test_the_free_cliques_counted_are_those_no_running_pod_uses() -> None:
    objects = payloads.cluster_objects(200)
    used = {o["spec"]["nodeName"] for o in objects if o["kind"] == "Pod"}
    free = [c for c in range(200 // payloads.CLIQUE_SIZE)
            if not any(payloads.node_name(c * payloads.CLIQUE_SIZE + t) in used for t in range(payloads.CLIQUE_SIZE))]
    assert len(free) * payloads.SEGMENT_SIZE == payloads.segmented_job_pods(200)


@pytest.mark.parametrize(("rank", "segment"), [(0, 0), (17, 0), (18, 1), (71, 3)])
def test_a_member_of_the_served_job_falls_in_segment_rank_over_18(rank: int, segment: int) -> None:
    policy = Policy()
    store = ClusterStore(policy)
    EmbeddedBackend(store, payloads.cluster_objects(200), "bench cluster of 200").start()
    pod = parsing.pod(payloads.segment_pod(rank))
    group = grouping.resolve(pod, store.snapshot().catalog, policy).group
    assert group is not None and group.segment is not None
    assert (group.segment.index, group.segment.count, group.segment.job_size) == (segment, 4, 72)
    assert segments.job_of(group.id) != group.id


def test_a_size_where_the_job_is_not_segmented_is_reported_as_such() -> None:
    lines = segmented_report.segments_markdown({"60": {"skipped": segmented.unsegmented(60)}})
    assert "### 60 nodes: not measured" in lines
    assert any("fits one domain, so it is not segmented" in line for line in lines)
    assert segmented_report.segments_summary({"60": {"skipped": "x"}}) == {}


@pytest.fixture(scope="module")
def only(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("segments")
    args = ["bench", "--only", "segments", "--nodes", "60,200", "--duration", "0.05", "--repeats", "2",
            "--micro-budget", "0.01", "--out", str(out)]
    assert cli.main(args) == 0
    loaded: dict[str, Any] = json.loads((out / "bench.json").read_text())
    return out, loaded


def test_only_segments_measures_the_job_alone_with_its_baselines(only: tuple[Path, dict[str, Any]]) -> None:
    out, result = only
    assert "http" not in result and "in_process" not in result and result["parameters"]["segments_only"]
    assert "not segmented" in result["segments"]["60"]["skipped"]
    row = result["segments"]["200"]
    first, later = row["first_filter"], row["later_filter"]
    assert row["servers"] == first["samples"] == 2  # one fresh server per first filter
    assert first["passed"] == payloads.SEGMENT_SIZE and first["same_reply_on_every_server"]
    assert first["ratio"] > 0 and later["ratio"] > 0 and later["requests"] >= 2
    assert row["memory"]["after_first_filter"] > 0 and row["memory"]["peak"] >= row["memory"]["cached"]
    assert row["in_process"]["segment_first_filter_200"]["reservations_stored"] == 4
    table = (out / "bench.md").read_text()
    assert "### 200 nodes: 72 pods in 4 segments of 18" in table and "## The targets" not in table
    assert result["summary"]["segment_first_filter_200_http_p50_ms"] == first["p50_ms"]
