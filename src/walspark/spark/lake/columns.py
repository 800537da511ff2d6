"""The change rows' columns and the SQL fragments every apply path builds on them.

Shared by the mirror (SCD1) and the history (SCD2) paths, the identity runs and the table sync:
the envelope column names, the SCD2 validity columns, the helper-column names of a folded batch,
null-safe key conditions, and the total order of a batch's changes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType


from walspark.changes.rows import ENVELOPE, UNCHANGED_FIELD
from walspark.spark.lake.tables import quote

log = logging.getLogger(__name__)

#: How a table is applied: a mirror of its rows (SCD1) or the history of their versions (SCD2).
Mode = Literal["scd1", "scd2"]


#: The change rows' envelope, as :mod:`walspark.changes.rows` makes it.
ENVELOPE_COLUMNS = tuple(ENVELOPE.names)
CHANGE_COLUMNS = frozenset((*ENVELOPE_COLUMNS, "_old", UNCHANGED_FIELD.name))

#: SCD2 validity columns: structs of the commit LSN and commit time of the change that opened /
#: closed the row version (``__END_AT`` null on the current version).
START_AT = "__START_AT"
END_AT = "__END_AT"
SCD2_COLUMNS = (START_AT, END_AT)
VALIDITY_DDL = "STRUCT<lsn: BIGINT, commit_time: TIMESTAMP>"
SCD2_DDL = ((START_AT, VALIDITY_DDL), (END_AT, VALIDITY_DDL))

#: The one column of the Delta table of a source table without columns (``CREATE TABLE t ()``;
#: PostgreSQL allows it and replicates its row count): Delta needs a column, so the table holds
#: one row per source row, each ``true`` here. Its rows are all alike, so the apply treats them
#: as a multiset of that value: an insert adds a row, a delete (REPLICA IDENTITY FULL) removes
#: one, a truncate empties the table.
ROW_MARKER = "__WALSPARK_ROW"

#: Prefix of the helper columns of the folded source (they never reach the Delta table).
_P = "__ws_"

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


# ---------------------------------------------------------------------------------------------
# SQL-expression helpers (shared by SCD1 and SCD2)


def ref(alias: str, name: str) -> str:
    """``alias.`name```: a column of a MERGE side."""
    return f"{alias}.{quote(name)}"


def key_condition(
    keys: Sequence[str], source_keys: Sequence[str] | None = None, types: Mapping[str, DataType] | None = None
) -> str:
    """Null-safe key match of target ``t`` and source ``s`` (``false`` without a key); ``types``
    (the target's column types) lets a key hold a map (see :func:`same`)."""
    if not keys:
        return "false"
    source_keys = source_keys or [key_column(i) for i in range(len(keys))]
    types = types or {}
    return " AND ".join(same(ref("t", k), ref("s", sk), types.get(k)) for k, sk in zip(keys, source_keys, strict=True))


def has_map(dtype: DataType | None) -> bool:
    """Whether a Spark type holds a map (hstore), at any depth."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, MapType):
        return True
    if isinstance(dtype, ArrayType):
        return has_map(dtype.elementType)
    if isinstance(dtype, StructType):
        return any(has_map(f.dataType) for f in dtype.fields)
    return False


def comparable(expr: str, dtype: DataType | None, depth: int = 0) -> str:
    """SQL of ``expr`` in a form ``<=>`` accepts. Spark cannot compare maps (hstore's type) though it
    groups by them, so a map, in arrays and structs too, is compared as its entries sorted by key;
    every other value as it is."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if not has_map(dtype):
        return expr
    var = f"{_P}e{depth}"
    if isinstance(dtype, MapType):  # (walspark's maps hold strings: hstore)
        return f"array_sort(map_entries({expr}))"
    if isinstance(dtype, ArrayType):
        return f"transform({expr}, {var} -> {comparable(var, dtype.elementType, depth + 1)})"
    assert isinstance(dtype, StructType)
    fields = ", ".join(f"{comparable(f'{expr}.{quote(f.name)}', f.dataType, depth + 1)} AS {quote(f.name)}"
                       for f in dtype.fields)  # fmt: skip
    return f"IF({expr} IS NULL, NULL, struct({fields}))"


def same(left: str, right: str, dtype: DataType | None) -> str:
    """``left <=> right`` (SQL) for two values of type ``dtype``, maps included (:func:`comparable`)."""
    return f"{comparable(left, dtype)} <=> {comparable(right, dtype)}"


def key_column(i: int) -> str:
    """Name of the i-th key value column of a folded source."""
    return f"{_P}k{i}"


def value_column(i: int) -> str:
    """Name of the i-th resolved value (a ``struct<v>``, null while unresolved)."""
    return f"{_P}v{i}"


def lsn_literal_order(commit_lsn: int, seq: int) -> Column:
    """``(_commit_lsn, _seq) > (commit_lsn, seq)``: the rows after a given change."""
    from pyspark.sql import functions as F

    c, s = F.col("_commit_lsn"), F.col("_seq")
    return (c > commit_lsn) | ((c == commit_lsn) & (s > seq))


def validity_struct(lsn: Column, commit_time: Column) -> Column:
    """An SCD2 validity value (``__START_AT``/``__END_AT``)."""
    from pyspark.sql import functions as F

    return F.struct(lsn.cast("bigint").alias("lsn"), commit_time.cast("timestamp").alias("commit_time"))


#: The total order of changes within a batch (a key change's departure sorts before its update).
ORDER_COLUMNS = ("_commit_lsn", "_seq", f"{_P}sub")


def change_order() -> Column:
    """:data:`ORDER_COLUMNS` as one comparable struct (for ``max_by``)."""
    from pyspark.sql import functions as F

    return F.struct(*[F.col(c) for c in ORDER_COLUMNS])
