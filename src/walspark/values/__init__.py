"""PostgreSQL value formats (text and binary) -> Python values, Arrow arrays, Spark types.

Pure: no I/O, no Spark import at module level. Entry points: :class:`TypeRegistry`,
:func:`to_arrow_array`, :func:`arrow_schema` / :func:`spark_schema`, :func:`decode_value`. See
docs/types.md for every type's mapping and each policy.
"""

from __future__ import annotations

from typing import Any

from . import oids
from .arrays import PgArray, format_array
from .arrow import (
    ColumnSpec,
    DecodedColumn,
    arrow_field,
    arrow_schema,
    column_codecs,
    decode_gathered,
    decode_tuples,
    default_registry,
    to_arrow_array,
    unchanged_columns_array,
)
from .catalog import TYPE_CATALOG_QUERY, UserTypes, register_catalog_rows, registry_of
from .codecs import UNCHANGED_TOAST, Codec
from .datetimes import PgDate, PgTime, PgTimestamp
from .errors import ValueConversionError
from .interval import Interval
from .numeric import NumericPolicy
from .ranges import Range
from .registry import ColumnOptions, TypeRegistry, UnknownTypeWarning
from .spark_types import spark_schema, spark_type

__all__ = [
    "RECOMMENDED_SESSION_SETTINGS",
    "TYPE_CATALOG_QUERY",
    "UNCHANGED_TOAST",
    "Codec",
    "ColumnOptions",
    "ColumnSpec",
    "DecodedColumn",
    "Interval",
    "NumericPolicy",
    "PgArray",
    "PgDate",
    "PgTime",
    "PgTimestamp",
    "Range",
    "TypeRegistry",
    "UnknownTypeWarning",
    "UserTypes",
    "ValueConversionError",
    "arrow_field",
    "arrow_schema",
    "column_codecs",
    "decode_gathered",
    "decode_tuples",
    "decode_value",
    "default_registry",
    "format_array",
    "oids",
    "register_catalog_rows",
    "registry_of",
    "spark_schema",
    "spark_type",
    "to_arrow_array",
    "unchanged_columns_array",
]

#: Settings for the replication connection under which every text form is parsed exactly
#: (pass as startup options, e.g. ``options='-c DateStyle=ISO ...'``).
RECOMMENDED_SESSION_SETTINGS: dict[str, str] = {
    "DateStyle": "ISO",
    "IntervalStyle": "postgres",
    "extra_float_digits": "1",
    "bytea_output": "hex",
    "client_encoding": "UTF8",
}


def decode_value(
    type_oid: int,
    kind: str,
    data: bytes | None,
    *,
    type_modifier: int = -1,
    registry: TypeRegistry | None = None,
    options: ColumnOptions | None = None,
) -> Any:
    """Decode one TupleData value to Python: 't' text, 'b' binary, 'n' -> None,
    'u' -> :data:`UNCHANGED_TOAST` (not None: the value exists but was not sent)."""
    reg = registry or default_registry()
    codec = reg.resolve(type_oid, type_modifier, options or ColumnOptions(), binary=kind == "b")
    return codec.decode(kind, data)
