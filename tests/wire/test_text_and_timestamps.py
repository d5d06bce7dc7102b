"""``webhook.wire.text`` and ``webhook.wire.timestamps``: the one truncation rule and the one RFC 3339
writer and reader the project uses."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.errors import WireError
from webhook.wire.text import clip, clip_bytes, shown
from webhook.wire.timestamps import Precision, parse_rfc3339, rfc3339

T = 1_700_000_000.123456  # 2023-11-14T22:13:20.123456Z


@pytest.mark.parametrize(("text", "limit", "want"), [
    ("abc", 5, "abc"),
    ("abcde", 5, "abcde"),
    ("abcdef", 5, "ab..."),
    ("x" * 10_000, 256, "x" * 253 + "..."),
    ("", 3, ""),
])
def test_clip_keeps_short_text_and_cuts_long_text_within_the_limit(text: str, limit: int, want: str) -> None:
    assert clip(text, limit) == want
    assert len(clip(text, limit)) <= limit


@pytest.mark.parametrize(("text", "limit", "want"), [
    ("abc", 5, "abc"),
    ("ééé", 6, "ééé"),  # six bytes
    ("éééé", 6, "é..."),  # cut on a character boundary, never through one
    ("aééé", 6, "aé..."),
])
def test_clip_bytes_counts_utf8_bytes_and_never_splits_a_character(text: str, limit: int, want: str) -> None:
    assert clip_bytes(text, limit) == want
    assert len(clip_bytes(text, limit).encode()) <= limit


@pytest.mark.parametrize(("value", "want"), [
    ("short", "'short'"),
    ("y" * 100, repr("y" * 40) + "... (100 characters)"),
    ([1] * 1000, "a list of 1000 items"),
    ({"a": {"b": {}}}, "an object with 1 keys"),
    (2 ** 10_000, "an integer of 10001 bits"),
    (None, "None"),
    (object(), "a object"),
])
def test_shown_never_prints_a_hostile_value_whole(value: Any, want: str) -> None:
    assert shown(value) == want


@pytest.mark.parametrize(("precision", "want"), [
    ("s", "2023-11-14T22:13:20Z"),
    ("ms", "2023-11-14T22:13:20.123Z"),
    ("us", "2023-11-14T22:13:20.123456Z"),
])
def test_rfc3339_writes_utc_with_z_at_each_precision(precision: Precision, want: str) -> None:
    assert rfc3339(T, precision) == want


@pytest.mark.parametrize("precision", ["s", "ms", "us"])
def test_what_rfc3339_writes_parses_back_to_the_same_instant_at_its_precision(precision: Precision) -> None:
    step = {"s": 1.0, "ms": 1e-3, "us": 1e-6}[precision]
    assert T - step < parse_rfc3339(rfc3339(T, precision)) <= T + 1e-6


@pytest.mark.parametrize(("text", "want"), [
    ("2023-11-14T22:13:20Z", 1_700_000_000.0),
    ("2023-11-14T23:13:20+01:00", 1_700_000_000.0),
    ("2023-11-14T22:13:20", 1_700_000_000.0),  # no zone: UTC, the only one Kubernetes writes
])
def test_parse_rfc3339_reads_z_offsets_and_zoneless_times_as_utc(text: str, want: float) -> None:
    assert parse_rfc3339(text) == want


@pytest.mark.parametrize("text", ["", "yesterday", "2023-13-45T99:00:00Z", 17, None, "9" * 100_000])
def test_parse_rfc3339_refuses_anything_else_with_a_wire_error_naming_the_field(text: Any) -> None:
    with pytest.raises(WireError) as err:
        parse_rfc3339(text, "status.phaseSince")
    assert err.value.path == "status.phaseSince"
    assert len(str(err.value)) < 200
