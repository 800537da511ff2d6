"""A table sync's copy in key-range chunks that survive a crash (huge tables).

Chunks by key, so a copy resumed in a new snapshot is reconciled per key; the Delta log is the
record of what is done. See docs/design/table-sync.md.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from walspark import _injection
from walspark.protocol.lsn import format_lsn
from walspark.spark.lake.tables import quote
from walspark.spark.snapshot.pgsnapshot import CtidRange, _range
from walspark.storage import Location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from walspark.spark.snapshot.initial import TablePlan

log = logging.getLogger(__name__)

__all__ = ["CopyOutcome", "copy_in_chunks", "replace_from_side", "truncated_within", "without_copied"]

#: Prefix of the ``userMetadata`` of a copy's chunk commits.
METADATA_PREFIX = "walspark-copy "
#: Prefix of the ``userMetadata`` of the commit where a copy made beside its table replaces it.
REPLACE_PREFIX = "walspark-copy-replace "

#: Pages sampled per chunk when choosing chunk bounds (at least :data:`MIN_SAMPLE_PAGES`): a page
#: sample is cheap, and enough pages make chunks of about even size.
SAMPLE_PAGES_PER_CHUNK = 20
MIN_SAMPLE_PAGES = 200

_KEY_QUERY = """
SELECT i.indnkeyatts, a.attname::text, format_type(a.atttypid, NULL)
  FROM pg_class c
  JOIN pg_index i ON i.indrelid = c.oid
  CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
 WHERE c.oid = %s AND k.n <= i.indnkeyatts
   AND CASE c.relreplident WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END
 ORDER BY k.n
"""


@dataclass(slots=True)
class CopyPlan:
    """A copy's chunks, durable across attempts (see the module docstring)."""

    gen: int
    shape: str
    keys: list[str]
    chunks: list[CtidRange]
    plan_id: str
    start_version: int | None = None
    #: Where the waves are committed: the table's own path for a table new to the target, else a
    #: side table (``TargetLayout.side_copy``) that replaces it in one commit at the hand-off.
    into: str | None = None
    #: The properties the copy's table was made with (what the replace gives the table).
    properties: dict[str, str] | None = None

    def save(self, path: Location) -> None:
        path.write_json(asdict(self))

    @staticmethod
    def load(path: Location) -> CopyPlan | None:
        try:
            d = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        return CopyPlan(d["gen"], d["shape"], d["keys"], [_range(c) for c in d["chunks"]], d["plan_id"],
                        d.get("start_version"), d.get("into"), d.get("properties"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Wave:
    """One committed wave, as the Delta history tells it."""

    version: int
    lsn: int
    chunks: tuple[int, ...]
    rows: int


@dataclass(frozen=True, slots=True)
class CopyOutcome:
    rows: int
    #: The C of the last snapshot that copied chunks: changes at or after it are not in the copy.
    since: int
    #: ``(C, last Delta version)`` per snapshot that copied chunks, when there are several.
    cuts: tuple[tuple[int, int], ...]
    keys: tuple[str, ...]
    resumed: int  # chunks committed by earlier attempts
    #: The copy is in a side table that replaces the table at the hand-off (:func:`replace_from_side`).
    side: bool = False


def shape_of(plan: TablePlan) -> str:
    """What must not change between two attempts of a copy for their chunks to fit together."""
    return json.dumps([plan.columns, plan.row_filter, [(r.schema, r.table) for r in plan.relations], plan.binary])


def key_columns(conn: Any, plan: TablePlan) -> list[tuple[str, str]]:
    """The replica identity key's columns and type names, or [] (no usable key)."""
    if plan.oid is None:
        return []
    rows = conn.execute(_KEY_QUERY, (plan.oid,)).fetchall()
    names = {c[0] for c in plan.columns}
    if not rows or len(rows) != rows[0][0] or any(r[1] not in names for r in rows):
        return []  # expression index columns, or a key column the publication does not send
    return [(str(r[1]), str(r[2])) for r in rows]


def chunk_count(rows: int | None, pages: int, *, parallelism: int, partition_rows: int, small_rows: int) -> int:
    """How many chunks a relation gets: about ``partition_rows`` each, at least ``parallelism``
    when it is big enough to split at all (the rule of :func:`.snapshot.plan_partitions`)."""
    rows = rows if rows is not None else pages * 100
    if rows < small_rows:
        return 1
    return max(parallelism, math.ceil(rows / max(partition_rows, 1)))


def key_bounds(conn: Any, schema: str, table: str, keys: Sequence[str], row_filter: str | None,
               pages: int, chunks: int) -> list[tuple[str, ...]]:  # fmt: skip
    """Up to ``chunks - 1`` increasing key values splitting the relation evenly, from a page sample.

    The values are PostgreSQL's text output of the keys, ordered by PostgreSQL: the ranges
    compare them back in the database, with the columns' own collations. Fewer bounds (bigger
    chunks) when the sample is small; never a wrong one — any bounds give disjoint chunks.
    """
    from psycopg import sql

    if chunks <= 1:
        return []
    sample_pages = max(chunks * SAMPLE_PAGES_PER_CHUNK, MIN_SAMPLE_PAGES)
    percent = 100.0 if pages <= sample_pages else 100.0 * sample_pages / pages
    # Qualified: ORDER BY a bare name would sort by the output column of that name, i.e. as text.
    cols = [sql.Identifier("walspark_sample", k) for k in keys]
    where = sql.SQL(" WHERE ({})").format(sql.SQL(row_filter)) if row_filter else sql.SQL("")  # the server's text
    query = sql.SQL("SELECT {} FROM ONLY {} AS walspark_sample TABLESAMPLE SYSTEM ({}){} ORDER BY {}").format(
        sql.SQL(", ").join(sql.SQL("{}::text").format(c) for c in cols),
        sql.Identifier(schema, table),
        sql.Literal(percent),
        where,
        sql.SQL(", ").join(cols),
    )
    sample = [tuple(r) for r in conn.execute(query).fetchall()]
    bounds: list[tuple[str, ...]] = []
    for i in range(1, chunks):
        if sample:
            value = sample[min(len(sample) - 1, round(i * len(sample) / chunks))]
            if value != sample[0] and (not bounds or value != bounds[-1]):
                bounds.append(value)
    return bounds


def plan_chunks(conn: Any, plan: TablePlan, *, parallelism: int, partition_rows: int,
                small_rows: int) -> tuple[list[str], list[CtidRange]]:  # fmt: skip
    """Key-range chunks of every relation of ``plan`` (page ranges when it has no usable key);
    ``conn`` is inside the copy's snapshot."""
    from walspark.spark.snapshot.initial import plan_partitions

    key = key_columns(conn, plan)
    if not key:
        return [], plan_partitions(plan, parallelism=parallelism, partition_rows=partition_rows,
                                   small_rows=small_rows)  # fmt: skip
    names, types = tuple(k for k, _ in key), tuple(t for _, t in key)
    chunks: list[CtidRange] = []
    for rel in plan.relations:
        n = chunk_count(rel.estimated_rows, rel.pages, parallelism=parallelism, partition_rows=partition_rows,
                        small_rows=small_rows)  # fmt: skip
        edges: list[tuple[str, ...] | None] = [None, *key_bounds(conn, rel.schema, rel.table, names, plan.row_filter,
                                                                rel.pages, n), None]  # fmt: skip
        for lo, hi in itertools.pairwise(edges):
            chunks.append(CtidRange(len(chunks), rel.schema, rel.table, 0, None, names, types, lo, hi))
    return list(names), chunks


def committed_waves(spark: SparkSession, path: str, saved: CopyPlan) -> list[Wave]:
    """The waves of ``saved`` that the Delta table holds (its history after the copy's start)."""
    if saved.start_version is None:
        return []
    waves = []
    for version, text, metrics in _history(spark, path, saved.start_version):
        if not text.startswith(METADATA_PREFIX):
            continue
        meta = json.loads(text[len(METADATA_PREFIX) :])
        if meta.get("gen") == saved.gen and meta.get("plan") == saved.plan_id:
            # Spark's appends count numOutputRows, delta-rs's num_added_rows.
            rows = int(metrics.get("numOutputRows", metrics.get("num_added_rows", 0)))
            waves.append(Wave(version, int(meta["lsn"]), tuple(meta["chunks"]), rows))
    return sorted(waves, key=lambda w: w.version)


def _history(spark: SparkSession, path: str, after: int) -> list[tuple[int, str, dict[str, Any]]]:
    """``(version, userMetadata, operationMetrics)`` of the table's commits after ``after``: read
    by delta-rs where the table is local (no Spark job), else by Spark."""
    from walspark.spark.lake.driver_log import local_path
    from walspark.spark.snapshot import driver_copy

    local = local_path(path) if driver_copy.enabled(path) else None
    if local is not None:
        from deltalake import DeltaTable

        try:
            history = DeltaTable(local).history()
        except Exception as exc:  # noqa: BLE001 - a table delta-rs cannot open is Spark's to read
            log.debug("%s: history read by Spark (%s)", path, exc)
        else:
            return [(int(h["version"]), h.get("userMetadata") or "", h.get("operationMetrics") or {})
                    for h in history if int(h["version"]) > after]  # fmt: skip
    from delta.tables import DeltaTable as SparkDeltaTable

    rows = (SparkDeltaTable.forPath(spark, path).history().where(f"version > {int(after)}")
            .select("version", "userMetadata", "operationMetrics").collect())  # fmt: skip
    return [(int(r["version"]), r["userMetadata"] or "", r["operationMetrics"] or {}) for r in rows]


def _start(spark: SparkSession, properties: dict[str, str], schema: pa.Schema, path: str) -> int:
    """Replace the Delta table at ``path`` by an empty one of the plan's shape (``schema``, the
    source's, and ``properties``); its version. A new local table is created by delta-rs
    (:func:`.driver_copy.create`).

    SQL, not ``DeltaTable.createOrReplace().location()``: the builder leaves an existing table of
    the same schema as it is (no new version), and a copy must start from an empty table.
    """
    from delta.tables import DeltaTable

    from walspark.spark.lake.tables import properties_clause
    from walspark.spark.snapshot import driver_copy
    from walspark.spark.snapshot.initial import _sql_path
    from walspark.values import spark_schema

    if driver_copy.can_create(path, schema, properties):
        return driver_copy.create(path, schema, [], properties)
    view = f"walspark_copy_{uuid.uuid4().hex}"
    spark.createDataFrame([], spark_schema(schema)).createOrReplaceTempView(view)
    props = properties_clause(properties)
    try:
        spark.sql(f"CREATE OR REPLACE TABLE {_sql_path(path)} USING delta{props} "
                  f"AS SELECT * FROM `{view}`")  # fmt: skip
    finally:
        spark.catalog.dropTempView(view)
    return int(DeltaTable.forPath(spark, path).history(1).first()["version"])  # type: ignore[index]  # just written


def replace_from_side(spark: SparkSession, side: str, path: str, plan: CopyPlan) -> None:
    """Replace the table at ``path`` by the copy at ``side`` in one commit (``CREATE OR REPLACE
    TABLE … AS SELECT``, with the properties the copy was made with): readers see the old rows
    until that commit and every copied row from it on; the old versions stay readable by time
    travel. The commit is tagged with the copy's plan id, and a table whose last commit has that
    tag is left as it is: nothing else writes a table being copied, so a hand-off repeated after a
    crash between the replace and the record of it makes no second version."""
    from walspark.spark.lake.columns import _USER_METADATA
    from walspark.spark.snapshot.initial import _create_as_select

    tag = REPLACE_PREFIX + json.dumps({"gen": plan.gen, "plan": plan.plan_id})
    last = _history(spark, path, _last_version(spark, path) - 1)
    if last and last[-1][1] == tag:
        return
    previous = spark.conf.get(_USER_METADATA, None)
    spark.conf.set(_USER_METADATA, tag)
    try:
        _create_as_select(spark, path, spark.read.format("delta").load(side), plan.properties or {})
    finally:
        if previous is None:
            spark.conf.unset(_USER_METADATA)
        else:
            spark.conf.set(_USER_METADATA, previous)


def _last_version(spark: SparkSession, path: str) -> int:
    from delta.tables import DeltaTable

    from walspark.spark.lake.driver_log import local_path
    from walspark.spark.snapshot import driver_copy

    local = local_path(path) if driver_copy.enabled(path) else None
    if local is not None:
        from deltalake import DeltaTable as RsTable

        try:
            return int(RsTable(local).version())
        except Exception as exc:  # noqa: BLE001 - a table delta-rs cannot open is Spark's to read
            log.debug("%s: version read by Spark (%s)", path, exc)
    return int(DeltaTable.forPath(spark, path).history(1).first()["version"])  # type: ignore[index]  # one row


def copy_in_chunks(spark: SparkSession, *, dsn: str, snapshot_name: str, consistent_point: int,
                   plan: TablePlan, catalog: list[list[Any]], path: str, side: str, plan_path: Location,
                   gen: int, parallelism: int, partition_rows: int, small_rows: int, say: Callable[[str], None],
                   stop: threading.Event) -> CopyOutcome:  # fmt: skip
    """Copy ``plan`` into ``path`` in waves of chunks, continuing the chunks an earlier attempt of
    the same generation committed when their shape still fits (see the module docstring). A table
    that has a Delta table already is copied into ``side`` instead, which replaces it in one commit
    at the hand-off (:func:`replace_from_side`): a first copy is visible as it goes, a re-copy never."""
    import pyarrow as pa

    from walspark.source.connect import connect_sql
    from walspark.spark.lake import driver_append
    from walspark.spark.lake.tables import is_delta_table
    from walspark.spark.snapshot import driver_copy
    from walspark.spark.snapshot.initial import (
        SMALL_TABLE_ROWS,
        SnapshotProgress,
        _written_rows,
        source_plan,
        table_properties,
    )
    from walspark.spark.snapshot.pgsnapshot import begin_in_snapshot, source_schema

    loaded = CopyPlan.load(plan_path)
    saved = loaded if loaded is not None and loaded.gen == gen else None  # this generation's plan
    shape = shape_of(plan)
    base = source_plan(dsn, snapshot_name, plan, catalog)
    waves = committed_waves(spark, saved.into or path, saved) if saved is not None else []
    restart = None
    if saved is not None and saved.shape != shape:
        restart = "its columns, row filter or partitions changed since the copy began"
    elif saved is not None and waves and not saved.keys:
        restart = "it has no primary key or replica identity index to resume by"
    if saved is None or restart:
        if restart:
            say(f"copy of {plan.qualified} starts over: {restart}")
        with connect_sql(dsn) as conn:
            begin_in_snapshot(conn, snapshot_name)
            keys, chunks = plan_chunks(conn, plan, parallelism=parallelism, partition_rows=partition_rows,
                                       small_rows=small_rows)  # fmt: skip
            conn.execute("COMMIT")
        saved = CopyPlan(gen, shape, keys, chunks, uuid.uuid4().hex, into=side if is_delta_table(path) else path)
        saved.save(plan_path)
        waves = []
    schema = source_schema(base)
    into = saved.into or path
    if saved.start_version is None:
        saved.properties = table_properties(plan, spark, path, schema)
        saved.start_version = _start(spark, saved.properties, schema, into)
        saved.save(plan_path)
    # A small table's waves are read and appended from the driver (no Spark query per wave).
    driver = (driver_copy.enabled(into) and driver_append.can_append(into) and driver_copy.plain_schema(schema)
              and sum(r.rows_or_guess for r in plan.relations) < SMALL_TABLE_ROWS)  # fmt: skip
    done = {i for w in waves for i in w.chunks}
    todo = [c for c in saved.chunks if c.index not in done]
    total = len(saved.chunks)
    how = "key ranges" if saved.keys else "page ranges"
    if done:
        say(
            f"resuming the copy of {plan.qualified}: {len(done)} of {total} chunks were committed before; "
            f"copying the other {len(todo)} at {format_lsn(consistent_point)}"
        )
    else:
        say(
            f"copying {plan.qualified} at {format_lsn(consistent_point)} ({total} chunks, {how}) while the "
            "stream goes on"
        )
    started = time.monotonic()
    rows = sum(w.rows for w in waves)
    for first in range(0, len(todo), max(parallelism, 1)):
        if stop.is_set():
            raise InterruptedError(f"the copy of {plan.qualified} was stopped")
        wave = todo[first : first + max(parallelism, 1)]
        meta = {"gen": gen, "plan": saved.plan_id, "lsn": consistent_point, "chunks": [c.index for c in wave]}
        note = METADATA_PREFIX + json.dumps(meta)
        if driver:
            try:
                batch = pa.Table.from_batches(list(driver_copy.read(base, wave)), schema)
                driver_append.append(into, batch, note)
                rows += batch.num_rows
            except driver_append.DriverAppendUnsupported:
                driver = False
        if not driver:
            df = spark.read.format("pgsnapshot").option("plan", replace(base, ranges=wave).to_json()).load()
            df.write.format("delta").mode("append").option("userMetadata", note).save(into)
            rows += _written_rows(spark, into)
        done.update(c.index for c in wave)
        say(
            "copy of "
            + SnapshotProgress(
                plan.schema, plan.table, len(done), total, rows, plan.estimated_rows, time.monotonic() - started
            ).line()
        )  # as the initial snapshot's
        if len(done) < total:
            _injection.point("wave-committed", table=plan.qualified, wave=first // max(parallelism, 1) + 1, stop=stop)
    waves = committed_waves(spark, into, saved)
    say(
        "copy of "
        + SnapshotProgress(
            plan.schema,
            plan.table,
            total,
            total,
            sum(w.rows for w in waves),
            plan.estimated_rows,
            time.monotonic() - started,
            done=True,
        ).line()
    )
    lsns = sorted({w.lsn for w in waves}) or [consistent_point]
    cuts = tuple((lsn, max(w.version for w in waves if w.lsn == lsn)) for lsn in lsns) if len(lsns) > 1 else ()
    return CopyOutcome(sum(w.rows for w in waves), lsns[-1], cuts, tuple(saved.keys),
                       sum(len(w.chunks) for w in waves if w.lsn != consistent_point), into != path)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# What of a pending log the copy already holds


def truncated_within(rows: DataFrame, first: int, since: int) -> bool:
    """A TRUNCATE between the first and the last snapshot of a resumed copy: chunks read before it
    hold rows it removed, chunks read after it do not — no per-key rule can tell; copy again."""
    from pyspark.sql import functions as F

    lsn = F.col("_commit_lsn")
    return bool(rows.where((F.col("_op") == "T") & (lsn >= first) & (lsn < since)).limit(1).count())


def without_copied(rows: DataFrame, *, since: int, cuts: Sequence[tuple[int, int]], keys: Sequence[str],
                   spark: SparkSession, path: str) -> DataFrame:  # fmt: skip
    """The changes of ``rows`` (per-table layout) the copy does not already hold.

    One snapshot: those with commit LSN >= C. Several (a resumed copy): per key, the C of the
    snapshot its chunk was read in — found as the first cut whose Delta version holds the key;
    a key no chunk holds did not exist when its chunk was read, and every change of it from the
    first C on is applied (its last one before its chunk's C left it deleted, so that is what the
    fold ends with). An update that moved a row between keys of different C is applied on each
    side by that side's C: kept, or reduced to the delete of its old key.
    """
    from pyspark.sql import functions as F

    lsn = F.col("_commit_lsn")
    if len(cuts) <= 1 or not keys:
        return rows.where(lsn >= since)
    first = min(c for c, _ in cuts)
    op = F.col("_op")
    new = [F.col(quote(k)) for k in keys]
    old = [F.col("_old").getField(k) for k in keys]
    key_names = [f"__ws_ck{i}" for i in range(len(keys))]
    wanted = (rows.where(op.isin("I", "U")).select(*[c.alias(n) for c, n in zip(new, key_names)])
              .unionByName(rows.where(op.isin("U", "D") & F.col("_old").isNotNull())
                           .select(*[c.alias(n) for c, n in zip(old, key_names)]))
              .distinct())  # fmt: skip
    held = None
    for cut, version in cuts:
        copy = spark.read.format("delta").option("versionAsOf", version).load(path)
        part = (copy.select(*[F.col(quote(k)).alias(n) for k, n in zip(keys, key_names)])
                .join(F.broadcast(wanted), key_names, "left_semi").withColumn("__ws_at", F.lit(cut)))  # fmt: skip
        held = part if held is None else held.unionByName(part)
    assert held is not None
    held = held.groupBy(*key_names).agg(F.min("__ws_at").alias("__ws_at"))

    def threshold(side: list[Any], tag: str) -> tuple[DataFrame, Any, list[Any]]:
        renamed = held.select(
            *[F.col(n).alias(f"{n}{tag}") for n in key_names], F.col("__ws_at").alias(f"__ws_at{tag}")
        )
        cond = [s.eqNullSafe(F.col(f"{n}{tag}")) for s, n in zip(side, key_names)]
        return renamed, F.coalesce(F.col(f"__ws_at{tag}"), F.lit(first)), cond

    new_held, at_new, new_cond = threshold(new, "n")
    old_held, at_old, old_cond = threshold(old, "o")
    joined = rows.join(F.broadcast(new_held), _all(new_cond), "left").join(
        F.broadcast(old_held), _all(old_cond), "left"
    )
    moved = (op == "U") & F.col("_old").isNotNull() & _any([~n.eqNullSafe(o) for n, o in zip(new, old)])
    keep = (F.when(op == "D", lsn >= at_old)
            .when(moved, (lsn >= at_new) | (lsn >= at_old))
            .when(op.isin("I", "U"), lsn >= at_new)
            .when(op == "T", lsn >= since)
            .otherwise(lsn >= first))  # fmt: skip
    extra = [*(f"{n}{t}" for n in key_names for t in "no"), "__ws_atn", "__ws_ato"]
    return (joined.where(keep).withColumn("_op", F.when(moved & (lsn < at_new), F.lit("D")).otherwise(op))
            .drop(*extra).select(*[F.col(quote(c)) for c in rows.columns]))  # fmt: skip


def _all(conds: list[Any]) -> Any:
    import functools
    import operator

    return functools.reduce(operator.and_, conds)


def _any(conds: list[Any]) -> Any:
    import functools
    import operator

    return functools.reduce(operator.or_, conds)
