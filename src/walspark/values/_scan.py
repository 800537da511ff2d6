"""Shared low-level helpers for the text and binary formats.

Why a module of its own: the record (composite) and range text formats quote fields the
same way (double quotes, with ``""`` or a backslash to escape), every binary decoder reads
big-endian integers, and every decoder must turn a malformed input into one kind of error.
Keeping these here means each format module only states what is specific to it.
"""

from __future__ import annotations

import re
import struct
from typing import Final

from .errors import ValueConversionError

__all__ = [
    "FLOAT8",
    "INT2",
    "INT4",
    "INT8",
    "UINT4",
    "Reader",
    "quote_field",
    "scan_field",
    "to_str",
]

INT2: Final = struct.Struct(">h")
UINT2: Final = struct.Struct(">H")
INT4: Final = struct.Struct(">i")
UINT4: Final = struct.Struct(">I")
INT8: Final = struct.Struct(">q")
UINT8: Final = struct.Struct(">Q")
FLOAT4: Final = struct.Struct(">f")
FLOAT8: Final = struct.Struct(">d")


def to_str(data: bytes | bytearray | memoryview | str) -> str:
    """Decode a text-format value (pgoutput sends it in the database encoding, UTF-8)."""
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueConversionError(f"text value is not valid UTF-8 ({exc.reason})", value=bytes(data)) from None


class Reader:
    """A cursor over a binary value; every read checks bounds.

    Why: a truncated or corrupt value must raise a clear error, never an IndexError or a
    silently short result.
    """

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = bytes(data)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise ValueConversionError(
                f"binary value truncated: need {n} bytes at offset {self.pos}, have {len(self.data) - self.pos}",
                value=self.data,
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt: struct.Struct) -> int | float:
        return fmt.unpack(self._take(fmt.size))[0]

    def i8(self) -> int:
        v = self._take(1)[0]
        return v - 256 if v >= 128 else v

    def u8(self) -> int:
        return self._take(1)[0]

    def i16(self) -> int:
        return INT2.unpack(self._take(2))[0]

    def u16(self) -> int:
        return UINT2.unpack(self._take(2))[0]

    def i32(self) -> int:
        return INT4.unpack(self._take(4))[0]

    def u32(self) -> int:
        return UINT4.unpack(self._take(4))[0]

    def i64(self) -> int:
        return INT8.unpack(self._take(8))[0]

    def u64(self) -> int:
        return UINT8.unpack(self._take(8))[0]

    def f64(self) -> float:
        return FLOAT8.unpack(self._take(8))[0]

    def raw(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        return self._take(n)

    def cstring(self) -> bytes:
        """A NUL-terminated string (pq_sendstring), without its terminator."""
        end = self.data.find(b"\x00", self.pos)
        if end < 0:
            raise ValueConversionError("binary value truncated: unterminated string", value=self.data)
        chunk = self.data[self.pos : end]
        self.pos = end + 1
        return chunk

    def counted(self) -> bytes | None:
        """An int32 length then that many bytes; length -1 means NULL."""
        n = self.i32()
        if n == -1:
            return None
        if n < -1:
            raise ValueConversionError(f"invalid length {n} in binary value", value=self.data)
        return self._take(n)

    def rest(self) -> bytes:
        chunk = self.data[self.pos :]
        self.pos = len(self.data)
        return chunk

    def at_end(self) -> bool:
        return self.pos == len(self.data)

    def expect_end(self) -> None:
        if self.pos != len(self.data):
            raise ValueConversionError(f"binary value has {len(self.data) - self.pos} trailing bytes", value=self.data)


_FIELD_PATTERNS: dict[str, re.Pattern[str]] = {}


def _plain_pattern(stops: str) -> re.Pattern[str]:
    pat = _FIELD_PATTERNS.get(stops)
    if pat is None:
        pat = re.compile("[^" + re.escape(stops + '"\\') + "]*")
        _FIELD_PATTERNS[stops] = pat
    return pat


def scan_field(s: str, pos: int, stops: str) -> tuple[str | None, int]:
    """Read one field of a record or range literal, starting at ``pos``.

    The grammar (record_in / range_parse_bound): a field is any mix of unquoted characters
    (a backslash escapes the next one) and double-quoted runs (inside which ``""`` and a
    backslash escape). The field ends at the first unquoted character in ``stops``.
    Returns ``(None, end)`` for an empty field with no quotes at all — NULL in a record,
    an unbounded side in a range — else ``(text, end)`` with ``end`` at the stop character.
    """
    n = len(s)
    plain = _plain_pattern(stops)
    m = plain.match(s, pos)
    assert m is not None  # the pattern matches the empty string
    end = m.end()
    if end >= n or s[end] in stops:
        return (s[pos:end] if end > pos else None), end
    parts: list[str] = [s[pos:end]]
    i = end
    quoted = False
    while i < n:
        c = s[i]
        if c in stops:
            break
        if c == '"':
            quoted = True
            i += 1
            while True:
                if i >= n:
                    raise ValueConversionError("unterminated quoted field", value=s)
                c = s[i]
                if c == '"':
                    if i + 1 < n and s[i + 1] == '"':
                        parts.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                if c == "\\":
                    if i + 1 >= n:
                        raise ValueConversionError("dangling backslash in quoted field", value=s)
                    parts.append(s[i + 1])
                    i += 2
                    continue
                parts.append(c)
                i += 1
        elif c == "\\":
            if i + 1 >= n:
                raise ValueConversionError("dangling backslash in field", value=s)
            parts.append(s[i + 1])
            i += 2
        else:
            m = plain.match(s, i)
            assert m is not None
            parts.append(m.group())
            i = m.end()
    text = "".join(parts)
    if not text and not quoted:
        return None, i
    return text, i


_NEEDS_QUOTE_FIELD = re.compile(r'[",\\()\[\]\s]')


def quote_field(value: str | None, *, quote_empty: bool = True) -> str:
    """Render one field as record_out / range_out do: quote when needed, double ``"``/``\\``.

    Used by the encoders (tests, round trips); NULL / unbounded renders as nothing.
    """
    if value is None:
        return ""
    if (value == "" and quote_empty) or _NEEDS_QUOTE_FIELD.search(value):
        return '"' + value.replace("\\", "\\\\").replace('"', '""') + '"'
    return value
