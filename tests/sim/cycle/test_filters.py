"""The emulator's in-tree filters, each rule against a case computed by hand from kube-scheduler's code.

Covered: nodeSelector and required node affinity (In, NotIn, Exists, DoesNotExist, Gt, Lt, matchFields
on metadata.name, ORed terms, empty and malformed terms), taints and tolerations (NoSchedule, NoExecute,
PreferNoSchedule, Equal/Exists, empty key), cordoned nodes, NodeResourcesFit (requests, limits as
defaulted requests, the init-container maximum, sidecars, overhead, pod-level requests, extended
resources, ``ignoredResources`` and ``ignoredResourceGroups``, "Too many pods", resolvable vs not), and
the order in which plugins report.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.cycle import objects as o
from webhook.sim.cycle import SchedulerConfig, parse_cluster
from webhook.sim.cycle.cluster import node_infos
from webhook.sim.cycle.filters import filter_node, prefilter
from webhook.sim.cycle.model import parse_pod
from webhook.sim.cycle.status import UNRESOLVABLE, UNSCHEDULABLE, Status

MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TAINTED = "node(s) had untolerated taint(s)"
CORDONED = "node(s) were unschedulable"


def verdict(pod_raw: dict[str, Any], node_raw: dict[str, Any], bound: tuple[dict[str, Any], ...] = (),
            config: SchedulerConfig | None = None) -> tuple[str, str] | None:
    """(code, reasons) the filters give the one node, or ``None`` when the pod fits."""
    cluster = parse_cluster([node_raw], list(bound))
    infos = node_infos(cluster)
    ctx = prefilter(parse_pod(pod_raw), cluster, config or o.config(), infos)
    assert not isinstance(ctx, Status)
    status, _ = filter_node(ctx, infos[0])
    return None if status is None else (status.code, status.message)


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                          {"nodeSelectorTerms": list(terms)}}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    term: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        term["values"] = list(values)
    return {"matchExpressions": [term]}


RACK = {"rack": "a", "gen": "8"}
FAIL = (UNRESOLVABLE, MISMATCH)


@pytest.mark.parametrize(("spec", "expected"), [
    pytest.param({"nodeSelector": {"rack": "a"}}, None, id="a nodeSelector the node's labels satisfy passes"),
    pytest.param({"nodeSelector": {"rack": "b"}}, FAIL, id="a nodeSelector with another value fails"),
    pytest.param({"nodeSelector": {}}, None, id="an empty nodeSelector selects every node"),
    pytest.param(required(expr("rack", "In", "b", "a")), None, id="In passes when the value is listed"),
    pytest.param(required(expr("rack", "In", "b")), FAIL, id="In fails when the value is not listed"),
    pytest.param(required(expr("zone", "In", "z")), FAIL, id="In fails on a node lacking the label"),
    pytest.param(required(expr("zone", "NotIn", "z")), None, id="NotIn passes on a node lacking the label"),
    pytest.param(required(expr("rack", "NotIn", "a")), FAIL, id="NotIn fails when the value is listed"),
    pytest.param(required(expr("rack", "Exists")), None, id="Exists passes when the label is there"),
    pytest.param(required(expr("zone", "Exists")), FAIL, id="Exists fails when the label is missing"),
    pytest.param(required(expr("zone", "DoesNotExist")), None, id="DoesNotExist passes when the label is missing"),
    pytest.param(required(expr("gen", "Gt", "7")), None, id="Gt compares the label as an integer: 8 > 7"),
    pytest.param(required(expr("gen", "Gt", "8")), FAIL, id="Gt is strict: 8 is not > 8"),
    pytest.param(required(expr("gen", "Lt", "10")), None, id="Lt compares as integers, not strings: 8 < 10"),
    pytest.param(required(expr("rack", "Gt", "1")), FAIL, id="Gt fails when the label is not an integer"),
    pytest.param(required(expr("gen", "Gt", "1", "2")), FAIL, id="a Gt with two values does not parse: no match"),
    pytest.param(required(expr("rack", "Bogus", "a")), FAIL, id="an unknown operator does not parse: no match"),
    pytest.param(required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}), None,
                 id="matchFields metadata.name In names the node"),
    pytest.param(required({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}),
                 FAIL, id="matchFields metadata.name NotIn excludes the node"),
    pytest.param(required(expr("rack", "In", "b"), expr("gen", "In", "8")), None,
                 id="terms are ORed: the second one matching is enough"),
    pytest.param(required({"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]},
                                                {"key": "gen", "operator": "In", "values": ["9"]}]}), FAIL,
                 id="expressions inside one term are ANDed"),
    pytest.param(required({}), FAIL, id="an empty term selects nothing"),
    pytest.param(required(), FAIL, id="a required affinity with no terms selects nothing"),
    pytest.param({**required(expr("rack", "Exists")), "nodeSelector": {"rack": "b"}}, FAIL,
                 id="nodeSelector and node affinity must both hold"),
])
def test_node_affinity_and_selector_rules(spec: dict[str, Any], expected: tuple[str, str] | None) -> None:
    assert verdict(o.pod("p", spec=spec), o.node("n1", labels=RACK)) == expected


NO_SCHEDULE = {"key": "gpu", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize(("taints", "tolerations", "expected"), [
    pytest.param([NO_SCHEDULE], [], (UNRESOLVABLE, TAINTED), id="an untolerated NoSchedule taint rejects"),
    pytest.param([{**NO_SCHEDULE, "effect": "NoExecute"}], [], (UNRESOLVABLE, TAINTED),
                 id="an untolerated NoExecute taint rejects"),
    pytest.param([{**NO_SCHEDULE, "effect": "PreferNoSchedule"}], [], None, id="PreferNoSchedule never rejects"),
    pytest.param([NO_SCHEDULE], [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                 None, id="an Equal toleration with the same value tolerates"),
    pytest.param([NO_SCHEDULE], [{"key": "gpu", "value": "false"}], (UNRESOLVABLE, TAINTED),
                 id="the default operator is Equal: another value does not tolerate"),
    pytest.param([NO_SCHEDULE], [{"key": "gpu", "operator": "Exists"}], None,
                 id="Exists with the key tolerates any value and effect"),
    pytest.param([NO_SCHEDULE], [{"operator": "Exists"}], None, id="Exists with an empty key tolerates everything"),
    pytest.param([NO_SCHEDULE], [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}],
                 (UNRESOLVABLE, TAINTED), id="a toleration for another effect does not tolerate"),
    pytest.param([NO_SCHEDULE], [{"key": "gpu", "operator": "Gt", "value": "0"}], (UNRESOLVABLE, TAINTED),
                 id="Gt tolerations match nothing while their feature gate is off"),
])
def test_taint_toleration_rules(taints: list[dict[str, str]], tolerations: list[dict[str, str]],
                                expected: tuple[str, str] | None) -> None:
    assert verdict(o.pod("p", spec={"tolerations": tolerations}), o.node("n1", taints=taints)) == expected


@pytest.mark.parametrize(("tolerations", "expected"), [
    pytest.param([], (UNRESOLVABLE, CORDONED), id="a cordoned node rejects a pod"),
    pytest.param([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}], None,
                 id="a pod tolerating the unschedulable taint may still go to a cordoned node"),
])
def test_a_cordoned_node(tolerations: list[dict[str, str]], expected: tuple[str, str] | None) -> None:
    assert verdict(o.pod("p", spec={"tolerations": tolerations}), o.node("n1", unschedulable=True)) == expected


def containers(*cpus: str, init: tuple[tuple[str, bool], ...] = ()) -> dict[str, Any]:
    """App containers with these CPU requests, init containers as (cpu, is_sidecar)."""
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "resources": {"requests": {"cpu": c}}}
                                           for i, c in enumerate(cpus)]}
    spec["initContainers"] = [{"name": f"i{i}", "resources": {"requests": {"cpu": c}},
                               **({"restartPolicy": "Always"} if sidecar else {})}
                              for i, (c, sidecar) in enumerate(init)]
    return spec


CPU_SHORT = (UNSCHEDULABLE, "Insufficient cpu")
CPU_NEVER = (UNRESOLVABLE, "Insufficient cpu")


@pytest.mark.parametrize(("spec", "free_cpu", "expected"), [
    pytest.param(containers("1", "1.5"), "2.5", None, id="app containers add up: 2.5 fits 2.5 free"),
    pytest.param(containers("1", "1.6"), "2.5", CPU_SHORT, id="2.6 does not fit 2.5 free"),
    pytest.param(containers("1", init=(("3", False),)), "2.5", CPU_SHORT,
                 id="the largest init container counts when bigger than the app containers: 3 > 2.5"),
    pytest.param(containers("1", init=(("2", False), ("1", False))), "2", None,
                 id="init containers do not add up: max(1, 2, 1) = 2"),
    pytest.param(containers("1", init=(("1", True), ("2", False))), "2.5", CPU_SHORT,
                 id="a sidecar started before an init container runs beside it: 1 + 2 = 3"),
    pytest.param(containers("1", init=(("1", True),)), "2", None,
                 id="a sidecar runs beside the app containers too: 1 + 1 = 2"),
    pytest.param(containers("1", init=(("1.5", True), ("0.5", True))), "2.9", CPU_SHORT,
                 id="sidecars add up with the app containers: 1 + 1.5 + 0.5 = 3"),
    pytest.param({**containers("1"), "overhead": {"cpu": "500m"}}, "1.4", CPU_SHORT,
                 id="pod overhead is added: 1.5 > 1.4"),
    pytest.param({**containers("4"), "resources": {"requests": {"cpu": "1"}}}, "1", None,
                 id="pod-level requests replace the containers' total"),
])
def test_cpu_requests_are_computed_as_kube_scheduler_does(spec: dict[str, Any], free_cpu: str,
                                                           expected: tuple[str, str] | None) -> None:
    # 4 allocatable CPUs, a bound pod takes 4 - free_cpu of them.
    used = f"{4000 - int(float(free_cpu) * 1000)}m"
    bound = o.pod("busy", cpu=used, memory=None, on="n1")
    assert verdict(o.pod("p", spec=spec, memory=None), o.node("n1", cpu="4"), (bound,)) == expected


def test_a_request_larger_than_the_node_is_unresolvable() -> None:
    assert verdict(o.pod("p", cpu="5"), o.node("n1", cpu="4")) == CPU_NEVER


def test_every_insufficient_resource_is_a_reason() -> None:
    assert verdict(o.pod("p", cpu="5", memory="40Gi"), o.node("n1", cpu="4")) == (
        UNRESOLVABLE, "Insufficient cpu, Insufficient memory")


def test_limits_without_requests_are_requests_as_the_api_server_defaults_them() -> None:
    spec = {"containers": [{"name": "c", "resources": {"limits": {"cpu": "3"}}}]}
    assert verdict(o.pod("p", spec=spec), o.node("n1", cpu="2")) == CPU_NEVER


def test_a_full_node_has_too_many_pods() -> None:
    bound = (o.pod("a", on="n1"), o.pod("b", on="n1"))
    assert verdict(o.pod("p"), o.node("n1", pods="2"), bound) == (UNSCHEDULABLE, "Too many pods")


GPU_SHORT = (UNSCHEDULABLE, f"Insufficient {o.GPU}")


@pytest.mark.parametrize(("node_gpus", "used", "config", "expected"), [
    pytest.param(8, 4, o.config(), None, id="4 GPUs fit 4 free"),
    pytest.param(8, 6, o.config(), GPU_SHORT, id="4 GPUs do not fit 2 free"),
    pytest.param(0, 0, o.config(), (UNRESOLVABLE, f"Insufficient {o.GPU}"),
                 id="a node without the extended resource never fits"),
    pytest.param(8, 6, o.config(ignored=[o.GPU]), None, id="ignoredResources leaves the GPU count to the extender"),
    pytest.param(0, 0, o.config(ignored=[o.GPU]), None, id="ignoredResources even where the node has none"),
])
def test_extended_resources(node_gpus: int, used: int, config: SchedulerConfig,
                            expected: tuple[str, str] | None) -> None:
    bound = (o.pod("busy", gpus=used, on="n1"),) if used else ()
    assert verdict(o.pod("p", gpus=4), o.node("n1", gpus=node_gpus), bound, config) == expected


def test_ignored_resource_groups_skip_every_resource_of_the_prefix() -> None:
    raw = {"profiles": [{"pluginConfig": [{"name": "NodeResourcesFit",
                                           "args": {"ignoredResourceGroups": ["nvidia.com"]}}]}]}
    from webhook.sim.cycle import parse_config

    assert verdict(o.pod("p", gpus=4), o.node("n1"), config=parse_config(raw)) is None


def test_the_first_failing_plugin_names_the_node_taints_before_affinity_before_resources() -> None:
    node = o.node("n1", cpu="1", labels=RACK, taints=[NO_SCHEDULE])
    spec = {"nodeSelector": {"rack": "b"}}
    assert verdict(o.pod("p", cpu="2", spec=spec), node) == (UNRESOLVABLE, TAINTED)
    assert verdict(o.pod("p", cpu="2", spec={**spec, "tolerations": [{"operator": "Exists"}]}), node) == FAIL
