"""The initial snapshot: every published table copied in parallel inside one exported snapshot.

The slot's consistent point splits the history: what committed before it is in the copy, what
committed after is streamed — no gap, no duplicate. See docs/design/snapshot.md for the steps
and why a rerun is safe.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from walspark.protocol.lsn import format_lsn, parse_lsn
from walspark.spark.lake.tables import table_properties as target_properties
from walspark.spark.snapshot.pgsnapshot import CtidRange, SnapshotSourcePlan
from walspark.spark.snapshot.pgsnapshot import register as register_snapshot_source
from walspark.storage import StorageSettings, TargetLayout, location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "SnapshotError",
    "SnapshotProgress",
    "SnapshotRecord",
    "SnapshotResult",
    "TablePlan",
    "TableSnapshot",
    "console_progress",
    "plan_partitions",
    "publication_tables",
    "read_record",
    "run_snapshot",
]

log = logging.getLogger(__name__)


#: Rows per CTID-range task when nothing else is asked (a big table gets at least one task per
#: unit of Spark's default parallelism). Large, because a task's fixed cost (its Python worker's
#: round trips, a connection importing the snapshot, a COPY, a file) is tens of milliseconds of
#: CPU: 5,000,000 rows in 100 tasks took 9.0 s on 2 cores, in 8 tasks 3.2 s (docs/snapshot.md).
#: A task streams its rows, so its memory does not grow with its size.
DEFAULT_PARTITION_ROWS = 1_000_000
#: Most heap pages (8 KiB each) a task reads when its rows are sized by ``partition_rows``: wide
#: rows make fewer per task (128 MiB of table each at most).
MAX_TASK_PAGES = 16_384

#: Tables estimated below this many rows are read in one task, without a CTID condition.
SMALL_TABLE_ROWS = 50_000

#: Rows per page assumed for a table PostgreSQL has never analysed (``reltuples`` = -1).
ASSUMED_ROWS_PER_PAGE = 100
#: Bytes of a page, for a table's size from its pages (PostgreSQL's default ``block_size``).
PAGE_BYTES = 8192


class SnapshotError(RuntimeError):
    """The snapshot cannot start or continue; the message says what to do."""


# ---------------------------------------------------------------------------------------------
# Planning


@dataclass(slots=True)
class Relation:
    """One relation with storage: a plain table or a leaf partition."""

    schema: str
    table: str
    pages: int
    estimated_rows: int | None

    @property
    def rows_or_guess(self) -> int:
        """The estimate, or :data:`ASSUMED_ROWS_PER_PAGE` per page for a relation never analysed."""
        return self.estimated_rows if self.estimated_rows is not None else self.pages * ASSUMED_ROWS_PER_PAGE


@dataclass(slots=True)
class TablePlan:
    """One published table: its columns and the CTID ranges that read it."""

    schema: str
    table: str
    columns: list[tuple[str, int, int]]
    binary: bool
    relations: list[Relation]
    ranges: list[CtidRange] = field(default_factory=list)
    #: The publication's row filter (the server's deparsed expression, ORed over publications),
    #: applied to every relation's COPY; None copies every row.
    row_filter: str | None = None
    #: A table without columns: its row count in the snapshot (copied as that many marker rows).
    columnless_rows: int | None = None
    attnums: dict[str, int] = field(default_factory=dict)  # column -> pg_attribute.attnum (evolution.py)
    oid: int | None = None  # the published relation (a partition root under publish_via_partition_root)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def pages(self) -> int:
        return sum(r.pages for r in self.relations)

    @property
    def estimated_rows(self) -> int | None:
        known = [r.estimated_rows for r in self.relations]
        return None if any(k is None for k in known) else sum(k or 0 for k in known)


def _estimate(reltuples: float | None, relpages: int | None, pages: int) -> int | None:
    """Rows now, from the planner's density (rows per page at the last ANALYZE) and today's size."""
    if reltuples is None or reltuples < 0:
        return None
    if not relpages or relpages <= 0:
        return 0 if pages == 0 else int(reltuples) or None
    return round(reltuples / relpages * pages)


def plan_partitions(
    plan: TablePlan,
    *,
    parallelism: int,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    partition_pages: int | None = None,
    small_rows: int = SMALL_TABLE_ROWS,
) -> list[CtidRange]:
    """CTID ranges of whole pages for every relation of ``plan`` (stored on it and returned).

    ``partition_pages`` fixes the pages per task; otherwise a task gets about ``partition_rows``
    rows (at most :data:`MAX_TASK_PAGES` pages), and a table big enough to split gets at least
    ``parallelism`` tasks so every core has work. The last range of each relation is open-ended: pages added after the plan (rows
    moved by concurrent updates) are read too — they hold no row of the snapshot anyway, but
    nothing depends on the page count being exact.
    """
    ranges: list[CtidRange] = []
    for rel in plan.relations:
        rows = rel.rows_or_guess
        if partition_pages is not None:
            chunk = max(1, partition_pages)
        elif rel.pages <= 1 or rows < small_rows:
            chunk = rel.pages or 1
        else:
            per_page = max(rows / rel.pages, 1.0)
            chunk = max(1, min(math.ceil(partition_rows / per_page), MAX_TASK_PAGES))
            chunk = min(chunk, max(1, math.ceil(rel.pages / max(parallelism, 1))))
        if rel.pages <= chunk:
            ranges.append(CtidRange(len(ranges), rel.schema, rel.table, 0, None))
            continue
        start = 0
        while start < rel.pages:
            end: int | None = start + chunk
            if end is not None and end >= rel.pages:
                end = None
            ranges.append(CtidRange(len(ranges), rel.schema, rel.table, start, end))
            if end is None:
                break
            start = end
    plan.ranges = ranges
    return ranges


_SIZE_QUERY = """
SELECT n.nspname::text, c.relname::text, c.reltuples::float8, c.relpages,
       (pg_relation_size(c.oid) / current_setting('block_size')::int)::int8
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = %s
"""

_LEAVES_QUERY = """
SELECT p.relid::oid::int8 FROM pg_partition_tree(%s) p JOIN pg_class c ON c.oid = p.relid
 WHERE p.isleaf AND c.relkind = 'r'
 ORDER BY p.level, c.relname
"""


def publication_tables(conn: Any, publication: str | Sequence[str]) -> list[TablePlan]:
    """The publication's tables as pgoutput will stream them: names, columns, rows, storage.

    Run it inside the exported snapshot so the list and the columns are those of the consistent
    point. What is copied is what the catalog says is published
    (:func:`walspark.source.catalog.published_tables`, publications comma-separated as the
    stream reads them): the columns pgoutput sends, the rows passing the row filter, a table's own
    rows only (``ONLY``). A partitioned root published through its root is read through its leaf
    partitions, each with the root's filter; types come from the root.
    """
    from walspark.source.catalog import ColumnListConflict, published_tables
    from walspark.values import TypeRegistry

    try:
        published = published_tables(conn, publication)
    except ColumnListConflict as exc:
        raise SnapshotError(str(exc)) from None
    registry = TypeRegistry()
    plans = []
    for rel in published:
        columns = [(c.name, c.type_oid, c.typmod) for c in rel.columns]
        if rel.via_root:
            leaf_oids = [r[0] for r in conn.execute(_LEAVES_QUERY, (rel.oid,)).fetchall()]
        else:
            leaf_oids = [rel.oid]
        relations = []
        for leaf in leaf_oids:
            lschema, ltable, reltuples, relpages, pages = conn.execute(_SIZE_QUERY, (leaf,)).fetchone()
            relations.append(Relation(lschema, ltable, int(pages), _estimate(reltuples, relpages, int(pages))))
        plans.append(
            TablePlan(
                rel.schema,
                rel.table,
                columns,
                True,
                relations,
                row_filter=rel.row_filter,
                attnums={c.name: c.attnum for c in rel.columns},
                oid=rel.oid,
            )
        )
        if not columns:  # PostgreSQL replicates the row count of a table without columns
            plans[-1].columnless_rows = _count_rows(conn, relations, rel.row_filter)
    # Binary COPY needs every column's binary format known; otherwise text COPY, whose string
    # values match what the text-mode stream gives for a type walspark does not know.
    catalog = _catalog_rows(conn)
    if catalog:
        from walspark.values import register_catalog_rows

        register_catalog_rows(registry, catalog)
    for p in plans:
        p.binary = all(registry.is_known(oid) for _, oid, _ in p.columns)
    return plans


def _count_rows(conn: Any, relations: Sequence[Relation], row_filter: str | None = None) -> int:
    """Rows of these relations (each ``ONLY``, passing the publication's row filter), in the
    connection's snapshot."""
    from psycopg import sql

    where = sql.SQL(" WHERE ({})").format(sql.SQL(row_filter)) if row_filter else sql.SQL("")  # the server's own text
    return sum(
        conn.execute(sql.SQL("SELECT count(*) FROM ONLY {}.{}{}").format(sql.Identifier(r.schema),
                                                                        sql.Identifier(r.table), where)).fetchone()[0]
        for r in relations
    )  # fmt: skip


def _catalog_rows(conn: Any) -> list[list[Any]]:
    """The user types (:func:`walspark.source.catalog.user_types`, the stream's too) as JSON-ready
    rows for the tasks."""
    from walspark.source.catalog import user_types

    return [[*r[:9], [list(f) for f in r[9]] if r[9] else None] for r in user_types(conn)]


# ---------------------------------------------------------------------------------------------
# Bookkeeping


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """What ``snapshot.json`` says: the state of the last snapshot into the target."""

    state: str  # "in_progress" | "complete"
    slot: str
    publication: str
    consistent_point: int | None
    tables: list[dict[str, Any]]
    started_at: str
    completed_at: str | None = None

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "slot": self.slot,
            "publication": self.publication,
            "consistent_point": None if self.consistent_point is None else format_lsn(self.consistent_point),
            "tables": self.tables,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
        }


def read_record(layout: TargetLayout, settings: StorageSettings | None = None) -> SnapshotRecord | None:
    """The snapshot record of the target, or None when no snapshot was ever started there."""
    data = layout.snapshot_record(settings).read_json()
    if data is None:
        return None
    cp = data.get("consistent_point")
    return SnapshotRecord(
        data["state"],
        data["slot"],
        data["publication"],
        None if cp is None else parse_lsn(cp),
        list(data.get("tables") or []),
        data.get("started_at", ""),
        data.get("completed_at"),
    )


def _write_record(layout: TargetLayout, record: SnapshotRecord) -> None:
    """Replace the record atomically (local: a sibling written, fsynced, renamed; object store: one
    PUT): never a torn file."""
    path = layout.snapshot_record()
    path.write_json(record.to_dict(), tmp_name=f".{path.name}.{os.getpid()}.tmp", indent=2)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------------
# Progress


@dataclass(frozen=True, slots=True)
class SnapshotProgress:
    """One progress report of one table.

    ``rows_copied`` is an estimate while the table runs (finished tasks' share of the estimated
    rows) and exact when ``done`` (Delta's count of written rows).
    """

    schema: str
    table: str
    tasks_done: int
    tasks_total: int
    rows_copied: int
    rows_estimated: int | None
    elapsed: float
    done: bool = False

    @property
    def rate(self) -> float:
        return self.rows_copied / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        if self.done or not self.rows_estimated or self.rate <= 0:
            return None
        return max(self.rows_estimated - self.rows_copied, 0) / self.rate

    def line(self) -> str:
        """A human line: ``public.orders  12/40 tasks  1,200,000 / ~5,000,000 rows  310,000 rows/s  ETA 12s``."""
        est = "?" if self.rows_estimated is None else f"~{self.rows_estimated:,}"
        if self.done:
            return (
                f"{self.schema}.{self.table}: done, {self.rows_copied:,} rows in {self.elapsed:.1f}s "
                f"({self.rate:,.0f} rows/s, {self.tasks_total} tasks)"
            )
        eta = "" if self.eta is None else f", ETA {self.eta:.0f}s"
        return (
            f"{self.schema}.{self.table}: {self.tasks_done}/{self.tasks_total} tasks, "
            f"~{self.rows_copied:,} / {est} rows, {self.rate:,.0f} rows/s{eta}"
        )


ProgressCallback = Callable[[SnapshotProgress], None]


def console_progress(stream: TextIO | None = None) -> ProgressCallback:
    """A callback printing one line per progress report (to stderr by default)."""

    def report(p: SnapshotProgress) -> None:
        out = stream or sys.stderr
        print(p.line(), file=out, flush=True)

    return report


@contextlib.contextmanager
def _watch(
    spark: SparkSession, group: str, plan: TablePlan, callback: ProgressCallback | None, started: float, interval: float
) -> Iterator[None]:
    """Report a table's finished tasks while its Spark job runs.

    Executors cannot print to the driver, so a driver thread polls Spark's status tracker for the
    job group's stage of ``len(plan.ranges)`` tasks and reports whenever more have finished.
    """
    if callback is None:
        yield
        return
    stop = threading.Event()
    total = len(plan.ranges)
    est = plan.estimated_rows

    def poll() -> None:
        tracker = spark.sparkContext.statusTracker()
        last = -1
        while not stop.wait(interval):
            try:
                done = 0
                for job_id in tracker.getJobIdsForGroup(group):
                    job = tracker.getJobInfo(job_id)
                    for stage_id in job.stageIds if job else ():
                        stage = tracker.getStageInfo(stage_id)
                        if stage is not None and stage.numTasks == total:
                            done = max(done, stage.numCompletedTasks)
            except Exception:  # the tracker is best effort; progress must never fail the snapshot
                log.debug("status tracker poll failed", exc_info=True)
                continue
            if done != last and done < total:
                last = done
                rows = int((est or 0) * done / total) if total else 0
                callback(SnapshotProgress(plan.schema, plan.table, done, total, rows, est, time.monotonic() - started))

    thread = threading.Thread(target=poll, name=f"walspark-progress-{plan.table}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# ---------------------------------------------------------------------------------------------
# Running


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """One table written by the snapshot."""

    schema: str
    table: str
    path: str
    rows: int
    tasks: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "table": self.table,
            "path": self.path,
            "rows": self.rows,
            "tasks": self.tasks,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    """The outcome: where streaming starts (``consistent_point``) and what was written.

    ``skipped`` is True when a complete snapshot was already recorded and nothing was redone.
    """

    slot: str
    consistent_point: int
    tables: list[TableSnapshot]
    skipped: bool = False

    @property
    def consistent_point_text(self) -> str:
        return format_lsn(self.consistent_point)


def _sql_path(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _written_rows(spark: SparkSession, path: str) -> int:
    """Rows the last commit of ``path`` wrote (Delta's ``numOutputRows`` operation metric).

    Read from the newest commit file of a local table (a file read instead of a Spark query that
    costs about a second per table), else through ``DESCRIBE HISTORY``.
    """
    with contextlib.suppress(Exception):
        log_dir = location(path) / "_delta_log"
        if not log_dir.is_local:  # a listing and a GET cost about what the query costs
            raise LookupError(path)
        latest = max(
            (e for e in log_dir.list() if e.name[:1].isdigit() and e.name.endswith(".json")), key=lambda e: e.name
        ).local_path
        assert latest is not None  # a local log
        for line in latest.read_text().splitlines():
            entry = json.loads(line)
            if "commitInfo" in entry:
                return int(entry["commitInfo"]["operationMetrics"]["numOutputRows"])
    row = spark.sql(f"DESCRIBE HISTORY {_sql_path(path)} LIMIT 1").first()
    metrics = (row["operationMetrics"] or {}) if row else {}
    return int(metrics.get("numOutputRows", 0))


def table_properties(
    plan: TablePlan, spark: SparkSession, path: str, schema: pa.Schema | None = None
) -> dict[str, str]:
    """The properties of a table copied to ``path``: deletion vectors for a large one (larger where
    delta-rs merges it), column mapping where a name of the source's Arrow ``schema`` (None: the
    plan's columns) needs it (:func:`~walspark.spark.lake.tables.table_properties`), and each
    column's identity, so that later DDL is followed by attnum (:mod:`.evolution`)."""
    from walspark.spark.lake.driver_merge import may_write
    from walspark.spark.lake.evolution import ATTNUMS_PROPERTY, ColumnIds
    from walspark.spark.lake.tables import field_names

    if schema is not None:
        from walspark.values import spark_schema

        names = field_names(spark_schema(schema).fields)
    else:
        names = [c[0] for c in plan.columns]
    props = target_properties(spark.conf, sum(r.rows_or_guess for r in plan.relations), names,
                              driver_merges=may_write(path),
                              estimated_bytes=sum(r.pages for r in plan.relations) * PAGE_BYTES)  # fmt: skip
    if plan.attnums:
        props[ATTNUMS_PROPERTY] = ColumnIds(plan.attnums, {}).to_json()
    return props


def source_plan(
    dsn: str, snapshot_name: str, plan: TablePlan, catalog: list[list[Any]], *, fail_partition: int | None = None
) -> SnapshotSourcePlan:
    """What the ``pgsnapshot`` tasks of ``plan`` need (its ranges as planned)."""
    return SnapshotSourcePlan(dsn=dsn, snapshot_name=snapshot_name, columns=plan.columns, binary=plan.binary,
                              ranges=plan.ranges, catalog=catalog, fail_partition=fail_partition,
                              row_filter=plan.row_filter)  # fmt: skip


def write_table(
    spark: SparkSession,
    dsn: str,
    snapshot_name: str,
    plan: TablePlan,
    path: str,
    *,
    catalog: list[list[Any]],
    progress: ProgressCallback | None = None,
    fail_partition: int | None = None,
    poll_interval: float = 0.5,
) -> TableSnapshot:
    """Copy one planned table into a fresh Delta table at ``path``, in one Spark job and one commit.

    ``CREATE OR REPLACE TABLE delta.`path` ... AS SELECT`` makes the table (its features as
    :func:`table_properties` says) and its rows one atomic Delta commit: a failed job leaves the
    previous version in place.
    A table without columns becomes its row count in marker rows (see ``apply.ROW_MARKER``).
    A small table new to the target is copied from the driver instead (:mod:`.driver_copy`), and
    a big one's files are written by its tasks where delta-rs writes them as Spark would
    (:mod:`.task_write`).
    """
    started = time.monotonic()
    if plan.columnless_rows is not None:
        from walspark.spark.lake.columns import ROW_MARKER
        from walspark.spark.lake.tables import quote

        properties = table_properties(plan, spark, path)
        df = spark.range(plan.columnless_rows).selectExpr(f"true AS {quote(ROW_MARKER)}")
    else:
        from walspark.spark.snapshot import driver_copy
        from walspark.spark.snapshot.pgsnapshot import source_schema

        source = source_plan(dsn, snapshot_name, plan, catalog, fail_partition=fail_partition)
        schema = source_schema(source)
        properties = table_properties(plan, spark, path, schema)
        copied = driver_copy.copy(source, path, properties)
        if copied is not None:
            return _done(plan, path, copied, started, progress)
        if driver_copy.tasks_may_write(path, schema, properties):
            return _written_by_tasks(spark, plan, source, schema, path, properties, started, progress, poll_interval)
        df = spark.read.format("pgsnapshot").option("plan", source.to_json()).load()
    with _job(spark, plan, progress, started, poll_interval):
        _create_as_select(spark, path, df, properties)
    return _done(plan, path, _written_rows(spark, path), started, progress)


@contextlib.contextmanager
def _job(spark: SparkSession, plan: TablePlan, progress: ProgressCallback | None, started: float,
         poll_interval: float) -> Iterator[None]:  # fmt: skip
    """The Spark jobs run inside: one job group named for the table, its tasks reported (:func:`_watch`)."""
    group = f"walspark-snapshot-{abs(hash((plan.schema, plan.table, time.monotonic_ns())))}"
    sc = spark.sparkContext
    sc.setJobGroup(group, f"walspark snapshot of {plan.qualified}", interruptOnCancel=True)
    try:
        with _watch(spark, group, plan, progress, started, poll_interval):
            yield
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def _create_as_select(spark: SparkSession, path: str, df: DataFrame, properties: dict[str, str]) -> None:
    """``CREATE OR REPLACE TABLE delta.`path` ... AS SELECT`` of ``df``: the table's features as
    ``properties`` say, its rows, one atomic commit replacing whatever was there."""
    from walspark.spark.lake.tables import properties_clause

    view = f"walspark_snapshot_{abs(hash((path, time.monotonic_ns())))}"
    df.createOrReplaceTempView(view)
    try:
        spark.sql(f"CREATE OR REPLACE TABLE {_sql_path(path)} USING delta{properties_clause(properties)}"
                  f" AS SELECT * FROM `{view}`")  # fmt: skip
    finally:
        spark.catalog.dropTempView(view)


def _written_by_tasks(spark: SparkSession, plan: TablePlan, source: SnapshotSourcePlan, schema: pa.Schema,
                      path: str, properties: dict[str, str], started: float, progress: ProgressCallback | None,
                      poll_interval: float) -> TableSnapshot:  # fmt: skip
    """The table made empty by Spark, exactly as its copy would make it; then the tasks write its
    files and the driver commits them (:mod:`.task_write`)."""
    from walspark.spark.snapshot import task_write
    from walspark.values import spark_schema

    empty = spark.createDataFrame(spark.sparkContext.emptyRDD(), spark_schema(schema))
    _create_as_select(spark, path, empty, properties)
    with _job(spark, plan, progress, started, poll_interval):
        files = spark.read.format("pgsnapshot").option("plan", source.to_json()).option("stage", path).load()
        written = files.collect()
    return _done(plan, path, task_write.commit(path, written), started, progress)


def _done(plan: TablePlan, path: str, rows: int, started: float, progress: ProgressCallback | None) -> TableSnapshot:
    """The result of a table's copy, said to ``progress`` as its last report."""
    elapsed = time.monotonic() - started
    result = TableSnapshot(plan.schema, plan.table, path, rows, len(plan.ranges), elapsed)
    if progress is not None:
        progress(
            SnapshotProgress(
                plan.schema,
                plan.table,
                len(plan.ranges),
                len(plan.ranges),
                rows,
                plan.estimated_rows,
                elapsed,
                done=True,
            )
        )
    return result


def _drop_slot(dsn: str, slot: str) -> bool:
    from walspark.source.connect import connect_sql
    from walspark.source.slots import drop_slot

    with connect_sql(dsn) as conn:
        return drop_slot(conn, slot, if_exists=True)


def _slot_exists(dsn: str, slot: str) -> bool:
    from walspark.source.connect import connect_sql
    from walspark.source.slots import get_slot

    with connect_sql(dsn) as conn:
        return get_slot(conn, slot) is not None


def _plan_in_snapshot(
    dsn: str, snapshot_name: str, publication: str | Sequence[str]
) -> tuple[list[TablePlan], list[list[Any]]]:
    from walspark.source.connect import connect_sql
    from walspark.spark.snapshot.pgsnapshot import begin_in_snapshot

    with connect_sql(dsn) as conn:
        begin_in_snapshot(conn, snapshot_name)
        plans = publication_tables(conn, publication)
        catalog = _catalog_rows(conn)
        conn.execute("COMMIT")
    return plans, catalog


def run_snapshot(
    spark: SparkSession,
    dsn: str,
    publication: str,
    slot: str,
    target: str,
    *,
    parallelism: int | None = None,
    progress: ProgressCallback | None = None,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    partition_pages: int | None = None,
    redo: bool = False,
    two_phase: bool = False,
    table_concurrency: int = 4,
    fail_partition: tuple[str, int] | None = None,
    state: str | None = None,
    failover: bool = False,
) -> SnapshotResult:
    """Create ``slot`` with an exported snapshot and copy every table of ``publication`` into ``target``.

    Returns the slot's consistent point: start streaming ``slot`` there (it is also the slot's
    ``confirmed_flush_lsn``) and the target continues the snapshot with no gap and no duplicate.

    ``parallelism`` is the number of tasks a big table is at least split into (default: Spark's
    default parallelism); ``partition_rows`` / ``partition_pages`` size the CTID ranges.
    ``table_concurrency`` tables are copied at the same time (each its own Spark job).
    ``failover``: the slot is one the standbys synchronize (PostgreSQL 17+, see
    :func:`~walspark.source.slots.create_slot_command`).
    ``fail_partition=("schema.table", i)`` is a test hook: task ``i`` of that table raises.
    See the module docstring for the restart rules and ``redo``.
    """
    from walspark.source.names import validate_slot_name
    from walspark.source.publications import publication_list

    validate_slot_name(slot)
    if not publication_list(publication):
        raise SnapshotError("a snapshot needs at least one publication name")
    register_snapshot_source(spark)
    parallelism = parallelism or spark.sparkContext.defaultParallelism

    layout = TargetLayout(target, state)
    previous = read_record(layout)
    if previous is not None and previous.complete and previous.slot == slot and not redo:
        if previous.consistent_point is not None and _slot_exists(dsn, slot):
            log.info(
                "snapshot of %s already complete at %s; nothing to do", target, format_lsn(previous.consistent_point)
            )
            tables = [
                TableSnapshot(t["schema"], t["table"], t["path"], t["rows"], t.get("tasks", 0), t.get("seconds", 0.0))
                for t in previous.tables
            ]
            return SnapshotResult(slot, previous.consistent_point, tables, skipped=True)
        raise SnapshotError(
            f"the snapshot in {target} is complete but slot {slot!r} is gone: changes since "
            f"its consistent point are lost; snapshot again (redo) into this target"
        )
    if previous is not None and previous.slot == slot:
        # A snapshot of ours that did not finish (or a redo): its slot is ours to drop.
        if _drop_slot(dsn, slot):
            log.warning("dropped slot %s left by an unfinished snapshot; starting over", slot)
    elif _slot_exists(dsn, slot):
        raise SnapshotError(
            f"slot {slot!r} already exists and this target has no snapshot of it; "
            "a snapshot needs a new slot (drop it, or choose another name)"
        )

    started_at = _now()
    _write_record(layout, SnapshotRecord("in_progress", slot, publication, None, [], started_at))
    from walspark.source.slots import create_slot_with_snapshot

    written: list[TableSnapshot] = []
    try:
        with create_slot_with_snapshot(dsn, slot, two_phase=two_phase, failover=failover) as exported:
            consistent_point = exported.consistent_point
            assert exported.snapshot_name is not None
            log.info(
                "slot %s consistent point %s, snapshot %s", slot, format_lsn(consistent_point), exported.snapshot_name
            )
            plans, catalog = _plan_in_snapshot(dsn, exported.snapshot_name, publication)
            snapshot_name = exported.snapshot_name

            def copy(plan: TablePlan) -> TableSnapshot:
                plan_partitions(
                    plan, parallelism=parallelism, partition_rows=partition_rows, partition_pages=partition_pages
                )
                fail = fail_partition[1] if fail_partition and fail_partition[0] == plan.qualified else None
                return write_table(
                    spark,
                    dsn,
                    snapshot_name,
                    plan,
                    layout.table(plan.schema, plan.table),
                    catalog=catalog,
                    progress=progress,
                    fail_partition=fail,
                )

            # Tables run as concurrent Spark jobs (a thread each, up to table_concurrency): a small
            # table is one task, so one at a time would leave the other cores idle.
            workers = max(1, min(table_concurrency, len(plans)))
            with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="walspark-snapshot") as pool:
                futures = [pool.submit(copy, plan) for plan in plans]
                try:
                    written.extend(f.result() for f in futures)
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
            exported.close()  # the snapshot is no longer needed: release it before the bookkeeping
    except BaseException:
        # Best effort: a slot left behind retains WAL. A crash that skips this is handled by the
        # rerun (the in-progress record names the slot).
        with contextlib.suppress(Exception):
            _drop_slot(dsn, slot)
        raise
    _write_record(
        layout,
        SnapshotRecord(
            "complete", slot, publication, consistent_point, [t.to_dict() for t in written], started_at, _now()
        ),
    )
    return SnapshotResult(slot, consistent_point, written)
