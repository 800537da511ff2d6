"""Codecs: one object per resolved column type, decoding both formats to Python and Arrow.

Here are the scalar codecs and the unknown-type fallback, and every codec's name, as the one
place to import codecs from. See docs/design/values.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ._codec_base import UNCHANGED_TOAST, Codec, Fn

# Re-exported: names of this module (the registry, arrow.py and the snapshot source import them from here).
from ._columns import (  # noqa: F401
    Raw,
    RawColumn,
    _Fallback,
    _utf8_array,
    decimal_column,
    raw_array,
    raw_array_from_buffers,
    raw_list,
    shifted_column,
    unpack_column,
)
from ._container_codecs import ArrayCodec, CompositeCodec, MultirangeCodec, RangeCodec, range_arrow_type
from .errors import ValueConversionError

__all__ = [
    "INTERVAL_ARROW_TYPE",
    "UNCHANGED_TOAST",
    "ArrayCodec",
    "BinaryCodec",
    "BoolCodec",
    "Codec",
    "CompositeCodec",
    "MultirangeCodec",
    "NumberCodec",
    "RangeCodec",
    "ScalarCodec",
    "TextCodec",
    "UnknownCodec",
    "range_arrow_type",
]

#: interval in Arrow and Spark: PostgreSQL's three fields, kept apart.
INTERVAL_ARROW_TYPE = pa.struct(
    [pa.field("months", pa.int32()), pa.field("days", pa.int32()), pa.field("microseconds", pa.int64())]
)


def _identity(x: Any) -> Any:
    return x


class ScalarCodec(Codec):
    """A scalar type described by functions: raw decoders, then Python and storage views.

    ``text``/``binary`` turn bytes into an intermediate (e.g. PostgreSQL's day number);
    ``to_python`` and ``to_storage`` turn that into the Python value and the Arrow scalar.
    """

    __slots__ = ("_binary", "_py", "_store", "_text", "_vector_binary", "_vector_text")

    def __init__(
        self,
        oid: int,
        name: str,
        arrow_type: pa.DataType,
        text: Fn,
        binary: Fn | None,
        to_python: Fn = _identity,
        to_storage: Fn = _identity,
        delimiter: str = ",",
        vector_text: Callable[[pa.Array], pa.Array] | None = None,
        vector_binary: Callable[[RawColumn], pa.Array] | None = None,
    ) -> None:
        super().__init__(oid, name, arrow_type, delimiter)
        self._text, self._binary, self._py, self._store = text, binary, to_python, to_storage
        # A whole-column conversion of the text values, used when it is exact: Arrow's
        # parsers are strict, so anything they cannot read exactly (BC dates, years past
        # 9999, infinity, NaN, offsets with seconds) fails, and the column then goes
        # through the per-value path, which applies the column's policies.
        self._vector_text = vector_text
        self._vector_binary = vector_binary

    def arrow_from_binary(self, values: RawColumn) -> pa.Array:
        if self._vector_binary is not None:
            try:
                return self._vector_binary(values)
            except _Fallback:
                pass
        return super().arrow_from_binary(values)

    def arrow_from_text(self, values: RawColumn) -> pa.Array:
        if self._vector_text is not None:
            try:
                return self._vector_text(_utf8_array(values))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass
        return super().arrow_from_text(values)

    def _bin(self) -> Fn:
        if self._binary is None:
            raise ValueConversionError("type has no binary format", type_name=self.name, type_oid=self.oid)
        return self._binary

    def decode_text(self, data: Raw) -> Any:
        return self._py(self._text(data))

    def decode_binary(self, data: Raw) -> Any:
        return self._py(self._bin()(data))

    def text_storage(self, data: Raw) -> Any:
        return self._store(self._text(data))

    def binary_storage(self, data: Raw) -> Any:
        return self._store(self._bin()(data))


class TextCodec(ScalarCodec):
    """Types whose value is a string (text, varchar, json, enums, inet, tsvector...).

    ``fast_text``: the text form is the value itself, so a whole column converts with
    Arrow's vectorised UTF-8 check. ``binary_prefix``: the binary form is the same
    characters after that many leading bytes (0 for text, 1 for jsonb's version byte),
    so binary converts in bulk too; None when the binary form needs rendering.
    """

    __slots__ = ("_fast_text", "_prefix")

    def __init__(
        self,
        oid: int,
        name: str,
        text: Fn,
        binary: Fn | None,
        *,
        fast_text: bool = True,
        binary_prefix: int | None = None,
        delimiter: str = ",",
    ) -> None:
        super().__init__(oid, name, pa.string(), text, binary, delimiter=delimiter)
        self._fast_text = fast_text
        self._prefix = binary_prefix

    def arrow_from_text(self, values: RawColumn) -> pa.Array:
        if self._fast_text:
            try:
                return _utf8_array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass  # per value below, for a precise error
        return super().arrow_from_text(values)

    def arrow_from_binary(self, values: RawColumn) -> pa.Array:
        if self._prefix == 0:
            try:
                return _utf8_array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass
        return super().arrow_from_binary(values)


class NumberCodec(ScalarCodec):
    """Integers and floats: Arrow's exact string->number cast for text, one struct format for binary.

    Arrow's integer cast is exact and its float parser correctly rounded; it also accepts
    "nan", "inf" and "infinity" in any case, so PostgreSQL's float spellings need nothing
    special. Anything Arrow refuses falls back to the per-value path for the precise error.
    """

    __slots__ = ("_fmt",)

    def __init__(self, oid: int, name: str, arrow_type: pa.DataType, text: Fn, binary: Fn, fmt: str) -> None:
        super().__init__(oid, name, arrow_type, text, binary)
        self._fmt = fmt

    def arrow_from_text(self, values: RawColumn) -> pa.Array:
        try:
            return pc.cast(_utf8_array(values), self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return super().arrow_from_text(values)

    def arrow_from_binary(self, values: RawColumn) -> pa.Array:
        try:
            return unpack_column(values, self._fmt, self.arrow_type)
        except _Fallback:
            return super().arrow_from_binary(values)  # raises the precise error


class BoolCodec(ScalarCodec):
    __slots__ = ()

    def arrow_from_text(self, values: RawColumn) -> pa.Array:
        arr = raw_array(values)
        is_t, is_f = pc.equal(arr, pa.scalar(b"t")), pc.equal(arr, pa.scalar(b"f"))
        if pc.all(pc.or_kleene(is_t, is_f)).as_py() in (True, None):
            return is_t
        return super().arrow_from_text(values)


class BinaryCodec(ScalarCodec):
    """bytea: the binary format is the bytes themselves (zero Python work per value)."""

    __slots__ = ()

    def arrow_from_binary(self, values: RawColumn) -> pa.Array:
        return raw_array(values)


class UnknownCodec(Codec):
    """Any type walspark does not know (extension types, unregistered user types).

    Text values are kept as strings, binary values as bytes; the column's Arrow type is
    ``string`` or ``binary`` according to the stream's mode. A text value in a binary
    column is stored as its UTF-8 bytes; a binary value in a string column raises (it
    would need the type's own decoder). The registry warns once per type.
    """

    __slots__ = ()

    def decode_text(self, data: Raw) -> Any:
        from ._scan import to_str

        return to_str(data)

    def decode_binary(self, data: Raw) -> Any:
        return bytes(data)

    def text_storage(self, data: Raw) -> Any:
        return bytes(data) if pa.types.is_binary(self.arrow_type) else self.decode_text(data)

    def binary_storage(self, data: Raw) -> Any:
        if pa.types.is_binary(self.arrow_type):
            return bytes(data)
        raise ValueConversionError(
            "binary value of an unknown type in a text-mode column (resolve the schema with binary=True)"
        )

    def arrow_from_text(self, values: RawColumn) -> pa.Array:
        if pa.types.is_binary(self.arrow_type):
            return raw_array(values)
        try:
            return _utf8_array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return super().arrow_from_text(values)

    def arrow_from_binary(self, values: RawColumn) -> pa.Array:
        if pa.types.is_binary(self.arrow_type):
            return raw_array(values)
        return super().arrow_from_binary(values)
