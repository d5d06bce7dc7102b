"""What the extender views do per request besides deciding: the pod parsed once per version (and never
served for other content under the same uid and resourceVersion), node names checked with one subset
test, and the /prioritize reply written without a dict per node, byte for byte what orjson writes."""

from __future__ import annotations

import copy
import threading
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import serving
from webhook.domain.placement import candidates
from webhook.domain.reading import parsing
from webhook.errors import WireError
from webhook.http.extender import scores_json
from webhook.http.extender_args import PodCache, node_names


def _pod() -> dict[str, Any]:
    pod: dict[str, Any] = serving.fixture("extender/filter-names-train-8.json")["Pod"]
    return pod


def test_the_same_pod_is_parsed_once_and_served_as_the_same_object() -> None:
    cache = PodCache()
    first = cache.parse(_pod())
    assert cache.parse(_pod()) is first and first == parsing.pod(_pod(), "Pod")


@pytest.mark.parametrize("change", [
    lambda p: p["spec"].update(schedulerName="other"),
    lambda p: p["spec"].update(priority=True),  # equal to 1 in Python, not in JSON
    lambda p: p["metadata"]["labels"].update(x="y"),
])
def test_other_content_under_the_same_uid_and_version_is_parsed_again(change: Any) -> None:
    cache = PodCache()
    pod = _pod()
    pod["spec"]["priority"] = 1
    cache.parse(pod)
    other = copy.deepcopy(pod)
    change(other)
    try:
        want: Any = parsing.pod(other, "Pod")
    except WireError as exc:
        with pytest.raises(WireError, match=str(exc.path).replace(".", r"\.")):
            cache.parse(other)
    else:
        assert cache.parse(other) == want


def test_a_malformed_pod_is_refused_every_time_and_never_kept() -> None:
    cache = PodCache()
    bad = _pod()
    bad["metadata"]["name"] = ["not", "a", "string"]
    for _ in range(2):
        with pytest.raises(WireError) as err:
            cache.parse(bad)
        assert err.value.path == "Pod.metadata.name"
    with pytest.raises(WireError):
        cache.parse("a string, not a pod")


def test_the_cache_keeps_at_most_its_size_and_threads_share_it() -> None:
    cache = PodCache(size=8)
    pods = []
    for i in range(30):
        pod = _pod()
        pod["metadata"]["uid"] = f"uid-{i}"
        pods.append(pod)
    wrong: list[str] = []

    def caller(k: int) -> None:
        for j in range(200):
            pod = pods[(k * 7 + j) % len(pods)]
            if cache.parse(pod).uid != pod["metadata"]["uid"]:
                wrong.append(pod["metadata"]["uid"])

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [] and len(cache._items) <= 8


def test_names_of_cached_nodes_are_checked_by_one_subset_test_and_others_one_by_one() -> None:
    labelled = frozenset({"a-0", "a-1", "b-0"})
    checked = node_names(["b-0", "a-1"], labelled)
    assert isinstance(checked, candidates.CheckedNames) and checked == ["b-0", "a-1"] and checked.within is labelled
    assert not isinstance(node_names(["a-0", "hgx"], labelled), candidates.CheckedNames)
    for names, path in (([1], "NodeNames"), ([["a-0"]], "NodeNames"), ([{"a": 1}], "NodeNames"),
                        ("a-0", "NodeNames"), (["a-0", "n" * 254], "NodeNames[1]")):
        with pytest.raises(WireError) as err:
            node_names(names, labelled)
        assert err.value.path == path


names = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.lists(names, max_size=30), st.data())
def test_the_prioritize_reply_is_what_orjson_writes_for_the_list_of_dicts(cands: list[str],
                                                                          data: st.DataObject) -> None:
    scored = data.draw(st.dictionaries(st.sampled_from(cands) if cands else st.nothing(),
                                       st.integers(0, 10), max_size=len(cands)))
    want = orjson.dumps([{"Host": name, "Score": scored.get(name, 0)} for name in cands])
    assert scores_json(cands, scored) == want


@pytest.mark.parametrize("cands", [["gpu-000-00", "gpu-000-01"], ['x","Score":9},{"Host":"y', "a"],
                                   ["a,b", "]", '["'], ["\\", "\n"], ["é", "😀"], []])
def test_names_that_look_like_the_reply_do_not_break_it(cands: list[str]) -> None:
    scored = {cands[-1]: 7} if cands else {}
    assert orjson.loads(scores_json(cands, scored)) == [{"Host": n, "Score": scored.get(n, 0)} for n in cands]
