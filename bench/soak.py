"""Soak: a long steady stream, reported per window, to show what drifts (`./dev bench soak`).

Why: a batch that takes 0.3 s in the first minutes and 0.6 s after an hour, or a table whose
files, bookkeeping or staging only ever grow, fail a long-running pipeline slowly — no short
benchmark sees it. A writer offers ``--rate`` changes/s (default 1,000) for ``--minutes`` (30)
into ``--tables`` published tables (4) of ``--rows`` initial rows each (100,000, copied by the
pipeline's snapshot before the writes start), while ``walspark.Pipeline`` — the code of
``walspark run`` — streams with a ``--trigger`` of 0.5 s. Every ``--window`` minutes (5) one row:

* batches with changes in the window, their median and p95 duration (Spark's ``batchDuration``,
  from a streaming listener), and the change rows they applied per second;
* freshness: every ``--sample`` s (1) a reader outside Spark (delta-rs) takes each table's newest
  ``at`` from the Delta log's file statistics (no data read; millisecond precision) and its age
  is one sample — how old the newest visible change is; p50 and p95 over the window's samples;
* at the window's end: data files referenced per table (the largest of the tables) and Parquet
  files on disk per table (referenced or not: what a VACUUM would clean), ``_delta_log`` files per
  table, files under ``<target>/_walspark`` (bookkeeping) and those the progress table
  references, the bytes under ``<target>/_walspark/staging``, and the driver's RSS (this Python
  process plus its JVM, from ``/proc``).

The writer's transactions are on a fixed schedule (no drift when a commit is slow), each of
``--per-txn`` changes (50) in one table, round-robin over the tables: mostly updates of random
keys (``at = clock_timestamp()``), and as many inserts (new keys) as deletes (the oldest keys),
``--churn`` of the changes each (5 %), so the tables keep their size. Its achieved rate is
reported beside the applied one. Both clocks (writer, reader) are this host's.

Goals (the lines after the table): the last window's median batch duration at most 1.2 x the
first's; files per table and staging bytes bounded — the last window's reading at most 1.5 x the
largest of the first two windows' (the first windows hold the writes' start; a growth that
continues through the run fails it). The same rule is shown for the Parquet files on disk, the
``_walspark`` files, the progress table's files and the RSS. The applied change rows are
counted as each batch is applied (the pipeline's status), until every table's newest ``at``
matches the source's (the drain after the writes). Progress on stderr, the table on stdout.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from common import log, pct  # bench/common.py, beside this script
from streaming import add_stream_options, start_pipeline  # bench/streaming.py, beside this script

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

GROWTH = 1.5  # bounded: the last window's reading <= GROWTH x the largest of the first two windows'
DRIFT = 1.2  # the last window's median batch duration <= DRIFT x the first window's


def create_tables(dsn: str, tables: int, rows: int) -> None:
    """``soak_0`` .. ``soak_<tables-1>`` of ``rows`` rows each, published by ``soak_pub``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in range(tables):
            conn.execute(f"CREATE TABLE soak_{t} (id bigint PRIMARY KEY, at timestamptz NOT NULL, v int NOT NULL,"
                         " payload text)")  # fmt: skip
            conn.execute(f"INSERT INTO soak_{t} SELECT g, clock_timestamp(), 0, repeat('x', 100)"
                         " FROM generate_series(1, %s::bigint) g", (rows,))  # fmt: skip
        conn.execute("CREATE PUBLICATION soak_pub FOR TABLE " + ", ".join(f"soak_{t}" for t in range(tables)))


class Writer:
    """Transactions of ``per_txn`` changes at a fixed rate, round-robin over the tables."""

    def __init__(self, dsn: str, tables: int, rows: int, rate: float, per_txn: int, churn: float,
                 seconds: float) -> None:  # fmt: skip
        self.dsn, self.tables, self.seconds = dsn, tables, seconds
        self.txn_rate = rate / per_txn
        self.moved = max(1, round(per_txn * churn)) if churn > 0 else 0  # inserts = deletes per txn
        self.updates = per_txn - 2 * self.moved
        if self.updates < 0:
            raise SystemExit(f"--churn {churn:g} leaves no updates in a transaction of {per_txn} changes")
        self.live = [[1, rows] for _ in range(tables)]  # per table: lowest and highest live key
        self.changes = 0
        self.transactions = 0
        self.started: float | None = None
        self.ended: float | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="soak-writer", daemon=True)

    def _run(self) -> None:
        rng = random.Random(16)
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.started = started = time.monotonic()
                while (due := started + self.transactions / self.txn_rate) < started + self.seconds:
                    if (pause := due - time.monotonic()) > 0:
                        time.sleep(pause)
                    t = self.transactions % self.tables
                    lo, hi = self.live[t]
                    name = f"soak_{t}"
                    with conn.transaction():
                        keys = rng.sample(range(lo + self.moved, hi + 1), min(self.updates, hi - lo + 1 - self.moved))
                        if keys:
                            conn.execute(f"UPDATE {name} SET at = clock_timestamp(), v = v + 1 WHERE id = ANY(%s)",
                                         (keys,))  # fmt: skip
                        if self.moved:
                            conn.execute(f"DELETE FROM {name} WHERE id BETWEEN %s AND %s", (lo, lo + self.moved - 1))
                            conn.execute(f"INSERT INTO {name} SELECT g, clock_timestamp(), 0, repeat('x', 100)"
                                         " FROM generate_series(%s::bigint, %s::bigint) g",
                                         (hi + 1, hi + self.moved))  # fmt: skip
                    self.live[t] = [lo + self.moved, hi + self.moved]
                    self.changes += len(keys) + 2 * self.moved
                    self.transactions += 1
        except BaseException as exc:  # noqa: BLE001 - reported by main
            self.error = exc
        finally:
            self.ended = time.monotonic()


@dataclass
class Batches:
    """Every micro-batch Spark reports (a streaming listener): arrival time, duration, change rows."""

    #: (arrival, batch seconds, change rows, seconds in the sink's addBatch)
    events: list[tuple[float, float, int, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The running pipeline (a ``PipelineHandle``), whose batches say how many changes they applied
    #: (Spark's ``numInputRows`` carries the same figure, docs/deploying.md).
    handle: Any = None

    def listen(self, spark: SparkSession) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        batches = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

            def onQueryProgress(self, event) -> None:  # type: ignore[no-untyped-def]
                p = event.progress
                rows = p.numInputRows
                if batches.handle is not None:
                    rows = next((b.rows for b in batches.handle.recent_progress if b.batch_id == p.batchId), rows)
                with batches.lock:
                    add = (p.durationMs or {}).get("addBatch", 0) / 1000.0
                    batches.events.append((time.monotonic(), p.batchDuration / 1000.0, rows, add))

            def onQueryIdle(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

            def onQueryTerminated(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

        spark.streams.addListener(_Listener())

    def between(self, start: float, end: float) -> list[tuple[float, int]]:
        """(duration, rows) of the batches with changes that ended in [start, end)."""
        with self.lock:
            return [(d, n) for t, d, n, _ in self.events if start <= t < end and n > 0]

    def sink_share(self, start: float, end: float) -> list[tuple[float, float]]:
        """(batch seconds, seconds in the sink) of the batches with changes that ended in [start, end)."""
        with self.lock:
            return [(d, a) for t, d, n, a in self.events if start <= t < end and n > 0]


class Lake:
    """Reads of the target outside Spark: delta-rs for the tables' logs, the file system for the rest."""

    def __init__(self, target: Path, tables: int) -> None:
        self.target = target
        self.paths = [target / "public" / f"soak_{t}" for t in range(tables)]
        self.home = target / "_walspark"
        self._open: dict[Path, Any] = {}

    def _table(self, path: Path) -> Any:
        from deltalake import DeltaTable

        table = self._open.get(path)
        if table is None:
            table = self._open[path] = DeltaTable(str(path))
        else:
            table.update_incremental()
        return table

    def _physical(self, path: Path, column: str) -> str:
        """The column's name in the files and their statistics (walspark's tables map column names)."""
        field = next(f for f in self._table(path).schema().fields if f.name == column)
        return str(field.metadata.get("delta.columnMapping.physicalName", column))

    def _actions(self, path: Path) -> Any:
        import pyarrow as pa

        return pa.table(self._table(path).get_add_actions(flatten=True))

    def newest(self) -> list[float | None]:
        """Each table's newest ``at`` (epoch seconds) from its files' statistics; None before it exists."""
        import pyarrow.compute as pc

        out: list[float | None] = []
        for path in self.paths:
            try:
                newest = pc.max(self._actions(path).column(f"max.{self._physical(path, 'at')}")).as_py()
            except Exception:  # noqa: BLE001 - not created yet (or no statistics)
                out.append(None)
                continue
            out.append(None if newest is None else newest.timestamp())
        return out

    def referenced(self, path: Path) -> int:
        try:
            return self._actions(path).num_rows
        except Exception:  # noqa: BLE001 - not created yet
            return 0

    def reading(self) -> dict[str, int]:
        """The window-end figures: files per table (largest), bookkeeping, staging bytes."""
        on_disk = [sum(1 for f in path.rglob("*.parquet") if "_delta_log" not in f.parts) for path in self.paths]
        logs = [sum(1 for _ in (path / "_delta_log").glob("*")) if (path / "_delta_log").exists() else 0
                for path in self.paths]  # fmt: skip
        staging = self.home / "staging"
        return {
            "referenced": max(self.referenced(p) for p in self.paths),
            "on_disk": max(on_disk),
            "log": max(logs),
            "home_files": sum(1 for p in self.home.rglob("*") if p.is_file()),
            "progress_files": self.referenced(self.home / "progress"),
            "staging": sum(p.stat().st_size for p in staging.rglob("*") if p.is_file()) if staging.exists() else 0,
        }


def rss_bytes() -> tuple[int, int]:
    """VmRSS of this process and of its JVM (a child process running java), from /proc."""
    def vmrss(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    me, jvm = os.getpid(), 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        except (OSError, ValueError):
            continue
        if int(rest[1]) == me and comm == "java":
            jvm += vmrss(int(entry.name))
    return vmrss(me), jvm


@dataclass(frozen=True, slots=True)
class Window:
    end_minutes: float
    batches: int
    p50: float
    p95: float
    applied: float
    offered: float
    fresh50: float
    fresh95: float
    figures: dict[str, int]
    rss: tuple[int, int]


HEADER = ("| end (min) | batches | batch p50 (s) | batch p95 (s) | applied (chg/s) | offered (chg/s) "
          "| fresh p50 (s) | fresh p95 (s) | files/table ref (disk) | log files/table | _walspark files "
          "| progress files | staging (MiB) | RSS py + JVM (MiB) |")  # fmt: skip


def row(w: Window) -> str:
    f, mib = w.figures, 2**20
    return (f"| {w.end_minutes:.1f} | {w.batches} | {w.p50:.2f} | {w.p95:.2f} | {w.applied:,.0f} | {w.offered:,.0f} "
            f"| {w.fresh50:.2f} | {w.fresh95:.2f} | {f['referenced']} ({f['on_disk']}) | {f['log']} "
            f"| {f['home_files']} | {f['progress_files']} | {f['staging'] / mib:.1f} "
            f"| {w.rss[0] / mib:,.0f} + {w.rss[1] / mib:,.0f} |")  # fmt: skip


def bounded(name: str, values: list[float], unit: float = 1.0) -> str:
    """The goal line of a reading that must not keep growing (``unit``: the divisor it is shown in)."""
    if len(values) < 3:
        return f"{name}: too few windows to judge (need 3)"
    limit = GROWTH * max(values[:2])
    f = ",.0f" if unit == 1 else ",.1f"
    verdict = "bounded" if values[-1] <= limit else "GROWING"
    return (f"{name}: last {values[-1] / unit:{f}} vs {GROWTH:g} x max(first two) = {limit / unit:,.1f}: {verdict} "
            f"(by window: {', '.join(f'{v / unit:{f}}' for v in values)})")


def stream(args: argparse.Namespace, dsn: str, handle: Any, batches: Batches, lake: Lake,
           windows: list[Window]) -> tuple[Writer, float, float, float, int]:  # fmt: skip
    """The writes, a row per window on stdout, then the drain. Returns the writer, when its writes
    started (monotonic), their seconds, when the pipeline had drained, and the change rows applied."""
    writer = Writer(dsn, args.tables, args.rows, args.rate, args.per_txn, args.churn, args.minutes * 60)
    log(f"streaming; offering {args.rate:g} changes/s ({writer.txn_rate:g} txn/s of {args.per_txn}) for "
        f"{args.minutes:g} min, a row every {args.window:g} min")
    base = handle.status().rows  # change rows applied before the writes (none, the snapshot is not counted)
    writer.thread.start()
    while writer.started is None and writer.error is None:
        time.sleep(0.01)
    started = writer.started or time.monotonic()
    print(HEADER)
    print("|" + "---:|" * (HEADER.count("|") - 1), flush=True)
    window_start, window_changes = started, 0
    fresh: list[float] = []
    while True:
        tick = time.monotonic()
        if handle.exception is not None or not handle.is_active:
            raise SystemExit(f"the pipeline failed: {handle.exception or handle.status()}")
        if writer.error is not None:
            raise SystemExit(f"the writer failed: {writer.error!r}")
        now = time.time()
        fresh += [now - newest for newest in lake.newest() if newest is not None]
        window_end = window_start + args.window * 60
        if time.monotonic() >= window_end:
            done = batches.between(window_start, window_end)
            durations = [d for d, _ in done]
            offered = writer.changes - window_changes
            w = Window(end_minutes=(window_end - started) / 60, batches=len(done),
                       p50=statistics.median(durations) if durations else float("nan"),
                       p95=pct(durations, 95), applied=sum(n for _, n in done) / (window_end - window_start),
                       offered=offered / (window_end - window_start), fresh50=pct(fresh, 50),
                       fresh95=pct(fresh, 95), figures=lake.reading(), rss=rss_bytes())  # fmt: skip
            windows.append(w)
            print(row(w), flush=True)
            log(f"window to {w.end_minutes:.1f} min: {len(done)} batches, p50 {w.p50:.2f} s, "
                f"freshness p50 {w.fresh50:.2f} s")
            window_start, window_changes, fresh = window_end, writer.changes, []
            if window_end >= started + args.minutes * 60 - 0.5:  # the writes' last window
                break
        time.sleep(max(0.0, args.sample - (time.monotonic() - tick)))
    writer.thread.join()
    if writer.error is not None:
        raise SystemExit(f"the writer failed: {writer.error!r}")
    written = (writer.ended or time.monotonic()) - started
    # Drain: every table's newest visible change at least as new as the source's newest.
    with psycopg.connect(dsn) as conn:
        last = [conn.execute(f"SELECT extract(epoch FROM max(at))::float8 FROM soak_{t}").fetchone()[0]  # type: ignore[index]
                for t in range(args.tables)]  # fmt: skip
    deadline = time.monotonic() + max(300.0, args.minutes * 60)  # a run that fell behind: report, not fail
    while not all(n is not None and n >= s - 0.001 for n, s in zip(lake.newest(), last, strict=True)):
        if not handle.is_active:
            raise SystemExit(f"the pipeline failed while draining: {handle.exception or handle.status()}")
        if time.monotonic() > deadline:
            log("the pipeline had not drained by the deadline; reporting what was applied")
            break
        time.sleep(0.5)
    drained = time.monotonic()
    applied = handle.status().rows - base  # recorded as each batch is applied (the listener's events come later)
    return writer, started, written, drained, applied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of writes (default 30)")
    parser.add_argument("--window", type=float, default=5.0, help="minutes per report row (default 5)")
    parser.add_argument("--rate", type=float, default=1000.0, help="changes/s offered, all tables (default 1,000)")
    parser.add_argument("--tables", type=int, default=4, help="published tables (default 4)")
    parser.add_argument("--rows", type=int, default=100_000, help="initial rows per table (default 100,000)")
    parser.add_argument("--per-txn", type=int, default=50, help="changes per transaction (default 50)")
    parser.add_argument("--churn", type=float, default=0.05, help="share of inserts, and of deletes (default 0.05)")
    add_stream_options(parser, sample=1.0, what="freshness")
    parser.add_argument("--keep", type=Path, default=None, help="keep the target (Delta tables) here")
    args = parser.parse_args()
    if args.rows <= args.per_txn:
        parser.error("--rows must be larger than --per-txn")

    from walspark import Pipeline
    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.spark.session import spark_session

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="walspark-bench-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    target = workdir / "lake"
    shutil.rmtree(target, ignore_errors=True)  # a kept run's state would resume an old slot
    windows: list[Window] = []
    try:
        with EmbeddedPostgres() as pg:
            dsn = pg.dsn()
            create_tables(dsn, args.tables, args.rows)
            spark = spark_session("walspark-bench-soak", master=args.master)
            batches = Batches()
            batches.listen(spark)
            lake = Lake(target, args.tables)
            log(f"snapshot of {args.tables} x {args.rows:,} rows, then streaming (trigger {args.trigger:g} s)")
            handle = start_pipeline(Pipeline(spark, dsn=dsn, publication="soak_pub", slot="soak_slot",
                                             target=str(target)).trigger_seconds(args.trigger)
                                    .on_progress(lambda _line: None),
                                    timeout=900)  # fmt: skip
            batches.handle = handle
            try:
                writer, started, written, drained, applied = stream(args, dsn, handle, batches, lake, windows)
            finally:
                handle.stop(timeout=120)
            spark.stop()
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)

    first, last_w = windows[0], windows[-1]
    print(f"\nwriter: {writer.changes:,} changes in {writer.transactions:,} transactions over {written:.0f} s = "
          f"{writer.changes / written:,.0f} changes/s offered (asked {args.rate:g}); applied {applied:,} change rows "
          f"by {drained - started:.0f} s ({drained - started - written:.1f} s after the writes) = "
          f"{applied / (drained - started):,.0f} changes/s; applied / offered rows {applied / max(writer.changes, 1):.3f}")
    ratio = last_w.p50 / first.p50 if first.p50 else float("nan")
    print(f"median batch duration: last / first window = {last_w.p50:.2f} / {first.p50:.2f} = {ratio:.2f} "
          f"(goal <= {DRIFT:g}): {'met' if ratio <= DRIFT else 'NOT met'}")
    print(bounded("data files per table (referenced, largest table)", [w.figures["referenced"] for w in windows]))
    print(bounded("Parquet files on disk per table (largest table)", [w.figures["on_disk"] for w in windows]))
    print(bounded("staging MiB", [w.figures["staging"] for w in windows], 2**20))
    print(bounded("_walspark files", [w.figures["home_files"] for w in windows]))
    print(bounded("progress table files", [w.figures["progress_files"] for w in windows]))
    print(bounded("driver RSS MiB, Python + JVM", [sum(w.rss) for w in windows], 2**20))


if __name__ == "__main__":
    main()
