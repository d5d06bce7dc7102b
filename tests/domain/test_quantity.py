"""Kubernetes resource.Quantity as Kubernetes parses it: a table of its behaviours (each one checked
against k8s.io/apimachinery v0.37.2), and a differential run against that very parser, built from its Go
module (tests/domain/quantity_oracle), over thousands of generated strings."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.domain.reading import quantity
from webhook.domain.reading.parsing import count
from webhook.domain.reading.quantity import BAD_NUMBER, BAD_SUFFIX, FORMAT_WRONG, MAX_INT64, QuantityError
from webhook.errors import WireError

E = Decimal


@pytest.mark.parametrize(("text", "value", "fmt"), [
    ("4", E(4), "DecimalSI"),
    ("500m", E("0.5"), "DecimalSI"),
    ("1Ki", E(1024), "BinarySI"),
    ("1.5Gi", E(1610612736), "BinarySI"),
    ("0.1Ki", E("102.4"), "BinarySI"),
    ("1e3", E(1000), "DecimalExponent"),
    ("1E3", E(1000), "DecimalExponent"),
    ("+1e+3", E(1000), "DecimalExponent"),
    ("1E", E(10) ** 18, "DecimalSI"),  # "E" alone is exa, not an exponent
    ("1P", E(10) ** 15, "DecimalSI"),
    ("1n", E("1e-9"), "DecimalSI"),
    ("1u", E("1e-6"), "DecimalSI"),
    ("e3", E(0), "DecimalExponent"),  # no digits: zero, with a suffix
    ("12345678901234567890", E(12345678901234567890), "DecimalSI"),
])
def test_quantities_have_their_exact_kubernetes_value(text: str, value: Decimal, fmt: str) -> None:
    q = quantity.parse(text)
    assert (q.value, q.format) == (value, fmt)


@pytest.mark.parametrize(("text", "value"), [
    ("1e309", E("1e309")),  # decimal quantities are not capped: valid, and beyond every count
    ("1E309", E("1e309")),
    ("9" * 400, E("9" * 400)),
    ("8Ei", E(MAX_INT64)),  # binary ones are, at 2^63-1
    ("100Ei", E(MAX_INT64)),
    ("-8Ei", E(-MAX_INT64)),
    ("1e-400", E("1e-9")),  # rounded away from zero to a whole nano unit
    ("-1e-400", E("-1e-9")),
    ("1.0000000001", E("1.000000001")),
    ("1e4294967296", E(1)),  # the exponent wraps to 32 bits, as Go's int32() does
    ("1e4294967306", E(10) ** 10),
    ("+", E(0)), ("-", E(0)), (".", E(0)), ("000", E(0)), ("-0", E(0)), (".Ti", E(0)),
    ("1.", E(1)), (".5", E("0.5")),
])
def test_kubernetes_quirks_are_kept(text: str, value: Decimal) -> None:
    assert quantity.parse(text).value == value


@pytest.mark.parametrize(("text", "reason"), [
    ("", FORMAT_WRONG), ("\u00b2", FORMAT_WRONG), ("\u0661", FORMAT_WRONG), ("4 ", FORMAT_WRONG), (" 4", FORMAT_WRONG),
    ("0x10", FORMAT_WRONG), ("1_000", FORMAT_WRONG), ("1.5.5", FORMAT_WRONG), ("1e308Ei", FORMAT_WRONG),
    ("1KI", FORMAT_WRONG),  # "I" is no suffix letter
    ("1ee3", BAD_SUFFIX), ("1e", BAD_SUFFIX), ("1Mi5", BAD_SUFFIX), ("1k-", BAD_SUFFIX), ("1ki", BAD_SUFFIX),
    ("1e9223372036854775808", BAD_SUFFIX),  # an exponent must fit 64 bits
    (".e-10", BAD_NUMBER), (".Pi", BAD_NUMBER),  # no digit, where Kubernetes takes its arbitrary-precision path
])
def test_what_kubernetes_refuses_is_refused_with_its_reason(text: str, reason: str) -> None:
    with pytest.raises(QuantityError) as err:
        quantity.parse(text)
    assert str(err.value) == reason


@pytest.mark.parametrize(("value", "expected"), [
    (None, E(0)), (2, E(2)), (1.5, E("1.5")), (1e22, E("1e22")), ("\u00a04\u3000", E(4)), ("\t4\n", E(4)),
])
def test_json_values_read_like_kubernetes_reads_them(value: object, expected: Decimal) -> None:
    assert quantity.from_json(value).value == expected


@pytest.mark.parametrize("value", [True, [], {}, "\x1c4"])  # Go's TrimSpace keeps \x1c; str.strip() would not
def test_json_values_that_are_no_quantity_are_refused(value: object) -> None:
    with pytest.raises(QuantityError):
        quantity.from_json(value)


@pytest.mark.parametrize("text", ["1e2147483647", "1e-2147483648", "9" * 1_000_000, "0." + "0" * 1_000_000 + "1"])
def test_huge_exponents_and_huge_texts_parse_in_linear_time(text: str) -> None:
    started = time.process_time()
    quantity.parse(text)
    assert time.process_time() - started < 2.0  # expanding 10^2147483647 would take hours


@pytest.mark.parametrize(("value", "reason"), [
    ("1e309", "out of range"), ("1E309", "out of range"), ("9" * 400, "out of range"),
    ("9223372036854775808", "out of range"), ("1e2147483647", "out of range"),
    ("1e308Ei", "not a Kubernetes quantity"), ("\u00b2", "not a Kubernetes quantity"),
    ("-1", "whole non-negative"), ("500m", "whole non-negative"), ("1e-400", "whole non-negative"),
    ([1], "not a Kubernetes quantity"),
])
def test_a_count_beyond_what_kubernetes_counts_is_a_clear_reason(value: object, reason: str) -> None:
    with pytest.raises(WireError, match=reason) as err:
        count(value, "Pod.spec.containers[0].resources.limits[nvidia.com/gpu]")
    assert err.value.path == "Pod.spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert len(str(err.value)) < 400  # the value is quoted cut short, whatever its size


@pytest.mark.parametrize(("value", "expected"), [
    ("8Ei", MAX_INT64), ("9223372036854775807", MAX_INT64), ("1e18", 10**18), ("4.0", 4), (None, 0), (4, 4),
])
def test_counts_up_to_two_to_the_63_minus_one_are_whole_numbers(value: object, expected: int) -> None:
    assert count(value, "q") == expected


# -- The same strings through Kubernetes' own parser ---------------------------------------------------------

ORACLE = Path(__file__).parent / "quantity_oracle"
_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e", "E", "e3",
             "e-3", "e+3", "E-10", "e4294967296", "e4294967306", "e-4294967290", "e9223372036854775808",
             "e-9223372036854775809", "e400", "e-400", "i", "K", "ki", "KI", "mi", "x", " ", "e00000000000000000000003"]


def _oracle_binary() -> Path:
    digest = hashlib.sha256(b"".join((ORACLE / n).read_bytes() for n in ("go.mod", "go.sum", "main.go")))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imex-webhook"
    target = cache / f"quantity-oracle-{digest.hexdigest()[:16]}"
    if target.exists():
        return target
    if shutil.which("go") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the Go toolchain is not on PATH: the quantity oracle is built from k8s.io/apimachinery")
        pytest.skip("no Go toolchain: the quantity oracle is built from k8s.io/apimachinery")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    proc = subprocess.run(["go", "build", "-trimpath", "-buildvcs=false", "-o", str(partial), "."], cwd=ORACLE,
                          capture_output=True, text=True, env={**os.environ, "CGO_ENABLED": "0"}, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    partial.rename(target)
    return target


class Oracle:
    """One long-lived Go process: a JSON-quoted string a line in, its verdict a line out."""

    def __init__(self, binary: Path) -> None:
        self.proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def parse(self, texts: list[str]) -> list[tuple[str, Decimal | str, str]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("".join(json.dumps(t) + "\n" for t in texts))
        self.proc.stdin.flush()
        out: list[tuple[str, Decimal | str, str]] = []
        for _ in texts:
            kind, _, rest = self.proc.stdout.readline().rstrip("\n").partition(" ")
            if kind == "ok":
                unscaled, scale, fmt = rest.split(" ")
                out.append(("ok", Decimal(f"{unscaled}E{-int(scale)}"), fmt))
            else:
                out.append(("error", rest, ""))
        return out

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    running = Oracle(_oracle_binary())
    yield running
    running.close()


def _ours(text: str) -> tuple[str, Decimal | str, str]:
    try:
        q = quantity.parse(text)
    except QuantityError as exc:
        return ("error", str(exc), "")
    return ("ok", q.value, q.format)


# Kubernetes expands 10^exponent in full: exponents of a billion would take it minutes, so they stay out of
# the comparison (our parser's cost for them is checked above).
_numbers = st.builds(
    lambda sign, digits, dot, fraction, suffix: sign + digits + dot + fraction + suffix,
    st.sampled_from(["", "", "+", "-"]),
    st.text("0123456789", max_size=30),
    st.sampled_from(["", "", "."]),
    st.text("0123456789", max_size=12),
    st.sampled_from(_SUFFIXES),
)
_scrambles = st.text("0123456789.+-eEinumkKMGTP \u00b2", max_size=10)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.one_of(_numbers, _scrambles), min_size=100, max_size=100))
def test_every_string_parses_as_kubernetes_parses_it(oracle: Oracle, texts: list[str]) -> None:
    theirs = oracle.parse(texts)
    for text, expected in zip(texts, theirs, strict=True):
        assert _ours(text) == expected, text
