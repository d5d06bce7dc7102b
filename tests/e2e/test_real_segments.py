"""Jobs larger than one NVLink domain through the real kube-scheduler (docs/SCHEDULER.md, "Jobs larger than one
NVLink domain"): an Indexed Job's ComputeDomain annotated imex-webhook.io/segment-size is placed as whole
segments, each in one clique, neighbouring ranks together; admission gives each segment its own required pod
affinity, which kube-scheduler's InterPodAffinity enforces. Racks a (4 nodes) and b (3) take device-plugin pods.
With --block-label, a job no network block can hold is refused before any pod binds, its reason naming the
shape. Bare pods without a rank are each given a segment at their filter (the label imex-webhook.io/segment,
which a ValidatingAdmissionPolicy lets the webhook's identity write and nothing else)."""

from __future__ import annotations

import pytest

from tests.e2e import objects, scenario
from tests.e2e.conftest import GPUS_PER_NODE, WEBHOOK_GROUPS, WEBHOOK_USER, RealCluster, rack_of
from tests.e2e.kubeapi import ApiCallError, KubeApi, eventually
from webhook.domain import keys

pytestmark = pytest.mark.realcluster

BLOCK = "network.example.com/block"


def _job(cluster: RealCluster, ns: str, name: str, pods: int, per: int | None,
         placement: str | None = None) -> list[str]:
    annotations = {keys.SEGMENT_SIZE_ANNOTATION: str(per)} if per else {}
    if placement:
        annotations[keys.PLACEMENT_ANNOTATION] = placement
    return scenario.indexed_job(cluster, ns, name, pods, annotations)


def _racks_by_segment(placed: dict[str, str], per: int) -> list[set[str]]:
    count = -(-len(placed) // per)
    return [{rack_of(placed[f"{name.rsplit('-', 1)[0]}-{rank}"]) for name in placed
             for rank in range(s * per, min((s + 1) * per, len(placed)))} for s in range(count)]


@pytest.mark.parametrize(("pods", "per", "expected"), [
    (6, 3, [{"a"}, {"b"}]),  # two racks, one segment each
    (6, 2, [{"a"}, {"a"}, {"b"}]),  # rack a takes two segments
], ids=["2 segments over two racks", "3 segments, one rack takes two"])
def test_a_job_larger_than_any_rack_lands_in_whole_segments(real_cluster: RealCluster, pods: int, per: int,
                                                            expected: list[set[str]]) -> None:
    ns = real_cluster.namespace(f"segments-{per}")
    try:
        names = _job(real_cluster, ns, "train", pods, per)
        placed = real_cluster.wait_bound(ns, names, timeout=90)
        assert _racks_by_segment(placed, per) == expected, placed
        assert len(set(placed.values())) == pods  # one member per node, across segments too
        stored = {p["metadata"]["name"]: p for p in real_cluster.api.list("Pod", ns)}
        labels = {stored[n]["metadata"]["labels"][keys.GROUP_LABEL] for n in names}
        assert len(labels) == len(expected)  # a required co-location per segment, not per job
        segments = sorted(r["spec"]["segment"]["index"] for r in real_cluster.api.list("DomainReservation")
                          if r["spec"].get("segment", {}).get("jobName") == "train"
                          and r["spec"]["namespace"] == ns)
        assert segments == list(range(len(expected)))  # stored, and accepted by the CRD's validation
    finally:
        real_cluster.cleanup(ns)


def test_a_job_no_network_block_can_hold_is_refused_naming_its_shape(real_cluster: RealCluster) -> None:
    racks = {"a": "block-1", "b": "block-2"}
    nodes = [n["metadata"]["name"] for n in real_cluster.api.list("Node") if rack_of(n["metadata"]["name"]) in racks]
    ns = real_cluster.namespace("segments-block")
    real_cluster.stop_extender()
    try:
        for node in nodes:
            real_cluster.api.merge_patch("Node", None, node, {"metadata": {"labels": {BLOCK: racks[rack_of(node)]}}})
        real_cluster.start_extender("imex-webhook", "--block-label", BLOCK)
        names = _job(real_cluster, ns, "train", 6, 3)

        def refused() -> str | None:
            pod = real_cluster.api.get("Pod", ns, names[0])
            conditions = pod.get("status", {}).get("conditions", [])
            return next((c["message"] for c in conditions if c.get("reason") == "Unschedulable"
                         and "no plan holds" in c.get("message", "")), None)

        message = eventually(refused, 60, what="the FailedScheduling reason of the job's first pod")
        assert "job segments-block/train (6 pods in 2 segments of 3" in message, message
        assert f"under any one value of {BLOCK}" in message, message
        assert not [p for p in real_cluster.api.list("Pod", ns) if p["spec"].get("nodeName")]
    finally:
        real_cluster.cleanup(ns)
        real_cluster.stop_extender()
        for node in nodes:
            real_cluster.api.merge_patch("Node", None, node, {"metadata": {"labels": {BLOCK: None}}})
        real_cluster.start_extender()


def test_a_preferred_job_no_rack_holds_falls_back_to_the_largest_segments_that_fit(real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("segments-preferred")
    try:
        names = _job(real_cluster, ns, "train", 6, None, placement="preferred")
        placed = real_cluster.wait_bound(ns, names, timeout=90)
        # No rack holds 6; rack a holds 4, so segments of 4 (ranks 0-3) and 2 (ranks 4-5), never one pod alone.
        assert [rack_of(placed[f"train-{r}"]) for r in range(6)] == ["a"] * 4 + ["b"] * 2, placed
        stored = [r["spec"] for r in real_cluster.api.list("DomainReservation")
                  if r["spec"].get("namespace") == ns and "segment" in r["spec"]]
        assert sorted((s["segment"]["index"], s["size"], s["segment"].get("preferred")) for s in stored) == [
            (0, 4, True), (1, 2, True)]
        pods = real_cluster.api.list("Pod", ns)
        assert not any("podAffinity" in str(p["spec"].get("affinity")) for p in pods)  # the extender keeps each part
    finally:
        real_cluster.cleanup(ns)


def test_bare_pods_without_a_rank_are_each_given_a_segment_and_each_segment_lands_in_one_rack(
        real_cluster: RealCluster) -> None:
    ns = real_cluster.namespace("segments-unranked")
    try:
        body = objects.computedomain(ns, "train", 6)
        body["metadata"]["annotations"] = {keys.SEGMENT_SIZE_ANNOTATION: "3"}
        cd = real_cluster.api.create(body)
        real_cluster.api.create(objects.channel_template(ns, "train", cd["metadata"]["uid"]))
        names = [f"worker-{c}" for c in "uvwxyz"]  # no controller, no index: nothing to rank them by
        for name in names:
            real_cluster.api.create(objects.pod(ns, name, gpus=GPUS_PER_NODE, claims=[scenario.channel("train")]))
        placed = real_cluster.wait_bound(ns, names, timeout=90)
        stored = {p["metadata"]["name"]: p for p in real_cluster.api.list("Pod", ns)}
        segment = {n: stored[n]["metadata"]["labels"].get(keys.SEGMENT_LABEL) for n in names}
        assert sorted(segment.values()) == ["0", "0", "0", "1", "1", "1"], segment
        racks = {s: {rack_of(placed[n]) for n in names if segment[n] == s} for s in ("0", "1")}
        assert all(len(r) == 1 for r in racks.values()) and racks["0"] != racks["1"], (racks, placed)
        assert len(set(placed.values())) == 6  # one member per node, across segments too

        # The policy narrows the webhook's pod patch to that one label (the API server evaluates its CEL).
        as_webhook = KubeApi(real_cluster.plane.server, str(real_cluster.plane.ca_file),
                             real_cluster.plane.identity("webhook", WEBHOOK_USER, WEBHOOK_GROUPS))
        as_webhook.merge_patch("Pod", ns, names[0], {"metadata": {"labels": {keys.SEGMENT_LABEL: segment[names[0]]}}})
        for patch in ({"metadata": {"labels": {"app": "other"}}}, {"metadata": {"annotations": {"x": "y"}}}):
            with pytest.raises(ApiCallError) as refused:
                as_webhook.merge_patch("Pod", ns, names[0], patch)
            assert refused.value.status in (403, 422) and "imex-webhook-segment-label-only" in refused.value.body
    finally:
        real_cluster.cleanup(ns)
