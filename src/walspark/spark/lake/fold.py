"""Folding a table's batch to one change per key, in the change order.

An update that changed the key becomes a delete of the old key followed by the update; an
unchanged-TOAST column takes the latest earlier value of its key in the batch (or of the key it
moved from), else it is left to the MERGE, which keeps the target's value.
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


from walspark.spark.lake.columns import _P, change_order, key_column, value_column
from walspark.spark.lake.evolution import (
    TargetTable,
)
from walspark.spark.lake.tables import quote

log = logging.getLogger(__name__)


def keyed_changes(rows: DataFrame, keys: Sequence[str]) -> DataFrame:
    """I/U/D rows with their key values (``__ws_k<i>``) and a tiebreak ``__ws_sub``.

    A delete's key is in ``_old``; an update that changed the key (``_old`` present with other
    key values) also emits a delete of the old key just before it — so a fold per key sees the
    row leave its old key — and keeps the old key in ``__ws_from``: where the values it left
    unchanged (TOAST) are to be found.
    """
    from pyspark.sql import functions as F

    op = F.col("_op")
    new_key = [F.col(quote(k)) for k in keys]
    old_key = [F.col("_old").getField(k) for k in keys]
    base = rows.where(op.isin("I", "U", "D"))
    if not keys:
        return base.select("*", F.lit(1).alias(f"{_P}sub"), F.lit(None).alias(f"{_P}from"))
    moved = (
        (op == "U")
        & F.col("_old").isNotNull()
        & functools.reduce(operator.or_, [~n.eqNullSafe(o) for n, o in zip(new_key, old_key)])
    )
    keyed = base.select(
        "*",
        *[F.when(op == "D", o).otherwise(n).alias(key_column(i)) for i, (n, o) in enumerate(zip(new_key, old_key))],
        F.lit(1).alias(f"{_P}sub"),
        F.when(moved, F.struct(*[o.alias(f"k{i}") for i, o in enumerate(old_key)])).alias(f"{_P}from"),
    )
    departures = (
        base.where(moved)
        .select("*", *[o.alias(key_column(i)) for i, o in enumerate(old_key)], F.lit(0).alias(f"{_P}sub"))
        .withColumn("_op", F.lit("D"))
        .withColumn(f"{_P}from", F.lit(None))
    )
    return keyed.unionByName(departures)


def carries(name: str) -> Column:
    """Whether a change carries a value for column ``name`` (not a delete, not unchanged TOAST)."""
    from pyspark.sql import functions as F

    return (F.col("_op") != "D") & ~F.array_contains(F.col("_unchanged"), name)


def carried_value(name: str) -> Column:
    """``struct(value)`` where the change carries the column, else null (so NULL values count)."""
    from pyspark.sql import functions as F

    return F.when(carries(name), F.struct(F.col(quote(name)).alias("v")))


def unresolved_indexes(names: Sequence[str]) -> Column:
    """``array<int>`` of positions of columns no change in the batch carried (take the target's)."""
    from pyspark.sql import functions as F

    if not names:
        return F.array().cast("array<int>")
    return F.array_compact(F.array(*[F.when(F.col(value_column(i)).isNull(), F.lit(i)) for i in range(len(names))]))


def fold_last_per_key(changes: DataFrame, keys: Sequence[str], names: Sequence[str]) -> DataFrame:
    """SCD1 fold: one row per key — the last change, with unchanged-TOAST values resolved in-batch.

    ``max_by`` over the change order picks the last change; per column, ``max_by`` of the value
    over the orders of only the changes that carried it picks the latest carried value (rows
    whose ordering is null are ignored by ``max_by``). Output: ``__ws_k<i>``, ``__ws_op``,
    ``__ws_lsn``, the row columns by name, ``__ws_unchanged`` (positions still unresolved) and
    ``__ws_from`` (the old key of the latest key change into this key, if any).
    """
    from pyspark.sql import functions as F

    order = change_order()
    group = [key_column(i) for i in range(len(keys))]
    aggs = [F.max_by(F.struct(F.col("_op").alias("op"), F.col("_commit_lsn").alias("lsn")), order).alias(f"{_P}last")]
    aggs += [F.max_by(carried_value(c), F.when(carries(c), order)).alias(value_column(i)) for i, c in enumerate(names)]
    # The latest key change into this key: its old key holds values nothing later carried.
    aggs.append(F.max_by(F.col(f"{_P}from"), F.when(F.col(f"{_P}from").isNotNull(), order)).alias(f"{_P}from"))
    folded = changes.groupBy(*group).agg(*aggs)
    op = F.col(f"{_P}last.op")
    return folded.select(
        *group,
        F.col(f"{_P}from"),
        op.alias(f"{_P}op"),
        F.col(f"{_P}last.lsn").alias(f"{_P}lsn"),
        *[F.col(value_column(i)).getField("v").alias(c) for i, c in enumerate(names)],
        unresolved_indexes(names).alias(f"{_P}unchanged"),
    )


def _fill_from(folded: DataFrame, lookup: DataFrame, names: Sequence[str], nkeys: int, tag: str) -> DataFrame:
    """Fill unresolved values of key-changed rows from ``lookup`` rows at their old key.

    ``lookup`` has the key columns ``__ws_k<i>``, the row columns and ``__ws_unchanged`` (values
    it does not know). Filled positions leave ``__ws_unchanged``.
    """
    from pyspark.sql import functions as F

    p = f"{_P}{tag}"
    lookup = lookup.select(
        *[F.col(key_column(i)).alias(f"{p}k{i}") for i in range(nkeys)],
        F.lit(True).alias(f"{p}found"),
        F.col(f"{_P}unchanged").alias(f"{p}unchanged"),
        *[F.col(quote(c)).alias(f"{p}v{i}") for i, c in enumerate(names) if c in lookup.columns],
    )
    present = set(lookup.columns)
    match = functools.reduce(
        operator.and_, [folded[f"{_P}from"].getField(f"k{i}").eqNullSafe(lookup[f"{p}k{i}"]) for i in range(nkeys)]
    )
    joined = folded.join(lookup, F.col(f"{_P}from").isNotNull() & match, "left")
    unchanged = F.col(f"{_P}unchanged")

    def known(i: Column | int) -> Column:
        return F.coalesce(F.col(f"{p}found"), F.lit(False)) & ~F.array_contains(F.col(f"{p}unchanged"), i)

    values = [
        F.when(F.array_contains(unchanged, i) & known(i), F.col(f"{p}v{i}")).otherwise(F.col(quote(c))).alias(c)
        if f"{p}v{i}" in present
        else F.col(quote(c))
        for i, c in enumerate(names)
    ]
    others = [F.col(quote(c)) for c in folded.columns if c not in set(names) and c != f"{_P}unchanged"]
    filled = [i for i, c in enumerate(names) if f"{p}v{i}" in present]
    still = F.filter(unchanged, lambda x: ~(x.isin(filled) & known(x))) if filled else unchanged
    return joined.select(*others, *values, still.alias(f"{_P}unchanged"))


def resolve_from_moved_keys(
    target: TargetTable, folded: DataFrame, names: Sequence[str], keys: Sequence[str]
) -> DataFrame:
    """Fill unresolved values of rows that arrived by a key change, from the old key's row.

    An update that changes the key and leaves a TOASTed column alone sends it as unchanged; the
    value is under the *old* key — in this batch (the old key's last carried values) or in the
    target — which the MERGE cannot see from the new key's row. Two left joins on the old key
    (run only for batches that have such updates) fetch it. Not followed: chains of several key
    changes within one batch, and an old key re-inserted after the change in the same batch.
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from_batch = _fill_from(folded, folded, names, len(keys), "b")
    current = DeltaTable.forPath(target.spark, target.path).toDF()
    current = current.select(
        *[F.col(quote(k)).alias(key_column(i)) for i, k in enumerate(keys)],
        *[F.col(quote(c)) for c in names if c in current.columns],
        F.array().cast("array<int>").alias(f"{_P}unchanged"),
    )
    return _fill_from(from_batch, current, names, len(keys), "t")


def append_only(changes: DataFrame, names: Sequence[str]) -> DataFrame:
    """A table without a key: every insert is a new row (the folded-source shape, no key)."""
    from pyspark.sql import functions as F

    return changes.where(F.col("_op") == "I").select(
        F.lit("I").alias(f"{_P}op"),
        F.col("_commit_lsn").alias(f"{_P}lsn"),
        *[F.col(quote(c)) for c in names],
        F.array().cast("array<int>").alias(f"{_P}unchanged"),
    )
