"""Codecs: one object per resolved column type, decoding both formats to Python and Arrow.

Why objects: a column's Arrow type depends on more than its OID (numeric's typmod, the
column's policies, an array's element type, a composite's fields), and decoding an array
or range must delegate to the element's codec. A codec is built once per column (see
:class:`~walspark.values.registry.TypeRegistry`) and then used for every value.

Two parallel paths per codec:

* ``decode_text`` / ``decode_binary``: bytes -> the Python value (exact; see each type).
* ``text_storage`` / ``binary_storage``: bytes -> the scalar that ``pyarrow.array``
  accepts for ``arrow_type`` (days, microseconds, dicts, nested lists, ...), applying the
  column's policies. ``arrow_from_text`` / ``arrow_from_binary`` turn a whole column of
  values into an Arrow array, vectorised where exact.
"""

from __future__ import annotations

import struct
from types import ModuleType
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from walspark import compiled

from .arrays import ParsedArray, PgArray, decode_array_binary, parse_array_text, parse_vector_text
from .composite import decode_record_binary, parse_record_text
from .errors import ValueConversionError
from .ranges import ParsedRange, decode_multirange_binary, decode_range_binary, parse_multirange_text, parse_range_text

__all__ = [
    "Codec", "ScalarCodec", "TextCodec", "NumberCodec", "BoolCodec", "BinaryCodec",
    "ArrayCodec", "RangeCodec", "MultirangeCodec", "CompositeCodec", "UnknownCodec", "INTERVAL_ARROW_TYPE",
    "range_arrow_type", "UNCHANGED_TOAST",
]

Raw = bytes  # pgoutput hands values over as bytes
#: A column of raw values: bytes per row (None for no value), or the same as an Arrow binary
#: array (the compiled hot path builds that from the message buffers, no object per value).
RawColumn = Sequence[Raw | None] | pa.BinaryArray
Fn = Callable[[Any], Any]
_CONVERSION_ERRORS = (ValueError, struct.error, IndexError, TypeError, OverflowError, ArithmeticError)

#: interval in Arrow and Spark: PostgreSQL's three fields, kept apart.
INTERVAL_ARROW_TYPE = pa.struct(
    [pa.field("months", pa.int32()), pa.field("days", pa.int32()), pa.field("microseconds", pa.int64())]
)


class _UnchangedToast:
    """The value of a ``'u'`` TupleData column: not sent because it did not change.

    Deliberately not None: an unchanged TOAST value is not NULL, and code that treats it as
    NULL overwrites real data (the most reported bug of CDC tools).
    """

    __slots__ = ()
    _instance: "_UnchangedToast | None" = None

    def __new__(cls) -> "_UnchangedToast":
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


#: Returned by :meth:`Codec.decode` for kind ``'u'`` (compare with ``is``).
UNCHANGED_TOAST = _UnchangedToast()


def _identity(x: Any) -> Any:
    return x


class Codec:
    """Base class; see the module docstring. Subclasses set the decoding functions."""

    __slots__ = ("oid", "name", "arrow_type", "delimiter")

    def __init__(self, oid: int, name: str, arrow_type: pa.DataType, delimiter: str = ",") -> None:
        self.oid = oid
        self.name = name
        self.arrow_type = arrow_type
        self.delimiter = delimiter  # pg_type.typdelim, used when this is an array element

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} oid={self.oid} arrow={self.arrow_type}>"

    # -- per value -----------------------------------------------------------------
    def decode_text(self, data: Raw) -> Any:
        raise NotImplementedError

    def decode_binary(self, data: Raw) -> Any:
        raise NotImplementedError

    def text_storage(self, data: Raw) -> Any:
        return self.decode_text(data)

    def binary_storage(self, data: Raw) -> Any:
        return self.decode_binary(data)

    def decode(self, kind: str, data: Raw | None) -> Any:
        """One TupleData column: 't'/'b' decode, 'n' gives None, 'u' gives UNCHANGED_TOAST."""
        if kind == "t":
            return self._wrap(self.decode_text, data)
        if kind == "b":
            return self._wrap(self.decode_binary, data)
        if kind == "u":
            return UNCHANGED_TOAST
        if kind == "n":
            return None
        raise ValueConversionError(f"unknown TupleData column kind {kind!r}", type_name=self.name, type_oid=self.oid)

    # -- per column ------------------------------------------------------------------
    def arrow_from_text(self, values: RawColumn) -> pa.Array:
        return self._build(self.text_storage, values)

    def arrow_from_binary(self, values: RawColumn) -> pa.Array:
        return self._build(self.binary_storage, values)

    # -- helpers ---------------------------------------------------------------------
    def _wrap(self, fn: Fn, data: Any) -> Any:
        try:
            return fn(data)
        except ValueConversionError as exc:
            raise exc.with_context(type_name=self.name, type_oid=self.oid) from None
        except _CONVERSION_ERRORS as exc:
            raise ValueConversionError(
                f"cannot decode: {exc}", type_name=self.name, type_oid=self.oid,
                value=bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else data,
            ) from exc

    def _build(self, fn: Fn, values: RawColumn) -> pa.Array:
        values = raw_list(values)

        def run() -> list[Any]:
            return [None if v is None else fn(v) for v in values]

        items = self._wrap(lambda _: run(), None)
        try:
            return pa.array(items, type=self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise ValueConversionError(
                f"value does not fit {self.arrow_type}: {exc}", type_name=self.name, type_oid=self.oid
            ) from exc


class ScalarCodec(Codec):
    """A scalar type described by functions: raw decoders, then Python and storage views.

    ``text``/``binary`` turn bytes into an intermediate (e.g. PostgreSQL's day number);
    ``to_python`` and ``to_storage`` turn that into the Python value and the Arrow scalar.
    """

    __slots__ = ("_text", "_binary", "_py", "_store", "_vector_text", "_vector_binary")

    def __init__(
        self, oid: int, name: str, arrow_type: pa.DataType, text: Fn, binary: Fn | None,
        to_python: Fn = _identity, to_storage: Fn = _identity, delimiter: str = ",",
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


class _Fallback(Exception):
    """A vectorised path declines a column (e.g. it holds a sentinel); use the per-value one."""


#: The Arrow type of each struct format that the compiled path byte-swaps into place.
_FIXED_WIDTH = {"h": pa.int16(), "i": pa.int32(), "q": pa.int64(), "f": pa.float32(), "d": pa.float64()}


def unpack_column(values: RawColumn, fmt: str, arrow_type: pa.DataType,
                  speedups: ModuleType | None = compiled.speedups) -> pa.Array:  # fmt: skip
    """Fixed-size big-endian binary values -> an Arrow array, in one struct call.

    With the compiled path (``speedups``), an Arrow binary array of them is byte-swapped in C
    straight into the Arrow array's buffer instead: no Python object per value. Anything it
    declines takes the struct path, which is the reference.

    Raises _Fallback when a value has the wrong size, so that the per-value path reports it.
    """
    size = struct.calcsize(">" + fmt)
    if (speedups is not None and isinstance(values, pa.BinaryArray) and values.offset == 0
            and _FIXED_WIDTH.get(fmt) == arrow_type):  # fmt: skip
        validity, offsets, data = values.buffers()
        swapped = speedups.fixed_width(validity, offsets, data, len(values), size, fmt in "fd")
        if swapped is not None:
            return pa.Array.from_buffers(arrow_type, len(values), [validity, pa.py_buffer(swapped)], values.null_count)
    values = raw_list(values)
    present = [v for v in values if v is not None]
    if any(len(v) != size for v in present):
        raise _Fallback
    it = iter(struct.unpack(f">{len(present)}{fmt}", b"".join(present)))
    try:
        return pa.array([None if v is None else next(it) for v in values], type=arrow_type)
    except (pa.ArrowInvalid, OverflowError):
        raise _Fallback from None


def decimal_column(values: RawColumn, arrow_type: pa.DataType,
                   speedups: ModuleType | None = compiled.speedups) -> pa.Array:  # fmt: skip
    """numeric binary values -> Arrow decimal128, each summed into its 128-bit integer in C.

    Only on the compiled path, for an Arrow binary array; raises _Fallback (the per-value
    path, which is the reference: Decimal, the column's policy, the precise error) for
    anything else and for anything the C code declines (NaN, ±Infinity, a value that does not
    fit exactly, bytes numeric_send never sends).
    """
    if speedups is None or not isinstance(values, pa.BinaryArray) or values.offset:
        raise _Fallback
    validity, offsets, data = values.buffers()
    out = speedups.numeric_decimal128(validity, offsets, data, len(values), arrow_type.precision, arrow_type.scale)
    if out is None:
        raise _Fallback
    return pa.Array.from_buffers(arrow_type, len(values), [validity, pa.py_buffer(out)], values.null_count)


def shifted_column(values: RawColumn, fmt: str, storage: pa.DataType, offset: int,
                   sentinels: tuple[int, int], arrow_type: pa.DataType,
                   speedups: ModuleType | None = compiled.speedups) -> pa.Array:  # fmt: skip
    """date/timestamp binary -> Arrow: PostgreSQL's count from 2000 shifted to 1970.

    Declines (so the per-value path applies the infinity policy) when the column holds
    ±infinity or a value the shift would overflow.
    """
    raw = unpack_column(values, fmt, storage, speedups)
    lo, hi = pc.min_max(raw).values()
    if lo.is_valid and (lo.as_py() in sentinels or hi.as_py() in sentinels):
        raise _Fallback
    try:
        return pc.add_checked(raw, pa.scalar(offset, storage)).cast(arrow_type)
    except pa.ArrowInvalid:
        raise _Fallback from None


def raw_array(values: RawColumn) -> pa.BinaryArray:
    """A column of raw values as an Arrow binary array (as it is, when it already is one)."""
    return values if isinstance(values, pa.BinaryArray) else pa.array(values, type=pa.binary())


def raw_array_from_buffers(length: int, validity: bytes, offsets: bytes, data: bytes, null_count: int) -> pa.BinaryArray:
    """The Arrow binary array of buffers gathered elsewhere (``walspark_c``), wrapped without a copy."""
    return pa.Array.from_buffers(pa.binary(), length, [pa.py_buffer(validity), pa.py_buffer(offsets),
                                                       pa.py_buffer(data)], null_count)  # fmt: skip


def raw_list(values: RawColumn) -> Sequence[Raw | None]:
    """A column of raw values as bytes per row, for the per-value paths."""
    return values.to_pylist() if isinstance(values, pa.Array) else values


def _utf8_array(values: RawColumn) -> pa.Array:
    """bytes -> Arrow string array, with Arrow's vectorised UTF-8 validation."""
    return raw_array(values).cast(pa.string())


class TextCodec(ScalarCodec):
    """Types whose value is a string (text, varchar, json, enums, inet, tsvector...).

    ``fast_text``: the text form is the value itself, so a whole column converts with
    Arrow's vectorised UTF-8 check. ``binary_prefix``: the binary form is the same
    characters after that many leading bytes (0 for text, 1 for jsonb's version byte),
    so binary converts in bulk too; None when the binary form needs rendering.
    """

    __slots__ = ("_fast_text", "_prefix")

    def __init__(self, oid: int, name: str, text: Fn, binary: Fn | None, *, fast_text: bool = True,
                 binary_prefix: int | None = None, delimiter: str = ",") -> None:
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


# --- containers -------------------------------------------------------------------------

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

    __slots__ = ("element", "ndims", "ignore_bounds", "vector")

    def __init__(self, oid: int, name: str, element: Codec, ndims: int = 1, *,
                 ignore_bounds: bool = False, vector: bool = False) -> None:
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
    return pa.struct([
        pa.field("lower", elem), pa.field("upper", elem), pa.field("lower_inc", pa.bool_()),
        pa.field("upper_inc", pa.bool_()), pa.field("empty", pa.bool_()),
    ])


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

