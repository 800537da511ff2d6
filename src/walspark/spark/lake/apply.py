"""Apply change rows to Delta Lake tables: mirrors (SCD1) and history (SCD2), exactly once.

Input: a change DataFrame in the data source's **per-table layout** (pipeline.md §4): the
envelope columns (``_commit_lsn, _lsn, _seq, _xid, _commit_time, _origin, _op, _schema, _table,
_relation_version, _key``), then the table's own columns flattened with their Spark types, then
``_old`` (struct) and ``_unchanged`` (names of unchanged-TOAST columns). Every column that is not
an envelope column, ``_old`` or ``_unchanged`` is a row column. This module does not import the
data source: it works on any DataFrame of that shape (:func:`change_rows_table_layout` turns
:class:`~walspark.changes.rows.ChangeRowBuilder` batches into it).

Per table, per micro-batch (SCD1):

1. order the changes by ``(_commit_lsn, _seq)``; an update that changed the key becomes a delete
   of the old key followed by the update;
2. split at the last TRUNCATE: changes before it are dropped, the MERGE deletes every target
   row no later change touches (``whenNotMatchedBySource`` delete) — so the truncate and the
   changes after it land in one commit;
3. fold to the last change per key; an unchanged-TOAST column takes the value of the latest
   earlier change of that key in the batch that carried it, else it is left to the MERGE, which
   keeps the target's value (``CASE WHEN array_contains(s.unchanged, i) THEN t.c ELSE s.c END``)
   — never NULL, never a placeholder;
4. one MERGE: delete, update, insert, with Delta's ``txnAppId``/``txnVersion`` set so a
   replayed batch is a no-op (verified: Delta 4.4 records and honours them for MERGE).

Keys are the replica identity (``_key``; REPLICA IDENTITY FULL flags every column, so rows match
on all columns, null-safe ``<=>``). A table with no key (REPLICA IDENTITY NOTHING — PostgreSQL
then refuses UPDATE/DELETE on a table that publishes them) is applied append-only, with a
warning; updates and deletes that still arrive are dropped and logged. A batch whose changes
were made under several replica identities (the identity changed within it) is applied in
identity runs, each matched on its own identity, one commit each (:mod:`.identity`).

Schema evolution (:mod:`.evolution`): columns follow PostgreSQL's DDL by identity (attnum) —
renames, drops and re-adds, new columns with their missing value; columns missing from the
batch stay in the Delta table (NULL in rows inserted or updated from then on); integral/float/
decimal types widen with Delta type widening; anything else raises :class:`SchemaEvolutionError`
for that table only. Delta tables are created with column mapping (``name`` mode), so any
PostgreSQL identifier keeps its name; SQL text here always backquotes identifiers, and refers to
values by position, never by splicing names into string literals.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, Row, SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

    from walspark.spark.lake.progress import ProgressRow

from walspark.spark.lake.evolution import (  # noqa: F401
    SchemaEvolutionError,
    TargetTable,
    _widening,
    follow_catalog,
    follow_ddl,
)
from walspark.spark.lake.tables import quote, table_path

log = logging.getLogger(__name__)

Mode = Literal["scd1", "scd2"]

ENVELOPE_COLUMNS = (
    "_commit_lsn", "_lsn", "_seq", "_xid", "_commit_time", "_origin", "_op",
    "_schema", "_table", "_relation_version", "_key",
)  # fmt: skip
CHANGE_COLUMNS = frozenset((*ENVELOPE_COLUMNS, "_old", "_unchanged"))

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


def key_condition(keys: Sequence[str], source_keys: Sequence[str] | None = None) -> str:
    """Null-safe key match of target ``t`` and source ``s`` (``false`` without a key)."""
    if not keys:
        return "false"
    source_keys = source_keys or [key_column(i) for i in range(len(keys))]
    return " AND ".join(f"{ref('t', k)} <=> {ref('s', sk)}" for k, sk in zip(keys, source_keys, strict=True))


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


# ---------------------------------------------------------------------------------------------
# Plan of one table's batch


@dataclass(frozen=True, slots=True)
class Truncate:
    """A TRUNCATE of the table within the batch: its position and commit."""

    commit_lsn: int
    seq: int
    commit_time_us: int  # µs since the Unix epoch (no Python datetime round trip through time zones)

    def validity(self) -> Column:
        """The truncate as an SCD2 validity value (it closes the rows current at that point)."""
        from pyspark.sql import functions as F

        return validity_struct(F.lit(self.commit_lsn), F.timestamp_micros(F.lit(self.commit_time_us)))

    def validity_sql(self) -> str:
        return f"named_struct('lsn', CAST({self.commit_lsn} AS BIGINT), 'commit_time', timestamp_micros({self.commit_time_us}))"


@dataclass(frozen=True, slots=True)
class BatchFacts:
    """What one cheap aggregation tells about a table's batch before any write."""

    schema: str
    table: str
    rows: int
    keys: tuple[str, ...]
    max_commit_lsn: int
    truncates: tuple[Truncate, ...]
    #: Updates with an old key (or old row) *and* unchanged TOAST values: they may need a lookup.
    moved_unchanged: int = 0
    #: Updates with unchanged TOAST values: the target must hold those rows (see :mod:`.unchanged`).
    unchanged: int = 0
    #: Inserts among ``rows``: a batch of only inserts needs no MERGE (see :func:`append_inserts`).
    inserts: int = 0
    #: ``keys`` are the replica identity the rows carry (not a user's choice of key columns).
    replica_keys: bool = True
    #: How many replica identities (distinct ``_key``) the batch's changes were made under; more
    #: than one: the batch is applied in identity runs (see :mod:`.identity`).
    identities: int = 1
    #: The user's key columns for the table (``ApplyChanges.keys``), None: its replica identity.
    user_keys: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What :func:`apply_changes` did for one table."""

    schema: str
    table: str
    path: str
    rows: int
    skipped: bool = False
    commit_lsn: int | None = None


def row_fields(df: DataFrame) -> list[StructField]:
    """The table's own columns of a per-table change DataFrame (everything but the envelope)."""
    return [f for f in df.schema.fields if f.name not in CHANGE_COLUMNS]


def _facts_aggregates(moved_old: Column) -> list[Column]:
    """The aggregates of :class:`BatchFacts` (``moved_old``: the row has an old key or row)."""
    from pyspark.sql import functions as F

    ordering = F.struct("_commit_lsn", "_seq")
    return [
        F.count(F.lit(1)).alias("n"),
        F.max_by("_key", ordering).alias("key"),
        F.size(F.collect_set("_key")).alias("identities"),
        F.max("_commit_lsn").alias("max_lsn"),
        F.count(F.when((F.col("_op") == "U") & moved_old & (F.size("_unchanged") > 0), 1)).alias("moved"),
        F.count(F.when(F.col("_op") == "I", 1)).alias("inserts"),
        F.count(F.when((F.col("_op") == "U") & (F.size("_unchanged") > 0), 1)).alias("unchanged"),
        F.collect_list(F.when(F.col("_op") == "T", F.struct("_commit_lsn", "_seq", F.unix_micros("_commit_time")))).alias(
            "truncs"
        ),
    ]


def _facts_from_row(row: Row, table: tuple[str, str], keys: Sequence[str] | None) -> BatchFacts:
    from walspark.spark.lake.identity import match_keys

    truncates = tuple(sorted((Truncate(t[0], t[1], t[2]) for t in row["truncs"]),
                             key=lambda t: (t.commit_lsn, t.seq)))  # fmt: skip
    replica = tuple(row["key"] or ())
    chosen = match_keys(keys, replica, f"{table[0]}.{table[1]}")
    return BatchFacts(
        schema=table[0],
        table=table[1],
        rows=row["n"],
        keys=chosen,
        max_commit_lsn=row["max_lsn"],
        truncates=truncates,
        moved_unchanged=row["moved"],
        inserts=row["inserts"],
        unchanged=row["unchanged"],
        replica_keys=set(chosen) == set(replica),
        identities=row["identities"],
        user_keys=tuple(keys) if keys is not None else None,
    )


def batch_facts(df: DataFrame, table: tuple[str, str] | None, keys: Sequence[str] | None) -> BatchFacts | None:
    """One aggregation: the table, row count, replica identity, last commit LSN and truncates."""
    from pyspark.sql import functions as F

    row = df.agg(
        *_facts_aggregates(F.col("_old").isNotNull()), F.collect_set(F.struct("_schema", "_table")).alias("tables")
    ).first()
    if row is None or row["n"] == 0:
        return None
    names = {(t["_schema"], t["_table"]) for t in row["tables"]}
    if table is None:
        if len(names) != 1:
            raise ValueError(f"a change batch for one table expected, got {sorted(names)}: pass table=(schema, name)")
        (table,) = names
    elif names - {tuple(table)}:
        raise ValueError(f"change batch holds rows of {sorted(names - {tuple(table)})}, not only of {table}")
    return _facts_from_row(row, table, keys)


def tables_facts(df: DataFrame, keys: Callable[[str, str], Sequence[str] | None]) -> dict[tuple[str, str], BatchFacts]:
    """:func:`batch_facts` of every table of a batch in one aggregation (grouped by table).

    ``df`` is in the per-table or the all-tables layout; ``keys(schema, table)`` gives a
    table's user keys (None: its replica identity).
    """
    from pyspark.sql import functions as F

    if "_old" in df.columns:
        moved_old = F.col("_old").isNotNull()
    else:  # all-tables layout: a row's old key/row is in its own table's ":old" column, others are null
        olds = [F.col(quote(c)).isNotNull() for c in df.columns if c.endswith(OLD_SUFFIX)]
        moved_old = functools.reduce(operator.or_, olds) if olds else F.lit(False)
    rows = df.groupBy("_schema", "_table").agg(*_facts_aggregates(moved_old)).collect()
    facts = {}
    for row in rows:
        table = (row["_schema"], row["_table"])
        facts[table] = _facts_from_row(row, table, keys(*table))
    return facts


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
    moved = (op == "U") & F.col("_old").isNotNull() & functools.reduce(
        operator.or_, [~n.eqNullSafe(o) for n, o in zip(new_key, old_key)]
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
        if f"{p}v{i}" in present else F.col(quote(c))
        for i, c in enumerate(names)
    ]
    others = [F.col(quote(c)) for c in folded.columns if c not in set(names) and c != f"{_P}unchanged"]
    filled = [i for i, c in enumerate(names) if f"{p}v{i}" in present]
    still = F.filter(unchanged, lambda x: ~(x.isin(filled) & known(x))) if filled else unchanged
    return joined.select(*others, *values, still.alias(f"{_P}unchanged"))


def resolve_from_moved_keys(target: TargetTable, folded: DataFrame, names: Sequence[str], keys: Sequence[str]) -> DataFrame:
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
        merge = merge.whenMatchedDelete(condition=is_delete).whenMatchedUpdate(condition=not_delete, set=update)
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
    if truncated:  # the changes after the truncate apply to an empty table
        counted = deltas.withColumn(final, F.col(n))
    else:
        current = DeltaTable.forPath(target.spark, target.path).toDF()
        current = current.groupBy(*[F.col(quote(c)).alias(f"{_P}t{i}") for i, c in enumerate(names)]).agg(
            F.count(F.lit(1)).alias(f"{_P}tn")
        )
        match = functools.reduce(
            operator.and_, [deltas[quote(c)].eqNullSafe(current[f"{_P}t{i}"]) for i, c in enumerate(names)]
        )
        counted = deltas.join(current, match, "left").withColumn(
            final, F.when(F.col(n) < 0, F.coalesce(F.col(f"{_P}tn"), F.lit(0)) + F.col(n)).otherwise(F.col(n))
        )
    value_cols = [F.col(quote(c)) for c in names]
    removals = counted.where(F.col(n) < 0).select(*value_cols, F.lit("match").alias(action))
    inserts = counted.where(F.col(final) > 0).select(
        *value_cols, F.lit("insert").alias(action), F.explode(F.sequence(F.lit(1), F.col(final))).alias(f"{_P}copy")
    )
    source = inserts.drop(f"{_P}copy").unionByName(removals)
    on = f"s.{action} = 'match' AND " + key_condition(names, names)
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
        result, record = _apply_table(batch_df.sparkSession, batch_df, batch_id, facts, target=target, mode=mode,
                                      app_id=app_id)  # fmt: skip
        if record is not None:
            ProgressTable(batch_df.sparkSession, target).record_many([record])
        return result
    finally:
        batch_df.unpersist()


def _apply_table(
    spark: SparkSession,
    batch_df: DataFrame,
    batch_id: int,
    facts: BatchFacts,
    *,
    target: str,
    mode: Mode,
    app_id: str,
    known: dict[str, dict[str, DataType | None]] | None = None,
) -> tuple[ApplyResult, ProgressRow | None]:
    """Apply one table's batch (its facts already known); returns the progress row to record.

    Delta writes go through ``spark`` (whose session settings carry the transaction id), which
    may be another session than ``batch_df``'s: tables applied in parallel each get one.
    """
    from walspark.spark.lake.identity import identity_runs, run_step
    from walspark.spark.lake.progress import ProgressRow, ProgressTable

    schema, name = facts.schema, facts.table
    path = table_path(target, schema, name)
    done = ProgressTable(spark, target).last(app_id, schema, name)
    if done is not None and done.batch_id >= batch_id:
        log.info("%s.%s: batch %d already applied (progress at batch %d)", schema, name, batch_id, done.batch_id)
        return ApplyResult(schema, name, path, facts.rows, skipped=True, commit_lsn=done.commit_lsn), None
    rows = batch_df
    if done is not None and done.commit_lsn is not None:
        from pyspark.sql import functions as F

        rows = rows.where(F.col("_commit_lsn") > done.commit_lsn)
    fields = row_fields(batch_df)
    columnless = not fields
    if columnless:
        rows, fields = with_row_marker(rows)
    names = [f.name for f in fields]
    missing = [k for k in facts.keys if k not in names]
    if missing:
        raise ValueError(f"{schema}.{name}: key columns {missing} are not columns of the change rows")
    tgt = TargetTable(spark, path, f"{schema}.{name}")
    rows, fields = follow_ddl(tgt, rows, fields, known)  # renames, drops and re-adds, new columns' old rows
    note = json.dumps({"app_id": app_id, "batch_id": batch_id, "commit_lsn": facts.max_commit_lsn})
    # Schema changes are their own idempotent commits, before (and outside) the guarded MERGE.
    dropped = tgt.evolve(fields, SCD2_DDL if mode == "scd2" else (), known)
    # Changes made under different replica identities are matched each on its own, run by run.
    for i, (part, part_facts) in enumerate(identity_runs(rows, facts)):
        if columnless and mode == "scd1":  # a multiset of marker rows (SCD2: versions appended)
            part_facts = replace(part_facts, keys=(ROW_MARKER,), replica_keys=True)
        idempotence = IdempotentWrite(spark, txn_app_id(app_id, schema, name, run_step(i)), batch_id, note)
        with idempotence:
            if mode == "scd1":
                _apply_scd1(tgt, part, part_facts, fields, dropped, idempotence)
            else:
                from walspark.spark.lake.apply_scd2 import apply_scd2

                apply_scd2(tgt, part, part_facts, fields)
    record = ProgressRow(app_id, schema, name, batch_id, facts.max_commit_lsn, facts.rows, mode)
    return ApplyResult(schema, name, path, facts.rows, commit_lsn=facts.max_commit_lsn), record


def with_row_marker(rows: DataFrame) -> tuple[DataFrame, list[StructField]]:
    """The changes of a table without columns, with :data:`ROW_MARKER` as their one column: set
    on every row an insert writes, and as the old row of every delete (one arrives only with
    REPLICA IDENTITY FULL, whose old row of no columns is the marker row; an update cannot set
    a column a table does not have). Not read from ``_old``: a struct of no fields did not
    come through Spark's Arrow conversion as non-null for such deletes."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructField

    marker = F.lit(True)
    op = F.col("_op")
    rows = rows.withColumn(ROW_MARKER, F.when(op.isin("I", "U"), marker)).withColumn(
        "_old", F.when(op.isin("U", "D"), F.struct(marker.alias(ROW_MARKER)))
    )
    return rows, [StructField(ROW_MARKER, BooleanType(), True)]


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
        log.warning(
            "%s has no replica identity key: applied append-only (inserts appended, updates/deletes dropped)",
            tgt.qualified,
        )
        source = append_only(changes, names)
    merge_scd1(tgt, source, facts.keys, names, dropped, truncated=bool(facts.truncates))


# ---------------------------------------------------------------------------------------------
# Builder

_PROGRESS_WRITER: list[ThreadPoolExecutor] = []


class TableSyncHook(Protocol):
    """What the sink asks of the per-table sync (:class:`walspark.spark.snapshot.tablesync.TableSync`)."""

    def batch(self, batch_id: int) -> AbstractContextManager[None]: ...

    def route(self, table: tuple[str, str], rows: DataFrame, facts: BatchFacts, batch_id: int,
              session: SparkSession) -> tuple[DataFrame, BatchFacts] | None: ...  # fmt: skip

    def syncing(self, schema: str, table: str) -> bool: ...


def _progress_writer() -> ThreadPoolExecutor:
    """The one thread writing progress commits in the background (joined at interpreter exit,
    before PySpark's own exit hooks stop the session)."""
    if not _PROGRESS_WRITER:
        _PROGRESS_WRITER.append(ThreadPoolExecutor(1, thread_name_prefix="walspark-progress"))
    return _PROGRESS_WRITER[0]



@dataclass(frozen=True, slots=True)
class _TableOptions:
    mode: Mode = "scd1"
    keys: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ApplyChanges:
    """Builder of a ``foreachBatch`` sink, in the spirit of Delta's Python API.

    >>> sink = ApplyChanges("/lake").app_id("orders-query").scd2("public.orders").keys("public.items", "id")
    >>> stream.writeStream.foreachBatch(sink.foreach_batch).start()      # doctest: +SKIP

    Each call returns a new builder; tables default to SCD1 with their replica identity key.
    """

    target: str
    _app_id: str = "walspark"
    _tables: dict[str, _TableOptions] = field(default_factory=dict)
    #: The target tables' columns as last seen or changed by this sink (see TargetTable.evolve).
    _known: dict[str, dict[str, DataType | None]] = field(default_factory=dict, compare=False, repr=False)
    #: How many tables of a batch are applied at once.
    _parallelism: int = 4
    #: The last batch's progress commit, written in the background (see :meth:`flush`).
    _progress: list[Future[None]] = field(default_factory=list, compare=False, repr=False)
    #: Per-table sync of tables being copied while the stream runs (:mod:`.tablesync`), or None.
    _sync: TableSyncHook | None = field(default=None, compare=False, repr=False)

    def app_id(self, app_id: str) -> ApplyChanges:
        """The id scoping batch ids (one per streaming query/checkpoint)."""
        return replace(self, _app_id=app_id)

    def _with(self, table: str, **changes: object) -> ApplyChanges:
        options = replace(self._tables.get(table, _TableOptions()), **changes)  # type: ignore[arg-type]
        return replace(self, _tables={**self._tables, table: options})

    def scd1(self, *tables: str) -> ApplyChanges:
        """Mirror these tables (``schema.table``): the default."""
        return functools.reduce(lambda b, t: b._with(t, mode="scd1"), tables, self)

    def scd2(self, *tables: str) -> ApplyChanges:
        """Keep the history of these tables (``schema.table``) with ``__START_AT``/``__END_AT``."""
        return functools.reduce(lambda b, t: b._with(t, mode="scd2"), tables, self)

    def keys(self, table: str, *columns: str) -> ApplyChanges:
        """Match rows of ``table`` on these columns instead of its replica identity."""
        return self._with(table, keys=tuple(columns))

    def table_sync(self, sync: TableSyncHook | None) -> ApplyChanges:
        """Route the changes of tables being copied through ``sync`` (``walspark run`` does)."""
        return replace(self, _sync=sync)

    def options_for(self, schema: str, table: str) -> _TableOptions:
        return self._tables.get(f"{schema}.{table}", _TableOptions())

    def foreach_batch(self, batch_df: DataFrame, batch_id: int) -> list[ApplyResult]:
        """Apply a per-table change batch (a ``foreachBatch`` function)."""

        batch_df = batch_df.persist()  # read the batch once, whatever the number of tables in it
        try:
            if self._sync is not None:
                with self._sync.batch(batch_id):
                    return self._apply_tables(batch_df, batch_id)
            return self._apply_tables(batch_df, batch_id)
        finally:
            batch_df.unpersist()

    def flush(self) -> None:
        """Wait until the last batch's progress rows are written; raise what made them fail.

        A batch's progress commit (one Delta append, about a second) runs in the background
        while the next batch is read and applied, instead of lengthening every batch. That is
        safe because the progress table is a shortcut, not the source of truth: a batch
        replayed after a crash that lost its progress rows is still skipped table by table by
        Delta's transaction id, committed atomically with the data. Each batch waits for the
        previous one's progress before writing its own, so they land in order, one at a time.
        Call this before stopping the Spark session (``walspark run`` does).
        """
        while self._progress:
            self._progress.pop(0).result()

    def follow_catalog(self, spark: SparkSession, declared: Iterable[tuple[str, str, StructType]], *,
                       drained: bool = False) -> None:  # fmt: skip
        """Give the existing target tables the columns the catalog has now: before a query starts,
        and once it has ``drained`` the slot (see :func:`.evolution.follow_catalog`).

        ``declared``: (schema, table, declared struct) of each table the query reads. DDL is not
        streamed, so a table altered and then left alone would otherwise keep its old columns
        until its next change.
        """
        changed = False
        for schema, name, struct in declared:
            if self._sync is not None and self._sync.syncing(schema, name):
                continue  # its copy writes the catalog's shape; the hand-off evolves it further
            tgt = TargetTable(spark, table_path(self.target, schema, name), f"{schema}.{name}")
            changed |= follow_catalog(tgt, struct.fields, drained=drained)
        if changed:
            self._known.clear()  # the remembered columns and attnums are stale now

    def parallelism(self, tables: int) -> ApplyChanges:
        """Apply up to this many tables of a batch at once (default 4; 1: one after the other)."""
        if tables < 1:
            raise ValueError("parallelism must be at least 1")
        return replace(self, _parallelism=tables)

    def _apply_tables(self, batch_df: DataFrame, batch_id: int) -> list[ApplyResult]:
        """Apply each table of the batch, recording their progress in one commit at the end.

        Tables are independent (their own Delta table, MERGE and transaction id), so several are
        applied at once from a small thread pool: a micro-batch's cost is mostly fixed per-job
        latency (planning, Delta log, scheduling) that overlaps well. Each thread writes through
        its own clone of the session, because the transaction id of an idempotent write is a
        session setting. An incompatible schema change of one table does not stop the others;
        the batch then fails (after recording the tables that were applied), so the stream does
        not move past the table that could not follow.
        """

        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from walspark.spark.lake.progress import ProgressTable

        spark = batch_df.sparkSession
        facts = tables_facts(batch_df, lambda schema, table: self.options_for(schema, table).keys)
        tables = sorted(facts)
        per_table = "_old" in batch_df.columns

        def apply(table: tuple[str, str], session: SparkSession) -> tuple[ApplyResult, ProgressRow | None]:
            schema, name = table
            if not per_table:
                part = table_changes(batch_df, schema, name)
            elif len(tables) > 1:
                part = batch_df.where((F.col("_schema") == schema) & (F.col("_table") == name))
            else:
                part = batch_df
            options = self.options_for(schema, name)
            table_facts = facts[table]
            if self._sync is not None:  # a table being copied: its changes wait in its pending log
                routed = self._sync.route(table, part, table_facts, batch_id, session)
                if routed is None:
                    path = table_path(self.target, schema, name)
                    return ApplyResult(schema, name, path, table_facts.rows, skipped=True), None
                part, table_facts = routed
            return _apply_table(session, part, batch_id, table_facts, target=self.target, mode=options.mode,
                                app_id=self._app_id, known=self._known)  # fmt: skip

        outcomes: list[tuple[ApplyResult, ProgressRow | None] | BaseException] = []
        workers = min(self._parallelism, len(tables))
        if workers <= 1:
            for table in tables:
                try:
                    outcomes.append(apply(table, spark))
                except SchemaEvolutionError as exc:
                    outcomes.append(exc)
                except BaseException as exc:
                    outcomes.append(exc)
                    break  # as before: an unexpected failure stops the batch at once
        else:
            sessions = [SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession()) for _ in tables]
            with ThreadPoolExecutor(workers, thread_name_prefix="walspark-apply") as pool:
                futures = [pool.submit(apply, table, session) for table, session in zip(tables, sessions, strict=True)]
                for future in futures:
                    try:
                        outcomes.append(future.result())
                    except BaseException as exc:
                        outcomes.append(exc)
        results = [o[0] for o in outcomes if not isinstance(o, BaseException)]
        records = [o[1] for o in outcomes if not isinstance(o, BaseException) and o[1] is not None]
        self.flush()
        if records:
            self._progress.append(_progress_writer().submit(ProgressTable(spark, self.target).record_many, records))
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        unexpected = [e for e in errors if not isinstance(e, SchemaEvolutionError)]
        if unexpected:
            raise unexpected[0]
        if errors:
            raise SchemaEvolutionError("; ".join(str(e) for e in errors))
        return results

    __call__ = foreach_batch


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
    fields = df.schema[name].dataType.fields
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
