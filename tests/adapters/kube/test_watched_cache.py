"""The generic watched cache (``webhook.adapters.kube.cache``) on its own, without an API server: what a
list, a watch event and the answer to our own write do to it; resourceVersion ordering; objects it cannot
read or that are not its own; listeners in the order of changes under concurrent writers; hostile input."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.concurrency import run_together
from webhook.adapters.kube.cache import WatchedCache, cache_key, older
from webhook.errors import WireError


def obj(name: str, version: str = "1", value: Any = "v", namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": version}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"metadata": meta, "value": value}


def decode(o: Mapping[str, Any]) -> str | None:
    """A string value is kept, ``None`` is not this cache's object, anything else is malformed."""
    value = o.get("value")
    if value is not None and not isinstance(value, str):
        raise WireError("value", "expected a string")
    return value


@pytest.mark.parametrize(("new", "old", "is_older"), [
    ("9", "10", True),  # numerically, not as text
    ("10", "9", False),
    ("10", "10", False),
    ("", "10", False),  # not a number: the newest arrival is trusted
    ("abc", "10", False),
    ("10", "", False),
])
def test_a_resource_version_is_older_only_when_both_are_numbers_and_it_is_smaller(
        new: str, old: str, is_older: bool) -> None:
    assert older(new, old) is is_older


@pytest.mark.parametrize(("o", "key"), [
    (obj("a"), "a"),
    (obj("a", namespace="ns"), "ns/a"),
    (obj("a", namespace=""), "a"),
    ({"metadata": {"name": ""}}, None),
    ({"metadata": {"name": 7}}, None),
    ({"metadata": "a"}, None),
    ({}, None),
    ("not an object", None),
])
def test_objects_are_keyed_by_name_or_namespace_and_name(o: Any, key: str | None) -> None:
    assert cache_key(o) == key


def test_a_list_replaces_everything_and_marks_the_cache_synced_only_when_told() -> None:
    cache: WatchedCache[str] = WatchedCache("Thing", decode)
    cache.apply("Thing", "ADDED", obj("gone"))
    cache.replace("Thing", [obj("a", value="1"), obj("b", value="2"), obj("bad", value=3), obj("theirs", value=None),
                            {"metadata": {}}])
    assert dict(cache.items()) == {"a": "1", "b": "2"}
    assert not cache.synced
    cache.mark_synced("Thing")
    assert cache.synced


def test_a_late_watch_event_does_not_roll_back_our_own_write() -> None:
    cache: WatchedCache[str] = WatchedCache("Thing", decode)
    assert cache.store(obj("a", "12", "ours")) == "ours"
    cache.apply("Thing", "MODIFIED", obj("a", "11", "late"))
    assert cache.get("a") == "ours"
    cache.apply("Thing", "MODIFIED", obj("a", "12", "same version"))
    assert cache.get("a") == "same version"
    cache.apply("Thing", "DELETED", obj("a", "11"))
    assert cache.get("a") is None  # a deletion needs no version: the name is gone


def test_an_object_that_is_not_ours_any_more_leaves_the_cache() -> None:
    cache: WatchedCache[str] = WatchedCache("Thing", decode)
    cache.apply("Thing", "ADDED", obj("a"))
    cache.apply("Thing", "MODIFIED", obj("a", "2", None))
    assert cache.items() == {}


@pytest.mark.parametrize(("forget", "left"), [(False, {"a": "good"}), (True, {})])
def test_an_unreadable_object_keeps_its_last_good_version_unless_told_to_forget_it(
        forget: bool, left: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    cache: WatchedCache[str] = WatchedCache("Thing", decode, forget_unreadable=forget)
    cache.apply("Thing", "ADDED", obj("a", "1", "good"))
    cache.apply("Thing", "MODIFIED", obj("a", "2", ["bad"]))
    assert dict(cache.items()) == left
    assert "skipping malformed Thing a: value: expected a string" in caplog.text


@pytest.mark.parametrize("answer", [obj("a", value=5), obj("a", value=None), {"metadata": {}, "value": "v"}])
def test_an_answer_to_our_write_that_the_cache_cannot_keep_is_a_wire_error(answer: dict[str, Any]) -> None:
    cache: WatchedCache[str] = WatchedCache("Thing", decode)
    with pytest.raises(WireError):
        cache.store(answer)
    assert cache.items() == {}


@pytest.mark.parametrize("hostile", [{"metadata": None}, {"metadata": {"name": ["a"]}}, {"metadata": {}}])
def test_an_event_without_a_readable_name_is_skipped(hostile: dict[str, Any]) -> None:
    cache: WatchedCache[str] = WatchedCache("Thing", decode)
    cache.apply("Thing", "ADDED", obj("a"))
    for event in ("ADDED", "MODIFIED", "DELETED"):
        cache.apply("Thing", event, hostile)
    assert dict(cache.items()) == {"a": "v"}


def test_listeners_see_every_change_in_order_while_many_threads_write() -> None:
    cache: WatchedCache[str] = WatchedCache("Thing", decode)
    seen: list[int] = []
    cache.subscribe(lambda items: seen.append(len(items)))
    writers, each = 8, 50

    def write(w: int) -> None:
        for i in range(each):
            cache.apply("Thing", "ADDED", obj(f"w{w}-{i}"))

    run_together(writers, write, timeout=10)
    assert seen == list(range(1, writers * each + 1))  # one call per change, never two out of order
    assert len(cache.items()) == writers * each


def test_what_a_reader_holds_does_not_change_under_it() -> None:
    cache: WatchedCache[str] = WatchedCache("Thing", decode)
    cache.apply("Thing", "ADDED", obj("a"))
    held = cache.items()
    cache.apply("Thing", "ADDED", obj("b"))
    cache.forget("a")
    assert dict(held) == {"a": "v"} and dict(cache.items()) == {"b": "v"}
    with pytest.raises(TypeError):
        held["c"] = "v"  # type: ignore[index]
