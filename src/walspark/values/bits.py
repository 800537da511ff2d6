"""bit(n) and bit varying: strings of '0'/'1', the bit_out text form.

Why strings: a bit string has a length that is not a multiple of 8 and leading zeros
matter; a string of 0/1 keeps both, and is what the text format already carries.
"""

from __future__ import annotations

import re

from ._scan import Reader, to_str
from .errors import ValueConversionError

__all__ = ["decode_bit_binary", "decode_bit_text"]

_BITS = re.compile(r"[01]*\Z")


def decode_bit_text(data: bytes) -> str:
    s = to_str(data)
    if not _BITS.match(s):
        raise ValueConversionError("invalid bit string text", value=s)
    return s


def decode_bit_binary(data: bytes) -> str:
    """bit_send / varbit_send: int32 bit length, then the bits, most significant first."""
    r = Reader(data)
    nbits = r.i32()
    if nbits < 0:
        raise ValueConversionError("invalid bit string length", value=data)
    raw = r.raw((nbits + 7) // 8)
    r.expect_end()
    if not raw:
        return ""
    return format(int.from_bytes(raw, "big"), f"0{len(raw) * 8}b")[:nbits]
