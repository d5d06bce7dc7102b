"""Properties of ``mutating.mutate`` over random pod shapes (hypothesis).

Shapes: random labels and annotations whose keys contain ``/`` and ``~``; metadata, labels, annotations,
affinity sections and claim lists absent, null or empty; existing pod affinity lists and 0..3 node selector
terms of every kind (expressions, fields only, empty, already holding our expression); any
schedulerName; claims on demo ComputeDomain templates, unknown templates and unknown claims; group and
group-size annotations, consistent or not; a group label already set; nodeName on a domain node, a
node outside any domain, or an unknown node.

Properties: ``mutate`` never raises and never changes its input; a denial has a message and no patch;
every patch applies with ``jsonpatch`` and the result decodes as a ``V1Pod`` that keeps the group in
one domain, with ``imex-webhook.io/domain`` as the topology key and node requirement (never the clique
label, which fabric-zone nodes lack); a pod with claims or the group annotation whose group is unknown
is still sent to the imex scheduler and marked; a pod with neither is never patched; running
``mutate`` on the result gives the same verdict and an empty patch.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import admission_support as support
from webhook.demo import cluster as demo
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.domain.policy import Policy

POLICY = Policy()
ABSENT = object()  # a key left out of the object altogether

key_text = st.text(alphabet="ab/~.-_", min_size=1, max_size=6)
string_map = st.dictionaries(key_text, st.text(alphabet="xyz-", max_size=4), max_size=3)
CD_NAMES = ("train-8", "train-16", "elastic")


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The value, or the key absent, or null."""
    return st.one_of(st.just(ABSENT), st.none(), strategy)


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value is not ABSENT:
        target[key] = value


known_template = st.sampled_from(CD_NAMES).map(lambda cd: {"resourceClaimTemplateName": demo.template_name(cd)})
claims = st.lists(st.one_of(
    known_template, known_template, known_template,
    st.just({"resourceClaimTemplateName": "not-cached-yet"}),
    st.just({"resourceClaimName": "unknown-claim"}),
), min_size=1, max_size=3).map(lambda cs: [{"name": f"c{i}", **c} for i, c in enumerate(cs)])

group_annotations = st.fixed_dictionaries({}, optional={
    keys.GROUP_ANNOTATION: st.sampled_from(["job-a", "train-8", demo.uid("cd", "ml", "train-8"), " ", "a/b c"]),
    keys.GROUP_SIZE_ANNOTATION: st.sampled_from(["3", "0", "eight", "²", "-1", "1e3", "9" * 5000]),
    keys.MUTATED_ANNOTATION: st.just("v0"),
    mutating.GROUP_ID_ANNOTATION: st.just("stale"),
})

expression = st.one_of(
    st.just({"key": keys.CLIQUE_LABEL, "operator": "Exists"}),
    st.just({"key": keys.DOMAIN_LABEL, "operator": "Exists"}),
    st.just({"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}),
    st.just({"key": keys.CLIQUE_LABEL, "operator": "In", "values": ["a.1"]}),
)
node_term = st.fixed_dictionaries({}, optional={
    "matchExpressions": st.one_of(st.none(), st.lists(expression, max_size=2)),
    "matchFields": st.one_of(st.none(), st.lists(st.just(
        {"key": "metadata.name", "operator": "In", "values": ["gb200-a-01"]}), max_size=1)),
})
pod_term = st.fixed_dictionaries({
    "labelSelector": st.fixed_dictionaries({"matchLabels": string_map}),
    "topologyKey": st.sampled_from([keys.CLIQUE_LABEL, keys.DOMAIN_LABEL, "kubernetes.io/hostname"]),
})
node_affinity = st.fixed_dictionaries({}, optional={
    "requiredDuringSchedulingIgnoredDuringExecution": st.one_of(
        st.none(), st.fixed_dictionaries({"nodeSelectorTerms": st.lists(node_term, max_size=3)})),
    "preferredDuringSchedulingIgnoredDuringExecution": st.just(
        [{"weight": 1, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]}}]),
})
pod_affinity = st.fixed_dictionaries({}, optional={
    "requiredDuringSchedulingIgnoredDuringExecution": st.one_of(st.none(), st.lists(pod_term, max_size=2)),
})
affinity = st.fixed_dictionaries({}, optional={
    "podAffinity": st.one_of(st.none(), pod_affinity),
    "nodeAffinity": st.one_of(st.none(), node_affinity),
    "podAntiAffinity": st.just({"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}),
})


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod"}
    if draw(st.integers(0, 3)):
        meta: dict[str, Any] = {}
        labels = draw(_maybe(string_map))
        if labels not in (ABSENT, None) and draw(st.booleans()):
            labels[keys.GROUP_LABEL] = draw(st.sampled_from(
                [mutating.group_label_value(f"cd:{demo.uid('cd', 'ml', 'train-8')}"), "someone-else"]))
        _put(meta, "labels", labels)
        annotations = draw(_maybe(string_map))
        if annotations not in (ABSENT, None):
            annotations.update(draw(group_annotations))
        _put(meta, "annotations", annotations)
        _put(meta, "generateName", draw(st.sampled_from([ABSENT, "w-"])))
        pod["metadata"] = meta
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    shape = draw(st.sampled_from(["list", "list", "list", "absent", "null", "empty"]))
    no_claims = {"absent": ABSENT, "null": None, "empty": []}
    _put(spec, "resourceClaims", draw(claims) if shape == "list" else no_claims[shape])
    _put(spec, "affinity", draw(_maybe(affinity)))
    _put(spec, "schedulerName", draw(st.sampled_from(
        [ABSENT, "default-scheduler", "imex-scheduler", "volcano", ""])))
    _put(spec, "nodeName", draw(st.sampled_from([ABSENT, ABSENT, "gb200-a-03", "hgx-00", "nowhere-1"])))
    pod["spec"] = spec
    return pod


def _mutate(obj: dict[str, Any]) -> mutating.MutationResult:
    snap = support.demo_snapshot()
    return mutating.mutate(obj, "ml", snap.catalog, snap.nodes, POLICY)


def _scheduler_after(obj: dict[str, Any]) -> str:
    current = obj["spec"].get("schedulerName")
    return "imex-scheduler" if current in (None, "", "default-scheduler") else str(current)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods())
def test_any_pod_gets_a_verdict_whose_patch_applies_decodes_and_is_idempotent(obj: dict[str, Any]) -> None:
    before = copy.deepcopy(obj)
    result = _mutate(obj)
    assert obj == before
    if not result.allowed:
        assert result.message and result.patch == () and result.outcome == "denied"
        return
    patched = support.apply(obj, list(result.patch))
    pod = support.v1pod(patched)
    if result.group_id is not None:
        label = mutating.group_label_value(result.group_id)
        support.assert_kept_in_domain(patched, label, _scheduler_after(obj))
        assert pod.metadata.annotations[mutating.GROUP_ID_ANNOTATION]
        ours = [t for t in pod.spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution
                if t.label_selector.match_labels == {keys.GROUP_LABEL: label}]
        assert keys.DOMAIN_LABEL in {t.topology_key for t in ours}
        assert all(op["value"]["key"] != keys.CLIQUE_LABEL for op in result.patch
                   if isinstance(op["value"], dict) and "key" in op["value"])
    elif mutating.might_be_group(obj):
        # Not resolved at admission: still kept away from default-scheduler, and marked.
        assert {op["path"] for op in result.patch} <= {"/spec/schedulerName", "/metadata", "/metadata/annotations",
                                                       "/metadata/annotations/imex-webhook.io~1mutated"}
        if result.reason == "group-deferred":
            assert pod.spec.scheduler_name == _scheduler_after(obj)
            assert pod.metadata.annotations[keys.MUTATED_ANNOTATION]
    else:
        assert result.patch == ()
    again = _mutate(patched)
    assert (again.allowed, again.group_id, again.patch) == (True, result.group_id, ())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_any_annotation_value_gives_a_valid_label_value(value: str) -> None:
    label = mutating.group_label_value(f"ann:ml/{value}")
    assert len(label) <= 63
    assert label[0].isascii() and label[0].isalnum() and label[-1].isascii() and label[-1].isalnum()
    assert all(c.isascii() and (c.isalnum() or c in "-_.") for c in label)
