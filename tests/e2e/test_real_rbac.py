"""What the webhook's service account may write, as the real kube-apiserver enforces it with the shipped
manifests (manifests/rbac-webhook.yaml, manifests/webhook-admission-policy.yaml; docs/DEPLOYING.md, "What the
webhook's service account may write").

RBAC grants the account ``patch`` on pods, pods/status and nodes; the ValidatingAdmissionPolicies narrow each
to the one field the webhook owns. As that account (the client certificate ``serve`` runs with here):

- the writes the product makes pass, sent by the product's own code over the official client
  (``webhook/adapters/kube/``): the CapacityReturned condition (``PodNudger``), the segment label
  (``KubeBinder.label_segment``), the domain label (the ``NodeDomainLabeller``'s guarded merge patch, and
  the running extender's labeller writing a new node's label by itself);
- everything else is refused with the policy's message: Ready=False on a running pod, phase Failed on a
  pending one, another condition changed or removed, labels or annotations through pods/status, a
  finalizer on a pod, a taint, a cordon, another node label, a node annotation; and the objects are as
  they were;
- the same writes by another identity (here the suite's administrator, as the kubelet or a controller would
  make them) pass: the policies match the webhook's account alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from kubernetes.client import ApiClient

from tests.e2e import objects
from tests.e2e.conftest import WEBHOOK_GROUPS, WEBHOOK_USER, RealCluster
from tests.e2e.kubeapi import ApiCallError, KubeApi, eventually
from webhook.adapters.kube.api import MERGE_PATCH, Api, call_timeout, load_configuration
from webhook.adapters.kube.backend import KubeBinder
from webhook.adapters.kube.nudges import PodNudger
from webhook.domain import keys, requeue
from webhook.domain.policy import Policy
from webhook.domain.reading import node_labels, parsing
from webhook.wire.kinds import NODES

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]

ENFORCED = 60.0  # seconds a new policy may take to be enforced (and the labeller to act) on a busy machine
SEGMENT_POLICY = "imex-webhook-segment-label-only"
CONDITION_POLICY = "imex-webhook-capacity-condition-only"
DOMAIN_POLICY = "imex-webhook-domain-label-only"
STRATEGIC = "application/strategic-merge-patch+json"


@contextlib.contextmanager
def _product_api(cluster: RealCluster) -> Iterator[Api]:
    """The API client ``serve --kubeconfig`` builds, as the webhook's service account."""
    identity = cluster.plane.identity("webhook", WEBHOOK_USER, WEBHOOK_GROUPS)
    api = Api(ApiClient(load_configuration(str(identity.kubeconfig), in_cluster=False)), call_timeout(10.0))
    try:
        yield api
    finally:
        api.close()


def _patch(api: KubeApi, kind: str, ns: str | None, name: str, body: Mapping[str, Any], *,
           sub: str | None = None, strategic: bool = False, dry_run: bool = False) -> dict[str, Any]:
    content_type = STRATEGIC if strategic else MERGE_PATCH
    patched: dict[str, Any] = api.call("PATCH", api.path(kind, ns, name, sub), body, content_type=content_type,
                                       params={"dryRun": "All"} if dry_run else None)
    return patched


def _denial(write: Callable[[], object]) -> tuple[int, str] | None:
    """(status, message) when the API server refuses ``write`` in a ValidatingAdmissionPolicy; None when
    the write passed. Any other failure is raised."""
    try:
        write()
    except ApiCallError as err:
        message = str(json.loads(err.body).get("message", ""))
        if "ValidatingAdmissionPolicy" not in message:
            raise
        return err.status, message
    return None


def _refused(write: Callable[[], object], policy: str, message: str) -> None:
    denial = _denial(write)
    assert denial is not None, f"the write passed; {policy} should have refused it ({message})"
    status, said = denial
    assert status == 422, denial  # the policies leave the reason at Invalid: never mistaken for missing RBAC
    assert f"'{policy}'" in said and message in said, said


def _enforced(policy: str, write: Callable[[], object]) -> None:
    denial = eventually(lambda: _denial(write), ENFORCED, what=f"{policy} enforced")
    assert f"'{policy}'" in denial[1], denial


def _conditions(pod: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}


def test_the_webhooks_account_writes_only_its_condition_its_two_labels_and_nothing_else(
        real_cluster: RealCluster) -> None:
    started = time.monotonic()
    admin = real_cluster.api
    webhook = KubeApi(real_cluster.plane.server, str(real_cluster.plane.ca_file),
                      real_cluster.plane.identity("webhook", WEBHOOK_USER, WEBHOOK_GROUPS))
    ns = real_cluster.namespace("rbac")
    probe_node = f"rbac-probe-{uuid.uuid4().hex[:6]}"
    clique = f"{uuid.uuid4()}.1"
    try:
        # A pod nobody schedules (it stays Pending), with the condition kube-scheduler would have left on it.
        waiting = objects.pod(ns, "waiting", labels={"app": "train"})
        waiting["spec"]["schedulerName"] = "nobody"
        admin.create(waiting)
        admin.merge_patch("Pod", ns, "waiting", {"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/13 nodes"}]}},
            sub="status", strategic=True)

        # A new policy takes a moment to be enforced: wait until one forbidden write of each is refused
        # (dry runs, so that a write that passed too early changes nothing).
        _enforced(CONDITION_POLICY, lambda: _patch(webhook, "Pod", ns, "waiting", {"status": {"phase": "Failed"}},
                                                   sub="status", strategic=True, dry_run=True))
        _enforced(SEGMENT_POLICY, lambda: _patch(webhook, "Pod", ns, "waiting", {"metadata": {"labels": {"app": "x"}}},
                                                 dry_run=True))
        _enforced(DOMAIN_POLICY, lambda: _patch(webhook, "Node", None, "hgx-x-00", {"spec": {"unschedulable": True}},
                                                dry_run=True))

        # A node in a domain of its own (no GPUs: nothing lands there), and a running pod on it.
        admin.create(objects.node(probe_node, clique=clique))
        admin.merge_patch("Node", None, probe_node, {"spec": {"taints": None}})  # TaintNodesByCondition's
        running = objects.pod(ns, "running")
        running["spec"]["nodeName"] = probe_node
        admin.create(running)
        real_cluster.set_phase(ns, "running", "Running")

        # -- (a) what the product writes passes ------------------------------------------------------------
        # The running extender's labeller copies the new node's domain into imex-webhook.io/domain by itself.
        def domain_label() -> str | None:
            value: str | None = admin.get("Node", None, probe_node)["metadata"]["labels"].get(keys.DOMAIN_LABEL)
            return value
        eventually(lambda: domain_label() == clique, ENFORCED, what="the labeller's domain label on the new node")

        with _product_api(real_cluster) as api:
            # PodNudger's strategic merge patch of pods/status, twice: added, then changed.
            pod = parsing.pod(admin.get("Pod", ns, "waiting"))
            nudger = PodNudger(api)
            nudger.nudge(pod, "capacity returned: rack a", time.time())
            nudger.nudge(pod, "capacity returned: rack b", time.time() + 1)
            stored = admin.get("Pod", ns, "waiting")
            assert _conditions(stored)[requeue.CONDITION]["message"] == "capacity returned: rack b"
            assert _conditions(stored)["PodScheduled"]["reason"] == "Unschedulable"
            assert stored["status"]["phase"] == "Pending"

            # KubeBinder's merge patch of the segment label (a member without a rank).
            KubeBinder(api).label_segment(pod, 1)
            assert admin.get("Pod", ns, "waiting")["metadata"]["labels"][keys.SEGMENT_LABEL] == "1"

            # The labeller's guarded merge patch, removing the label (as for a node that left its domain);
            # the running labeller then writes it back.
            state = node_labels.state_of(admin.get("Node", None, probe_node), Policy())
            api.call("PATCH", NODES.path(name=probe_node), body=dataclasses.replace(state, value=None).body(),
                     content_type=MERGE_PATCH)
            eventually(lambda: domain_label() == clique, ENFORCED, what="the labeller writing the label back")

        # Its own condition may also be removed (the policy allows add, change and remove of that one).
        _patch(webhook, "Pod", ns, "waiting", {"status": {"conditions": [
            {"type": requeue.CONDITION, "$patch": "delete"}]}}, sub="status", strategic=True)
        assert requeue.CONDITION not in _conditions(admin.get("Pod", ns, "waiting"))

        # -- (b) everything else is refused ----------------------------------------------------------------
        pods_before = {name: admin.get("Pod", ns, name) for name in ("waiting", "running")}
        node_before = admin.get("Node", None, probe_node)

        def status(name: str, body: Mapping[str, Any]) -> Callable[[], object]:
            return lambda: _patch(webhook, "Pod", ns, name, body, sub="status", strategic=True)

        _refused(status("running", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                 CONDITION_POLICY, "may change only the condition imex-webhook.io/CapacityReturned")
        _refused(status("waiting", {"status": {"phase": "Failed"}}),
                 CONDITION_POLICY, "may not change a pod's phase")
        _refused(status("waiting", {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}),
                 CONDITION_POLICY, "may change only the condition imex-webhook.io/CapacityReturned")
        _refused(status("waiting", {"status": {"conditions": [{"type": "PodScheduled", "$patch": "delete"}]}}),
                 CONDITION_POLICY, "may change only the condition imex-webhook.io/CapacityReturned")
        _refused(status("waiting", {"metadata": {"labels": {"app": "other"}}}),
                 CONDITION_POLICY, "may not change a pod's labels, annotations or other metadata")
        _refused(status("waiting", {"metadata": {"annotations": {"x": "y"}}}),
                 CONDITION_POLICY, "may not change a pod's labels, annotations or other metadata")
        # Through the pod itself: the segment label only (not a finalizer that would hold the pod forever).
        _refused(lambda: _patch(webhook, "Pod", ns, "waiting", {"metadata": {"finalizers": ["example.com/hold"]}}),
                 SEGMENT_POLICY, "may not change a pod's metadata")

        def node(body: Mapping[str, Any]) -> Callable[[], object]:
            return lambda: _patch(webhook, "Node", None, probe_node, body)

        _refused(node({"spec": {"taints": [{"key": "example.com/evict", "effect": "NoExecute"}]}}),
                 DOMAIN_POLICY, "may not change a node's spec")
        _refused(node({"spec": {"unschedulable": True}}), DOMAIN_POLICY, "may not change a node's spec")
        _refused(node({"metadata": {"labels": {keys.CLIQUE_LABEL: f"{uuid.uuid4()}.2"}}}),
                 DOMAIN_POLICY, "may change only the label imex-webhook.io/domain of a node")
        _refused(node({"metadata": {"labels": {"kubernetes.io/os": None}}}),
                 DOMAIN_POLICY, "may change only the label imex-webhook.io/domain of a node")
        _refused(node({"metadata": {"annotations": {"example.com/note": "x"}}}),
                 DOMAIN_POLICY, "may not change a node's annotations")

        for name, before in pods_before.items():
            after = admin.get("Pod", ns, name)
            assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], name
        assert _conditions(admin.get("Pod", ns, "running"))["Ready"]["status"] == "True"
        assert admin.get("Node", None, probe_node)["metadata"]["resourceVersion"] == \
            node_before["metadata"]["resourceVersion"]

        # -- the policies match the webhook's account alone -----------------------------------------------
        admin.merge_patch("Node", None, probe_node, {"spec": {"unschedulable": True}})
        admin.merge_patch("Pod", ns, "running", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
                          sub="status", strategic=True)
        real_cluster.set_phase(ns, "waiting", "Failed")
        assert admin.get("Pod", ns, "waiting")["status"]["phase"] == "Failed"
        print(f"\nrbac scenario: {time.monotonic() - started:.1f} s")
    finally:
        for left in admin.list("Pod", ns):  # a finalizer that got through must not hold the namespace's pods
            if left["metadata"].get("finalizers"):
                admin.merge_patch("Pod", ns, left["metadata"]["name"], {"metadata": {"finalizers": None}})
        real_cluster.cleanup(ns)
        admin.delete("Node", None, probe_node)
