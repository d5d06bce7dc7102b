"""The node domain labeller against the fake API server over real HTTP: ``imex-webhook.io/domain`` on
every Node says the node's domain, so the pod affinity the webhook adds can be satisfied on cliques and
fabric zones alike.

Covered: the first list labels every node with a domain (clique first, then fabric zone) and removes a
stale label from a node without one; a node that gains or loses its clique label follows; a node with a
malformed label is skipped and counted while the others and the cache go on; 500 and 429 replies are
retried with back-off, 409 replies make it read the node again, and either way the label ends right; a
403 is given up and counted; writes are merge patches guarded by the resourceVersion; two labellers at
once (two replicas) converge with one write per node and no flapping; ``serve --kubeconfig`` runs it and
counts it in /metrics, and its ClusterRole allows it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import kmock
import pytest
import yaml
from kubernetes.client import ApiClient

from tests import builders, serving
from tests.kubefake import KubeFake, eventually
from webhook.adapters.kube import backend as kube
from webhook.adapters.kube.api import Api, call_timeout, load_configuration
from webhook.adapters.kube.node_labels import LabellerSettings, NodeDomainLabeller
from webhook.adapters.kube.watch import Watcher
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.policy import Policy
from webhook.state.cluster import ClusterStore
from webhook.wire.kinds import NODES

DOMAIN = keys.DOMAIN_LABEL
FAST = LabellerSettings(backoff_first=0.02, backoff_max=0.2, conflict_first=0.01)
CLIQUE = demo.clique_value("gb200-a")


class Running:
    """One labeller fed by its own Node watcher (as KubeBackend wires it), and a cache beside it."""

    def __init__(self, kubeconfig: Path, settings: LabellerSettings = FAST) -> None:
        self.api = Api(ApiClient(load_configuration(str(kubeconfig), False)), call_timeout(5.0))
        self.store = ClusterStore(Policy())
        self.labeller = NodeDomainLabeller(self.api, Policy(), settings)
        self.stopping = threading.Event()
        self.watcher = Watcher(self.api, NODES, self.labeller.tee(self.store), self.stopping)

    def start(self) -> Running:
        self.labeller.start()
        self.watcher.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.watcher.interrupt()
        self.watcher.join(5)
        self.labeller.stop()
        self.api.close()

    def count(self, outcome: str) -> float:
        return self.labeller.counter.labels(outcome)._value.get()  # type: ignore[no-any-return]


@pytest.fixture
def labellers(kubeconfig: Path) -> Iterator[Callable[..., Running]]:
    made: list[Running] = []

    def make(settings: LabellerSettings = FAST) -> Running:
        running = Running(kubeconfig, settings).start()
        made.append(running)
        return running

    yield make
    for running in made:
        running.stop()


def _label(fake: KubeFake, node: str) -> str | None:
    obj = fake.get("nodes", None, node) or {}
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(DOMAIN)
    return value if isinstance(value, str) else None


def _labels_settle(fake: KubeFake, expected: dict[str, str | None], timeout: float = 5.0) -> None:
    eventually(lambda: {n: _label(fake, n) for n in expected} == expected, timeout,
               what=f"labels {expected}")


def _expected_from_demo() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for node in demo.nodes():
        labels = node["metadata"]["labels"]
        out[node["metadata"]["name"]] = labels.get(keys.CLIQUE_LABEL) or labels.get(keys.FABRIC_ZONE_LABEL)
    return out


def _flaky(fake: KubeFake, method: str, status: int, reason: str, times: int) -> list[int]:
    """Answer the next ``times`` such requests on nodes with this error, then serve them as usual."""
    left = [times]

    def answer() -> None:
        if left[0] > 0:
            left[0] -= 1
            raise kmock.KubernetesError(status=status, reason=reason, message=f"injected {status}", details={})
    fake._react(method, "nodes", None, answer)
    return left


def test_the_first_list_labels_every_node_with_its_domain_and_clears_stale_labels(
        fake: KubeFake, labellers: Callable[..., Running]) -> None:
    fake.seed(demo.objects())
    fake.create("nodes", builders.node("stale", gpus=8))
    fake.patch("nodes", None, "stale", {"metadata": {"labels": {DOMAIN: "old.1"}}})
    fake.create("nodes", builders.node("empty-clique", gpus=4, zone="pcie-pool-1"))
    fake.patch("nodes", None, "empty-clique", {"metadata": {"labels": {keys.CLIQUE_LABEL: ""}}})
    running = labellers()
    expected = {**_expected_from_demo(), "stale": None, "empty-clique": "pcie-pool-1"}
    _labels_settle(fake, expected)
    assert expected["gb200-a-00"] == CLIQUE and expected["fab-00"] == demo.FABRIC_ZONE
    assert expected["hgx-00"] is None
    # The counters move just after the API server answers: wait for them too.
    eventually(lambda: running.count("set") == sum(1 for v in expected.values() if v)
               and running.count("removed") == 1, what="counted")
    assert running.count("removed") == 1 and running.labeller.pending() == {}
    # The cache beside it saw every node, labelled or not, and the label changes no domain.
    snapshot = running.store.snapshot()
    assert snapshot.nodes["fab-00"].domain == demo.FABRIC_ZONE and snapshot.nodes["stale"].domain is None


def test_a_node_that_gains_or_loses_its_clique_label_follows(fake: KubeFake,
                                                             labellers: Callable[..., Running]) -> None:
    fake.create("nodes", builders.node("n1", gpus=4, zone="pcie-pool-1"))
    running = labellers()
    _labels_settle(fake, {"n1": "pcie-pool-1"})
    fake.patch("nodes", None, "n1", {"metadata": {"labels": {keys.CLIQUE_LABEL: CLIQUE}}})
    _labels_settle(fake, {"n1": CLIQUE})  # the clique label comes first among the domain labels
    fake.patch("nodes", None, "n1", {"metadata": {"labels": {keys.CLIQUE_LABEL: None}}})
    _labels_settle(fake, {"n1": "pcie-pool-1"})
    fake.patch("nodes", None, "n1", {"metadata": {"labels": {keys.FABRIC_ZONE_LABEL: None}}})
    _labels_settle(fake, {"n1": None})
    eventually(lambda: DOMAIN not in fake.get("nodes", None, "n1")["metadata"]["labels"], what="label removed")
    fake.delete("nodes", None, "n1")
    eventually(lambda: running.labeller.pending() == {}, what="nothing left to do")
    eventually(lambda: (running.count("set"), running.count("removed")) == (3, 1), what="counted")


def test_a_malformed_node_is_skipped_and_counted_and_the_rest_goes_on(fake: KubeFake,
                                                                      labellers: Callable[..., Running]) -> None:
    fake.create("nodes", {"metadata": {"name": "bad", "labels": {keys.CLIQUE_LABEL: 5}}})
    fake.create("nodes", builders.node("good", gpus=4, domain=CLIQUE))
    running = labellers()
    _labels_settle(fake, {"good": CLIQUE})
    assert running.count("malformed") >= 1 and _label(fake, "bad") is None
    fake.create("nodes", builders.node("later", gpus=4, zone="z"))  # the watch goes on
    _labels_settle(fake, {"later": "z"})
    assert running.store.rejected >= 1 and "later" in running.store.snapshot().nodes


@pytest.mark.parametrize(("status", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable"),
                                                (429, "TooManyRequests")])
def test_server_errors_on_the_patch_are_retried_with_back_off(fake: KubeFake, labellers: Callable[..., Running],
                                                               status: int, reason: str) -> None:
    fake.create("nodes", builders.node("n1", gpus=4, domain=CLIQUE))
    left = _flaky(fake, "patch", status, reason, times=3)
    running = labellers()
    _labels_settle(fake, {"n1": CLIQUE})
    eventually(lambda: running.count("set") == 1, what="counted")
    assert left == [0] and running.count("retry") == 3


def test_a_409_on_the_patch_reads_the_node_again_and_ends_right(fake: KubeFake,
                                                                 labellers: Callable[..., Running]) -> None:
    fake.create("nodes", builders.node("n1", gpus=4, domain=CLIQUE))
    left = _flaky(fake, "patch", 409, "Conflict", times=2)
    running = labellers()
    _labels_settle(fake, {"n1": CLIQUE})
    eventually(lambda: running.count("set") == 1, what="counted")
    assert left == [0] and running.count("conflict") == 2
    assert fake.requests("fetch", "nodes") >= 2  # re-read after each conflict


def test_a_write_decided_on_an_old_view_is_refused_not_applied(fake: KubeFake, kubeconfig: Path) -> None:
    # The watch is behind: the labeller decides on resourceVersion N, the node has moved on (it gained a
    # clique label). The guarded patch gets 409; the labeller reads the node and writes the new answer.
    fake.create("nodes", builders.node("n1", gpus=4, zone="pcie-pool-1"))
    stale = fake.get("nodes", None, "n1")
    fake.patch("nodes", None, "n1", {"metadata": {"labels": {keys.CLIQUE_LABEL: CLIQUE}}}, emit=False)
    running = Running(kubeconfig)
    try:
        running.labeller.start()
        running.labeller.apply("Node", "MODIFIED", stale)  # as a lagging watch would deliver it
        _labels_settle(fake, {"n1": CLIQUE})
        eventually(lambda: running.count("set") == 1, what="counted")
        assert running.count("conflict") == 1
    finally:
        running.stop()


def test_a_forbidden_patch_is_given_up_and_counted(fake: KubeFake, labellers: Callable[..., Running],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    fake.fail("patch", "nodes", 403, "Forbidden", 'nodes "n1" is forbidden')
    fake.create("nodes", builders.node("n1", gpus=4, domain=CLIQUE))
    running = labellers()
    eventually(lambda: running.count("failed") == 1, what="given up")
    time.sleep(0.2)
    assert running.count("failed") == 1 and running.labeller.pending() == {}
    assert 'needs verb "patch" on "nodes"' in caplog.text


def test_two_labellers_converge_with_one_write_per_node_and_no_flapping(
        fake: KubeFake, labellers: Callable[..., Running]) -> None:
    fake.seed(demo.objects())
    a, b = labellers(), labellers()
    expected = _expected_from_demo()
    _labels_settle(fake, expected, timeout=10)
    wanted = sum(1 for v in expected.values() if v)
    # Each node written once, by one of them (the counters move just after the API server answers).
    eventually(lambda: a.count("set") + b.count("set") == wanted, what="one write per node")
    eventually(lambda: a.labeller.pending() == b.labeller.pending() == {}, what="both idle")
    # A change while both run: again exactly one write, and then quiet.
    fake.patch("nodes", None, "fab-01", {"metadata": {"labels": {keys.CLIQUE_LABEL: CLIQUE}}})
    _labels_settle(fake, {"fab-01": CLIQUE})
    eventually(lambda: a.labeller.pending() == b.labeller.pending() == {}, what="both idle again")
    eventually(lambda: a.count("set") + b.count("set") == wanted + 1, what="one more write")
    version = fake.get("nodes", None, "fab-01")["metadata"]["resourceVersion"]
    patches = fake.requests("update", "nodes")
    time.sleep(0.5)
    assert fake.get("nodes", None, "fab-01")["metadata"]["resourceVersion"] == version
    assert fake.requests("update", "nodes") == patches
    assert a.count("set") + b.count("set") == wanted + 1
    assert a.count("failed") == b.count("failed") == 0


def test_the_backend_runs_it_only_when_asked(fake: KubeFake, kubeconfig: Path) -> None:
    fake.create("nodes", builders.node("n1", gpus=4, domain=CLIQUE))
    plain = kube.connect(str(kubeconfig), False, ClusterStore(Policy()), "plain")
    labelling = kube.connect(str(kubeconfig), False, ClusterStore(Policy()), "labelling", label_nodes=True)
    try:
        assert plain.node_labels is None and labelling.node_labels is not None
        plain.start()
        eventually(lambda: plain.ready()[0], what="plain synced")
        time.sleep(0.2)
        assert _label(fake, "n1") is None
        labelling.start()
        _labels_settle(fake, {"n1": CLIQUE})
        eventually(lambda: labelling.store.snapshot().nodes["n1"].domain == CLIQUE, what="cache fed through the tee")
    finally:
        plain.stop()
        labelling.stop()


def test_serve_on_the_api_server_labels_nodes_and_counts_it(fake: KubeFake, kubeconfig: Path,
                                                            tmp_path: Path) -> None:
    fake.seed(demo.objects())
    with serving.serve(tmp_path, "--kubeconfig", str(kubeconfig)) as served:
        _labels_settle(fake, _expected_from_demo(), timeout=15)
        metrics = served.get("/metrics").text
        assert 'imex_webhook_node_domain_labels_total{outcome="set"}' in metrics


def test_the_webhook_cluster_role_may_patch_nodes() -> None:
    manifests = Path(__file__).parents[3] / "manifests" / "rbac-webhook.yaml"
    (role,) = [d for d in yaml.safe_load_all(manifests.read_text())
               if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "imex-webhook"]
    assert any("" in r["apiGroups"] and "nodes" in r["resources"] and "patch" in r["verbs"] for r in role["rules"])
