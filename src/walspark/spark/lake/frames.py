"""Change DataFrames in the per-table layout, from the all-tables layout or from Arrow batches.

The apply works on any DataFrame of that shape (pipeline.md §4); these adapters make one from the
data source's all-tables output, or from :class:`~walspark.changes.rows.ChangeRowBuilder`
batches (tests and notebooks).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField, StructType


from walspark.spark.lake.columns import CHANGE_COLUMNS, ENVELOPE_COLUMNS
from walspark.spark.lake.tables import quote

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# One table's rows, as a DataFrame built on demand


def row_fields(df: DataFrame) -> list[StructField]:
    """The table's own columns of a per-table change DataFrame (everything but the envelope)."""
    return [f for f in df.schema.fields if f.name not in CHANGE_COLUMNS]


class TableRows:
    """One table's changes of a batch: its row columns known at once, its Spark DataFrame built
    the first time a Spark write asks for it.

    A small batch merged from the driver reads its rows from Arrow (:mod:`.driver_merge`) and never
    asks: with tens of tables, building each one's DataFrame (a select over every table's columns,
    analysed by the JVM through py4j) cost more than the merges themselves.
    """

    __slots__ = ("_frame", "_make", "fields")

    def __init__(self, fields: Sequence[StructField], make: Callable[[], DataFrame]) -> None:
        self.fields = list(fields)
        self._make = make
        self._frame: DataFrame | None = None

    @classmethod
    def of(cls, df: DataFrame) -> TableRows:
        """Rows that are already a per-table DataFrame."""
        rows = cls(row_fields(df), lambda: df)
        rows._frame = df
        return rows

    def frame(self) -> DataFrame:
        """The rows as a Spark DataFrame (built once)."""
        if self._frame is None:
            self._frame = self._make()
        return self._frame

    def then(self, step: Callable[[DataFrame], DataFrame], fields: Sequence[StructField] | None = None) -> TableRows:
        """These rows with ``step`` applied to their DataFrame when it is built (``fields``: the
        row columns after it, if it changes them)."""
        return TableRows(self.fields if fields is None else fields, lambda: step(self.frame()))


def from_arrow(spark: SparkSession, rows: TableRows, arrow: pa.Table, schema: StructType) -> TableRows:
    """``rows`` (one table's, in the per-table layout) with their DataFrame made from ``arrow``,
    the same rows already on the driver (:func:`arrow_table_changes`), in their Spark ``schema``
    (:func:`table_changes_schema`: the batch's DataFrame is not made for it)."""
    return TableRows(rows.fields, lambda: spark.createDataFrame(arrow, schema=schema))


def table_changes_schema(batch: StructType, schema: str, table: str) -> StructType:
    """The schema of :func:`table_changes` of a DataFrame whose schema is ``batch``, known
    without analysing the DataFrame (nor making one, for a batch the driver holds as Arrow)."""
    from pyspark.sql.types import StructField, StructType

    if "_old" in batch.fieldNames():  # the per-table layout: only filtered
        return batch
    name = f"{schema}.{table}"
    whole, old = batch[name], batch[name + OLD_SUFFIX]
    # getField of a nullable struct is nullable, whatever the field says
    fields = [f if f.nullable or not whole.nullable else _nullable(f) for f in whole.dataType.fields]  # type: ignore[attr-defined]
    return StructType([*(batch[c] for c in ENVELOPE_COLUMNS), *fields,
                       StructField("_old", old.dataType, old.nullable, old.metadata), batch["_unchanged"]])  # fmt: skip


def table_rows(df: DataFrame, schema: str, table: str, *, alone: bool = False) -> TableRows:
    """:func:`table_changes` as :class:`TableRows`: the columns read from ``df``'s schema, the
    DataFrame built on demand (``alone``: ``df`` holds this table's rows only)."""
    if "_old" in df.columns:  # the per-table layout: only filtered
        if alone:
            return TableRows.of(df)
        return TableRows(row_fields(df), lambda: table_changes(df, schema, table))
    fields = table_changes_schema(df.schema, schema, table).fields[len(ENVELOPE_COLUMNS) : -2]
    return TableRows(fields, lambda: table_changes(df, schema, table))


def _nullable(field: StructField) -> StructField:
    from pyspark.sql.types import StructField

    return StructField(field.name, field.dataType, True, field.metadata)


# ---------------------------------------------------------------------------------------------
# Adapters: the all-tables layout and ChangeRowBuilder batches → the per-table layout

OLD_SUFFIX = ":old"


def table_changes(df: DataFrame, schema: str, table: str) -> DataFrame:
    """One table's rows of an all-tables change DataFrame, in the per-table layout.

    The all-tables layout (pipeline.md §4) has, per published table, a struct column
    ``"<schema>.<table>"`` (new row) and ``"<schema>.<table>:old"``; this selects the table's
    rows and flattens its new-row struct. A per-table DataFrame is only filtered.
    """
    from pyspark.sql import functions as F

    mine = (F.col("_schema") == schema) & (F.col("_table") == table)
    if "_old" in df.columns:
        return df.where(mine)
    name = f"{schema}.{table}"
    new = F.col(quote(name))
    fields = df.schema[name].dataType.fields  # type: ignore[attr-defined]  # a struct column
    return df.where(mine).select(
        *ENVELOPE_COLUMNS,
        *[new.getField(f.name).alias(f.name, metadata=f.metadata) for f in fields],
        F.col(quote(name + OLD_SUFFIX)).alias("_old"),
        "_unchanged",
    )


def change_rows_table_layout(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    """Flatten ``_new`` of change-row batches into the data source's per-table layout.

    Envelope columns, then ``_new``'s fields as top-level columns, then ``_old`` and
    ``_unchanged`` — what ``spark.createDataFrame`` needs to feed :func:`apply_changes` without
    the data source.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    new = table.column("_new").combine_chunks()
    valid = new.is_valid()
    columns = [table.column(c) for c in ENVELOPE_COLUMNS]
    fields = [table.schema.field(c) for c in ENVELOPE_COLUMNS]
    for i, f in enumerate(new.type):
        # A null _new (delete, truncate) has all-null fields, whatever the child arrays hold.
        columns.append(pc.if_else(valid, new.field(i), pa.nulls(len(new), f.type)))
        fields.append(pa.field(f.name, f.type))
    for c in ("_old", "_unchanged"):
        columns.append(table.column(c))
        fields.append(table.schema.field(c))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def change_dataframe(spark: SparkSession, batches: Iterable[pa.RecordBatch | pa.Table]) -> DataFrame:
    """A per-table change DataFrame from change-row batches of one table shape."""
    import pyarrow as pa

    tables = [change_rows_table_layout(b) for b in batches]
    return spark.createDataFrame(pa.concat_tables(tables))


def arrow_table_changes(batch: pa.Table, schema: str, table: str) -> pa.Table:
    """:func:`table_changes` of a batch already on the driver as Arrow: one table's rows in the
    per-table layout, the same columns in the same order (the new row's fields flattened, with a
    null new row giving null fields; ``":old"`` as ``_old``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mine = pc.and_(pc.equal(batch.column("_schema"), schema), pc.equal(batch.column("_table"), table))
    name = f"{schema}.{table}"
    if "_old" not in batch.column_names:  # the table's own columns first: a filter costs every column's
        batch = batch.select([*ENVELOPE_COLUMNS, name, name + OLD_SUFFIX, "_unchanged"])
    if not pc.all(mine).as_py():
        batch = batch.filter(mine)
    if "_old" in batch.column_names:
        return batch
    new = batch.column(name)
    fields = [batch.schema.field(c) for c in ENVELOPE_COLUMNS]
    columns = [batch.column(c) for c in ENVELOPE_COLUMNS]
    for field, values in zip(new.type, new.flatten(), strict=True):  # flatten: a null struct, null fields
        fields.append(field)
        columns.append(values)
    old = batch.schema.field(name + OLD_SUFFIX)
    fields += [old.with_name("_old"), batch.schema.field("_unchanged")]
    columns += [batch.column(name + OLD_SUFFIX), batch.column("_unchanged")]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
