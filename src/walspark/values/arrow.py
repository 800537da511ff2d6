"""Relation columns -> Arrow schema, and TupleData columns -> Arrow arrays, in bulk.

Why column at a time: the pipeline turns batches of change rows into Arrow record
batches; decoding one column of N rows with one codec lets Arrow's vectorised casts do
the work (integers, floats, strings) and avoids building per-row Python objects.

Unchanged TOAST values (kind ``'u'``) are not NULL. :func:`to_arrow_array` returns them
as nulls in the array *and* as a separate boolean mask; :func:`unchanged_columns_array`
turns the masks of a batch into the change row's ``list<string>`` column naming, per
row, the columns whose value was not sent. A consumer (MERGE) then keeps the target's
current value for those columns instead of writing NULL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .codecs import Codec
from .errors import ValueConversionError
from .registry import DEFAULT_OPTIONS, ColumnOptions, TypeRegistry

__all__ = [
    "ColumnSpec", "DecodedColumn", "to_arrow_array", "unchanged_columns_array", "arrow_field",
    "arrow_schema", "column_codecs", "decode_tuples", "default_registry",
]

_KINDS = {"n": "n", "u": "u", "t": "t", "b": "b", b"n": "n", b"u": "u", b"t": "t", b"b": "b",
          110: "n", 117: "u", 116: "t", 98: "b", None: "n"}


class ColumnSpec(Protocol):
    """What a Relation message's column offers (walspark.protocol.RelationColumn fits)."""

    name: str
    type_oid: int
    type_modifier: int


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
    try:
        if "t" in present and "b" not in present:
            arr = codec.arrow_from_text([v if k == "t" else None for k, v in zip(ks, values)])
        elif "b" in present and "t" not in present:
            arr = codec.arrow_from_binary([v if k == "b" else None for k, v in zip(ks, values)])
        elif "t" in present:
            t = codec.arrow_from_text([v if k == "t" else None for k, v in zip(ks, values)])
            b = codec.arrow_from_binary([v if k == "b" else None for k, v in zip(ks, values)])
            arr = pc.if_else(pa.array([k == "b" for k in ks], type=pa.bool_()), b, t)
        else:
            arr = pa.nulls(len(ks), type=codec.arrow_type)
    except ValueConversionError as exc:
        raise exc.with_context(column=column, type_name=codec.name, type_oid=codec.oid) from None
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    unchanged = pa.array([k == "u" for k in ks], type=pa.bool_()) if "u" in present else None
    return DecodedColumn(arr, unchanged)


def unchanged_columns_array(names: Sequence[str], columns: Sequence[DecodedColumn | pa.BooleanArray | None],
                            length: int) -> pa.ListArray:
    """Per row, the names of the columns whose value was unchanged TOAST (``list<string>``).

    Rows with none get an empty list (not NULL), so "no unchanged column" is explicit.
    """
    masks: list[list[bool] | None] = []
    for c in columns:
        m = c.unchanged if isinstance(c, DecodedColumn) else c
        masks.append(None if m is None else m.to_pylist())
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
    return pa.field(name, codec.arrow_type, nullable=True, metadata={
        b"pg.type": codec.name.encode(), b"pg.type_oid": str(codec.oid).encode(),
        b"pg.type_modifier": str(type_modifier).encode(),
    })


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
    decoded = []
    for j, (name, codec) in enumerate(zip(names, codecs)):
        kinds = [t.kinds[j] for t in tuples]
        values = [t.values[j] for t in tuples]
        decoded.append(to_arrow_array(codec, kinds, values, column=name))
    schema = pa.schema([arrow_field(n, k, _spec(c)[2]) for n, k, c in zip(names, codecs, columns)])
    batch = pa.RecordBatch.from_arrays([d.array for d in decoded], schema=schema)
    return batch, unchanged_columns_array(names, decoded, len(tuples))
