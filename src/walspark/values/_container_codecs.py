"""The container codecs: arrays, ranges, multiranges and composites, over their elements' codecs.

Why a module of its own: each of these holds the codec of its element (or fields) and
delegates every value to it, reading its own text or binary format with the parsers of
:mod:`.arrays`, :mod:`.ranges` and :mod:`.composite`; :mod:`walspark.values.codecs`
re-exports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ._codec_base import Codec, Fn
from ._columns import Raw
from .arrays import ParsedArray, PgArray, decode_array_binary, parse_array_text, parse_vector_text
from .composite import decode_record_binary, parse_record_text
from .errors import ValueConversionError
from .ranges import ParsedRange, decode_multirange_binary, decode_range_binary, parse_multirange_text, parse_range_text


def _nested_list_type(elem: pa.DataType, ndims: int) -> pa.DataType:
    t = elem
    for _ in range(ndims):
        t = pa.list_(t)
    return t


class ArrayCodec(Codec):
    """Arrays of any element codec.

    Arrow/Spark: ``list<elem>`` nested ``ndims`` times (a column option, default 1;
    PostgreSQL does not enforce a column's dimension count, so it cannot be inferred from
    the type). A value with another dimension count, or with lower bounds other than 1,
    raises :class:`ValueConversionError` unless ``ignore_bounds`` is set — never silently
    reshaped. ``{}`` is an empty list whatever ``ndims`` is.
    """

    __slots__ = ("element", "ignore_bounds", "ndims", "vector")

    def __init__(
        self, oid: int, name: str, element: Codec, ndims: int = 1, *, ignore_bounds: bool = False, vector: bool = False
    ) -> None:
        super().__init__(oid, name, _nested_list_type(element.arrow_type, max(ndims, 1)))
        self.element = element
        self.ndims = max(ndims, 1)
        self.ignore_bounds = ignore_bounds or vector
        self.vector = vector  # int2vector/oidvector: blank-separated text, lower bound 0

    def _parse_text(self, data: Raw) -> ParsedArray:
        if self.vector:
            return parse_vector_text(data)
        return parse_array_text(data, self.element.delimiter)

    def _python(self, p: ParsedArray) -> Any:
        if p.default_bounds or not p.dims or self.vector:
            return p.nested()
        return PgArray(p.nested(), p.lower_bounds)

    def _storage(self, p: ParsedArray) -> Any:
        if not p.dims:
            return []
        if len(p.dims) != self.ndims:
            raise ValueConversionError(
                f"array has {len(p.dims)} dimensions but the column is declared with {self.ndims} "
                "(set ColumnOptions.array_ndims)"
            )
        if not self.ignore_bounds and not p.default_bounds:
            raise ValueConversionError(
                f"array lower bounds {p.lower_bounds} are not 1 (set ColumnOptions.array_ignore_bounds)"
            )
        return p.nested()

    def decode_text(self, data: Raw) -> Any:
        return self._python(self._parse_text(data).map(lambda e: self.element.decode_text(e.encode())))

    def decode_binary(self, data: Raw) -> Any:
        return self._python(decode_array_binary(data).map(self.element.decode_binary))

    def text_storage(self, data: Raw) -> Any:
        return self._storage(self._parse_text(data).map(lambda e: self.element.text_storage(e.encode())))

    def binary_storage(self, data: Raw) -> Any:
        return self._storage(decode_array_binary(data).map(self.element.binary_storage))


class RangeCodec(Codec):
    """Ranges: Python :class:`~walspark.values.ranges.Range`, Arrow struct (see ranges.py)."""

    __slots__ = ("element",)

    def __init__(self, oid: int, name: str, element: Codec) -> None:
        super().__init__(oid, name, range_arrow_type(element.arrow_type))
        self.element = element

    def decode_text(self, data: Raw) -> Any:
        return parse_range_text(data).map(lambda e: self.element.decode_text(e.encode()))

    def decode_binary(self, data: Raw) -> Any:
        return decode_range_binary(data).map(self.element.decode_binary)

    def text_storage(self, data: Raw) -> Any:
        return parse_range_text(data).map(lambda e: self.element.text_storage(e.encode())).as_dict()

    def binary_storage(self, data: Raw) -> Any:
        return decode_range_binary(data).map(self.element.binary_storage).as_dict()


def range_arrow_type(elem: pa.DataType) -> pa.DataType:
    return pa.struct(
        [
            pa.field("lower", elem),
            pa.field("upper", elem),
            pa.field("lower_inc", pa.bool_()),
            pa.field("upper_inc", pa.bool_()),
            pa.field("empty", pa.bool_()),
        ]
    )


class MultirangeCodec(Codec):
    """Multiranges: a list of ranges in Python, Arrow and Spark."""

    __slots__ = ("range",)

    def __init__(self, oid: int, name: str, range_codec: RangeCodec) -> None:
        super().__init__(oid, name, pa.list_(range_codec.arrow_type))
        self.range = range_codec

    def _map(self, parsed: list[ParsedRange], fn: Fn, storage: bool) -> list[Any]:
        out = [r.map(fn) for r in parsed]
        return [r.as_dict() for r in out] if storage else out

    def decode_text(self, data: Raw) -> Any:
        el = self.range.element
        return self._map(parse_multirange_text(data), lambda e: el.decode_text(e.encode()), False)

    def decode_binary(self, data: Raw) -> Any:
        return self._map(decode_multirange_binary(data), self.range.element.decode_binary, False)

    def text_storage(self, data: Raw) -> Any:
        el = self.range.element
        return self._map(parse_multirange_text(data), lambda e: el.text_storage(e.encode()), True)

    def binary_storage(self, data: Raw) -> Any:
        return self._map(decode_multirange_binary(data), self.range.element.binary_storage, True)


class CompositeCodec(Codec):
    """A registered composite type: Python ``dict``, Arrow/Spark ``struct``."""

    __slots__ = ("fields",)

    def __init__(self, oid: int, name: str, fields: Sequence[tuple[str, Codec]]) -> None:
        super().__init__(oid, name, pa.struct([pa.field(n, c.arrow_type) for n, c in fields]))
        self.fields = list(fields)

    def _check(self, n: int, data: Raw) -> None:
        if n != len(self.fields):
            raise ValueConversionError(
                f"record has {n} fields, the registered type has {len(self.fields)}", value=bytes(data)
            )

    def _text(self, data: Raw, storage: bool) -> dict[str, Any]:
        raw = parse_record_text(data)
        self._check(len(raw), data)
        return {
            name: None if v is None else (c.text_storage if storage else c.decode_text)(v.encode())
            for (name, c), v in zip(self.fields, raw)
        }

    def _binary(self, data: Raw, storage: bool) -> dict[str, Any]:
        raw = decode_record_binary(data)
        self._check(len(raw), data)
        return {
            name: None if v is None else (c.binary_storage if storage else c.decode_binary)(v)
            for (name, c), (_oid, v) in zip(self.fields, raw)
        }

    def decode_text(self, data: Raw) -> Any:
        return self._text(data, False)

    def decode_binary(self, data: Raw) -> Any:
        return self._binary(data, False)

    def text_storage(self, data: Raw) -> Any:
        return self._text(data, True)

    def binary_storage(self, data: Raw) -> Any:
        return self._binary(data, True)
