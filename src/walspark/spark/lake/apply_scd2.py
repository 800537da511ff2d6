"""SCD2: keep every committed version of each row, with validity intervals.

One version per key per transaction, ``[__START_AT, __END_AT)``; the whole batch is one MERGE,
idempotent like SCD1. See docs/design/applying.md.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

from delta.tables import DeltaTable

from walspark.spark.lake.columns import (
    END_AT,
    ORDER_COLUMNS,
    START_AT,
    VALIDITY_DDL,
    key_column,
    key_condition,
    ref,
    validity_struct,
    value_column,
)
from walspark.spark.lake.evolution import TargetTable
from walspark.spark.lake.facts import BatchFacts
from walspark.spark.lake.fold import carried_value, keyed_changes
from walspark.spark.lake.tables import quote

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructField

_P = "__ws_"


def _segment(truncates: Sequence) -> Column:
    """How many of the batch's truncates precede each change (its segment, 0 before any)."""
    from pyspark.sql import functions as F

    from walspark.spark.lake.columns import lsn_literal_order

    if not truncates:
        return F.lit(0)
    return functools.reduce(
        operator.add, [F.when(lsn_literal_order(t.commit_lsn, t.seq), 1).otherwise(0) for t in truncates]
    )


def carried_col(i: int) -> str:
    """Name of the i-th carried value (``struct<v>``, null where the change does not carry it)."""
    return f"{_P}c{i}"


def _carry_across_key_changes(
    changes: DataFrame, facts: BatchFacts, names: Sequence[str], tgt: TargetTable
) -> DataFrame:
    """An update that changed the key carries, for its unchanged-TOAST columns, the old key's values.

    They are the old key's values just before the change — the running values at its departure
    row in this batch — else the target's current version of the old key. Done before the
    per-key running window, so every later version of the new key inherits them.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    nkeys = len(facts.keys)
    keys = [key_column(i) for i in range(nkeys)]
    carried = [carried_col(i) for i in range(len(names))]
    running = (
        Window.partitionBy(*keys).orderBy(*ORDER_COLUMNS).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    departures = changes.select(
        *keys, "_commit_lsn", "_seq", f"{_P}sub", *[F.last(c, ignorenulls=True).over(running).alias(c) for c in carried]
    ).where(F.col(f"{_P}sub") == 0)
    departures = departures.select(
        *[F.col(k).alias(f"{_P}d{i}") for i, k in enumerate(keys)],
        F.col("_commit_lsn").alias(f"{_P}dlsn"), F.col("_seq").alias(f"{_P}dseq"),
        *[F.col(c).alias(f"{_P}d{c}") for c in carried],
    )  # fmt: skip
    current = DeltaTable.forPath(tgt.spark, tgt.path).toDF().where(F.col(END_AT).isNull())
    present = set(current.columns)
    current = current.select(
        *[F.col(quote(k)).alias(f"{_P}o{i}") for i, k in enumerate(facts.keys)],
        *[
            F.struct(F.col(quote(c)).alias("v")).alias(f"{_P}o{carried[i]}")
            for i, c in enumerate(names)
            if c in present
        ],
    )
    moves = changes.where(F.col(f"{_P}from").isNotNull())
    old_key = [F.col(f"{_P}from").getField(f"k{i}") for i in range(nkeys)]
    moves = moves.join(
        departures,
        functools.reduce(operator.and_, [o.eqNullSafe(F.col(f"{_P}d{i}")) for i, o in enumerate(old_key)])
        & (F.col("_commit_lsn") == F.col(f"{_P}dlsn"))
        & (F.col("_seq") == F.col(f"{_P}dseq")),
        "left",
    ).join(
        current,
        functools.reduce(operator.and_, [o.eqNullSafe(F.col(f"{_P}o{i}")) for i, o in enumerate(old_key)]),
        "left",
    )
    filled = [
        F.coalesce(F.col(c), F.col(f"{_P}d{c}"), *([F.col(f"{_P}o{c}")] if f"{_P}o{c}" in moves.columns else [])).alias(
            c
        )
        for c in carried
    ]
    others = [c for c in changes.columns if c not in set(carried)]
    moves = moves.select(*others, *filled)
    return changes.where(F.col(f"{_P}from").isNull()).unionByName(moves)


def versions(rows: DataFrame, facts: BatchFacts, names: Sequence[str], tgt: TargetTable) -> DataFrame:
    """One row per key per transaction (per truncate segment) with its values and validity."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = [key_column(i) for i in range(len(facts.keys))]
    changes = keyed_changes(rows, facts.keys).withColumn(f"{_P}seg", _segment(facts.truncates))
    carried = [carried_col(i) for i in range(len(names))]
    changes = changes.select(
        *keys, "_op", "_commit_lsn", "_commit_time", "_seq", f"{_P}sub", f"{_P}seg", f"{_P}from",
        *[carried_value(c).alias(carried[i]) for i, c in enumerate(names)],
    )  # fmt: skip
    if facts.moved_unchanged:
        changes = _carry_across_key_changes(changes, facts, names, tgt)
    running = (
        Window.partitionBy(*keys).orderBy(*ORDER_COLUMNS).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    changes = changes.select(
        *keys, "_op", "_commit_lsn", "_commit_time", "_seq", f"{_P}sub", f"{_P}seg",
        *[F.last(carried[i], ignorenulls=True).over(running).alias(value_column(i)) for i in range(len(names))],
    )  # fmt: skip
    per_txn = Window.partitionBy(*keys, "_commit_lsn", f"{_P}seg").orderBy(F.desc("_seq"), F.desc(f"{_P}sub"))
    last = changes.withColumn(f"{_P}rn", F.row_number().over(per_txn)).where(F.col(f"{_P}rn") == 1)

    # Values still unknown (unchanged TOAST with no earlier change in the batch): the target's.
    current = DeltaTable.forPath(tgt.spark, tgt.path).toDF().where(F.col(END_AT).isNull())
    target_cols = {f.name for f in current.schema.fields}
    current = current.select(
        *[F.col(quote(k)).alias(f"{_P}t{i}") for i, k in enumerate(facts.keys)],
        *[F.struct(F.col(quote(c)).alias("v")).alias(f"{_P}tv{i}") for i, c in enumerate(names) if c in target_cols],
    )
    match = functools.reduce(operator.and_, [last[k].eqNullSafe(current[f"{_P}t{i}"]) for i, k in enumerate(keys)])
    joined = last.join(current, match, "left")
    if facts.unchanged:
        from walspark.spark.lake.unchanged import check_versions_known

        check_versions_known(tgt, joined, facts.keys, names, target_cols)  # never NULL for a value nobody knows

    by_key = Window.partitionBy(*keys).orderBy("_commit_lsn", f"{_P}seg")
    seg = F.col(f"{_P}seg")
    truncates = F.array(*[t.validity() for t in facts.truncates]) if facts.truncates else None
    nxt = validity_struct(F.lead("_commit_lsn").over(by_key), F.lead("_commit_time").over(by_key))
    same_segment = F.lead(f"{_P}seg").over(by_key) == seg
    end = F.when(same_segment, nxt)
    if truncates is not None:
        end = end.otherwise(F.get(truncates, seg))
    values = []
    for i, c in enumerate(names):
        resolved = F.col(value_column(i))
        if c in target_cols:
            resolved = F.coalesce(resolved, F.col(f"{_P}tv{i}"))
        values.append(resolved.getField("v").alias(c))
    return joined.select(
        *keys,
        F.col("_op").alias(f"{_P}op"),
        seg.alias(f"{_P}seg"),
        (F.row_number().over(by_key) == 1).alias(f"{_P}first"),
        validity_struct(F.col("_commit_lsn"), F.col("_commit_time")).alias(f"{_P}at"),
        end.alias(f"{_P}end"),
        *values,
    )


def apply_scd2(tgt: TargetTable, rows: DataFrame, facts: BatchFacts, fields: Sequence[StructField]) -> None:
    """One MERGE that closes replaced versions and inserts the batch's new versions."""
    from pyspark.sql import functions as F

    names = [f.name for f in fields]
    if not facts.keys:
        append_versions(tgt, rows, facts, names)
        return
    keys = [key_column(i) for i in range(len(facts.keys))]
    v = versions(rows, facts, names, tgt).persist()
    try:
        action = f"{_P}action"
        closes = v.where(F.col(f"{_P}first") & (F.col(f"{_P}seg") == 0)).select(
            *keys, F.lit("close").alias(action), F.col(f"{_P}at")
        )
        opens = v.where(F.col(f"{_P}op") != "D").select(
            *keys, F.lit("insert").alias(action), F.col(f"{_P}at"), F.col(f"{_P}end"), *[F.col(quote(c)) for c in names]
        )
        source = opens.unionByName(closes, allowMissingColumns=True)
        on = " AND ".join(
            [f"s.{action} = 'close'", f"{ref('t', END_AT)} IS NULL"]
            + [key_condition(facts.keys, keys, {f.name: f.dataType for f in fields})]
        )
        merge = (
            DeltaTable.forPath(tgt.spark, tgt.path)
            .alias("t")
            .merge(source.alias("s"), on)
            .whenMatchedUpdate(set={quote(END_AT): f"s.{_P}at"})
            .whenNotMatchedInsert(
                condition=f"s.{action} = 'insert'",
                values={
                    **{quote(c): ref("s", c) for c in names},
                    quote(START_AT): f"s.{_P}at",
                    quote(END_AT): f"s.{_P}end",
                },
            )
        )
        if facts.truncates:
            merge = merge.whenNotMatchedBySourceUpdate(
                condition=f"{ref('t', END_AT)} IS NULL", set={quote(END_AT): facts.truncates[0].validity_sql()}
            )
        merge.execute()
    finally:
        v.unpersist()


def append_versions(tgt: TargetTable, rows: DataFrame, facts: BatchFacts, names: Sequence[str]) -> None:
    """SCD2 of changes without a replica identity (NOTHING, DEFAULT without a primary key): each
    insert opens a version; a truncate closes the versions current at that point.

    PostgreSQL refuses updates and deletes of such a table while it is published for them, so
    only inserts and truncates arrive (e.g. rows inserted before a primary key was added, or a
    table whose identity became NOTHING); any update or delete that still arrives cannot be
    matched and is dropped with a warning, as SCD1 does. One MERGE that matches nothing (``ON
    false``): inserts are inserted with their end already known when a truncate of the batch
    follows them, and the target's current versions are closed at the batch's first truncate.
    """
    import logging

    from pyspark.sql import functions as F

    from walspark.spark.lake.columns import lsn_literal_order

    dropped = rows.where(F.col("_op").isin("U", "D")).limit(1).count()
    if dropped:
        logging.getLogger(__name__).warning(
            "%s: updates/deletes made without a replica identity cannot be matched: dropped", tgt.qualified
        )
    end = F.lit(None).cast(VALIDITY_DDL)
    for t in reversed(facts.truncates):  # the first truncate after the insert closes its version
        end = F.when(~lsn_literal_order(t.commit_lsn, t.seq), t.validity()).otherwise(end)
    source = rows.where(F.col("_op") == "I").select(
        validity_struct(F.col("_commit_lsn"), F.col("_commit_time")).alias(f"{_P}at"),
        end.alias(f"{_P}end"),
        *[F.col(quote(c)) for c in names],
    )
    merge = (
        DeltaTable.forPath(tgt.spark, tgt.path)
        .alias("t")
        .merge(source.alias("s"), "false")
        .whenNotMatchedInsert(
            values={**{quote(c): ref("s", c) for c in names}, quote(START_AT): f"s.{_P}at", quote(END_AT): f"s.{_P}end"}
        )
    )
    if facts.truncates:
        merge = merge.whenNotMatchedBySourceUpdate(
            condition=f"{ref('t', END_AT)} IS NULL", set={quote(END_AT): facts.truncates[0].validity_sql()}
        )
    merge.execute()
