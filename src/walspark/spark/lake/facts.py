"""What one aggregation tells about a table's batch before any write: :class:`BatchFacts`.

The apply decides its plan from these facts (which keys, truncates, inserts only, identity runs,
unchanged TOAST) without looking at the rows twice; :func:`match_keys` picks the columns a run of
changes is matched on (see :mod:`.identity`).
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, Row


from walspark.spark.lake.columns import validity_struct
from walspark.spark.lake.frames import OLD_SUFFIX
from walspark.spark.lake.tables import quote

log = logging.getLogger(__name__)


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
    #: The latest commit time among the changes, µs since the Unix epoch: how far behind the
    #: source the lake is once the batch is applied (the progress lines).
    max_commit_time_us: int | None = None
    #: The earliest commit LSN among the changes (None: not known).
    min_commit_lsn: int | None = None
    #: Updates and deletes among ``rows`` (with ``inserts`` and ``truncates``: :attr:`ops`).
    updates: int = 0
    deletes: int = 0

    @property
    def ops(self) -> tuple[tuple[str, int], ...]:
        """The batch's changes by operation (``I``, ``U``, ``D``, ``T``), those it has: what the
        pipeline counts per table and operation (its metrics)."""
        counts = (("I", self.inserts), ("U", self.updates), ("D", self.deletes), ("T", len(self.truncates)))
        return tuple((op, n) for op, n in counts if n)


def _facts_aggregates(moved_old: Column) -> list[Column]:
    """The aggregates of :class:`BatchFacts` (``moved_old``: the row has an old key or row)."""
    from pyspark.sql import functions as F

    ordering = F.struct("_commit_lsn", "_seq")
    return [
        F.count(F.lit(1)).alias("n"),
        F.max_by("_key", ordering).alias("key"),
        F.size(F.collect_set("_key")).alias("identities"),
        F.max("_commit_lsn").alias("max_lsn"),
        F.min("_commit_lsn").alias("min_lsn"),
        F.max(F.unix_micros("_commit_time")).alias("max_time"),
        F.count(F.when((F.col("_op") == "U") & moved_old & (F.size("_unchanged") > 0), 1)).alias("moved"),
        F.count(F.when(F.col("_op") == "I", 1)).alias("inserts"),
        F.count(F.when(F.col("_op") == "U", 1)).alias("updates"),
        F.count(F.when(F.col("_op") == "D", 1)).alias("deletes"),
        F.count(F.when((F.col("_op") == "U") & (F.size("_unchanged") > 0), 1)).alias("unchanged"),
        F.collect_list(
            F.when(F.col("_op") == "T", F.struct("_commit_lsn", "_seq", F.unix_micros("_commit_time")))
        ).alias("truncs"),
    ]


def _facts_from_row(row: Row | dict[str, Any], table: tuple[str, str], keys: Sequence[str] | None) -> BatchFacts:
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
        max_commit_time_us=row["max_time"],
        min_commit_lsn=row["min_lsn"],
        updates=row["updates"],
        deletes=row["deletes"],
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


def match_keys(user: Sequence[str] | None, replica: Sequence[str], table: str) -> tuple[str, ...]:
    """The columns a run of changes is matched on: the user's keys where the changes carry them,
    else the replica identity (see the module docstring)."""
    if user is None:
        return tuple(replica)
    if not replica or set(user) <= set(replica):
        return tuple(user)
    log.warning(
        "%s: keys %s are not all in the replica identity %s the changes carry: matched on the replica "
        "identity instead (deletes carry only its columns)", table, list(user), list(replica),
    )  # fmt: skip
    return tuple(replica)


def arrow_tables_facts(batch: pa.Table, keys: Callable[[str, str], Sequence[str] | None]
                       ) -> dict[tuple[str, str], BatchFacts]:  # fmt: skip
    """:func:`tables_facts` of a batch already on the driver as Arrow, no Spark job.

    The same aggregates as :func:`_facts_aggregates`, computed with Arrow's kernels and handed to
    the same :func:`_facts_from_row`, so both paths decide alike (a differential test holds them
    equal). ``batch`` is in the per-table or the all-tables layout.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if batch.num_rows == 0:
        return {}
    if "_old" in batch.column_names:
        moved_old = pc.is_valid(batch.column("_old"))
    else:
        olds = [pc.is_valid(batch.column(c)) for c in batch.column_names if c.endswith(OLD_SUFFIX)]
        moved_old = functools.reduce(pc.or_, olds) if olds else pa.repeat(False, batch.num_rows)
    op = batch.column("_op")
    update = pc.equal(op, "U")
    has_unchanged = pc.fill_null(pc.greater(pc.list_value_length(batch.column("_unchanged")), 0), False)
    flags = pa.table({
        "_schema": batch.column("_schema"), "_table": batch.column("_table"),
        "_commit_lsn": batch.column("_commit_lsn"), "_seq": batch.column("_seq"),
        "moved": pc.and_(pc.and_(update, moved_old), has_unchanged),
        "inserts": pc.equal(op, "I"),
        "updates": update,
        "deletes": pc.equal(op, "D"),
        "unchanged": pc.and_(update, has_unchanged),
        "truncate": pc.equal(op, "T"),
        # a replica identity as one comparable value (its column names joined; NUL never occurs in them)
        "identity": pc.binary_join(batch.column("_key"), "\x00"),
        "row": pa.array(range(batch.num_rows), pa.int64()),
        "time": pc.cast(batch.column("_commit_time").cast(pa.timestamp("us", "UTC")), pa.int64()),
    })  # fmt: skip
    groups = flags.group_by(["_schema", "_table"], use_threads=False).aggregate([
        ("row", "count"), ("_commit_lsn", "max"), ("_commit_lsn", "min"), ("time", "max"), ("moved", "sum"), ("inserts", "sum"),
        ("updates", "sum"), ("deletes", "sum"), ("unchanged", "sum"), ("identity", "count_distinct"),
    ]).to_pylist()  # fmt: skip
    # the key of a table's last change (max_by over (commit LSN, seq)): the rows sorted once
    order = pc.sort_indices(flags, [("_commit_lsn", "ascending"), ("_seq", "ascending")])
    ordered = flags.take(order).select(["_schema", "_table", "row", "truncate", "_commit_lsn", "_seq"])
    ordered = ordered.append_column("rank", pa.array(range(ordered.num_rows), pa.int64()))
    lasts = ordered.group_by(["_schema", "_table"], use_threads=False).aggregate([("rank", "max")])
    rows_at = ordered.column("row").take(lasts.column("rank_max")).to_pylist()
    last_row = {(s, t): r for s, t, r in zip(lasts.column("_schema").to_pylist(), lasts.column("_table").to_pylist(),
                                             rows_at, strict=True)}  # fmt: skip
    truncs: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    times = batch.column("_commit_time")
    truncated = ordered.filter(ordered.column("truncate")).to_pydict()  # in commit order
    for s, t, row, lsn, seq in zip(*(truncated[c] for c in ("_schema", "_table", "row", "_commit_lsn", "_seq")),
                                   strict=True):  # fmt: skip
        at = times[row].cast(pa.timestamp("us", "UTC")).value
        truncs.setdefault((s, t), []).append((lsn, seq, at))
    key_column = batch.column("_key")
    facts = {}
    for g in groups:
        table = (g["_schema"], g["_table"])
        row = {
            "n": g["row_count"], "max_lsn": g["_commit_lsn_max"], "min_lsn": g["_commit_lsn_min"], "max_time": g["time_max"], "moved": g["moved_sum"] or 0,
            "inserts": g["inserts_sum"] or 0, "unchanged": g["unchanged_sum"] or 0,
            "updates": g["updates_sum"] or 0, "deletes": g["deletes_sum"] or 0,
            "identities": g["identity_count_distinct"], "key": key_column[last_row[table]].as_py(),
            "truncs": truncs.get(table, []),
        }  # fmt: skip
        facts[table] = _facts_from_row(row, table, keys(*table))
    return facts
