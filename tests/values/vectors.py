"""Binary encoders for test vectors, written from PostgreSQL's *send functions.

Each builds the exact bytes the server sends, so decoders are checked against the wire
format independently of the decoders' own code.
"""

from __future__ import annotations

import struct
from decimal import Decimal

from walspark.values import TypeRegistry

REG = TypeRegistry()


def codec(oid: int, typmod: int = -1, **kw):
    from walspark.values import ColumnOptions

    return REG.resolve(oid, typmod, ColumnOptions(**kw) if kw else ColumnOptions())


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def u32(v: int) -> bytes:
    return struct.pack(">I", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def f64(v: float) -> bytes:
    return struct.pack(">d", v)


def numeric_send(value: Decimal | str) -> bytes:
    """numeric_send: ndigits, weight, sign, dscale, base-10000 digits (no trailing zeros)."""
    d = Decimal(value)
    if d.is_nan():
        return i16(0) + i16(0) + struct.pack(">H", 0xC000) + i16(0)
    if d.is_infinite():
        return i16(0) + i16(0) + struct.pack(">H", 0xD000 if d > 0 else 0xF000) + i16(0)
    sign, digits, exp = d.as_tuple()
    dscale = max(-exp, 0)
    coeff = int("".join(map(str, digits)) or "0")
    # Align to base 10000: value = coeff * 10**exp; choose groups of 4 around the point.
    frac_digits = -exp if exp < 0 else 0
    pad = (-frac_digits) % 4
    coeff *= 10**pad
    frac_groups = (frac_digits + pad) // 4
    if exp > 0:
        coeff *= 10**exp
    groups = []
    while coeff:
        coeff, g = divmod(coeff, 10000)
        groups.append(g)
    groups.reverse()
    if not groups:
        return i16(0) + i16(0) + struct.pack(">H", 0) + i16(dscale)
    weight = len(groups) - frac_groups - 1
    while groups and groups[-1] == 0:
        groups.pop()
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    head = i16(len(groups)) + i16(weight) + struct.pack(">H", 0x4000 if sign else 0) + i16(dscale)
    return head + b"".join(i16(g) for g in groups)


def array_send(elem_oid: int, dims: list[int], lbounds: list[int], elements: list[bytes | None]) -> bytes:
    out = i32(len(dims)) + i32(int(any(e is None for e in elements))) + u32(elem_oid)
    for d, lb in zip(dims, lbounds):
        out += i32(d) + i32(lb)
    for e in elements:
        out += i32(-1) if e is None else i32(len(e)) + e
    return out


def range_send(lower: bytes | None, upper: bytes | None, lower_inc: bool, upper_inc: bool,
               empty: bool = False) -> bytes:
    if empty:
        return b"\x01"
    flags = (0x02 if lower_inc else 0) | (0x04 if upper_inc else 0)
    flags |= 0x08 if lower is None else 0
    flags |= 0x10 if upper is None else 0
    out = bytes([flags])
    for b in (lower, upper):
        if b is not None:
            out += i32(len(b)) + b
    return out


def record_send(fields: list[tuple[int, bytes | None]]) -> bytes:
    out = i32(len(fields))
    for oid, b in fields:
        out += u32(oid) + (i32(-1) if b is None else i32(len(b)) + b)
    return out
