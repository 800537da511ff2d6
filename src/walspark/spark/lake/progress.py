"""walspark's own bookkeeping table: which batch of which query was applied to which table.

Written after the tables' commits: a shortcut for replays, never the only record. See
docs/design/applying.md for its crash windows.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from walspark.protocol.lsn import format_lsn

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from walspark.storage.layout import TargetLayout

#: Delta auto compaction, set when the first append creates the progress table: once it has 50
#: small files, Delta bin-packs them after the commit that made them, so a pipeline's every-batch
#: appends leave a bounded number of files (each append writes one).
AUTO_COMPACT = "delta.autoOptimize.autoCompact"

PROGRESS_DDL = (
    "app_id STRING, schema_name STRING, table_name STRING, batch_id BIGINT, "
    "commit_lsn BIGINT, commit_lsn_text STRING, rows BIGINT, mode STRING, applied_at TIMESTAMP, "
    "commit_version BIGINT"
)


#: Driver appends (delta-rs) to the progress table between two compactions of its files.
COMPACT_EVERY = 50


def _arrow_schema() -> pa.Schema:
    """:data:`PROGRESS_DDL` in Arrow."""
    import pyarrow as pa

    return pa.schema([
        ("app_id", pa.string()), ("schema_name", pa.string()), ("table_name", pa.string()), ("batch_id", pa.int64()),
        ("commit_lsn", pa.int64()), ("commit_lsn_text", pa.string()), ("rows", pa.int64()), ("mode", pa.string()),
        ("applied_at", pa.timestamp("us", "UTC")), ("commit_version", pa.int64()),
    ])  # fmt: skip


@dataclass(frozen=True, slots=True)
class ProgressRow:
    """One table's applied batch, to be recorded."""

    app_id: str
    schema: str
    table: str
    batch_id: int
    commit_lsn: int | None
    rows: int
    mode: str
    #: The table's Delta version after the batch's writes (None: not known, e.g. a change-log
    #: append): a change data feed's ``_commit_version`` v is this batch's when the table's
    #: previous batch recorded a version below v and this one a version at or above it.
    commit_version: int | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """The last batch applied to one table by one query."""

    batch_id: int
    commit_lsn: int | None


class ProgressTable:
    """Reads and appends the per-table progress rows (:attr:`TargetLayout.progress`).

    The rows are read from Delta once per process (from the driver with delta-rs where the
    table is local, :mod:`.driver_log`) and then kept in memory, updated by
    :meth:`record`: a query is the only writer of its own ``app_id``'s rows, so after the first
    read the process knows them, and each micro-batch saves a Spark job. A restarted process
    reads them afresh (:meth:`forget` does the same in tests).
    """

    _known: ClassVar[dict[str, dict[tuple[str, str, str], Progress]]] = {}
    #: Progress tables known to exist with their properties (this process appended to them, or
    #: found them made by an earlier one), and the lock of the appends
    #: before that: several threads may append (the sink's progress writer, ``apply_changes``
    #: called from threads of one's own), and two appends that both create the table conflict
    #: (ProtocolChangedException).
    _created: ClassVar[set[str]] = set()
    _creating: ClassVar[threading.Lock] = threading.Lock()
    #: Appends from the driver per progress table (see :meth:`_driver_append`).
    _appends: ClassVar[dict[str, int]] = {}

    def __init__(self, spark: SparkSession, layout: TargetLayout) -> None:
        self.spark = spark
        self.path = layout.progress

    @classmethod
    def forget(cls) -> None:
        """Drop what this process remembers (as a restart would)."""
        cls._known.clear()
        cls._created.clear()

    def _load(self) -> dict[tuple[str, str, str], Progress]:
        known = self._known.get(self.path)
        if known is None:
            known = {}
            if self._exists():
                known = self._read_driver()
                if known is None:
                    from pyspark.sql import functions as F

                    rows = (
                        self.spark.read.format("delta")
                        .load(self.path)
                        .groupBy("app_id", "schema_name", "table_name")
                        .agg(F.max("batch_id").alias("batch_id"), F.max("commit_lsn").alias("commit_lsn"))
                        .collect()
                    )
                    known = {(r[0], r[1], r[2]): Progress(r["batch_id"], r["commit_lsn"]) for r in rows}
                # made by an earlier process with its properties: this one may append from the driver
                with self._creating:
                    self._created.add(self.path)
            self._known[self.path] = known
        return known

    def _read_driver(self) -> dict[tuple[str, str, str], Progress] | None:
        """The highest batch and commit LSN per key, read with delta-rs (None: ask Spark).

        A local progress table is read in milliseconds this way; through Spark the read is the
        first query of a run's first batch, seconds in a fresh JVM."""
        from walspark.spark.lake import driver_log

        keys = ["app_id", "schema_name", "table_name"]
        rows = driver_log.read_columns(self.path, [*keys, "batch_id", "commit_lsn"])
        if rows is None:
            return None
        grouped = rows.group_by(keys, use_threads=False).aggregate([("batch_id", "max"), ("commit_lsn", "max")])
        return {(r["app_id"], r["schema_name"], r["table_name"]): Progress(r["batch_id_max"], r["commit_lsn_max"])
                for r in grouped.to_pylist()}  # fmt: skip

    def _exists(self) -> bool:
        from walspark.spark.lake.tables import is_delta_table

        return is_delta_table(self.path)

    def last(self, app_id: str, schema: str, table: str) -> Progress | None:
        """The latest progress of ``app_id`` for ``schema.table``, or None before any."""
        return self._load().get((app_id, schema, table))

    def record(self, app_id: str, schema: str, table: str, batch_id: int, commit_lsn: int | None,
               rows: int, mode: str) -> None:  # fmt: skip
        """Append the progress row of one applied batch (after the table's commit is durable)."""
        self.record_many([ProgressRow(app_id, schema, table, batch_id, commit_lsn, rows, mode)])

    def record_many(self, records: Sequence[ProgressRow]) -> None:
        """Append the progress rows of one applied batch, all tables in one Delta commit.

        Written after every table's commit of the batch is durable (see the module docstring).
        """
        import datetime

        from walspark.spark.lake import driver_append

        if not records:
            return
        now = datetime.datetime.now(datetime.UTC)
        rows = [
            (r.app_id, r.schema, r.table, r.batch_id, r.commit_lsn,
             None if r.commit_lsn is None else format_lsn(r.commit_lsn), r.rows, r.mode, now, r.commit_version)
            for r in records
        ]  # fmt: skip
        known = self._load()
        # From the driver where the table is local: no Spark job (.driver_append), creating it too.
        driven = driver_append.can_append(self.path) and self._driver_append(rows)
        if not driven:
            df = self.spark.createDataFrame(rows, PROGRESS_DDL)
            # one file per append, and auto compaction (set when the first append creates the table)
            # (mergeSchema: a table from before a column was added takes it)
            writer = (df.coalesce(1).write.format("delta").mode("append").option(AUTO_COMPACT, "true")
                      .option("mergeSchema", "true"))  # fmt: skip
            if self.path in self._created:
                writer.save(self.path)
            else:
                with self._creating:  # perhaps the append that creates the table: one at a time
                    writer.save(self.path)
                    self._created.add(self.path)
        for r in records:
            key = (r.app_id, r.schema, r.table)
            previous = known.get(key)
            lsn = (
                r.commit_lsn
                if previous is None or previous.commit_lsn is None
                else max(previous.commit_lsn, r.commit_lsn or 0)
            )
            known[key] = Progress(max(r.batch_id, previous.batch_id if previous else r.batch_id), lsn)

    def _driver_append(self, rows: Sequence[tuple[object, ...]]) -> bool:
        """Append ``rows`` from the driver (delta-rs); False: the table is left to Spark. Every
        :data:`COMPACT_EVERY` such appends the table's small files are bin-packed, as Delta's auto
        compaction does after Spark's appends."""
        import pyarrow as pa

        from walspark.spark.lake import driver_append

        schema = _arrow_schema()
        table = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)
        try:
            if self.path in self._created:
                driver_append.append(self.path, table, merge_schema=True)
            else:
                with self._creating:  # perhaps the append that creates the table: one at a time
                    driver_append.append(self.path, table, configuration={AUTO_COMPACT: "true"}, merge_schema=True)
                    self._created.add(self.path)
        except driver_append.DriverAppendUnsupported:
            return False
        with self._creating:
            count = self._appends[self.path] = self._appends.get(self.path, 0) + 1
        # a process's first append also looks at the files earlier (short, --once) runs left
        if count % COMPACT_EVERY == 0 or (count == 1 and driver_append.file_count(self.path) >= COMPACT_EVERY):
            driver_append.compact(self.path)
        return True

    def compact(self) -> int:
        """Keep one row per ``(app_id, schema, table)``: its last batch (and its highest commit LSN).

        Every batch appends a row per table, so a pipeline of 4 tables and a 1 s trigger adds
        345,600 rows a day; auto compaction bounds the files, this bounds the rows (table
        maintenance calls it, :func:`walspark.spark.lake.maintenance.maintain`). What walspark
        reads of the table, the highest batch and commit LSN per key, is unchanged; the
        per-batch history (rows and time of each batch) is what goes. Returns the rows removed.

        Safe beside a running pipeline: per key it deletes only rows below both the highest batch
        and the highest commit LSN it read, and a row appended meanwhile carries a higher commit
        LSN (even under a new checkpoint, whose batch ids start again at 0); Delta refuses the
        delete if such a row's file could match, and the next maintenance tries again.
        """
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        if not self._exists():
            return 0
        table = DeltaTable.forPath(self.spark, self.path)
        keys = (
            table.toDF().groupBy("app_id", "schema_name", "table_name")
            .agg(F.max("batch_id").alias("batch_id"), F.max("commit_lsn").alias("commit_lsn"), F.count(F.lit(1)).alias("n"))
            .where("n > 1")
            .collect()
        )  # fmt: skip
        if not keys:
            return 0
        condition = F.lit(False)
        for key in keys:
            older = (F.col("app_id") == key["app_id"]) & (F.col("schema_name") == key["schema_name"]) & (
                F.col("table_name") == key["table_name"]) & (F.col("batch_id") < key["batch_id"])  # fmt: skip
            if key["commit_lsn"] is not None:  # the row holding the highest LSN stays too
                older &= F.col("commit_lsn").isNull() | (F.col("commit_lsn") < key["commit_lsn"])
            condition = condition | older
        removed = table.toDF().where(condition).count()
        if removed:
            table.delete(condition)
        return removed
