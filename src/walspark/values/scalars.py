"""Simple scalar types: bool, integers, floats, strings, bytea, uuid, json, char and friends.

Why these live together: each is a few lines in each format and they share nothing but
the helpers of :mod:`._scan`. The ground truth is PostgreSQL's ``*send`` (binary) and
``*out`` (text) functions; the comments say which.
"""

from __future__ import annotations

import math
import re
import struct
import uuid as _uuid
from decimal import Decimal

from ._scan import FLOAT4, FLOAT8, INT2, INT4, INT8, UINT4, Reader, to_str
from .errors import ValueConversionError

__all__ = [
    "decode_bool_binary",
    "decode_bool_text",
    "decode_bytea_binary",
    "decode_bytea_text",
    "decode_char_binary",
    "decode_float4_binary",
    "decode_float4_text",
    "decode_float8_binary",
    "decode_float8_text",
    "decode_int2_binary",
    "decode_int4_binary",
    "decode_int8_binary",
    "decode_int_text",
    "decode_jsonb_binary",
    "decode_pg_lsn_binary",
    "decode_snapshot_binary",
    "decode_str",
    "decode_tid_binary",
    "decode_uint4_binary",
    "decode_uint8_binary",
    "decode_uuid_binary",
    "decode_uuid_text",
    "format_bytea_escape",
    "format_bytea_hex",
    "format_float4",
    "format_float8",
    "to_float4",
]


# --- bool (boolout: 't'/'f'; boolsend: one byte 0/1) ---------------------------------


def decode_bool_text(data: bytes) -> bool:
    if data == b"t":
        return True
    if data == b"f":
        return False
    raise ValueConversionError("invalid boolean text (expected 't' or 'f')", value=data)


def decode_bool_binary(data: bytes) -> bool:
    if len(data) != 1:
        raise ValueConversionError("boolean binary value must be 1 byte", value=data)
    return data != b"\x00"


# --- integers (int2/4/8out: decimal; *send: big-endian two's complement) -------------

_INT_TEXT = re.compile(rb"-?[0-9]+\Z")


def decode_int_text(data: bytes) -> int:
    if not _INT_TEXT.match(data):
        raise ValueConversionError("invalid integer text", value=data)
    return int(data)


def _fixed(fmt: struct.Struct, name: str):
    def decode(data: bytes) -> int:
        if len(data) != fmt.size:
            raise ValueConversionError(f"{name} binary value must be {fmt.size} bytes", value=data)
        return fmt.unpack(data)[0]

    decode.__name__ = f"decode_{name}_binary"
    return decode


decode_int2_binary = _fixed(INT2, "int2")
decode_int4_binary = _fixed(INT4, "int4")
decode_int8_binary = _fixed(INT8, "int8")
decode_uint4_binary = _fixed(UINT4, "uint4")  # oid, xid, cid, reg*: unsigned 32-bit
decode_uint8_binary = _fixed(struct.Struct(">Q"), "uint8")  # xid8, pg_lsn


# --- floats ---------------------------------------------------------------------------
# float4out/float8out print the shortest text that reads back to the same value when
# extra_float_digits > 0 (the default since PG 12), 'NaN', 'Infinity' and '-Infinity'.

# Every digit run is followed by something that must differ from a digit (no `[0-9]+\.?[0-9]*`):
# that ambiguous form made a long run of digits with a bad last byte backtrack quadratically
# (20 000 digits took 37 s), a hang on a corrupt value.
_FLOAT_TEXT = re.compile(
    rb"-?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|Infinity)\Z|NaN\Z"
)


def decode_float8_text(data: bytes) -> float:
    if not _FLOAT_TEXT.match(data):
        raise ValueConversionError("invalid float text", value=data)
    return float(data)


def to_float4(x: float) -> float:
    """Round a Python float to the nearest float32, as the column's storage does."""
    return FLOAT4.unpack(FLOAT4.pack(x))[0]


def decode_float4_text(data: bytes) -> float:
    # Round to float32 so that text and binary modes give the same Python value.
    return to_float4(decode_float8_text(data))


def decode_float4_binary(data: bytes) -> float:
    if len(data) != 4:
        raise ValueConversionError("float4 binary value must be 4 bytes", value=data)
    return FLOAT4.unpack(data)[0]


def decode_float8_binary(data: bytes) -> float:
    if len(data) != 8:
        raise ValueConversionError("float8 binary value must be 8 bytes", value=data)
    return FLOAT8.unpack(data)[0]


def _shortest_digits(x: float, single: bool) -> tuple[str, int]:
    """Shortest round-trip decimal digits of |x| and its scientific exponent."""
    x = abs(x)
    if single:
        for p in range(1, 10):
            s = f"{x:.{p - 1}e}"
            if to_float4(float(s)) == x:
                break
    else:
        s = repr(x)
    _, digits, exp = Decimal(s).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    exp = int(exp) + len(digits) - 1  # exponent of the first digit
    return text, exp


def _format_float(x: float, single: bool) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    digits, exp = _shortest_digits(x, single)
    sign = "-" if x < 0 else ""
    # Like PostgreSQL's shortest-decimal output: exponent form outside [-4, DIG).
    if exp < -4 or exp >= (6 if single else 15):
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    if len(digits) <= exp + 1:
        return sign + digits + "0" * (exp + 1 - len(digits))
    return f"{sign}{digits[: exp + 1]}.{digits[exp + 1 :]}"


def format_float8(x: float) -> str:
    """float8out with extra_float_digits >= 1: used to render geometric types from binary."""
    return _format_float(x, single=False)


def format_float4(x: float) -> str:
    """float4out with extra_float_digits >= 1."""
    return _format_float(x, single=True)


# --- strings --------------------------------------------------------------------------


def decode_str(data: bytes) -> str:
    """text, varchar, bpchar (padding kept), name, json, xml, enum labels, ...

    Their send functions send the characters as they are; their out functions print them
    as they are. bpchar keeps its trailing blanks in both formats.
    """
    return to_str(data)


def decode_jsonb_binary(data: bytes) -> str:
    """jsonb_send / jsonpath_send: a version byte (1) then the text form."""
    if not data or data[0] != 1:
        raise ValueConversionError("unsupported jsonb/jsonpath binary version", value=data)
    return to_str(data[1:])


def decode_char_binary(data: bytes) -> str:
    """ "char" (OID 18): one byte; rendered as charout does.

    charout prints a high-bit byte as a backslash and three octal digits and the zero
    byte as an empty string; we give the same text in both formats so they compare equal.
    """
    if len(data) > 1:
        raise ValueConversionError('"char" binary value must be at most 1 byte', value=data)
    if not data or data == b"\x00":
        return ""
    b = data[0]
    if b >= 0x80:
        return f"\\{b:03o}"
    return chr(b)


# --- bytea ----------------------------------------------------------------------------

_OCTAL = re.compile(rb"\\([0-3][0-7][0-7])|\\\\")


def decode_bytea_text(data: bytes) -> bytes:
    """byteaout: hex (``\\x0a0b``, the default) or escape format (bytea_output=escape)."""
    if data[:2] == b"\\x":
        try:
            return bytes.fromhex(data[2:].decode("ascii"))
        except ValueError:
            raise ValueConversionError("invalid hex bytea text", value=data) from None
    if b"\\" not in data:
        return bytes(data)

    def unescape(m: re.Match[bytes]) -> bytes:
        return bytes([int(m.group(1), 8)]) if m.group(1) else b"\\"

    # A backslash that starts no valid escape is an error in byteain too.
    if b"\\" in _OCTAL.sub(b"", data):
        raise ValueConversionError("invalid escape-format bytea text", value=data)
    return _OCTAL.sub(unescape, data)


def decode_bytea_binary(data: bytes) -> bytes:
    return bytes(data)


def format_bytea_hex(value: bytes) -> str:
    return "\\x" + value.hex()


def format_bytea_escape(value: bytes) -> str:
    """byteaout with bytea_output=escape: printable ASCII as is, ``\\\\``, else ``\\ooo``."""
    out = []
    for b in value:
        if b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b <= 0x7E:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


# --- uuid -----------------------------------------------------------------------------


def decode_uuid_text(data: bytes) -> _uuid.UUID:
    try:
        return _uuid.UUID(to_str(data))
    except ValueError:
        raise ValueConversionError("invalid uuid text", value=data) from None


def decode_uuid_binary(data: bytes) -> _uuid.UUID:
    if len(data) != 16:
        raise ValueConversionError("uuid binary value must be 16 bytes", value=data)
    return _uuid.UUID(bytes=bytes(data))


# --- system types rendered as their text form -------------------------------------------


def decode_tid_binary(data: bytes) -> str:
    """tidsend: uint32 block number, uint16 offset; tidout prints ``(block,offset)``."""
    r = Reader(data)
    block, offset = r.u32(), r.u16()
    r.expect_end()
    return f"({block},{offset})"


def decode_pg_lsn_binary(data: bytes) -> str:
    """pg_lsn_send: uint64; pg_lsn_out prints ``%X/%X`` (high and low 32 bits, hex)."""
    r = Reader(data)
    lsn = r.u64()
    r.expect_end()
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def decode_snapshot_binary(data: bytes) -> str:
    """pg_snapshot_send / txid_snapshot_send: int32 nxip, int64 xmin, int64 xmax, xips."""
    r = Reader(data)
    nxip = r.i32()
    xmin, xmax = r.i64(), r.i64()
    xips = [r.i64() for _ in range(nxip)]
    r.expect_end()
    return f"{xmin}:{xmax}:" + ",".join(map(str, xips))
