"""ResourceSlices -> whole GPUs per node: only a GPU driver's per-node slices count, only whole GPUs, and a
malformed slice names the field."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.domain.reading.slices import SliceGpus, resource_slice
from webhook.errors import WireError

DRIVERS = ("gpu.nvidia.com",)


def _slice(devices: list[Any], driver: str = "gpu.nvidia.com", node: str | None = "n1",
           **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"driver": driver, "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                            "devices": devices, **spec}
    if node is not None:
        body["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": body}


def _dev(kind: str | None = "gpu", qualified: bool = False) -> dict[str, Any]:
    if kind is None:
        return {"name": "d"}
    key = "gpu.nvidia.com/type" if qualified else "type"
    return {"name": "d", "attributes": {key: {"string": kind}}}


@pytest.mark.parametrize(("obj", "expected"), [
    (_slice([_dev(), _dev(), _dev(), _dev()]), SliceGpus("s", "n1", 4)),
    (_slice([_dev(), _dev("mig"), _dev("vfio")]), SliceGpus("s", "n1", 1)),
    (_slice([_dev(None), _dev(qualified=True)]), SliceGpus("s", "n1", 2)),
    (_slice([_dev("channel"), _dev("daemon")], driver="compute-domain.nvidia.com"), SliceGpus("s", "n1", 0, 1)),
    (_slice([_dev("channel")], driver="example.com/other"), SliceGpus("s", None, 0)),
    (_slice([_dev()], node=None, allNodes=True), SliceGpus("s", None, 0)),
    (_slice([]), SliceGpus("s", "n1", 0)),
], ids=["four whole GPUs", "MIG and VFIO devices are not whole GPUs", "untyped and qualified attributes count",
        "the compute-domain plugin's slice publishes an IMEX channel and no GPU",
        "another driver's slice counts for no node", "a slice for all nodes counts for no node", "no devices"])
def test_a_slice_counts_the_whole_gpus_of_a_gpu_driver_on_its_node(obj: dict[str, Any], expected: SliceGpus) -> None:
    assert resource_slice(obj, DRIVERS) == expected


@pytest.mark.parametrize(("obj", "field"), [
    ("not an object", "resourceSlice"),
    ({"metadata": {"name": "s"}, "spec": []}, "resourceSlice.spec"),
    (_slice("many"), "resourceSlice.spec.devices"),  # type: ignore[arg-type]
    (_slice([7]), "resourceSlice.spec.devices[0]"),
    (_slice([{"name": "d", "attributes": {"type": "gpu"}}]), "resourceSlice.spec.devices[0].attributes.type"),
    (_slice([_dev()], node=None, nodeName=["n1"]), "resourceSlice.spec.nodeName"),
], ids=["not an object", "spec a list", "devices a string", "a device a number", "attribute not an object",
        "nodeName a list"])
def test_a_malformed_slice_names_the_field(obj: Any, field: str) -> None:
    with pytest.raises(WireError) as err:
        resource_slice(obj, DRIVERS)
    assert err.value.path == field
