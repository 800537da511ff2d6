"""Fixed costs: what walspark pays when there is little data, beside its floors (`./dev bench fixed`).

Why: a scheduled ``walspark run --once`` over a quiet database, or a stream whose batches carry a
few changes each, costs what Spark, Delta and the server cost to start and to touch a table — not
what the data costs. Those figures mean something only beside the same work done bare, so the
floors are measured first, in the same run, on the same host:

* **floors** — a child process imports ``walspark.spark.session`` and calls ``spark_session()``
  (process launch → session ready, printed by the child), then, bare (PySpark + ``delta.tables``):
  writes a new Delta table of ``--rows`` rows (1,000), appends ``--changes`` rows (100) to it and
  MERGEs ``--changes`` changed rows into it, each twice (cold: the first time; warm: the second),
  and stops (``spark.stop()`` → process exit); its JVM compiles as a ``--once`` run's does (C1
  alone). Then ``pg_recvlogical`` (the server's own client,
  ``bench/e2e.py``'s, with the pgoutput options walspark asks of PostgreSQL 18) delivers
  ``--changes`` single-row updates of one table from a slot into /dev/null, process start to exit.
* **once** — ``walspark run --once`` (``python -m walspark.cli``), a child process per run, wall
  time from launch to exit, the DSN in ``$WALSPARK_DSN`` (never argv, where ``ps`` shows it). On a
  server with one table of ``--rows`` rows: the snapshot (the slot does not exist yet; the
  snapshot's own seconds — after Spark is up — from its ``public.soak_0: done, ... rows in X s``
  line), a second run with nothing to do, then ``--changes`` single-row updates (a transaction
  each) and a run. On a server with ``--tables-many`` tables (50) in one publication: their
  snapshot, then ``--changes`` updates on 1 table, on each of 4 tables and on each of the 50
  tables, each followed by a run. The runs' ``batch N: X changes applied in Y s`` lines are
  shown beside the wall. The cost per additional table touched by a batch is
  (wall(50 tables) − wall(1 table)) / 49, both on the 50-table publication.
* **steady** — ``walspark.Pipeline`` (the code of ``walspark run``, default MERGE mode) in a
  background thread of this process (``bench/streaming.py``), trigger ``--trigger`` (0.5 s), over
  4 tables and then over ``--tables-many``, each on a fresh server and target, while
  ``bench/soak.py``'s writer offers ``--rate`` (200) single-row updates per second, round-robin
  over the tables, a transaction each, for ``--seconds`` (60). Reported: micro-batches with
  changes, their duration p50 and p95 (Spark's ``batchDuration``, a streaming listener), offered
  and applied changes/s (applied: the pipeline's count of change rows over writes + drain), and
  the drain — from the writer's stop until every change was applied — and every table compared with
  its source (key and the updated column, delta-rs). The same over ``--tables-huge`` (500) tables.

Each floor a walspark case is set beside is a sum of the measured floors (named in its cell):
e.g. 100 updates on one table: session start + pg_recvlogical + MERGE (cold) + stop. A steady
batch's floor is a warm MERGE per table it touches (its change rows, at most the tables).

Goals (docs/design/fixed-costs.md): snapshot of one table ≤ 2 s after Spark is up; a run with
nothing to do ≤ 12 s; 100 updates on 1 table ≤ 15 s; a snapshot of 50 tables × 1,000 rows ≤ 20 s;
100 updates on each of 50 tables ≤ 45 s; ≤ 0.3 s per additional table touched by a batch; steady
over 50 tables: batch p95 ≤ 15 s; applied / offered ≥ 0.95 (drain included); steady over 500
tables: batch p95 ≤ 5 s, caught up ≤ 10 s after the last commit. The steady goal
over 4 tables — batch p50 ≤ 2.5 s at 1,000 changes/s — is measured by ``./dev bench freshness``.
Progress on stderr; the table on stdout, a row as each case ends, then whole at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from common import log, pct  # bench/common.py, beside this script
from paths import child_task, report, run_child  # bench/paths.py, beside this script

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from soak import Batches

GROUPS = ("floors", "once", "steady")
SNAPSHOT_LINE = re.compile(r"^(\S+): done, ([\d,]+) rows in ([\d.]+)s")
BATCH_LINE = re.compile(r"batch (\d+): ([\d,]+) changes applied in ([\d.]+)s")


@dataclass
class Case:
    """A row of the table."""

    name: str
    wall: str
    inside: str
    floor: str = "—"
    goal: str = "—"

    def row(self) -> str:
        return f"| {self.name} | {self.wall} | {self.inside} | {self.floor} | {self.goal} |"


HEADER = "| case | walspark wall (s) | what inside it | floor (s) | goal |\n|---|---:|---|---:|---|"


def verdict(value: float, limit: float, at_least: bool = False) -> str:
    """The goal cell: the limit and whether ``value`` meets it."""
    met = value >= limit if at_least else value <= limit
    return f"{'≥' if at_least else '≤'} {limit:g}: {'met' if met else 'NOT met'}"


class Floors:
    """The floors measured in this run (seconds by name); a sum of them is a case's floor."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def of(self, **parts: float) -> str:
        """The floor cell: Σ count × floor over ``parts`` (floor name with spaces as underscores → count)."""
        names = {k.replace("_", " "): n for k, n in parts.items() if n}
        if not self.seconds or any(k not in self.seconds for k in names):
            return "—"
        total = sum(n * self.seconds[k] for k, n in names.items())
        return f"{total:.2f} ({' + '.join(k if n == 1 else f'{n:g} × {k}' for k, n in names.items())})"


# --- floors -------------------------------------------------------------------------------


def floors_child(task: dict[str, Any]) -> None:
    """The floors' child: session start (from the process's launch), bare Delta writes, stop."""
    from walspark.spark.session import spark_session

    # compiled as a --once run's JVM is (C1 alone, walspark.spark.session.jit_options): floor and case alike
    spark = spark_session("walspark-bench-fixed-floor", master=task["master"], short_lived=True)
    figures = {"start": time.time() - task["launched"]}
    log(f"floor: SparkSession ready {figures['start']:.2f} s after the process was launched")
    from delta.tables import DeltaTable

    rows, changes = task["rows"], task["changes"]

    def frame(ids: list[int] | range, v: int):  # type: ignore[no-untyped-def]
        data = spark.createDataFrame([(i,) for i in ids], "id long") if isinstance(ids, list) else \
            spark.range(ids.start, ids.stop)  # fmt: skip
        return data.selectExpr("id", "current_timestamp() AS at", f"{v} AS v", "repeat('x', 100) AS payload")

    def timed(name: str, action) -> None:  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        action()
        figures[name] = time.perf_counter() - began
        log(f"floor: {name} {figures[name]:.2f} s")

    with tempfile.TemporaryDirectory(prefix="walspark-bench-fixed-") as tmp:
        for when in ("cold", "warm"):
            timed(f"create {when}", lambda w=when: frame(range(1, rows + 1), 0).write.format("delta")
                  .save(f"{tmp}/{w}"))  # fmt: skip
        for n, when in enumerate(("cold", "warm")):
            first = rows + 1 + n * changes
            timed(f"append {when}", lambda f=first: frame(range(f, f + changes), 0).write.format("delta")
                  .mode("append").save(f"{tmp}/cold"))  # fmt: skip
        keys = spread(rows, changes)
        for n, when in enumerate(("cold", "warm")):
            timed(f"merge {when}", lambda v=n + 1: DeltaTable.forPath(spark, f"{tmp}/cold").alias("t")
                  .merge(frame(keys, v).alias("s"), "t.id = s.id").whenMatchedUpdateAll()
                  .whenNotMatchedInsertAll().execute())  # fmt: skip
        figures["stop began"] = time.time()
        spark.stop()
    report(task, figures)


def measure_floors(args: argparse.Namespace, floors: Floors) -> list[Case]:
    """The floors: the child's session, Delta writes and stop; pg_recvlogical here."""
    log("floors: a child process starts a bare SparkSession and writes Delta bare")
    figures = run_child(__file__, {"launched": time.time(), "master": args.master, "rows": args.rows,
                                   "changes": args.changes})  # fmt: skip
    figures["stop"] = time.time() - figures.pop("stop began")
    floors.seconds.update(figures)
    floors.seconds["recvlogical"] = recvlogical_floor(args)
    s, c, r = floors.seconds, args.changes, args.rows
    return [
        Case("floor: SparkSession start", "—", "a child process: launch → spark_session() returned",
             f"{s['start']:.2f}"),
        Case("floor: Spark stop", "—", "spark.stop() → the child process's exit", f"{s['stop']:.2f}"),
        Case("floor: Delta write of a new table", "—", f"cold / warm; {r:,} rows (spark.range), bare",
             f"{s['create cold']:.2f} / {s['create warm']:.2f}"),
        Case("floor: Delta append", "—", f"cold / warm; {c} rows into the {r:,}-row table",
             f"{s['append cold']:.2f} / {s['append warm']:.2f}"),
        Case("floor: Delta MERGE", "—", f"cold / warm; {c} changed rows into that table (DeltaTable.merge)",
             f"{s['merge cold']:.2f} / {s['merge warm']:.2f}"),
        Case("floor: pg_recvlogical", "—", f"{c} single-row updates of 1 table → /dev/null, process start → exit",
             f"{s['recvlogical']:.2f}"),
    ]


def recvlogical_floor(args: argparse.Namespace) -> float:
    """``pg_recvlogical`` of ``--changes`` updates of one table (``bench/e2e.py``'s), in seconds."""
    from common import recvlogical  # bench/common.py, beside this script
    from soak import create_tables  # bench/soak.py, beside this script

    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.source.slots import create_slot

    with EmbeddedPostgres() as pg:
        dsn = pg.dsn()
        create_tables(dsn, 1, args.rows)
        with connect(dsn) as conn:
            create_slot(conn, "floor_slot")
        update(dsn, [0], args.rows, args.changes)
        endpos = current_lsn(dsn)
        seconds = recvlogical(pg, dsn, "floor_slot", "soak_pub", endpos)
    log(f"floor: pg_recvlogical {seconds:.2f} s")
    return seconds


# --- walspark run --once -------------------------------------------------------------------


def connect(dsn: str):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def current_lsn(dsn: str) -> str:
    with connect(dsn) as conn:
        return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]


def spread(rows: int, changes: int) -> list[int]:
    """``changes`` distinct keys spread over 1 .. ``rows``."""
    return [1 + i * (rows // changes) for i in range(changes)]


def update(dsn: str, tables: list[int], rows: int, changes: int) -> None:
    """``changes`` single-row updates (a transaction each) of each of ``soak_<t>`` for t in ``tables``."""
    with connect(dsn) as conn:
        for t in tables:
            for key in spread(rows, changes):
                conn.execute(f"UPDATE soak_{t} SET at = clock_timestamp(), v = v + 1 WHERE id = %s", (key,))


@dataclass
class Run:
    """One ``walspark run --once``: its wall time and what its output said."""

    wall: float
    snapshots: list[float]
    batches: list[tuple[int, float]]  # (changes, seconds)

    def inside(self) -> str:
        parts = []
        if len(self.snapshots) == 1:
            parts.append(f"snapshot {self.snapshots[0]:.1f} s (after Spark is up)")
        elif self.snapshots:
            parts.append(f"{len(self.snapshots)} snapshot lines: max {max(self.snapshots):.1f} s, "
                         f"sum {sum(self.snapshots):.1f} s")  # fmt: skip
        parts += [f"batch: {n:,} changes in {s:.1f} s" for n, s in self.batches]
        return "; ".join(parts) or "no batch"


def run_once(args: argparse.Namespace, dsn: str, target: str, what: str) -> Run:
    """``python -m walspark.cli run --once`` as a child process, timed from launch to exit."""
    argv = [sys.executable, "-m", "walspark.cli", "run", "--publication", "soak_pub", "--slot", "soak_slot",
            "--target", target, "--once", "--master", args.master]  # fmt: skip
    log(f"once: {what}: walspark run --once")
    lines: list[str] = []
    began = time.perf_counter()
    with subprocess.Popen(argv, env={**os.environ, "WALSPARK_DSN": dsn}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as child:  # fmt: skip
        for line in child.stdout:  # type: ignore[union-attr]
            lines.append(line.rstrip())
            log(f"  | {lines[-1]}")
    wall = time.perf_counter() - began
    if child.returncode != 0:
        raise SystemExit(f"walspark run --once ({what}) failed with exit code {child.returncode}")
    snapshots = [float(m[3]) for m in map(SNAPSHOT_LINE.search, lines) if m]
    batches = [(int(m[2].replace(",", "")), float(m[3])) for m in map(BATCH_LINE.search, lines) if m]
    log(f"once: {what}: {wall:.2f} s")
    return Run(wall, snapshots, batches)


def measure_once(args: argparse.Namespace, floors: Floors, emit) -> list[Case]:  # type: ignore[no-untyped-def]
    """The ``walspark run --once`` cases, on a server of one table and one of ``--tables-many``."""
    from soak import create_tables  # bench/soak.py, beside this script

    from walspark.embedded.postgres import EmbeddedPostgres

    cases: list[Case] = []
    c, r, many = args.changes, args.rows, args.tables_many

    def case(run: Run, name: str, floor: str, goal: str) -> None:
        cases.append(Case(name, f"{run.wall:.2f}", run.inside(), floor, goal))
        emit(cases[-1])

    with EmbeddedPostgres() as pg, tempfile.TemporaryDirectory(prefix="walspark-bench-fixed-") as tmp:
        dsn = pg.dsn()
        create_tables(dsn, 1, r)
        run = run_once(args, dsn, f"{tmp}/lake", f"snapshot of 1 table × {r:,} rows")
        case(run, f"snapshot of 1 table × {r:,} rows", floors.of(start=1, create_cold=1, stop=1),
             f"after Spark is up {verdict(run.snapshots[0], 2.0)}" if run.snapshots else "≤ 2 after Spark is up: ?")
        run = run_once(args, dsn, f"{tmp}/lake", "nothing to do")
        case(run, "nothing to do", floors.of(start=1, stop=1), verdict(run.wall, 12.0))
        update(dsn, [0], r, c)
        run = run_once(args, dsn, f"{tmp}/lake", f"{c} updates on 1 table")
        case(run, f"{c} updates on 1 table (a publication of 1)", floors.of(start=1, recvlogical=1, merge_cold=1,
             stop=1), verdict(run.wall, 15.0))  # fmt: skip
    walls: dict[int, float] = {}
    with EmbeddedPostgres() as pg, tempfile.TemporaryDirectory(prefix="walspark-bench-fixed-") as tmp:
        dsn = pg.dsn()
        create_tables(dsn, many, r)
        run = run_once(args, dsn, f"{tmp}/lake", f"snapshot of {many} tables × {r:,} rows")
        case(run, f"snapshot of {many} tables × {r:,} rows", floors.of(start=1, create_cold=1,
             create_warm=many - 1, stop=1), verdict(run.wall, 20.0))  # fmt: skip
        for touched in sorted({1, min(4, many), many}):
            update(dsn, list(range(touched)), r, c)
            run = run_once(args, dsn, f"{tmp}/lake", f"{c} updates on each of {touched} of {many} tables")
            walls[touched] = run.wall
            goal = {1: verdict(run.wall, 15.0), many: verdict(run.wall, 45.0)}.get(touched, "—")
            each = f"each of {touched} tables" if touched > 1 else "1 table"
            case(run, f"{c} updates on {each} (a publication of {many})",
                 floors.of(start=1, recvlogical=1, merge_cold=1, merge_warm=touched - 1, stop=1), goal)  # fmt: skip
    if many > 1:
        per_table = (walls[many] - walls[1]) / (many - 1)
        cases.append(Case("cost per additional table touched by a batch", f"{per_table:.3f}",
                          f"(wall({many} tables) − wall(1 table)) / {many - 1}", floors.of(merge_warm=1),
                          verdict(per_table, 0.3)))  # fmt: skip
        emit(cases[-1])
    return cases


# --- steady streaming ----------------------------------------------------------------------


def measure_steady(args: argparse.Namespace, spark: SparkSession, batches: Batches, tables: int,
                   floors: Floors) -> Case:  # fmt: skip
    """Stream over ``tables`` tables while the writer offers ``--rate`` single-row updates/s."""
    from soak import Writer, create_tables  # bench/soak.py, beside this script
    from streaming import start_pipeline  # bench/streaming.py, beside this script

    from walspark import Pipeline
    from walspark.embedded.postgres import EmbeddedPostgres

    with EmbeddedPostgres() as pg, tempfile.TemporaryDirectory(prefix="walspark-bench-fixed-") as tmp:
        dsn = pg.dsn()
        create_tables(dsn, tables, args.rows)
        log(f"steady: snapshot of {tables} × {args.rows:,} rows, then streaming (trigger {args.trigger:g} s)")
        pipeline = Pipeline(spark, dsn=dsn, publication="soak_pub", slot="soak_slot", target=f"{tmp}/lake")
        began = time.monotonic()
        handle = start_pipeline(pipeline.trigger_seconds(args.trigger).on_progress(lambda _line: None), timeout=1800)
        snapshot = time.monotonic() - began
        batches.handle = handle
        try:
            base = handle.status().rows
            writer = Writer(dsn, tables, args.rows, args.rate, 1, 0.0, args.seconds)
            log(f"steady: {tables} tables: offering {args.rate:g} single-row updates/s for {args.seconds:g} s")
            writer.thread.start()
            drained = drain(args, handle, writer, base)
        finally:
            handle.stop(timeout=300)
        equal = tables_equal(dsn, f"{tmp}/lake", tables)
    started, ended = writer.started or drained, writer.ended or drained
    applied = handle.status().rows - base
    done = batches.between(started, time.monotonic())  # the listener's events arrive after the batches
    durations, sizes = [d for d, _ in done], sorted(n for _, n in done)
    offered_rate, applied_rate = writer.changes / (ended - started), applied / (drained - started)
    ratio = applied_rate / offered_rate if offered_rate else float("nan")
    p50, p95 = pct(durations, 50), pct(durations, 95)
    touched = min(tables, sizes[len(sizes) // 2]) if sizes else 0
    goals = [f"applied / offered {verdict(ratio, 0.95, at_least=True)}"]
    if tables == args.tables_many:
        goals.insert(0, f"batch p95 {verdict(p95, 15.0)}")
    if tables == args.tables_huge:
        goals = [f"batch p95 {verdict(p95, 5.0)}", f"caught up {verdict(drained - ended, 10.0)}"]
    return Case(f"steady, {tables} tables, {args.rate:g} updates/s offered", f"p50 {p50:.2f} / p95 {p95:.2f}",
                f"snapshot and query start {snapshot:.1f} s; {len(done)} batches (median "
                f"{sizes[len(sizes) // 2] if sizes else 0:,} changes, max {max(durations, default=0.0):.2f} s); offered "
                f"{offered_rate:,.0f} chg/s, applied {applied_rate:,.0f} chg/s ({ratio:.3f}); caught up "
                f"{drained - ended:.1f} s after the writes; {equal}", floors.of(merge_warm=touched),
                "; ".join(goals))  # fmt: skip


def tables_equal(dsn: str, lake: str, tables: int) -> str:
    """``N of N tables equal`` (key, v per row: what the writer changes), read with delta-rs."""
    import psycopg
    from deltalake import DeltaTable

    equal = 0
    with psycopg.connect(dsn) as conn:
        for t in range(tables):
            source = sorted(conn.execute(f"SELECT id, v FROM soak_{t}").fetchall())
            arrow = DeltaTable(f"{lake}/public/soak_{t}").to_pyarrow_table(columns=["id", "v"])
            equal += source == sorted(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist(), strict=True))
    return f"{equal} of {tables} tables equal"


def drain(args: argparse.Namespace, handle: Any, writer: Any, base: int) -> float:
    """Wait for the writes, then until the pipeline has applied every change; when it had (monotonic)."""
    deadline: float | None = None
    while True:
        if handle.exception is not None or not handle.is_active:
            raise SystemExit(f"the pipeline failed: {handle.exception or handle.status()}")
        if writer.error is not None:
            raise SystemExit(f"the writer failed: {writer.error!r}")
        if not writer.thread.is_alive():
            if handle.status().rows - base >= writer.changes:
                return time.monotonic()
            deadline = deadline or time.monotonic() + max(300.0, args.seconds)
            if time.monotonic() > deadline:
                log("steady: the pipeline had not drained by the deadline; reporting what was applied")
                return time.monotonic()
        time.sleep(args.sample)


# --- main ----------------------------------------------------------------------------------


def main() -> None:
    task = child_task()
    if task is not None:  # the floors' child: nothing imported before its session but what it measures
        floors_child(task)
        return
    from streaming import add_stream_options  # bench/streaming.py, beside this script

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(GROUPS),
                        help=f"groups to run (default all, always in this order: {','.join(GROUPS)})")
    parser.add_argument("--seconds", type=float, default=60.0, help="steady: seconds of writes per run (default 60)")
    parser.add_argument("--rate", type=float, default=200.0, help="steady: single-row updates/s offered (default 200)")
    parser.add_argument("--tables-many", type=int, default=50, help="the many tables' count (default 50)")
    parser.add_argument("--tables-huge", type=int, default=500,
                        help="steady: also stream over this many tables (default 500; 0: not)")  # fmt: skip
    parser.add_argument("--rows", type=int, default=1000, help="initial rows per table (default 1,000)")
    parser.add_argument("--changes", type=int, default=100, help="once: single-row updates per table (default 100)")
    add_stream_options(parser, sample=0.1, what="steady: drain check")
    args = parser.parse_args()
    groups = args.only.split(",")
    if unknown := set(groups) - set(GROUPS):
        parser.error(f"--only: unknown group(s) {', '.join(sorted(unknown))} (known: {', '.join(GROUPS)})")
    if not 0 < args.changes <= args.rows:
        parser.error("--changes must be between 1 and --rows")

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"fixed costs on {os.cpu_count()} cores, load average {load} at start; {args.rows:,} rows per table, "
          f"{args.changes} changes per table touched, {args.tables_many} tables for 'many'\n")
    print(HEADER, flush=True)
    cases: list[Case] = []

    def emit(case: Case) -> None:
        print(case.row(), flush=True)

    floors = Floors()
    if "floors" in groups:
        for case in measure_floors(args, floors):
            cases.append(case)
            emit(case)
    if "once" in groups:
        cases += measure_once(args, floors, emit)
    if "steady" in groups:
        from soak import Batches  # bench/soak.py, beside this script

        from walspark.spark.session import spark_session

        spark = spark_session("walspark-bench-fixed", master=args.master)
        batches = Batches()
        batches.listen(spark)
        for tables in sorted({4, args.tables_many, args.tables_huge} - {0}):
            cases.append(measure_steady(args, spark, batches, tables, floors))
            emit(cases[-1])
        spark.stop()
    end = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nfixed costs ({os.cpu_count()} cores, load average {load} at start, {end} at the end)\n")
    print(HEADER)
    for case in cases:
        print(case.row())


if __name__ == "__main__":
    main()
