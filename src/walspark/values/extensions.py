"""Codecs of extension types with a well-known shape, found by name in the catalog (pgvector's vectors, hstore).

An extension's type OID differs from database to database, so these are registered from the
catalog rows (:func:`walspark.values.catalog.register_catalog_rows`) by the type's name, never by
OID. Other extension types are kept as their text (docs/types.md).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ._scan import Reader, to_str
from .codecs import Codec, ScalarCodec
from .errors import ValueConversionError

if TYPE_CHECKING:
    from .registry import ColumnOptions

__all__ = ["EXTENSION_CODECS", "HSTORE_ARROW_TYPE", "decode_hstore_binary", "parse_hstore"]

_HEADER = struct.Struct(">HH")  # pgvector's binary form: dimensions, an unused word, then the values


def _text(width: str) -> Callable[[bytes | memoryview], list[float]]:
    """``[1,2.5,-3]`` (pgvector's text form) -> the values, rounded to the type's own width
    (float4, or float2 for halfvec) and held as float4, as the binary form gives them."""

    def decode(data: bytes | memoryview) -> list[float]:
        text = bytes(data).decode("ascii").strip()
        if len(text) < 2 or text[0] != "[" or text[-1] != "]":
            raise ValueConversionError(f"not a vector: {text[:40]!r}")
        inner = text[1:-1].strip()
        if not inner:
            return []
        return np.array(inner.split(","), dtype=np.float64).astype(width).astype(np.float32).tolist()

    return decode


def _binary(width: str) -> Callable[[bytes | memoryview], list[float]]:
    """pgvector's ``vector_send`` (float4) or ``halfvec_send`` (float2) -> the values as float4."""
    size = np.dtype(width).itemsize

    def decode(data: bytes | memoryview) -> list[float]:
        raw = bytes(data)
        if len(raw) < _HEADER.size:
            raise ValueConversionError("vector value shorter than its header")
        dim, _ = _HEADER.unpack_from(raw)
        if len(raw) != _HEADER.size + dim * size:
            raise ValueConversionError(f"vector of {dim} dimensions is {len(raw)} bytes")
        return (
            np.frombuffer(raw, dtype=np.dtype(width).newbyteorder(">"), offset=_HEADER.size).astype(np.float32).tolist()
        )

    return decode


def _vector_codec(name: str, width: str) -> Callable[[int, int, ColumnOptions], Codec]:
    def make(oid: int, _typmod: int, _opts: ColumnOptions) -> Codec:
        return ScalarCodec(oid, name, pa.list_(pa.float32()), _text(width), _binary(width))

    return make


#: hstore in Arrow and Spark: a map of strings, its values nullable (``"k"=>NULL``), in the server's order.
HSTORE_ARROW_TYPE = pa.map_(pa.string(), pa.string())

HstorePairs = list[tuple[str, str | None]]


def _hstore_token(text: str, pos: int, stop: str) -> tuple[str, bool, int]:
    """One key or value of hstore's text form from ``pos``: a double-quoted string (a backslash
    escapes the next character), or an unquoted word ending at white space or ``stop``.
    Returns the token, whether it was quoted, and the position after it."""
    out: list[str] = []
    if text.startswith('"', pos):
        pos += 1
        while pos < len(text):
            ch = text[pos]
            if ch == "\\" and pos + 1 < len(text):
                out.append(text[pos + 1])
                pos += 2
            elif ch == '"':
                return "".join(out), True, pos + 1
            else:
                out.append(ch)
                pos += 1
        raise ValueConversionError(f"hstore: unterminated quoted string in {text[:60]!r}")
    start = pos
    while pos < len(text) and not text[pos].isspace() and text[pos] not in stop:
        if text[pos] == "\\" and pos + 1 < len(text):
            pos += 1
        out.append(text[pos])
        pos += 1
    if pos == start:
        raise ValueConversionError(f"hstore: a key or value expected at offset {pos} of {text[:60]!r}")
    return "".join(out), False, pos


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def parse_hstore(data: bytes | memoryview | str) -> HstorePairs:
    """hstore's text form (``"a"=>"1", "b c"=>NULL``, as hstore_out prints it; unquoted words
    as hstore_in reads them) -> its pairs in order; an unquoted ``NULL`` value is a NULL."""
    text = to_str(data)
    pairs: HstorePairs = []
    pos = _skip_space(text, 0)
    while pos < len(text):
        key, _, pos = _hstore_token(text, pos, "=")
        pos = _skip_space(text, pos)
        if not text.startswith("=>", pos):
            raise ValueConversionError(f"hstore: '=>' expected at offset {pos} of {text[:60]!r}")
        pos = _skip_space(text, pos + 2)
        value, quoted, pos = _hstore_token(text, pos, ",")
        pairs.append((key, None if not quoted and value.upper() == "NULL" else value))
        pos = _skip_space(text, pos)
        if pos < len(text):
            if text[pos] != ",":
                raise ValueConversionError(f"hstore: ',' expected at offset {pos} of {text[:60]!r}")
            pos = _skip_space(text, pos + 1)
    return pairs


def decode_hstore_binary(data: bytes | memoryview) -> HstorePairs:
    """hstore_send: an int32 count, then per pair the key (int32 length, bytes) and the value
    (int32 length, bytes; -1 for NULL)."""
    r = Reader(data)
    count = r.i32()
    if count < 0:
        raise ValueConversionError(f"hstore: negative pair count {count}", value=bytes(data))
    pairs: HstorePairs = []
    for _ in range(count):
        key = r.counted()
        if key is None:
            raise ValueConversionError("hstore: a NULL key", value=bytes(data))
        value = r.counted()
        pairs.append((to_str(key), None if value is None else to_str(value)))
    r.expect_end()
    return pairs


def _hstore_codec(oid: int, _typmod: int, _opts: ColumnOptions) -> Codec:
    return ScalarCodec(oid, "hstore", HSTORE_ARROW_TYPE, parse_hstore, decode_hstore_binary, to_python=dict)


#: Extension type name -> the factory of its codec (arguments: OID, typmod, column options).
EXTENSION_CODECS: dict[str, Callable[[int, int, ColumnOptions], Codec]] = {
    "vector": _vector_codec("vector", "f4"),
    "halfvec": _vector_codec("halfvec", "f2"),
    "hstore": _hstore_codec,
}
