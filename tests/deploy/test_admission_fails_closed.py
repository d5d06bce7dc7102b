"""The MutatingWebhookConfiguration fails closed for IMEX pods only: ``failurePolicy: Fail``, and match
conditions that never send a pod without resource claims and without the group annotation, so such pods
are created even while the webhook is down (kube-apiserver skips a webhook whose conditions are false)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from webhook.domain import keys
from webhook.domain.admission import mutating

MANIFEST = Path(__file__).parents[2] / "manifests" / "mutating-webhook.yaml"


def _webhook() -> dict[str, Any]:
    (config,) = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    (webhook,) = config["webhooks"]
    return webhook  # type: ignore[no-any-return]


def _sent(pod: dict[str, Any]) -> bool:
    env = celpy.Environment()
    results = []
    for condition in _webhook()["matchConditions"]:
        program = env.program(env.compile(condition["expression"]))
        results.append(bool(program.evaluate({"object": celpy.json_to_cel(pod)})))
    return all(results)


def test_an_outage_or_a_fault_never_admits_an_imex_pod_unmodified() -> None:
    assert _webhook()["failurePolicy"] == "Fail"


@pytest.mark.parametrize(("pod", "sent"), [
    ({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "nginx"}]}}, False),
    ({"metadata": {"annotations": {"team": "a"}}, "spec": {"resourceClaims": []}}, False),
    ({"metadata": {"annotations": {keys.GROUP_SIZE_ANNOTATION: "3"}}, "spec": {}}, False),
    ({"metadata": {}, "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}}, True),
    ({"metadata": {"annotations": {keys.GROUP_ANNOTATION: "run-1"}}, "spec": {}}, True),
])
def test_only_pods_that_may_be_in_a_group_are_sent_and_the_handler_agrees(pod: dict[str, Any], sent: bool) -> None:
    assert _sent(pod) is sent
    assert mutating.might_be_group(pod) is sent  # what an internal fault denies is what the webhook is sent
