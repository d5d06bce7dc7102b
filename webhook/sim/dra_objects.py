"""The DRA objects NVIDIA's ComputeDomain driver publishes, for the simulated clusters (demo, simulate):
the workload channel's DeviceClass and one IMEX channel (``channel-0``) per node."""

from __future__ import annotations

from typing import Any

from webhook.domain import keys

CD_DRIVER = keys.COMPUTE_DOMAIN_DRIVER


def channel_device_class() -> dict[str, Any]:
    """The DeviceClass a ComputeDomain's channel template asks for, as the driver installs it."""
    expression = (f"device.driver == '{CD_DRIVER}' && device.attributes['{CD_DRIVER}'].type == 'channel' "
                  f"&& device.attributes['{CD_DRIVER}'].id == 0")
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": keys.DEFAULT_CHANNEL_DEVICE_CLASSES[0]},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def channel_slice(node: str) -> dict[str, Any]:
    """The ResourceSlice of one node's IMEX channel, as the ComputeDomain kubelet plugin publishes it."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{CD_DRIVER}"},
            "spec": {"driver": CD_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "channel-0", "attributes": {"type": {"string": "channel"},
                                                                      "id": {"int": 0}}}]}}
