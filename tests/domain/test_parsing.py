"""Parsing Kubernetes JSON into the model: quantities, GPU demand as Kubernetes computes it, node
domains, device requests in every resource.k8s.io shape, and errors that name the offending field."""

from __future__ import annotations

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.reading import claim_parsing, parsing
from webhook.errors import WireError


@pytest.mark.parametrize(("text", "expected"), [
    ("4", 4.0), (8, 8.0), ("500m", 0.5), ("1Ki", 1024.0), ("2k", 2000.0), ("1e3", 1000.0), ("0", 0.0),
])
def test_quantities_parse_like_kubernetes(text: object, expected: float) -> None:
    assert parsing.quantity(text, "q") == expected


@pytest.mark.parametrize("text", ["four", "1.5.2", "", "4 GPUs", True])
def test_malformed_quantities_name_the_field(text: object) -> None:
    with pytest.raises(WireError) as err:
        parsing.quantity(text, "Pod.spec.containers[0].resources.limits")
    assert err.value.path == "Pod.spec.containers[0].resources.limits"


def test_a_fractional_gpu_count_is_rejected() -> None:
    with pytest.raises(WireError, match="whole non-negative count"):
        parsing.count("500m", "gpus")


def _spec(containers: list[int], init: list[tuple[int, bool]] = ()) -> dict[str, object]:  # type: ignore[assignment]
    def c(n: int, sidecar: bool = False) -> dict[str, object]:
        out: dict[str, object] = {"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: str(n)}}}
        if sidecar:
            out["restartPolicy"] = "Always"
        return out

    return {"containers": [c(n) for n in containers], "initContainers": [c(n, s) for n, s in init]}


@pytest.mark.parametrize(("containers", "init", "expected"), [
    ([4], [], 4),
    ([2, 2], [], 4),  # app containers add up
    ([1], [(8, False)], 8),  # an init container needing more than the app sets the peak
    ([4], [(2, False)], 4),
    ([2], [(1, True)], 3),  # a sidecar runs beside the app containers
    ([1], [(1, True), (4, False)], 5),  # an init container after a sidecar runs beside it
    ([], [], 0),
])
def test_gpu_demand_follows_the_schedulers_init_and_sidecar_rules(containers: list[int],
                                                                   init: list[tuple[int, bool]],
                                                                   expected: int) -> None:
    assert parsing.effective_gpus(_spec(containers, init)) == expected


def test_requests_count_when_no_limit_is_given() -> None:
    spec = {"containers": [{"name": "c", "resources": {"requests": {keys.GPU_RESOURCE: "2"}}}]}
    assert parsing.effective_gpus(spec) == 2


def test_the_first_domain_label_present_names_the_node_domain() -> None:
    n = builders.node("a", 4, "uuid-1.7", zone="pool")
    parsed = parsing.node(n, keys.DEFAULT_DOMAIN_LABELS)
    assert (parsed.domain, parsed.domain_key, parsed.fabric_zone) == ("uuid-1.7", keys.CLIQUE_LABEL, "pool")


def test_a_fabric_zone_alone_is_a_domain() -> None:
    parsed = parsing.node(builders.node("f", 1, zone="pool", slots=4), keys.DEFAULT_DOMAIN_LABELS)
    assert (parsed.domain, parsed.domain_key, parsed.fabric_slots) == ("pool", keys.FABRIC_ZONE_LABEL, 4)


def test_a_node_without_domain_labels_is_in_no_domain() -> None:
    assert parsing.node(builders.node("hgx", 8), keys.DEFAULT_DOMAIN_LABELS).domain is None


def test_a_node_without_a_name_is_a_wire_error() -> None:
    with pytest.raises(WireError, match=r"Nodes.items\[3\].metadata.name"):
        parsing.node({"metadata": {}}, keys.DEFAULT_DOMAIN_LABELS, "Nodes.items[3]")


def test_a_pod_with_a_non_list_of_containers_names_the_field() -> None:
    with pytest.raises(WireError) as err:
        parsing.pod({"metadata": {"name": "p"}, "spec": {"containers": {"name": "x"}}})
    assert err.value.path == "Pod.spec.containers"


def test_labels_must_be_strings() -> None:
    with pytest.raises(WireError, match=r"Pod.metadata.labels.app"):
        parsing.pod({"metadata": {"name": "p", "labels": {"app": 3}}, "spec": {}})


def _claim(requests: list[dict[str, object]], template: bool = False) -> dict[str, object]:
    spec: dict[str, object] = {"devices": {"requests": requests}}
    return {"metadata": {"name": "c", "namespace": "ml", "uid": "u1"},
            "spec": {"spec": spec} if template else spec}


@pytest.mark.parametrize(("request_body", "device_class", "count", "all_devices"), [
    ({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}, "gpu.nvidia.com", 2, False),
    ({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
     "gpu.nvidia.com", 1, True),
    ({"name": "g", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
                                      {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 1}]},
     "gpu.nvidia.com", 4, False),
    ({"name": "g", "deviceClassName": "gpu.nvidia.com", "count": 3}, "gpu.nvidia.com", 3, False),  # v1beta1
])
def test_device_requests_are_read_in_every_api_shape(request_body: dict[str, object], device_class: str,
                                                     count: int, all_devices: bool) -> None:
    spec = claim_parsing.claim_spec(_claim([request_body]), template=False)
    (req,) = spec.requests
    assert (req.device_class, req.count, req.all_devices) == (device_class, count, all_devices)


def test_a_template_finds_its_compute_domain_in_the_opaque_channel_config() -> None:
    rct = builders.cd_objects("train", 4)[1]
    del rct["metadata"]["labels"]
    assert claim_parsing.claim_spec(rct, template=True).compute_domain == builders.cd_uid("train")


def test_a_negative_num_nodes_is_rejected() -> None:
    cd = builders.cd_objects("x", 1)[0]
    cd["spec"]["numNodes"] = -1
    with pytest.raises(WireError, match="numNodes"):
        parsing.compute_domain(cd)


def test_gpus_the_agent_is_releasing_are_not_offered() -> None:
    n = builders.node("f", 4, "uuid-1.7")
    n["metadata"]["annotations"][keys.INVENTORY_ANNOTATION] = (
        '{"gpus": [{"uuid": "GPU-1", "releasing": true}, {"uuid": "GPU-2"}, {"uuid": "GPU-3", "releasing": true}]}')
    assert parsing.node(n, keys.DEFAULT_DOMAIN_LABELS).gpus == 2


@pytest.mark.parametrize("inventory", ["not json", "[]", '{"gpus": "x"}', ""])
def test_an_unreadable_inventory_withholds_nothing(inventory: str) -> None:
    n = builders.node("f", 4, "uuid-1.7")
    n["metadata"]["annotations"][keys.INVENTORY_ANNOTATION] = inventory
    assert parsing.node(n, keys.DEFAULT_DOMAIN_LABELS).gpus == 4
