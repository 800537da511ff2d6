"""Apply change rows to Delta Lake tables: mirrors (SCD1) and history (SCD2), exactly once.

Works on any change DataFrame in the data source's per-table layout, one MERGE per table and
batch, idempotent through Delta's transaction ids. See docs/design/applying.md for the steps.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField

    from walspark.spark.lake.progress import ProgressRow

from walspark.spark.lake import driver_merge
from walspark.spark.lake.columns import ROW_MARKER, SCD2_DDL, Mode, has_map, lsn_literal_order
from walspark.spark.lake.evolution import (
    SchemaEvolutionError,
    TargetTable,
    follow_ddl,
)
from walspark.spark.lake.facts import BatchFacts, batch_facts
from walspark.spark.lake.fold import (
    append_only,
    fold_last_per_key,
    keyed_changes,
    resolve_from_moved_keys,
)
from walspark.spark.lake.frames import TableRows
from walspark.spark.lake.writes import (
    IdempotentWrite,
    append_inserts,
    committed_version,
    merge_multiset,
    merge_scd1,
    txn_app_id,
)
from walspark.storage.layout import TargetLayout

log = logging.getLogger(__name__)

#: Tables already warned of in this process as applied append-only (they have no key): a
#: pipeline applies such a table at every batch, and one warning says it all.
_KEYLESS_WARNED: set[str] = set()


class UnmatchableKey(SchemaEvolutionError):
    """A table's changes are matched on a map column (hstore) in a way walspark does not compare
    maps: a key of its own, or whole rows of an SCD2 history."""


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What :func:`apply_changes` did for one table."""

    schema: str
    table: str
    path: str
    rows: int
    skipped: bool = False
    commit_lsn: int | None = None
    #: The latest commit time applied, µs since the Unix epoch (None: not known, e.g. a replay skipped).
    commit_time_us: int | None = None
    #: The changes applied by operation (:attr:`BatchFacts.ops <.facts.BatchFacts.ops>`), set by the sink.
    ops: tuple[tuple[str, int], ...] = ()


# ---------------------------------------------------------------------------------------------
# The entry point


def apply_changes(
    batch_df: DataFrame,
    batch_id: int,
    *,
    target: str,
    table: tuple[str, str] | None = None,
    keys: Sequence[str] | None = None,
    mode: Mode = "scd1",
    app_id: str = "walspark",
) -> ApplyResult | None:
    """Apply one micro-batch of one table's changes to ``<target>/<schema>/<table>``.

    ``batch_df`` is a per-table change DataFrame (see the module docstring); ``table`` defaults
    to the one in the rows and ``keys`` to their replica identity (``_key``; user keys must be
    among the replica identity columns, since deletes carry only those). ``app_id`` must stay the
    same for one streaming query across restarts (its checkpoint) and differ between queries
    writing the same target: it scopes the idempotence of ``batch_id``. Returns None for an
    empty batch.
    """
    if mode not in ("scd1", "scd2"):
        raise ValueError(f"mode must be 'scd1' or 'scd2', not {mode!r}")
    from walspark.spark.lake.progress import ProgressTable

    batch_df = batch_df.persist()
    try:
        facts = batch_facts(batch_df, table, keys)
        if facts is None:
            return None
        layout = TargetLayout(target)
        result, record = apply_table(batch_df.sparkSession, batch_df, batch_id, facts, layout=layout, mode=mode,
                                      app_id=app_id)  # fmt: skip
        if record is not None:
            ProgressTable(batch_df.sparkSession, layout).record_many([record])
        return result
    finally:
        batch_df.unpersist()


def apply_table(
    spark: SparkSession,
    batch_df: DataFrame | TableRows,
    batch_id: int,
    facts: BatchFacts,
    *,
    layout: TargetLayout,
    mode: Mode,
    app_id: str,
    known: dict[str, dict[str, DataType | None]] | None = None,
    arrow: pa.Table | None = None,
) -> tuple[ApplyResult, ProgressRow | None]:
    """Apply one table's batch (its facts already known); returns the progress row to record.

    Delta writes go through ``spark`` (whose session settings carry the transaction id), which
    may be another session than ``batch_df``'s: tables applied in parallel each get one.
    ``arrow``: the same rows on the driver, when the batch was small enough to collect; a plain
    SCD1 batch is then merged from there (:mod:`.driver_merge`), and ``batch_df``, when given as
    :class:`.TableRows`, is never built as a Spark DataFrame.
    """
    from walspark.spark.lake.identity import arrow_identity_runs, identity_runs, run_step
    from walspark.spark.lake.progress import ProgressRow, ProgressTable

    schema, name = facts.schema, facts.table
    began = time.monotonic()
    path = layout.table(schema, name)
    done = ProgressTable(spark, layout).last(app_id, schema, name)
    if done is not None and done.batch_id >= batch_id:
        log.info("%s.%s: batch %d already applied (progress at batch %d)", schema, name, batch_id, done.batch_id)
        return ApplyResult(schema, name, path, facts.rows, skipped=True, commit_lsn=done.commit_lsn), None
    rows = batch_df if isinstance(batch_df, TableRows) else TableRows.of(batch_df)
    if done is not None and done.commit_lsn is not None:
        import pyarrow.compute as pc
        from pyspark.sql import functions as F

        after = done.commit_lsn
        rows = rows.then(lambda df: df.where(F.col("_commit_lsn") > after))
        if arrow is not None:
            arrow = arrow.filter(pc.greater(arrow.column("_commit_lsn"), after))
    given = rows
    fields = rows.fields
    columnless = not fields
    if columnless:
        marker = with_row_marker_field()
        rows, fields = rows.then(with_row_marker, [marker]), [marker]
    names = [f.name for f in fields]
    missing = [k for k in facts.keys if k not in names]
    if missing:
        raise ValueError(f"{schema}.{name}: key columns {missing} are not columns of the change rows")
    maps = [f.name for f in fields if f.name in facts.keys and has_map(f.dataType)]
    if maps and (mode == "scd2" or set(facts.keys) != set(names)):
        raise UnmatchableKey(
            f"{schema}.{name}: its changes are matched on {maps}, which hold hstore maps; walspark matches"
            " maps only on whole rows (REPLICA IDENTITY FULL) of a mirror. Fix: a primary key or REPLICA"
            " IDENTITY USING INDEX without hstore columns, or the table without --scd2"
        )
    tgt = TargetTable(spark, path, f"{schema}.{name}")
    rows, fields = follow_ddl(tgt, rows, fields, known)  # renames, drops and re-adds, new columns' old rows
    note = json.dumps({"app_id": app_id, "batch_id": batch_id, "commit_lsn": facts.max_commit_lsn})
    # Schema changes are their own idempotent commits, before (and outside) the guarded MERGE.
    dropped = tgt.evolve(fields, SCD2_DDL if mode == "scd2" else (), known)
    result = ApplyResult(schema, name, path, facts.rows, commit_lsn=facts.max_commit_lsn,
                         commit_time_us=facts.max_commit_time_us)  # fmt: skip
    names = [f.name for f in fields]
    # Changes made under different replica identities are matched each on its own, run by run:
    # a plain run of a batch on the driver is applied from there (.driver_merge), the others
    # through Spark. Both paths split the batch into the same runs, with the same transaction ids.
    runs: list[tuple[Callable[[], DataFrame], BatchFacts, pa.Table | None]]
    if arrow is not None and mode == "scd1" and rows is given and not columnless:
        split = arrow_identity_runs(arrow, facts)
        starts = [start for start, _, _ in split]
        runs = [(functools.partial(_run_frame, rows, starts, i), part_facts, part)
                for i, (_, part, part_facts) in enumerate(split)]  # fmt: skip
    else:
        runs = [(functools.partial(_same, part), part_facts, None)
                for part, part_facts in identity_runs(rows.frame(), facts)]  # fmt: skip
    engines = []
    version: int | None = None  # the table's version after the batch's last write
    for i, (part, part_facts, part_arrow) in enumerate(runs):
        txn = txn_app_id(app_id, schema, name, run_step(i))
        if part_arrow is not None and driver_merge.plain(part_facts, names):
            version = driver_merge.apply(path, part_arrow, part_facts, names, txn, batch_id, note)
            if version is not None:
                engines.append("delta-rs")  # (a run without a key comes here with inserts only: nothing dropped)
                continue
        engines.append("Spark")
        if columnless and mode == "scd1":  # a multiset of marker rows (SCD2: versions appended)
            part_facts = replace(part_facts, keys=(ROW_MARKER,), replica_keys=True)
        idempotence = IdempotentWrite(spark, txn, batch_id, note)
        with idempotence:
            if mode == "scd1":
                _apply_scd1(tgt, part(), part_facts, fields, dropped, idempotence)
            else:
                from walspark.spark.lake.apply_scd2 import apply_scd2

                apply_scd2(tgt, part(), part_facts, fields)
        version = committed_version(spark, path)
    record = ProgressRow(app_id, schema, name, batch_id, facts.max_commit_lsn, facts.rows, mode, version)
    log.info("%s.%s: batch %d, %d change row(s) applied in %.2f s (%s)", schema, name, batch_id, facts.rows,
             time.monotonic() - began, ", ".join(engines))  # fmt: skip
    return result, record


def _run_frame(rows: TableRows, starts: list[tuple[int, int]], i: int) -> DataFrame:
    """The DataFrame of a batch's ``i``-th identity run, built when a Spark write asks for it."""
    from walspark.spark.lake.identity import run_rows

    return run_rows(rows.frame(), starts, i)


def _same(frame: DataFrame) -> DataFrame:
    return frame


def _say_keyless(tgt: TargetTable) -> None:
    """Warn that a table without a replica identity key had updates or deletes, which append-only
    drops: once per table and process, not at every batch (inserts alone lose nothing: no word)."""
    if tgt.path not in _KEYLESS_WARNED:
        _KEYLESS_WARNED.add(tgt.path)
        log.warning("%s has no replica identity key: applied append-only (inserts appended, updates/deletes "
                    "dropped); said once per table", tgt.qualified)  # fmt: skip


def with_row_marker_field() -> StructField:
    """The one column of a table without columns' changes (see :func:`with_row_marker`)."""
    from pyspark.sql.types import BooleanType, StructField

    return StructField(ROW_MARKER, BooleanType(), True)


def with_row_marker(rows: DataFrame) -> DataFrame:
    """The changes of a table without columns, with :data:`ROW_MARKER` as their one column: set
    on every row an insert writes, and as the old row of every delete (one arrives only with
    REPLICA IDENTITY FULL, whose old row of no columns is the marker row; an update cannot set
    a column a table does not have). Not read from ``_old``: a struct of no fields did not
    come through Spark's Arrow conversion as non-null for such deletes."""
    from pyspark.sql import functions as F

    marker = F.lit(True)
    op = F.col("_op")
    return rows.withColumn(ROW_MARKER, F.when(op.isin("I", "U"), marker)).withColumn(
        "_old", F.when(op.isin("U", "D"), F.struct(marker.alias(ROW_MARKER)))
    )


def _apply_scd1(tgt: TargetTable, rows: DataFrame, facts: BatchFacts, fields: Sequence[StructField],
                dropped: Sequence[str], idempotence: IdempotentWrite) -> None:  # fmt: skip
    names = [f.name for f in fields]
    if facts.inserts == facts.rows and facts.keys and facts.replica_keys:
        append_inserts(tgt, rows, fields, idempotence)
        return
    if facts.truncates:
        last = facts.truncates[-1]
        rows = rows.where(lsn_literal_order(last.commit_lsn, last.seq))
    if facts.keys and set(facts.keys) == set(names):
        # REPLICA IDENTITY FULL (every column is "key"): the table is a multiset of row values.
        merge_multiset(tgt, rows, names, dropped, truncated=bool(facts.truncates))
        return
    changes = keyed_changes(rows, facts.keys)
    if facts.keys:
        source = fold_last_per_key(changes, facts.keys, names)
        if facts.moved_unchanged:
            source = resolve_from_moved_keys(tgt, source, names, facts.keys)
        if facts.unchanged:
            from walspark.spark.lake.unchanged import check_unchanged_known

            check_unchanged_known(tgt, source, facts.keys, names)  # never NULL for a value nobody knows
    else:
        if facts.rows - facts.inserts - len(facts.truncates):  # updates or deletes to drop
            _say_keyless(tgt)
        source = append_only(changes, names)
    merge_scd1(tgt, source, facts.keys, names, dropped, truncated=bool(facts.truncates))
