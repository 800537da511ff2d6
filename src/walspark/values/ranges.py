"""Ranges and multiranges.

:class:`Range`; a null bound of a non-empty range means unbounded. See docs/design/values.md for
both formats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._scan import Reader, quote_field, scan_field, to_str
from .errors import ValueConversionError

__all__ = [
    "ParsedRange",
    "Range",
    "decode_multirange_binary",
    "decode_range_binary",
    "format_multirange",
    "format_range",
    "parse_multirange_text",
    "parse_range_text",
]

_EMPTY, _LB_INC, _UB_INC, _LB_INF, _UB_INF = 0x01, 0x02, 0x04, 0x08, 0x10


@dataclass(frozen=True, slots=True)
class Range:
    """A PostgreSQL range value. ``lower``/``upper`` None means unbounded on that side."""

    lower: Any = None
    upper: Any = None
    lower_inc: bool = False
    upper_inc: bool = False
    empty: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "lower_inc": self.lower_inc,
            "upper_inc": self.upper_inc,
            "empty": self.empty,
        }


@dataclass(frozen=True, slots=True)
class ParsedRange:
    """A range whose bounds are still raw (str from text, bytes from binary)."""

    lower: Any
    upper: Any
    lower_inc: bool
    upper_inc: bool
    empty: bool

    def map(self, fn: Callable[[Any], Any]) -> Range:
        return Range(
            None if self.lower is None else fn(self.lower),
            None if self.upper is None else fn(self.upper),
            self.lower_inc,
            self.upper_inc,
            self.empty,
        )


EMPTY = ParsedRange(None, None, False, False, True)


def _parse_range_at(s: str, pos: int) -> tuple[ParsedRange, int]:
    n = len(s)
    while pos < n and s[pos].isspace():
        pos += 1
    if s[pos : pos + 5].lower() == "empty":
        return EMPTY, pos + 5
    if pos >= n or s[pos] not in "[(":
        raise ValueConversionError("range text must start with '[', '(' or be 'empty'", value=s)
    lower_inc = s[pos] == "["
    lower, pos = scan_field(s, pos + 1, ",")
    if pos >= n or s[pos] != ",":
        raise ValueConversionError("range text lacks ','", value=s)
    upper, pos = scan_field(s, pos + 1, "])")
    if pos >= n:
        raise ValueConversionError("range text lacks ']' or ')'", value=s)
    upper_inc = s[pos] == "]"
    # range_in reports an unbounded side as exclusive.
    return ParsedRange(lower, upper, lower_inc and lower is not None, upper_inc and upper is not None, False), pos + 1


def parse_range_text(data: bytes | str) -> ParsedRange:
    s = to_str(data)
    r, pos = _parse_range_at(s, 0)
    if s[pos:].strip():
        raise ValueConversionError("text after the range", value=s)
    return r


def decode_range_binary(data: bytes) -> ParsedRange:
    r = Reader(data)
    flags = r.u8()
    if flags & _EMPTY:
        r.expect_end()
        return EMPTY
    lower = None if flags & _LB_INF else r.counted()
    upper = None if flags & _UB_INF else r.counted()
    r.expect_end()
    return ParsedRange(lower, upper, bool(flags & _LB_INC), bool(flags & _UB_INC), False)


def parse_multirange_text(data: bytes | str) -> list[ParsedRange]:
    s = to_str(data).strip()
    if not s.startswith("{"):
        raise ValueConversionError("multirange text must start with '{'", value=s)
    pos = 1
    out: list[ParsedRange] = []
    while True:
        while pos < len(s) and s[pos].isspace():
            pos += 1
        if pos < len(s) and s[pos] == "}" and not out:
            pos += 1
            break
        rng, pos = _parse_range_at(s, pos)
        out.append(rng)
        while pos < len(s) and s[pos].isspace():
            pos += 1
        if pos < len(s) and s[pos] == ",":
            pos += 1
            continue
        if pos < len(s) and s[pos] == "}":
            pos += 1
            break
        raise ValueConversionError("malformed multirange text", value=s)
    if s[pos:].strip():
        raise ValueConversionError("text after the multirange", value=s)
    return out


def decode_multirange_binary(data: bytes) -> list[ParsedRange]:
    r = Reader(data)
    count = r.i32()
    out: list[ParsedRange] = []
    for _ in range(count):
        raw = r.counted()
        if raw is None:
            raise ValueConversionError("NULL range inside a multirange", value=data)
        out.append(decode_range_binary(raw))
    r.expect_end()
    return out


def format_range(rng: Range, format_bound: Callable[[Any], str] = str) -> str:
    """range_out's text for ``rng`` (the encoder for round-trip tests)."""
    if rng.empty:
        return "empty"
    lo = "" if rng.lower is None else quote_field(format_bound(rng.lower))
    hi = "" if rng.upper is None else quote_field(format_bound(rng.upper))
    return f"{'[' if rng.lower_inc else '('}{lo},{hi}{']' if rng.upper_inc else ')'}"


def format_multirange(ranges: list[Range], format_bound: Callable[[Any], str] = str) -> str:
    return "{" + ",".join(format_range(r, format_bound) for r in ranges) + "}"
