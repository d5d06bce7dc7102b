"""The fake API server itself, through the official client's typed API, so its rules are not only
assumed by the adapter tests: discovery of every resource we use (and a missing CRD disappearing from
it), server-stamped metadata and increasing resourceVersions, 409 for a stale update and a duplicate
create, 401 without the token, and the same objects after a restart on the same port.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.kubefake import KubeFake


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(str(kubeconfig))
    yield api_client
    api_client.close()


def test_discovery_lists_every_resource_the_adapter_uses(fake: KubeFake, api: client.ApiClient) -> None:
    groups = {g.name: g.preferred_version.version for g in client.ApisApi(api).get_api_versions().groups}
    several = {"scheduling.k8s.io", "kubeflow.org"}  # two versions each: the preferred one is the fake's pick
    assert {g: v for g, v in groups.items() if g not in several} == {
        "batch": "v1", "resource.k8s.io": "v1", "resource.nvidia.com": "v1beta1", "imex-webhook.io": "v1alpha1",
        "coordination.k8s.io": "v1", "jobset.x-k8s.io": "v1alpha2", "events.k8s.io": "v1"}
    assert several <= set(groups)
    core = {r.name: r.namespaced for r in client.CoreV1Api(api).get_api_resources().resources}
    assert core == {"nodes": False, "pods": True, "pods/binding": True, "resourcequotas": True}

    fake.uninstall("computedomains")
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert "resource.nvidia.com" not in groups


def test_writes_are_stamped_and_guarded_by_resource_version(fake: KubeFake, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    node = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    assert node.metadata.uid and node.metadata.creation_timestamp and node.metadata.resource_version == "1"

    node.metadata.labels = {"a": "b"}
    updated = core.replace_node("n1", node)
    assert int(updated.metadata.resource_version) > 1

    with pytest.raises(ApiException) as stale:
        core.replace_node("n1", node)  # still carries resourceVersion 1
    assert stale.value.status == 409 and "the object has been modified" in stale.value.body

    with pytest.raises(ApiException) as duplicate:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    assert duplicate.value.status == 409 and '"reason": "AlreadyExists"' in duplicate.value.body


def test_requests_without_the_token_are_unauthorized(fake: KubeFake, api: client.ApiClient) -> None:
    api.configuration.api_key = {}
    with pytest.raises(ApiException) as raised:
        client.CoreV1Api(api).list_node()
    assert raised.value.status == 401


def test_a_restart_keeps_the_port_and_the_objects(fake: KubeFake, api: client.ApiClient) -> None:
    client.CoreV1Api(api).create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    port = fake.port
    fake.restart()
    assert fake.port == port
    assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["n1"]
