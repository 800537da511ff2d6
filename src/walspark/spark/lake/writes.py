"""The Delta writes of the apply, each idempotent per batch.

Every write runs inside :class:`IdempotentWrite`, which sets Delta's ``txnAppId``/``txnVersion``
so that a batch replayed after a crash is a no-op: the MERGE of a mirror, the append of a batch
of inserts only, and the multiset MERGE of a table without a key or with REPLICA IDENTITY FULL.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField


from walspark.spark.lake.columns import (
    _P,
    _TXN_APP_ID,
    _TXN_VERSION,
    _USER_METADATA,
    key_condition,
    ref,
    same,
)
from walspark.spark.lake.evolution import (
    TargetTable,
)
from walspark.spark.lake.tables import quote

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Exactly once


class IdempotentWrite:
    """Context manager: Delta writes inside carry ``txnAppId``/``txnVersion`` (and a commit note).

    Delta records the pair in the same commit as the data and skips any later write with a
    version at or below the recorded one for that app id — so a replayed batch changes nothing.
    """

    def __init__(self, spark: SparkSession, app_id: str, version: int, note: str) -> None:
        self.spark, self.settings = spark, {_TXN_APP_ID: app_id, _TXN_VERSION: str(version), _USER_METADATA: note}
        #: The same as DataFrameWriter options. A DataFrame writes through *its own* session, not
        #: ``spark`` (a per-thread clone when tables are applied in parallel), so a plain write
        #: must carry them itself or it would not be idempotent.
        self.writer_options = {"txnAppId": app_id, "txnVersion": str(version), "userMetadata": note}

    def __enter__(self) -> None:
        for k, v in self.settings.items():
            self.spark.conf.set(k, v)

    def __exit__(self, *exc: object) -> None:
        for k in self.settings:
            self.spark.conf.unset(k)


def committed_version(spark: SparkSession, path: str) -> int:
    """The version of the Delta table at ``path`` after a write through ``spark``'s JVM: its
    cached snapshot, which Delta moves to the commit it just made (no listing, no Spark job).
    What a change data feed's ``_commit_version`` is matched with (:mod:`.progress`)."""
    jvm: Any = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    return int(log.unsafeVolatileSnapshot().version())


def txn_app_id(app_id: str, schema: str, table: str, step: str = "") -> str:
    """Delta's transaction app id of one query's writes to one table (one per write step)."""
    return f"{app_id}/{schema}.{table}{'#' + step if step else ''}"


# ---------------------------------------------------------------------------------------------
# SCD1


def merge_scd1(target: TargetTable, source: DataFrame, keys: Sequence[str], names: Sequence[str],
               dropped: Sequence[str], truncated: bool) -> None:  # fmt: skip
    """The one MERGE of an SCD1 batch (``source`` as folded by :func:`fold_last_per_key`)."""
    from delta.tables import DeltaTable

    is_delete, not_delete = f"s.{_P}op = 'D'", f"s.{_P}op <> 'D'"
    unchanged = f"s.{_P}unchanged"
    update = {
        quote(c): f"CASE WHEN array_contains({unchanged}, {i}) THEN {ref('t', c)} ELSE {ref('s', c)} END"
        for i, c in enumerate(names)
    }
    update.update({quote(c): "NULL" for c in dropped})
    merge = DeltaTable.forPath(target.spark, target.path).alias("t").merge(source.alias("s"), key_condition(keys))
    if keys:
        merge = merge.whenMatchedDelete(condition=is_delete).whenMatchedUpdate(condition=not_delete, set=update)  # type: ignore[arg-type]
    merge = merge.whenNotMatchedInsert(condition=not_delete, values={quote(c): ref("s", c) for c in names})
    if truncated:
        merge = merge.whenNotMatchedBySourceDelete()
    merge.execute()


def append_inserts(target: TargetTable, rows: DataFrame, fields: Sequence[StructField],
                   idempotence: IdempotentWrite) -> None:  # fmt: skip
    """Append a batch of only inserts: no MERGE needed, and several times cheaper.

    Why this is exact: the rows carry the replica identity key, which is unique in PostgreSQL,
    so an insert's key is not in the source table when it is inserted. The target mirrors the
    source as of the batch's start (the snapshot is taken at the slot's consistent point, and
    every earlier change is applied), so the key is not in the target either — and with no
    delete or update in the batch, no key can repeat within it. (REPLICA IDENTITY FULL makes
    the table a multiset, where an insert is one more copy: an append again.) A replayed batch
    is skipped by Delta's transaction id, exactly as a MERGE would be. Columns the batch lacks
    (dropped in PostgreSQL) are left NULL; a column the target has widened is cast up to it.
    """
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in target.columns()}
    rows.where(F.col("_op") == "I").select(
        *[F.col(quote(f.name)).cast(types.get(f.name, f.dataType)).alias(f.name) for f in fields]
    ).write.format("delta").mode("append").options(**idempotence.writer_options).save(target.path)


def multiset_deltas(rows: DataFrame, names: Sequence[str]) -> DataFrame:
    """Net count change per row value: +1 per row inserted (I, U's new row), -1 per row removed.

    With REPLICA IDENTITY FULL there is no key: identical rows are legitimately several, and a
    delete removes one of them. Counting makes the batch's order irrelevant and keeps
    duplicates exact. An unchanged-TOAST value of an update's new row is the old row's value
    (FULL sends the whole old row).
    """
    from pyspark.sql import functions as F

    op = F.col("_op")
    old = [F.col("_old").getField(c).alias(c) for c in names]
    new = [
        F.when(F.array_contains(F.col("_unchanged"), c), F.col("_old").getField(c)).otherwise(F.col(quote(c))).alias(c)
        for c in names
    ]
    added = rows.where(op.isin("I", "U")).select(*new, F.lit(1).alias(f"{_P}n"))
    removed = rows.where(op.isin("U", "D")).select(*old, F.lit(-1).alias(f"{_P}n"))
    return added.unionByName(removed).groupBy(*[quote(c) for c in names]).agg(F.sum(f"{_P}n").alias(f"{_P}n"))


def merge_multiset(target: TargetTable, rows: DataFrame, names: Sequence[str], dropped: Sequence[str],
                   truncated: bool) -> None:  # fmt: skip
    """Apply net counts in one MERGE: values that lost rows are deleted and re-inserted as many
    times as they remain (the target's count, read first, plus the net change); values that only
    gained rows get that many inserts."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    n, final, action = f"{_P}n", f"{_P}final", f"{_P}action"
    deltas = multiset_deltas(rows, names).where(F.col(n) != 0)
    types = {f.name: f.dataType for f in deltas.schema.fields}
    if truncated:  # the changes after the truncate apply to an empty table
        counted = deltas.withColumn(final, F.col(n))
    else:
        current = DeltaTable.forPath(target.spark, target.path).toDF()
        current = current.groupBy(*[F.col(quote(c)).alias(f"{_P}t{i}") for i, c in enumerate(names)]).agg(
            F.count(F.lit(1)).alias(f"{_P}tn")
        )
        match = F.expr(" AND ".join(same(quote(c), f"{_P}t{i}", types[c]) for i, c in enumerate(names)))
        counted = deltas.join(current, match, "left").withColumn(
            final, F.when(F.col(n) < 0, F.coalesce(F.col(f"{_P}tn"), F.lit(0)) + F.col(n)).otherwise(F.col(n))
        )
    value_cols = [F.col(quote(c)) for c in names]
    removals = counted.where(F.col(n) < 0).select(*value_cols, F.lit("match").alias(action))
    inserts = counted.where(F.col(final) > 0).select(
        *value_cols, F.lit("insert").alias(action), F.explode(F.sequence(F.lit(1), F.col(final))).alias(f"{_P}copy")
    )
    source = inserts.drop(f"{_P}copy").unionByName(removals)
    on = f"s.{action} = 'match' AND " + key_condition(names, names, types)
    merge = (
        DeltaTable.forPath(target.spark, target.path)
        .alias("t")
        .merge(source.alias("s"), on)
        .whenMatchedDelete()
        .whenNotMatchedInsert(condition=f"s.{action} = 'insert'", values={quote(c): ref("s", c) for c in names})
    )
    if truncated:
        merge = merge.whenNotMatchedBySourceDelete()
    merge.execute()
