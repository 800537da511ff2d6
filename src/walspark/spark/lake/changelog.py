"""The change log of a table: every change as a row, appended once per micro-batch.

In change-log mode the hot path appends instead of merging, and the mirror is folded from the log
in the background (:mod:`.fold_worker`). See docs/design/applying.md for its rows, shapes and
the fold's position.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField

from walspark.spark.lake.tables import TABLE_PROPERTIES, is_delta_table
from walspark.storage.layout import TargetLayout

log = logging.getLogger(__name__)

__all__ = ["BATCH_ID", "ChangeLog", "FoldPlan", "change_log_tables", "folded_through", "read_change_log"]

#: The change log's column of the micro-batch that appended a row.
BATCH_ID = "_batch_id"


def change_log_tables(layout: TargetLayout) -> list[tuple[str, str]]:
    """The ``(schema, table)`` of every change log of the target (two listings deep)."""
    from urllib.parse import unquote

    from walspark.storage import location

    root = location(layout.changes)
    found = []
    for schema_dir in root.list() if root.exists() else []:
        for table_dir in schema_dir.list():
            if is_delta_table(table_dir):
                found.append((unquote(schema_dir.name), unquote(table_dir.name)))
    return sorted(found)


def _plain(value: Any, top: bool = True) -> Any:
    """A schema's JSON without what does not make two shapes differ (nullability, nested
    metadata, Delta's own metadata keys): two batches of one table shape compare equal."""
    if isinstance(value, list):
        return [_plain(v, top) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k in ("nullable", "containsNull", "valueContainsNull"):
            continue
        if k == "metadata":
            if top:
                out[k] = {mk: mv for mk, mv in v.items() if not mk.startswith("delta.")}
            continue
        out[k] = _plain(v, top=top and k == "fields")
    return out


def shape(fields: list[StructField]) -> Any:
    """The comparable shape of change-log columns (see :func:`_plain`)."""
    from pyspark.sql.types import StructType

    return _plain(json.loads(StructType([f for f in fields if f.name != BATCH_ID]).json()))


def _arrow_log_rows(rows: pa.Table, batch_id: int) -> pa.Table:
    """The Arrow form of the rows :meth:`ChangeLog.append` writes: no empty ``_old``, ``_batch_id`` last."""
    import pyarrow as pa

    if "_old" in rows.column_names and not rows.schema.field("_old").type.num_fields:
        rows = rows.drop_columns(["_old"])
    return rows.append_column(pa.field(BATCH_ID, pa.int64()), pa.repeat(pa.scalar(batch_id, pa.int64()), rows.num_rows))


@dataclass
class ChangeLog:
    """One table's change log: append a batch, read a range of batches."""

    spark: SparkSession
    layout: TargetLayout
    schema: str
    table: str

    @property
    def path(self) -> str:
        return self.layout.change_log(self.schema, self.table)

    def exists(self) -> bool:
        return is_delta_table(self.path)

    def fields(self) -> list[StructField] | None:
        """The log's columns (``_batch_id`` included), None before its first append."""
        if not self.exists():
            return None
        return list(self.spark.read.format("delta").load(self.path).schema.fields)

    def append(self, rows: DataFrame, batch_id: int, writer_options: dict[str, str],
               known: dict[str, Any] | None = None, before_reshape: Any = None,
               arrow: pa.Table | None = None, after_lsn: int | None = None) -> bool:  # fmt: skip
        """Append one batch's rows (``writer_options``: Delta writer options, e.g. the commit note),
        those of commits after ``after_lsn`` if given.

        ``arrow``: the same rows, already on the driver; a plain append (the log exists with this
        shape) then goes through delta-rs without a Spark job (:mod:`.driver_append`), and
        ``rows`` only gives the shape. Returns True when the rows replaced the log's content for
        a new shape; ``before_reshape`` is called first, to fold everything the log holds (see
        the module docstring).
        """
        from pyspark.sql import functions as F

        from walspark.spark.lake import driver_append

        # a table without columns has an empty _old, which Delta cannot store: left out
        fields = [f for f in rows.schema.fields if f.name != "_old" or f.dataType.fields]  # type: ignore[attr-defined]
        key = f"{self.path}\0shape"
        current = known.get(key) if known is not None else None
        if current is None:
            logged = self.fields()
            current = None if logged is None else shape(logged)
        wanted = shape(fields)
        if current == wanted and arrow is not None and driver_append.can_append(self.path):
            if after_lsn is not None:
                import pyarrow.compute as pc

                arrow = arrow.filter(pc.greater(arrow.column("_commit_lsn"), after_lsn))
            try:
                driver_append.append(self.path, _arrow_log_rows(arrow, batch_id), writer_options["userMetadata"])
            except driver_append.DriverAppendUnsupported:
                pass  # nothing written: Spark appends it below
            else:
                if known is not None:
                    known[key] = wanted
                    known[f"{self.path}\0last"] = batch_id
                return False
        if len(fields) < len(rows.schema.fields):
            rows = rows.drop("_old")
        if after_lsn is not None:
            rows = rows.where(F.col("_commit_lsn") > after_lsn)
        rows = rows.withColumn(BATCH_ID, F.lit(batch_id).cast("long"))
        writer = rows.write.format("delta").options(**writer_options)
        reshaped = False
        if current is None:
            writer.mode("append").options(**TABLE_PROPERTIES).save(self.path)
        elif current == wanted:
            writer.mode("append").save(self.path)
        else:
            if before_reshape is not None:
                before_reshape()
            log.info("%s.%s: the change log takes the table's new shape (batch %d)", self.schema, self.table, batch_id)
            writer.mode("overwrite").option("overwriteSchema", "true").save(self.path)
            reshaped = True
        if known is not None:
            known[key] = wanted
            known[f"{self.path}\0last"] = batch_id
        return reshaped

    def read(self, after: int, upto: int | None = None) -> DataFrame | None:
        """The rows of batches ``after < _batch_id <= upto`` in the per-table layout (without
        ``_batch_id``), None if the table has no change log."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        if not self.exists():
            return None
        df = self.spark.read.format("delta").load(self.path)
        cond = F.col(BATCH_ID) > after
        if upto is not None:
            cond &= F.col(BATCH_ID) <= upto
        df = df.where(cond).drop(BATCH_ID)
        if "_old" not in df.columns:  # see append: the old row of a table without columns
            df = df.withColumn("_old", F.lit(None).cast(StructType([])))
            df = df.select(*[c for c in df.columns if c not in ("_old", "_unchanged")], "_old", "_unchanged")
        return df

    def batches(self, after: int, upto: int) -> list[int]:
        """The batch ids in ``(after, upto]`` that appended rows, in order."""
        from pyspark.sql import functions as F

        rows = (
            self.spark.read.format("delta")
            .load(self.path)
            .where((F.col(BATCH_ID) > after) & (F.col(BATCH_ID) <= upto))
            .select(BATCH_ID)
            .distinct()
            .collect()
        )
        return sorted(r[0] for r in rows)

    def last_appended(self, known: dict[str, Any] | None) -> int | None:
        """:meth:`last_batch`, read once and then kept in ``known`` (updated by :meth:`append`)."""
        key = f"{self.path}\0last"
        if known is not None and key in known:
            return known[key]
        last = self.last_batch()
        if known is not None:
            known[key] = last
        return last

    def last_batch(self) -> int | None:
        """The highest batch id in the log (None: empty or no log)."""
        from pyspark.sql import functions as F

        if not self.exists():
            return None
        row = self.spark.read.format("delta").load(self.path).agg(F.max(BATCH_ID)).first()
        return None if row is None else row[0]


def read_change_log(spark: SparkSession, layout: TargetLayout, schema: str, table: str, *, after: int,
                    upto: int | None = None) -> DataFrame | None:  # fmt: skip
    """The change rows of ``schema.table`` appended by batches ``after < _batch_id <= upto``."""
    return ChangeLog(spark, layout, schema, table).read(after, upto)


# ---------------------------------------------------------------------------------------------
# The fold's position


@dataclass(frozen=True, slots=True)
class FoldPlan:
    """The fold of batches ``(after, upto]`` of one table's change log; ``done`` once recorded."""

    after: int
    upto: int
    done: bool

    @property
    def folded(self) -> int:
        """The highest batch id the mirror surely holds."""
        return self.upto if self.done else self.after


def read_plan(layout: TargetLayout, schema: str, table: str) -> FoldPlan | None:
    data = layout.fold_plan(schema, table).read_json()
    return None if data is None else FoldPlan(int(data["after"]), int(data["upto"]), bool(data["done"]))


def write_plan(layout: TargetLayout, schema: str, table: str, plan: FoldPlan) -> None:
    layout.fold_plan(schema, table).write_json({"after": plan.after, "upto": plan.upto, "done": plan.done})


def folded_through(layout: TargetLayout, schema: str, table: str) -> int:
    """The highest batch id of the change log already folded into the mirror (-1: none)."""
    plan = read_plan(layout, schema, table)
    return -1 if plan is None else plan.folded


# ---------------------------------------------------------------------------------------------
# The hot path's write


def append_batch(spark: SparkSession, rows: DataFrame, batch_id: int, facts: Any, *, layout: TargetLayout,
                 app_id: str, known: dict[str, Any] | None = None, before_reshape: Any = None,
                 arrow: pa.Table | None = None) -> tuple[Any, Any]:  # fmt: skip
    """Append one table's batch to its change log, exactly once; returns the
    :class:`~.apply.ApplyResult` and the progress row to record (None: already recorded).
    ``arrow``: the same rows on the driver, if the caller has them (see :meth:`ChangeLog.append`).

    Exactly once: a batch the progress table already has is skipped without a write, and rows
    at or below the table's recorded commit LSN are dropped, as in the direct apply. A replay
    after a crash between the append and its progress row is told by the change log itself: it
    holds the batch already (its highest ``_batch_id``, read once per process and then kept,
    since the query is the log's only writer and appends its batches in order). Not Delta's
    ``txnAppId``/``txnVersion``, which the direct apply uses: on an append it costs a Spark job
    over the log's transactions, 0.7 of the 1.2 s a 1,000-row append took here (0.5 s without).
    """
    from walspark.spark.lake.apply import ApplyResult
    from walspark.spark.lake.progress import ProgressRow, ProgressTable

    schema, name = facts.schema, facts.table
    changes = ChangeLog(spark, layout, schema, name)
    record = ProgressRow(app_id, schema, name, batch_id, facts.max_commit_lsn, facts.rows, "log")
    done = ProgressTable(spark, layout).last(app_id, schema, name)
    if done is not None and done.batch_id >= batch_id:
        log.info("%s.%s: batch %d already in the change log (progress at batch %d)", schema, name, batch_id,
                 done.batch_id)  # fmt: skip
        return ApplyResult(schema, name, changes.path, facts.rows, skipped=True, commit_lsn=done.commit_lsn), None
    last = changes.last_appended(known)
    if last is not None and last >= batch_id:
        log.info("%s.%s: batch %d already in the change log (its progress row was not written)", schema, name,
                 batch_id)  # fmt: skip
        return ApplyResult(
            schema, name, changes.path, facts.rows, skipped=True, commit_lsn=facts.max_commit_lsn
        ), record
    after_lsn = done.commit_lsn if done is not None else None  # commits the table has: left out
    note = json.dumps({"app_id": app_id, "batch_id": batch_id, "commit_lsn": facts.max_commit_lsn})
    changes.append(rows, batch_id, {"userMetadata": note}, known, before_reshape, arrow, after_lsn)
    return ApplyResult(schema, name, changes.path, facts.rows, commit_lsn=facts.max_commit_lsn,
                       commit_time_us=facts.max_commit_time_us), record  # fmt: skip
