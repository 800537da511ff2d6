"""Codecs of extension types with a well-known shape, found by name in the catalog (pgvector's vectors).

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

from .codecs import Codec, ScalarCodec
from .errors import ValueConversionError

if TYPE_CHECKING:
    from .registry import ColumnOptions

__all__ = ["EXTENSION_CODECS"]

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


#: Extension type name -> the factory of its codec (arguments: OID, typmod, column options).
EXTENSION_CODECS: dict[str, Callable[[int, int, ColumnOptions], Codec]] = {
    "vector": _vector_codec("vector", "f4"),
    "halfvec": _vector_codec("halfvec", "f2"),
}
