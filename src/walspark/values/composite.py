"""Composite (row) types: record_out text and record_send binary.

A ``dict`` only when the fields are registered, else an unknown type. See docs/design/values.md
for both formats.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._scan import Reader, quote_field, scan_field, to_str
from .errors import ValueConversionError

__all__ = ["decode_record_binary", "format_record", "parse_record_text"]


def parse_record_text(data: bytes | str) -> list[str | None]:
    s = to_str(data)
    if not s.startswith("(") or not s.endswith(")"):
        raise ValueConversionError("record text must be enclosed in parentheses", value=s)
    fields: list[str | None] = []
    pos = 1
    while True:
        value, pos = scan_field(s, pos, ",)")
        fields.append(value)
        if pos >= len(s):
            raise ValueConversionError("record text lacks ')'", value=s)
        if s[pos] == ")":
            break
        pos += 1
    if pos != len(s) - 1:
        raise ValueConversionError("text after the record", value=s)
    return fields


def decode_record_binary(data: bytes) -> list[tuple[int, bytes | None]]:
    r = Reader(data)
    n = r.i32()
    if n < 0:
        raise ValueConversionError("invalid record field count", value=data)
    out: list[tuple[int, bytes | None]] = []
    for _ in range(n):
        oid = r.u32()
        out.append((oid, r.counted()))
    r.expect_end()
    return out


def format_record(fields: Sequence[str | None]) -> str:
    """record_out's text for already-rendered field texts (None = NULL)."""
    return "(" + ",".join(quote_field(f) for f in fields) + ")"
