"""Batch-read benchmark: a capture file of 1,000,000 changes through ``format("pgoutput")``.

Run with ``./dev bench batch_read`` (``--changes N``, default 1,000,000; ``--partition-rows``,
``--rounds``, ``--keep PATH`` to keep or reuse the capture).

What it shows: the capture is split on the driver into partitions at transaction boundaries
(each carrying the Relation messages in force) and decoded by Spark tasks in parallel. The same
file is read twice — with the default partitioning and as a single partition — and the figures
(rows, partitions = tasks, seconds, rows/s; best of ``--rounds``) are printed side by side. Both reads are forced to
decode and materialise every row (Spark's ``noop`` sink) rather than just counting; Spark's status
tracker is sampled meanwhile for the number of the read's tasks running at once.

The workload: inserts, updates and deletes on a 6-column table (int key, text, int, numeric,
timestamptz, text[]) in transactions of 2,000 rows, captured at protocol version 4, text mode.

Standalone on purpose: it starts its own throw-away PostgreSQL 18 and local Spark
(``--master``, default ``local[*]``), and removes both on exit.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import workload  # bench/workload.py, beside this script
from common import log  # bench/common.py, beside this script

from walspark.capture import CaptureFile, CaptureInfo, write_capture
from walspark.embedded.postgres import EmbeddedPostgres
from walspark.source.sqlinterface import slot_changes

OPTIONS = {"proto_version": "4", "publication_names": "bench", "streaming": "on"}
TXN_ROWS = 2_000


def make_capture(path: Path, changes: int) -> int:
    with EmbeddedPostgres() as server:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            workload.create_table(conn, tags=True)
            conn.execute("CREATE PUBLICATION bench FOR TABLE bench_rows")
            conn.execute("SELECT pg_create_logical_replication_slot('bench', 'pgoutput')")
            log(f"writing {changes:,} changes")
            workload.write_changes(conn, changes, statement_rows=TXN_ROWS, shares=(0.6, 0.25), tags=True)
        log("capturing the slot (SQL interface)")
        with psycopg.connect(dsn) as conn:
            rows = write_capture(path, slot_changes(conn, "bench", OPTIONS),
                                 CaptureInfo(OPTIONS, conn.info.server_version, "bench"))
    return rows


def timed_read(spark, path: Path, **options: str) -> dict[str, float]:
    """One full read — every row decoded and materialised (``noop`` sink) — timed.

    ``concurrency`` is the largest number of the read's tasks Spark's status tracker saw
    running at the same instant (sampled every 50 ms): the partitions really run in parallel.
    """
    df = spark.read.format("pgoutput").options(**options).load(str(path))
    parts = df.rdd.getNumPartitions()
    tracker = spark.sparkContext.statusTracker()
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.05):
            for stage in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage)
                if info is not None:
                    peak = max(peak, info.numActiveTasks)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - began
    done.set()
    sampler.join()
    rows = df.count()  # a second pass, not timed: the number of rows the timed pass materialised
    return {"rows": rows, "partitions": parts, "seconds": wall, "concurrency": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--partition-rows", type=int, default=None, help="capture rows per partition")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--rounds", type=int, default=2, help="reads of each kind; the best is reported")
    parser.add_argument("--keep", type=Path, default=None, help="keep (or reuse) the capture file here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="walspark-bench-") as tmp:
        path = args.keep or Path(tmp) / "capture.parquet"
        if not path.exists():
            make_capture(path, args.changes)
        capture = CaptureFile(path)
        log(f"capture: {capture.num_rows:,} messages, {path.stat().st_size / 1e6:.0f} MB")

        from walspark.spark.session import spark_session

        spark = spark_session("walspark-bench-batch-read", master=args.master,
                              conf={"spark.sql.warehouse.dir": str(Path(tmp) / "warehouse")})
        cores = os.cpu_count() or 2
        # per-table layout: the table's real column types, flattened (what the apply step reads)
        parallel = {"table": "public.bench_rows"}
        if args.partition_rows:
            parallel["partitionRows"] = str(args.partition_rows)
        # warm-up: start the Python workers and import walspark in them
        spark.sparkContext.parallelize(range(cores), cores).map(lambda _: __import__("walspark.spark.datasource.source")).count()
        best: dict[str, dict[str, float]] = {}
        for round_ in range(args.rounds):
            for label, options in (("partitioned", parallel), ("single partition", {**parallel, "numPartitions": "1"})):
                r = timed_read(spark, path, **options)
                log(f"round {round_ + 1}, {label}: {r['rows']:,} rows, {r['partitions']} partitions, "
                    f"{r['seconds']:.1f}s, at most {r['concurrency']} tasks at once")
                if label not in best or r["seconds"] < best[label]["seconds"]:
                    best[label] = r
        spark.stop()

    print(f"\nbatch read of a capture file ({args.changes:,} changes requested; master {args.master}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    print(f"{'read':<18}{'rows':>11}{'partitions':>11}{'seconds':>9}{'rows/s':>10}{'max concurrent tasks':>22}")
    for label, r in best.items():
        print(f"{label:<18}{r['rows']:>11,}{r['partitions']:>11}{r['seconds']:>9.1f}{r['rows'] / r['seconds']:>10,.0f}"
              f"{r['concurrency']:>22}")
    print(f"speed-up of the partitioned read: {best['single partition']['seconds'] / best['partitioned']['seconds']:.2f}x")


if __name__ == "__main__":
    main()
