"""The kustomize component manifests/components/pack-plain-gpu-pods (docs/SCHEDULER.md, "GPU pods outside any
group"), rendered by kustomize: it turns on ``--pack-plain-gpu-pods`` and widens the webhook's matchConditions to
pods asking for nvidia.com/gpu, evaluated with a CEL implementation we did not write (the real API server
compiles it against the Pod schema in tests/e2e/test_real_plain_pods.py)."""

from __future__ import annotations

from typing import Any

import celpy
import pytest

from tests.deploy import upstream
from webhook import cli
from webhook.domain import keys
from webhook.service import deploy

COMPONENT = upstream.MANIFESTS / "components" / "pack-plain-gpu-pods"


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


@pytest.fixture(scope="module")
def rendered() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return upstream.render(), upstream.render(COMPONENT)


def _sent(webhook: dict[str, Any], pod: dict[str, Any]) -> bool:
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(pod)}
    return all(bool(env.program(env.compile(c["expression"])).evaluate(activation)) for c in webhook["matchConditions"])


def _container(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    container: dict[str, Any] = {"name": "c", "image": "i"}
    if resources:
        container["resources"] = resources
    return container


def _pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None,
         annotations: dict[str, str] | None = None, claims: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    if claims:
        spec["resourceClaims"] = [{"name": "ch", "resourceClaimTemplateName": "t"}]
    meta: dict[str, Any] = {"name": "p"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


GPU = {keys.GPU_RESOURCE: "1"}
CASES = [
    ("gpu-limit", _pod(_container(limits=GPU)), True),
    ("gpu-request-only", _pod(_container(requests=GPU)), True),
    ("gpu-in-the-second-container", _pod(_container(), _container(limits=GPU)), True),
    ("gpu-in-an-init-container", _pod(_container(), init=[_container(limits=GPU)]), True),
    ("claims", _pod(_container(), claims=True), True),
    ("group-annotation", _pod(_container(), annotations={keys.GROUP_ANNOTATION: "job"}), True),
    ("cpu-only", _pod(_container(limits={"cpu": "2"}, requests={"cpu": "1", "memory": "1Gi"})), False),
    ("another-device", _pod(_container(limits={"example.com/fpga": "1"})), False),
    ("no-resources", _pod(_container()), False),
    ("empty-init-list", _pod(_container(), init=[]), False),
]


@upstream.COLD_CACHE
@pytest.mark.parametrize(("pod", "sent"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_component_sends_gpu_pods_and_everything_the_base_sends(
        rendered: tuple[list[dict[str, Any]], list[dict[str, Any]]], pod: dict[str, Any], sent: bool) -> None:
    base, packed = (_one(docs, "MutatingWebhookConfiguration", deploy.WEBHOOK_CONFIGURATION)["webhooks"][0]
                    for docs in rendered)
    assert _sent(packed, pod) is sent
    if _sent(base, pod):
        assert _sent(packed, pod)  # a superset: nothing the service needed before is lost


def test_the_component_turns_the_setting_on_once_and_serve_accepts_the_arguments(
        rendered: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    base, packed = (_one(docs, "Deployment", deploy.SERVICE_NAME) for docs in rendered)
    args = packed["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == [*base["spec"]["template"]["spec"]["containers"][0]["args"], "--pack-plain-gpu-pods"]
    assert cli.parser().parse_args(args).pack_plain_gpu_pods is True


def test_the_component_changes_nothing_else(rendered: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    base, packed = rendered
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, base)) == sorted(map(key, packed))
    changed = {key(d) for d in packed} - {key(b) for b in base for d in packed if key(d) == key(b) and d == b}
    assert changed == {("Deployment", deploy.SERVICE_NAME),
                       ("MutatingWebhookConfiguration", deploy.WEBHOOK_CONFIGURATION)}
