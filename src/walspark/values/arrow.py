"""Relation columns -> Arrow schema, and TupleData columns -> Arrow arrays, in bulk.

A column at a time, so Arrow's vectorised casts do the work; unchanged TOAST values come back as
a separate mask, never as NULL. See docs/design/values.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from .codecs import Codec, RawColumn, raw_array_from_buffers
from .errors import ValueConversionError
from .registry import DEFAULT_OPTIONS, ColumnOptions, TypeRegistry

__all__ = [
    "ColumnSpec",
    "DecodedColumn",
    "arrow_field",
    "arrow_schema",
    "column_codecs",
    "decode_gathered",
    "decode_tuples",
    "default_registry",
    "to_arrow_array",
    "unchanged_columns_array",
]

_KINDS = {
    "n": "n",
    "u": "u",
    "t": "t",
    "b": "b",
    b"n": "n",
    b"u": "u",
    b"t": "t",
    b"b": "b",
    110: "n",
    117: "u",
    116: "t",
    98: "b",
    None: "n",
}


class ColumnSpec(Protocol):
    """What a Relation message's column offers (walspark.protocol.RelationColumn fits)."""

    @property
    def name(self) -> str: ...
    @property
    def type_oid(self) -> int: ...
    @property
    def type_modifier(self) -> int: ...


_DEFAULT_REGISTRY = TypeRegistry()


def default_registry() -> TypeRegistry:
    """A process-wide registry, for callers with one source database."""
    return _DEFAULT_REGISTRY


@dataclass(frozen=True, slots=True)
class DecodedColumn:
    """One decoded column of a batch.

    ``array``: the values; NULL where the value was NULL *or* unchanged TOAST.
    ``unchanged``: a boolean array, True where the value was unchanged TOAST (``'u'``);
    None when no value in the batch was (the common case, at no cost).
    """

    array: pa.Array
    unchanged: pa.BooleanArray | None

    def unchanged_mask(self) -> pa.BooleanArray:
        if self.unchanged is None:
            return pa.array([False] * len(self.array), type=pa.bool_())
        return self.unchanged


def _norm_kinds(kinds: Iterable[Any]) -> list[str]:
    try:
        return [_KINDS[k] for k in kinds]
    except KeyError as exc:
        raise ValueConversionError(f"unknown TupleData column kind {exc.args[0]!r}") from None


def to_arrow_array(
    codec: Codec,
    kinds: Iterable[Any],
    values: Sequence[bytes | None],
    *,
    column: str | None = None,
) -> DecodedColumn:
    """Decode one column of a batch of TupleData values into Arrow.

    ``kinds`` has one entry per row: ``'n'`` NULL, ``'u'`` unchanged TOAST, ``'t'`` text,
    ``'b'`` binary (a str of such characters, bytes, or single-character strings all work).
    ``values`` holds the raw bytes for 't'/'b' rows (anything for 'n'/'u' rows). Text and
    binary values may be mixed in one batch. Errors name ``column``.
    """
    ks = _norm_kinds(kinds)
    if len(ks) != len(values):
        raise ValueError(f"{len(ks)} kinds for {len(values)} values")
    present = set(ks)
    unchanged = pa.array([k == "u" for k in ks], type=pa.bool_()) if "u" in present else None

    def only(kind: str) -> list[bytes | None]:
        return [v if k == kind else None for k, v in zip(ks, values)]

    if "t" in present and "b" in present:  # text and binary values in one column: rare
        try:
            t, b = codec.arrow_from_text(only("t")), codec.arrow_from_binary(only("b"))
        except ValueConversionError as exc:
            raise exc.with_context(column=column, type_name=codec.name, type_oid=codec.oid) from None
        return DecodedColumn(_whole(pc.if_else(pa.array([k == "b" for k in ks], type=pa.bool_()), b, t)), unchanged)
    if "t" in present:
        return DecodedColumn(_convert(codec, only("t"), binary=False, length=len(ks), column=column), unchanged)
    if "b" in present:
        return DecodedColumn(_convert(codec, only("b"), binary=True, length=len(ks), column=column), unchanged)
    return DecodedColumn(pa.nulls(len(ks), type=codec.arrow_type), unchanged)


def _convert(codec: Codec, raw: RawColumn | None, *, binary: bool, length: int, column: str | None) -> pa.Array:
    """One column's raw values (all text or all binary; None: no value at all) through its codec."""
    if raw is None:
        return pa.nulls(length, type=codec.arrow_type)
    try:
        return _whole(codec.arrow_from_binary(raw) if binary else codec.arrow_from_text(raw))
    except ValueConversionError as exc:
        raise exc.with_context(column=column, type_name=codec.name, type_oid=codec.oid) from None


def _whole(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def gathered_array(codec: Codec, gathered: tuple[Any, ...], length: int, *, column: str | None = None) -> DecodedColumn:
    """Like :func:`to_arrow_array`, for a column the compiled hot path gathered into Arrow buffers.

    ``gathered`` is one column of ``walspark_c.gather_columns``: ``(flags, null_count, kinds,
    validity, unchanged, offsets, data)``. The buffers become an Arrow binary array as they are;
    the codec converts that array as it would the list of bytes, so both paths give one result.
    """
    from walspark_c import HAS_BINARY, HAS_TEXT, HAS_UNCHANGED

    flags, null_count, kinds, validity, unchanged_bits, offsets, data = gathered
    raw = raw_array_from_buffers(length, validity, offsets, data, null_count)
    if flags & HAS_TEXT and flags & HAS_BINARY:
        return to_arrow_array(codec, kinds, raw.to_pylist(), column=column)
    unchanged = (pa.Array.from_buffers(pa.bool_(), length, [None, pa.py_buffer(unchanged_bits)])
                 if flags & HAS_UNCHANGED else None)  # fmt: skip
    present = raw if flags & (HAS_TEXT | HAS_BINARY) else None
    return DecodedColumn(_convert(codec, present, binary=bool(flags & HAS_BINARY), length=length, column=column),
                         unchanged)  # fmt: skip


def unchanged_columns_array(
    names: Sequence[str], columns: Sequence[DecodedColumn | pa.BooleanArray | None], length: int
) -> pa.ListArray:
    """Per row, the names of the columns whose value was unchanged TOAST (``list<string>``).

    Rows with none get an empty list (not NULL), so "no unchanged column" is explicit.
    """
    masks: list[list[bool] | None] = []
    for c in columns:
        m = c.unchanged if isinstance(c, DecodedColumn) else c
        masks.append(None if m is None else m.to_pylist())
    if all(m is None for m in masks):  # the common case: every row gets an empty list, built from buffers
        zeros = pa.Array.from_buffers(pa.int32(), length + 1, [None, pa.py_buffer(bytes(4 * (length + 1)))])
        return pa.ListArray.from_arrays(zeros, pa.array([], pa.string()))
    rows: list[list[str]] = [[] for _ in range(length)]
    for name, m in zip(names, masks):
        if m is None:
            continue
        for i, flag in enumerate(m):
            if flag:
                rows[i].append(name)
    return pa.array(rows, type=pa.list_(pa.string()))


def _spec(column: Any) -> tuple[str, int, int]:
    if isinstance(column, tuple):
        name, oid, mod = column
        return str(name), int(oid), int(mod)
    return column.name, int(column.type_oid), int(column.type_modifier)


def _options_for(name: str, options: ColumnOptions | Mapping[str, ColumnOptions] | None) -> ColumnOptions:
    if options is None:
        return DEFAULT_OPTIONS
    if isinstance(options, ColumnOptions):
        return options
    return options.get(name, options.get("*", DEFAULT_OPTIONS))


def column_codecs(
    columns: Sequence[ColumnSpec | tuple[str, int, int]],
    registry: TypeRegistry | None = None,
    options: ColumnOptions | Mapping[str, ColumnOptions] | None = None,
    *,
    binary: bool = False,
) -> list[Codec]:
    """The codec of each Relation column. ``options`` is one ColumnOptions for all, or a
    mapping column name -> ColumnOptions (key ``"*"`` for the rest)."""
    reg = registry or _DEFAULT_REGISTRY
    out = []
    for c in columns:
        name, oid, mod = _spec(c)
        out.append(reg.resolve(oid, mod, _options_for(name, options), binary=binary))
    return out


def arrow_field(name: str, codec: Codec, type_modifier: int = -1) -> pa.Field:
    """A nullable Arrow field carrying the PostgreSQL type in its metadata."""
    return pa.field(
        name,
        codec.arrow_type,
        nullable=True,
        metadata={
            b"pg.type": codec.name.encode(),
            b"pg.type_oid": str(codec.oid).encode(),
            b"pg.type_modifier": str(type_modifier).encode(),
        },
    )


def arrow_schema(
    columns: Sequence[ColumnSpec | tuple[str, int, int]],
    registry: TypeRegistry | None = None,
    options: ColumnOptions | Mapping[str, ColumnOptions] | None = None,
    *,
    binary: bool = False,
) -> pa.Schema:
    """The Arrow schema of a Relation message's columns (see docs/types.md)."""
    codecs = column_codecs(columns, registry, options, binary=binary)
    return pa.schema([arrow_field(_spec(c)[0], k, _spec(c)[2]) for c, k in zip(columns, codecs)])


def decode_tuples(
    columns: Sequence[ColumnSpec | tuple[str, int, int]],
    tuples: Sequence[Any],
    registry: TypeRegistry | None = None,
    options: ColumnOptions | Mapping[str, ColumnOptions] | None = None,
    *,
    binary: bool = False,
) -> tuple[pa.RecordBatch, pa.ListArray]:
    """Decode TupleData rows (objects with ``kinds`` and ``values``, like
    walspark.protocol.TupleData) into a record batch plus the per-row list of
    unchanged-TOAST column names."""
    codecs = column_codecs(columns, registry, options, binary=binary)
    names = [_spec(c)[0] for c in columns]
    decoded = [to_arrow_array(codec, [t.kinds[j] for t in tuples], [t.values[j] for t in tuples], column=name)
               for j, (name, codec) in enumerate(zip(names, codecs))]  # fmt: skip
    return _batch(columns, names, codecs, decoded, len(tuples))


def decode_gathered(
    columns: Sequence[ColumnSpec | tuple[str, int, int]],
    gathered: Sequence[tuple[Any, ...]],
    length: int,
    registry: TypeRegistry | None = None,
    options: ColumnOptions | Mapping[str, ColumnOptions] | None = None,
    *,
    binary: bool = False,
) -> tuple[pa.RecordBatch, pa.ListArray]:
    """:func:`decode_tuples` for rows the compiled hot path gathered (``walspark_c.gather_columns``)."""
    codecs = column_codecs(columns, registry, options, binary=binary)
    names = [_spec(c)[0] for c in columns]
    decoded = [gathered_array(codec, g, length, column=name) for name, codec, g in zip(names, codecs, gathered)]
    return _batch(columns, names, codecs, decoded, length)


def _batch(
    columns: Sequence[ColumnSpec | tuple[str, int, int]],
    names: Sequence[str],
    codecs: Sequence[Codec],
    decoded: Sequence[DecodedColumn],
    length: int,
) -> tuple[pa.RecordBatch, pa.ListArray]:
    schema = pa.schema([arrow_field(n, k, _spec(c)[2]) for n, k, c in zip(names, codecs, columns)])
    batch = pa.RecordBatch.from_arrays([d.array for d in decoded], schema=schema)
    return batch, unchanged_columns_array(names, decoded, length)
