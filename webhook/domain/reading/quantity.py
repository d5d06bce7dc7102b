"""Kubernetes ``resource.Quantity`` (k8s.io/apimachinery/pkg/api/resource), parsed as Kubernetes parses it.

Accepted text, scanned left to right with no backtracking (the scanner, not the looser regular expression
in its error message, decides):

    [+|-] [zeros] [digits] [. [digits]] [suffix letters from "eEinumkKMGTP"] [+|-] [digits]

Digits are ASCII only ("²" and other Unicode digits are refused). The suffix must then be one of
``n u m "" k M G T P E`` (decimal SI), ``Ki Mi Gi Ti Pi Ei`` (binary SI) or ``e``/``E`` followed by a signed
64-bit integer (decimal exponent). Kubernetes' quirks are kept on purpose, so that we agree with the API
server on every input:

- a sign or zeros alone ("+", "-", "000", ".") is zero; "1." and ".5" are numbers;
- an exponent that fits 64 bits but not 32 wraps to 32 bits (Go's ``int32(parsed)``): "1e4294967296" is 1;
- every non-zero value is rounded away from zero to a whole number of nano units ("1e-400" is 1n);
- binary SI values are capped at 2^63-1 in magnitude ("8Ei" is 9223372036854775807); decimal ones are
  not capped ("1e309" and 400 nines are valid quantities), which is why callers that count check the
  range themselves (``MAX_INT64``: beyond it, Kubernetes' own ``Value()`` wraps around);
- JSON ``null`` is the zero quantity; JSON numbers are read from their text, and Go trims Unicode white
  space around a JSON string before parsing it.

Values are exact ``Decimal`` numbers, never floats. Parsing costs time linear in the text: no power of ten
is ever expanded, so "1e2147483647" is as cheap as "1".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Context, Decimal, Inexact
from typing import Any, Literal

from webhook.errors import ImexWebhookError

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

MAX_INT64 = 2**63 - 1
_EMAX = 10**15  # decimal exponents reach about 2^31 plus the length of the text; 10^15 is room enough
_NANO = Decimal("1e-9")
_SUFFIX_LETTERS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_EXPONENT = re.compile(r"[+-]?[0-9]+")
_PLAIN = re.compile(r"[0-9]{1,18}")  # the common case ("4"), parsed without Decimal
# Go's strings.TrimSpace (unicode.IsSpace): narrower than str.strip(), which also drops \x1c-\x1f.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000"

# Kubernetes' own error texts, so that a user can search for them.
FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
BAD_NUMBER = "unable to parse numeric part of quantity"
BAD_SUFFIX = "unable to parse quantity's suffix"


class QuantityError(ImexWebhookError, ValueError):
    """Text Kubernetes refuses as a quantity; the message is Kubernetes' reason."""


@dataclass(frozen=True, slots=True)
class Quantity:
    value: Decimal  # exact: rounded up to 1n, binary SI capped at 2^63-1, as Kubernetes holds it
    format: Format

    def whole(self) -> int | None:
        """The value as an int when it is a whole number within Kubernetes' 64-bit range, else None."""
        v = self.value
        # The range first: it compares without expanding "1e2147483647"; what passes is at most 19 digits.
        if not -MAX_INT64 - 1 <= v <= MAX_INT64 or v != v.to_integral_value():
            return None
        return int(v)


ZERO = Quantity(Decimal(0), "DecimalSI")


def from_json(value: Any) -> Quantity:
    """A quantity as it appears in decoded JSON: a string, a number, or null (zero)."""
    if value is None:
        return ZERO
    if isinstance(value, bool):
        raise QuantityError(FORMAT_WRONG)  # Go reads the literal "true": not a number
    if isinstance(value, int):
        return parse(str(value))
    if isinstance(value, float):
        # orjson hands over the double, not the literal: its shortest round-trip text is the closest we get.
        return parse(repr(value))
    if isinstance(value, str):
        return parse(value.strip(_GO_SPACE))
    raise QuantityError(f"expected a quantity (a string such as \"4\" or \"500m\"), got {type(value).__name__}")


def parse(text: str) -> Quantity:
    """``resource.ParseQuantity``: the exact value of ``text``, or ``QuantityError`` with Kubernetes' reason."""
    if _PLAIN.fullmatch(text):
        return Quantity(Decimal(int(text)), "DecimalSI")
    if not text:
        raise QuantityError(FORMAT_WRONG)
    negative, digits, fraction, suffix = _scan(text)
    if digits is None:
        return ZERO  # a sign, zeros, or nothing after the sign
    base, exponent, fmt = _interpret(suffix)
    if not digits and not fraction and not text.lstrip("+-").startswith("0"):
        # "." with no digit at all: Kubernetes' exact path takes it as 0, its arbitrary-precision path
        # (tiny decimal exponents, Pi and Ei) finds no digit and refuses it.
        if (base == 10 and exponent < -9) or (base == 2 and exponent > 40):
            raise QuantityError(BAD_NUMBER)
        return Quantity(Decimal(0), fmt)
    return Quantity(_value(negative, digits or "0", fraction, base, exponent, fmt), fmt)


def _run(text: str, start: int, allowed: frozenset[str]) -> int:
    end = start
    while end < len(text) and text[end] in allowed:
        end += 1
    return end


def _scan(text: str) -> tuple[bool, str | None, str, str]:
    """(negative, integer digits without leading zeros (None: the value is zero), fraction digits, suffix)."""
    pos = 0
    negative = False
    if text[0] in "+-":
        negative = text[0] == "-"
        pos = 1
    while pos < len(text) and text[pos] == "0":
        pos += 1
    if pos == len(text):
        return negative, None, "", ""
    end = _run(text, pos, _DIGITS)
    digits = text[pos:end]
    pos = end
    fraction = ""
    if pos < len(text) and text[pos] == ".":
        end = _run(text, pos + 1, _DIGITS)
        fraction = text[pos + 1:end]
        pos = end
    start = pos
    pos = _run(text, pos, _SUFFIX_LETTERS)
    if pos < len(text) and text[pos] in "+-":
        pos += 1
    if _run(text, pos, _DIGITS) != len(text):
        raise QuantityError(FORMAT_WRONG)
    return negative, digits, fraction, text[start:]


def _interpret(suffix: str) -> tuple[int, int, Format]:
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix], "DecimalSI"
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT.fullmatch(suffix[1:]):
        sign = -1 if suffix[1] == "-" else 1
        magnitude = suffix[1:].lstrip("+-").lstrip("0") or "0"
        if len(magnitude) <= 19:  # a 64-bit integer, without handing int() thousands of digits
            parsed = sign * int(magnitude)
            if -(2**63) <= parsed <= MAX_INT64:
                return 10, (parsed + 2**31) % 2**32 - 2**31, "DecimalExponent"
    raise QuantityError(BAD_SUFFIX)


def _value(negative: bool, digits: str, fraction: str, base: int, exponent: int, fmt: Format) -> Decimal:
    mantissa = digits + fraction
    # Precision for x 2^60 and for the carry of rounding up: every step below is exact but that rounding.
    precision = len(mantissa) + 40
    if base == 10:
        amount = Decimal(f"{mantissa}E{exponent - len(fraction)}")
    else:
        exact = Context(prec=precision, Emax=_EMAX, Emin=-_EMAX, traps=[Inexact])
        amount = exact.multiply(Decimal(f"{mantissa}E{-len(fraction)}"), Decimal(2**exponent))
    if amount.as_tuple().exponent < -9:  # type: ignore[operator]
        amount = amount.quantize(_NANO, rounding=ROUND_CEILING,
                                 context=Context(prec=precision, Emax=_EMAX, Emin=-_EMAX))
    if fmt == "BinarySI" and amount > MAX_INT64:
        amount = Decimal(MAX_INT64)
    return amount.copy_negate() if negative else amount  # unary minus would round to the context's 28 digits
