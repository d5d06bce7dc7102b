"""Admission next to Kubernetes 1.37's topology-aware workload scheduling (KEP-5732, docs/GROUPS.md): a pod
whose PodGroup already keeps its pods within one value of a domain label gets no pod affinity of ours (and an
annotation saying why), and every other pod gets it as before; PodGroup topology constraints are read in
each served version's shape, and hostile ones are a ``WireError`` naming the field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests import admission_support as support
from tests import builders
from tests import controller_objects as co
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.domain.admission.mutating import MutationResult
from webhook.domain.model import GangGroup
from webhook.domain.policy import Policy
from webhook.domain.reading import workload_parsing
from webhook.errors import WireError

Obj = dict[str, Any]
GPU = co.pod_spec(claim_template=co.GPU_TEMPLATE)
CLIQUE = "aaaa-1111.7"
RACK_LABEL = "topology.kubernetes.io/rack"
OWN_LABEL = "example.com/nvl-domain"  # an operator's own --domain-label
POLICY = Policy()


def _pod_group(keys_: list[str] | None, version: str = "v1beta1") -> Obj:
    pg = co.pod_group_object("pg", {"gang": {"minCount": 2}}, version=version)
    if keys_ is not None:
        pg["spec"]["schedulingConstraints"] = (
            {"topologyConstraints": [{"topologyKey": k} for k in keys_]} if version == "v1alpha2"
            else {"topology": [{"key": k} for k in keys_]})
    return pg


def _mutate(pod: Obj, pod_group: Obj | None, policy: Policy = POLICY) -> MutationResult:
    objects = [*builders.rack("a", CLIQUE, 4), co.gpu_claim_template(), *([pod_group] if pod_group else [])]
    snap = builders.snapshot(objects, policy=policy)
    return mutating.mutate(copy.deepcopy(pod), co.NS, snap.catalog, snap.nodes, policy)


def _patched(pod: Obj, result: MutationResult) -> Obj:
    return support.apply(pod, json.loads(json.dumps(list(result.patch))))


def _our_affinity_terms(pod: Obj) -> list[Obj]:
    terms = pod["spec"].get("affinity", {}).get("podAffinity", {}) \
        .get("requiredDuringSchedulingIgnoredDuringExecution", [])
    return [t for t in terms if keys.GROUP_LABEL in t.get("labelSelector", {}).get("matchLabels", {})]


@pytest.mark.parametrize(("topology", "version", "policy", "left_out"), [
    pytest.param([keys.CLIQUE_LABEL], "v1beta1", Policy(), True, id="clique label"),
    pytest.param([keys.DOMAIN_LABEL], "v1beta1", Policy(), True, id="our domain label"),
    pytest.param([keys.FABRIC_ZONE_LABEL], "v1beta1", Policy(), True, id="fabric zone label"),
    pytest.param([OWN_LABEL], "v1beta1", Policy(domain_labels=(OWN_LABEL,)), True, id="configured domain label"),
    pytest.param([keys.CLIQUE_LABEL], "v1alpha3", Policy(), True, id="clique label, v1alpha3"),
    pytest.param([keys.CLIQUE_LABEL], "v1alpha2", Policy(), True, id="clique label, 1.36 v1alpha2 shape"),
    pytest.param(None, "v1beta1", Policy(), False, id="no constraint"),
    pytest.param([], "v1beta1", Policy(), False, id="empty topology list"),
    pytest.param([RACK_LABEL], "v1beta1", Policy(), False, id="another label"),
    pytest.param([OWN_LABEL], "v1beta1", Policy(), False, id="a label that is no domain label here"),
    pytest.param([RACK_LABEL, keys.CLIQUE_LABEL], "v1beta1", Policy(), False,
                 id="a domain label second: kube-scheduler applies only the first"),
])
def test_our_pod_affinity_is_left_out_only_when_the_pod_group_constrains_a_domain_label(
        topology: list[str] | None, version: str, policy: Policy, left_out: bool) -> None:
    pod = co.pod_in_group("p", "pg", GPU)
    result = _mutate(pod, _pod_group(topology, version), policy)
    assert (result.allowed, result.outcome, result.group_id) == (True, "mutated", "podgroup:ml/pg")
    patched = _patched(pod, result)
    label = mutating.group_label_value("podgroup:ml/pg")
    annotations = patched["metadata"]["annotations"]
    if left_out:
        assert _our_affinity_terms(patched) == []
        assert annotations[keys.UPSTREAM_TOPOLOGY_ANNOTATION] == \
            f"PodGroup pg constrains topology to {topology[0]}; imex-webhook's pod affinity left out"  # type: ignore[index]
        # Everything grouping and the extender need is still there.
        assert patched["metadata"]["labels"][keys.GROUP_LABEL] == label
        assert annotations[mutating.GROUP_ID_ANNOTATION] == "podgroup:ml/pg"
        assert patched["spec"]["schedulerName"] == support.SCHEDULER
        (term,) = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert term["matchExpressions"] == [{"key": support.TOPOLOGY_KEY, "operator": "Exists"}]
    else:
        support.assert_kept_in_domain(patched, label)
        assert keys.UPSTREAM_TOPOLOGY_ANNOTATION not in annotations
    assert _mutate(patched, _pod_group(topology, version), policy).patch == ()  # reinvocation adds nothing


def test_a_compute_domain_pod_whose_pod_group_constrains_the_clique_gets_no_pod_affinity() -> None:
    pod = co.pod_in_group("p", "pg", co.pod_spec(cd="train"))
    snap = builders.snapshot([*builders.rack("a", CLIQUE, 4), *builders.cd_objects("train", 2),
                              _pod_group([keys.CLIQUE_LABEL])])
    result = mutating.mutate(copy.deepcopy(pod), co.NS, snap.catalog, snap.nodes, POLICY)
    assert result.allowed and result.group_id == f"cd:{builders.cd_uid('train')}"
    patched = _patched(pod, result)
    assert _our_affinity_terms(patched) == []
    assert keys.UPSTREAM_TOPOLOGY_ANNOTATION in patched["metadata"]["annotations"]


@pytest.mark.parametrize("pod_group", [
    pytest.param(None, id="not cached yet"),
    pytest.param(_pod_group(None) | {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                                              "schedulingConstraints": {"topology": "clique"}}},
                 id="refused by the cache"),
])
def test_a_pod_group_the_cache_lacks_leaves_the_pod_deferred_without_the_annotation(pod_group: Obj | None) -> None:
    pod = co.pod_in_group("p", "pg", GPU)
    result = _mutate(pod, pod_group)
    assert result.reason == "group-deferred"
    assert keys.UPSTREAM_TOPOLOGY_ANNOTATION not in _patched(pod, result)["metadata"].get("annotations", {})


def test_a_stale_annotation_is_replaced_with_the_decision() -> None:
    pod = co.pod_in_group("p", "pg", GPU)
    pod["metadata"]["annotations"][keys.UPSTREAM_TOPOLOGY_ANNOTATION] = "written by hand"
    patched = _patched(pod, _mutate(pod, _pod_group([keys.CLIQUE_LABEL])))
    assert patched["metadata"]["annotations"][keys.UPSTREAM_TOPOLOGY_ANNOTATION].startswith("PodGroup pg ")


@pytest.mark.parametrize(("version", "constraints", "expected"), [
    ("v1beta1", {"topology": [{"key": keys.CLIQUE_LABEL}]}, (keys.CLIQUE_LABEL,)),
    ("v1alpha3", {"topology": [{"key": RACK_LABEL}]}, (RACK_LABEL,)),
    ("v1alpha2", {"topologyConstraints": [{"topologyKey": keys.CLIQUE_LABEL}]}, (keys.CLIQUE_LABEL,)),
    ("v1beta1", {}, ()),
    ("v1beta1", {"topology": None}, ()),
    ("v1beta1", {"topology": [{"key": keys.CLIQUE_LABEL}], "later": {"x": {"x": {}}}}, (keys.CLIQUE_LABEL,)),
])
def test_pod_group_topology_keys_are_read_in_each_versions_shape(version: str, constraints: Obj,
                                                                 expected: tuple[str, ...]) -> None:
    pg = co.pod_group_object("pg", {"gang": {"minCount": 2}}, version=version)
    pg["spec"]["schedulingConstraints"] = constraints
    assert workload_parsing.pod_group(pg) == GangGroup("ml", "pg", gang=True, min_count=2, topology_keys=expected)


def _nested(levels: int) -> Obj:
    node: Obj = {}
    for _ in range(levels):
        node = {"key": node}
    return node


@pytest.mark.parametrize(("constraints", "field", "why"), [
    ("clique", "spec.schedulingConstraints", "expected an object"),
    ({"topology": {"key": keys.CLIQUE_LABEL}}, "spec.schedulingConstraints.topology", "expected a list"),
    ({"topology": [keys.CLIQUE_LABEL]}, r"spec.schedulingConstraints.topology\[0\]", "expected an object"),
    ({"topology": [{"key": 5}]}, r"topology\[0\]\.key", "expected a string"),
    ({"topology": [{"key": ["a"]}]}, r"topology\[0\]\.key", "expected a string"),
    ({"topology": [{}]}, r"topology\[0\]\.key", "missing"),
    ({"topology": [{"key": ""}]}, r"topology\[0\]\.key", "missing"),
    ({"topology": [{"key": "k" * 400}]}, r"topology\[0\]\.key", "longer than 317"),
    ({"topology": [{"key": keys.CLIQUE_LABEL}] * 100_000}, r"schedulingConstraints\.topology",
     "100000 topology constraints"),
    ({"topology": [{"key": keys.CLIQUE_LABEL}] * 9}, r"schedulingConstraints\.topology", "at most 8"),
    ({"topology": [_nested(100_000)]}, r"topology\[0\]\.key", "expected a string"),
    ({"topologyConstraints": [{"topologyKey": 1}]}, r"topologyConstraints\[0\]\.topologyKey", "expected a string"),
])
def test_a_hostile_topology_constraint_is_a_wire_error_naming_the_field(constraints: Any, field: str,
                                                                        why: str) -> None:
    pg = co.pod_group_object("pg", {"gang": {"minCount": 2}})
    pg["spec"]["schedulingConstraints"] = constraints
    with pytest.raises(WireError, match=field) as error:
        workload_parsing.pod_group(pg)
    assert why in str(error.value)
