"""Fresh reads (merge-on-read): a table's current state, including changes not yet folded.

See docs/design/applying.md for why the fold position is read first, and what is not handled.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

from walspark.spark.lake.changelog import BATCH_ID
from walspark.spark.lake.columns import _P, ROW_MARKER, SCD2_COLUMNS, key_column, lsn_literal_order, same
from walspark.spark.lake.facts import batch_facts
from walspark.spark.lake.frames import row_fields
from walspark.spark.lake.tables import quote
from walspark.storage.layout import TargetLayout

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField

    from walspark.spark.lake.facts import BatchFacts

__all__ = ["fresh_rows", "fresh_view", "read_table", "table_name"]

Shape = Sequence[tuple[str, "DataType"]]

#: The longest chain of key changes followed for a value left unchanged (one round per hop).
MAX_HOPS = 16


def fresh_rows(mirror: DataFrame, pending: DataFrame, keys: Sequence[str] | None = None) -> DataFrame:
    """``mirror``'s rows with the ``pending`` change rows (per-table layout) folded in, as SCD1.

    ``keys``: the key columns, as :func:`~.apply.apply_changes` takes them; None: the replica
    identity the rows carry (``_key``). Rows made under several replica identities are folded
    run by run, each on its own identity, like the apply (:mod:`.identity`). Output: the
    mirror's columns in its order, then columns only the pending rows have; a value is cast to
    the mirror's type, or to the pending type where that is a widening. Lazy but for one small
    aggregation over ``pending`` (its facts: identities, truncates, key changes) and, if keys
    changed with values left unchanged, a round or two of :func:`_resolve_moved`.
    """
    from pyspark.sql import functions as F

    from walspark.spark.lake.identity import identity_runs

    refuse_history(mirror.columns, "this table")
    pending = pending.drop(BATCH_ID)
    facts = batch_facts(pending, None, keys)
    if facts is None:
        return mirror
    qualified = f"{facts.schema}.{facts.table}"
    fields = row_fields(pending)
    columnless = not fields
    if columnless:  # the marker rows of a table without columns: a multiset, as the apply does
        from walspark.spark.lake.apply import with_row_marker, with_row_marker_field

        pending, fields = with_row_marker(pending), [with_row_marker_field()]
    shape = _output_shape(mirror, fields, qualified)
    types = dict(shape)
    row_names = {f.name for f in fields}
    pending = pending.select(
        *[F.col(quote(c)).cast(types[c]).alias(c) if c in row_names else F.col(quote(c)) for c in pending.columns]
    )
    current = _shaped(mirror, shape)
    names = [f.name for f in fields]
    for part, part_facts in identity_runs(pending, facts):
        current = _fold_run(current, part, part_facts, names, shape, columnless)
    return current


def _fold_run(current: DataFrame, rows: DataFrame, facts: BatchFacts, names: Sequence[str], shape: Shape,
              columnless: bool) -> DataFrame:  # fmt: skip
    """One identity run folded into ``current`` (the rows so far), as :func:`~.apply._apply_scd1`."""
    from pyspark.sql import functions as F

    from walspark.spark.lake.fold import append_only, keyed_changes

    keys = (ROW_MARKER,) if columnless else facts.keys
    missing = [k for k in keys if k not in names]
    if missing:
        raise ValueError(f"{facts.schema}.{facts.table}: key columns {missing} are not columns of the change rows")
    if facts.truncates:  # the last truncate empties the table; only the changes after it count
        last = facts.truncates[-1]
        rows, current = rows.where(lsn_literal_order(last.commit_lsn, last.seq)), current.where(F.lit(False))
    if keys and set(keys) == set(names):
        return _fold_multiset(current, rows, names, shape)
    if keys:
        return _fold_keyed(current, rows, facts, keys, names, shape)
    inserts = append_only(keyed_changes(rows, ()), names)  # no key: append-only, like the apply
    return current.unionByName(_shaped(inserts, shape))


def _fold_keyed(current: DataFrame, rows: DataFrame, facts: BatchFacts, keys: Sequence[str], names: Sequence[str],
                shape: Shape) -> DataFrame:  # fmt: skip
    """The last change per key over the rows so far: the MERGE of :func:`~.writes.merge_scd1`
    as a full outer join (null-safe on the key) — untouched rows kept, deleted keys dropped,
    values left unchanged (TOAST) and not resolved in the batch taken from the row so far."""
    from pyspark.sql import functions as F

    from walspark.spark.lake.fold import fold_last_per_key, keyed_changes

    folded = fold_last_per_key(keyed_changes(rows, keys), keys, names)
    if facts.moved_unchanged:
        folded = _resolve_moved(folded, current, keys, names)
    op, unchanged = F.col(f"{_P}op"), F.col(f"{_P}unchanged")
    source = folded.select(
        *[F.col(key_column(i)) for i in range(len(keys))], op, unchanged,
        *[F.col(quote(c)).alias(f"{_P}s{i}") for i, c in enumerate(names)],
    )  # fmt: skip
    on = _all([F.col(quote(k)).eqNullSafe(F.col(key_column(i))) for i, k in enumerate(keys)])
    joined = current.join(source, on, "full")
    touched = op.isNotNull()
    position = {c: i for i, c in enumerate(names)}

    def value(name: str) -> Column:
        held = F.col(quote(name))
        if name not in position:  # a column the changes lack (dropped): NULL in every row they write
            return F.when(~touched, held)
        i = position[name]
        return F.when(~touched | F.array_contains(unchanged, i), held).otherwise(F.col(f"{_P}s{i}"))

    return joined.where(~touched | (op != "D")).select(*[value(n).cast(t).alias(n) for n, t in shape])


def _resolve_moved(folded: DataFrame, current: DataFrame, keys: Sequence[str], names: Sequence[str]) -> DataFrame:
    """:func:`~.fold.resolve_from_moved_keys` with the rows so far in place of the Delta table,
    and chains followed: a value a key change left unchanged is under the old key — in the
    batch, else in the rows so far — which may itself have arrived by a key change. Pending rows
    span many micro-batches, so ``1 -> 2`` in one and ``2 -> 3`` in the next is an ordinary
    chain here. One hop per round, each round materialised (a round joins the folded rows with
    themselves), until no row gains a value; the first round usually resolves everything."""
    from pyspark.sql import functions as F

    from walspark.spark.lake.fold import _fill_from

    lookup = current.select(
        *[F.col(quote(k)).alias(key_column(i)) for i, k in enumerate(keys)],
        *[F.col(quote(c)) for c in names],
        F.array().cast("array<int>").alias(f"{_P}unchanged"),
    )
    open_ = (F.col(f"{_P}op") != "D") & F.col(f"{_P}from").isNotNull() & (F.size(f"{_P}unchanged") > 0)
    left = None
    for _ in range(MAX_HOPS):
        folded = _fill_from(folded, folded, names, len(keys), "b")
        folded = _fill_from(folded, lookup, names, len(keys), "t").localCheckpoint()
        # An open row left: a longer chain, or a value at the row's own key in the rows so far.
        now = folded.where(open_).count()
        if now == 0 or now == left:
            break
        left = now
    return folded


def _fold_multiset(current: DataFrame, rows: DataFrame, names: Sequence[str], shape: Shape) -> DataFrame:
    """REPLICA IDENTITY FULL (or no columns): the rows are a multiset of values. As
    :func:`~.writes.merge_multiset`: values that lost rows are removed and put back as many times
    as remain (the count so far plus the net change); values that only gained get that many."""
    from pyspark.sql import functions as F

    from walspark.spark.lake.writes import multiset_deltas

    n, final = F.col(f"{_P}n"), F.col(f"{_P}final")
    values = [f"{_P}d{i}" for i in range(len(names))]
    deltas = multiset_deltas(rows, names).where(n != 0)
    deltas = deltas.select(*[F.col(quote(c)).alias(v) for c, v in zip(names, values)], n)
    counts = current.groupBy(*[F.col(quote(c)).alias(f"{_P}c{i}") for i, c in enumerate(names)]).agg(
        F.count(F.lit(1)).alias(f"{_P}tn")
    )
    types = [current.schema[c].dataType for c in names]
    on = F.expr(" AND ".join(same(v, f"{_P}c{i}", types[i]) for i, v in enumerate(values)))
    counted = deltas.join(counts, on, "left").withColumn(
        f"{_P}final", F.when(n < 0, F.coalesce(F.col(f"{_P}tn"), F.lit(0)) + n).otherwise(n)
    )
    removed = counted.where(n < 0).select(*values)
    kept = current.join(removed, F.expr(" AND ".join(same(quote(c), v, t) for c, v, t in zip(names, values, types))),
                        "left_anti")  # fmt: skip
    added = counted.where(final > 0).select(
        *[F.col(v).alias(c) for c, v in zip(names, values)], F.explode(F.sequence(F.lit(1), final)).alias(f"{_P}copy")
    )
    return kept.unionByName(_shaped(added, shape))


# ---------------------------------------------------------------------------------------------
# Shapes


def _output_shape(mirror: DataFrame, fields: Sequence[StructField], qualified: str) -> list[tuple[str, DataType]]:
    """The mirror's columns (widened where the changes carry a wider type), then the new ones."""
    from walspark.spark.lake.evolution import SchemaEvolutionError, _widening

    incoming = {f.name: f.dataType for f in fields}
    shape = []
    for f in mirror.schema.fields:
        kind = f.dataType
        if f.name in incoming:
            wide = _widening(incoming[f.name], kind)
            if wide is False:
                raise SchemaEvolutionError(
                    f"{qualified}: column {f.name!r} is {kind.simpleString()} in the mirror but "
                    f"{incoming[f.name].simpleString()} in the pending changes: no fresh read until the fold applies it"
                )
            kind = wide or kind
        shape.append((f.name, kind))
    have = {n for n, _ in shape}
    return shape + [(f.name, f.dataType) for f in fields if f.name not in have]


def _shaped(df: DataFrame, shape: Shape) -> DataFrame:
    """``df`` with exactly the columns of ``shape``, in order, cast; NULL where it has none."""
    from pyspark.sql import functions as F

    have = set(df.columns)
    return df.select(*[(F.col(quote(n)) if n in have else F.lit(None)).cast(t).alias(n) for n, t in shape])


def _all(conditions: Sequence[Column]) -> Column:
    return functools.reduce(operator.and_, conditions)


def refuse_history(columns: Sequence[str], qualified: str, path: str | None = None) -> None:
    """A table with the SCD2 validity columns is a history, which has no SCD1 fold to preview."""
    if set(SCD2_COLUMNS) <= set(columns):
        where = f" at {path}" if path else ""
        raise ValueError(
            f"{qualified}: fresh reads fold into mirrors (SCD1); read the history table{where} as it is "
            f"(its {', '.join(SCD2_COLUMNS)} columns say which versions are current)"
        )


# ---------------------------------------------------------------------------------------------
# The glue: a table of a target in change-log mode


def table_name(table: str | tuple[str, str]) -> tuple[str, str]:
    """``(schema, table)`` from a tuple, or from ``schema.table`` with exactly one unquoted dot
    (a part may be double-quoted, ``"we ird"."a.b"``; a bare name means ``public``) — splitting
    on the first dot would misread names holding dots."""
    if isinstance(table, tuple):
        if len(table) != 2 or not all(isinstance(p, str) and p for p in table):
            raise ValueError(f"a table is (schema, name), not {table!r}")
        return table[0], table[1]
    from walspark.spark.datasource.schema import parse_table_name

    return parse_table_name(table)


def read_table(spark: SparkSession, target: str, table: str | tuple[str, str], *, state: str | None = None,
               keys: Sequence[str] | None = None) -> DataFrame:  # fmt: skip
    """The current rows of ``table`` under ``target``: its mirror plus the changes not yet folded.

    Reads the fold position first, then the mirror, then the pending change rows (see the module
    docstring for why that order is consistent). Without a change log or pending rows, the mirror
    as it is. ``keys`` as for :func:`fresh_rows` (None: the replica identity of the changes).
    """
    from walspark.spark.lake import changelog
    from walspark.spark.lake.tables import is_delta_table

    schema, name = table_name(table)
    layout = TargetLayout(target, state)
    qualified, path = f"{schema}.{name}", layout.table(schema, name)
    folded = changelog.folded_through(layout, schema, name)
    mirror = spark.read.format("delta").load(path) if is_delta_table(path) else None
    if mirror is not None:
        refuse_history(mirror.columns, qualified, path)
    pending = changelog.read_change_log(spark, layout, schema, name, after=folded)
    if pending is None:
        if mirror is None:
            raise ValueError(f"{qualified}: no table at {path} and no change log under {target}")
        return mirror
    if mirror is None:  # the first fold has not created the mirror yet: start from no rows
        mirror = _empty_mirror(spark, pending)
    return fresh_rows(mirror, pending, keys)


def fresh_view(spark: SparkSession, target: str, table: str | tuple[str, str], view_name: str,
               **kw: object) -> DataFrame:  # fmt: skip
    """:func:`read_table` registered as the temporary view ``view_name`` (returned as well).

    The view is the plan of this call, with the pending changes found then: call again to see
    changes appended since.
    """
    df = read_table(spark, target, table, **kw)  # type: ignore[arg-type]
    df.createOrReplaceTempView(view_name)
    return df


def _empty_mirror(spark: SparkSession, pending: DataFrame) -> DataFrame:
    from pyspark.sql.types import BooleanType, StructField, StructType

    fields = row_fields(pending.drop(BATCH_ID)) or [StructField(ROW_MARKER, BooleanType())]
    return spark.createDataFrame([], StructType([StructField(f.name, f.dataType, True) for f in fields]))
