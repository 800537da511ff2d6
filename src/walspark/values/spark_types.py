"""Arrow types -> Spark types, and Relation columns -> a Spark StructType.

Why derived from Arrow: the Arrow type of each column is chosen so that Spark (and
Delta) can take the Arrow batch as it is; deriving the Spark type mechanically keeps the
two in step. pyspark is imported inside the functions: ``values`` must not need Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .registry import ColumnOptions, TypeRegistry

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import DataType, StructType

__all__ = ["spark_schema", "spark_type"]


def spark_type(arrow_type: pa.DataType) -> DataType:
    """The Spark type holding exactly the values of ``arrow_type``."""
    from pyspark.sql import types as T

    t = arrow_type
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_int16(t):
        return T.ShortType()
    if pa.types.is_int32(t):
        return T.IntegerType()
    if pa.types.is_int64(t):
        return T.LongType()
    if pa.types.is_float32(t):
        return T.FloatType()
    if pa.types.is_float64(t):
        return T.DoubleType()
    if pa.types.is_decimal(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return T.StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return T.BinaryType()
    if pa.types.is_date32(t):
        return T.DateType()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return T.ArrayType(spark_type(t.value_type), containsNull=True)
    if pa.types.is_map(t):
        return T.MapType(spark_type(t.key_type), spark_type(t.item_type), valueContainsNull=True)
    if pa.types.is_struct(t):
        return T.StructType(
            [T.StructField(t.field(i).name, spark_type(t.field(i).type), True) for i in range(t.num_fields)]
        )
    raise TypeError(f"no Spark type for Arrow type {t}")


def spark_schema(
    columns: Sequence[Any] | pa.Schema,
    registry: TypeRegistry | None = None,
    options: ColumnOptions | Mapping[str, ColumnOptions] | None = None,
    *,
    binary: bool = False,
) -> StructType:
    """A Spark StructType for Relation columns (or for an Arrow schema from arrow_schema).

    Field metadata carries the PostgreSQL type (``pg.type``, ``pg.type_oid``,
    ``pg.type_modifier``) like the Arrow fields do.
    """
    from pyspark.sql import types as T

    from .arrow import arrow_schema

    schema = columns if isinstance(columns, pa.Schema) else arrow_schema(columns, registry, options, binary=binary)
    fields = []
    for f in schema:
        md = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
        fields.append(T.StructField(f.name, spark_type(f.type), True, md))
    return T.StructType(fields)
