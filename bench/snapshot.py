"""Parallel snapshot vs a single-stream COPY of the same table, same run (`./dev bench snapshot`).

Starts an embedded PostgreSQL 18, fills one table of --rows rows (default 5,000,000; a bigint
key, an int, a short text, a timestamptz, a numeric), then measures, in this order:

1. **single-stream COPY**: ``COPY big TO STDOUT (FORMAT binary)`` through psycopg, reading every
   byte into the client (no decoding) — the fastest one connection can pull the table;
2. **walspark snapshot**: :func:`walspark.spark.snapshot.initial.run_snapshot` on Spark ``local[*]``:
   slot creation with an exported snapshot, CTID-range tasks (binary COPY + decoding into Arrow),
   and the Delta table written — the whole thing, wall clock; once as walspark writes it (each
   task writes its Parquet file with delta-rs, the driver commits them) and once with Spark's
   writer (``WALSPARK_SNAPSHOT_TASK_WRITES=0``: ``CREATE TABLE AS SELECT``);
3. **walspark read only**: the same tasks into Spark's ``noop`` sink (read + decode, no Delta),
   to show what the copy itself costs apart from writing Parquet/Delta;
4. **pg_dump**: ``pg_dump --data-only`` of the table to /dev/null, the server's own tool;
5. steps 2 and 3 again on the pure-Python path (``WALSPARK_PURE_PYTHON=1``), in a child process
   with a Spark of its own (``bench/paths.py`` says why), on the same server and table.

Spark's one-off start-up (JVM, Delta's first use) is paid by a warm-up snapshot of a tiny table
(several tasks, so every Python worker is started) before the timed run, since a long-running
pipeline pays it once. Prints a table with rows/s, task count and the ratios, then where each
step's CPU went: PostgreSQL's backends, Spark's JVM, its Python workers, the driver.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from typing import Any

from common import CpuMeter, RssMeter, cpu_line, fill_big_table, postmaster_pid  # bench/common.py, beside this script
from paths import child_task, path_name, report, run_pure  # bench/paths.py, beside this script


def read_only(spark, dsn: str, partition_rows: int) -> float:
    """The same CTID-range tasks into Spark's ``noop`` sink: read + decode without Delta."""
    import psycopg

    from walspark.spark.snapshot.initial import plan_partitions, publication_tables
    from walspark.spark.snapshot.pgsnapshot import SnapshotSourcePlan, register

    register(spark)
    with psycopg.connect(dsn, autocommit=True) as conn:
        [plan] = publication_tables(conn, "pub")
        plan_partitions(plan, parallelism=spark.sparkContext.defaultParallelism, partition_rows=partition_rows)
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        name = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        source = SnapshotSourcePlan(dsn, name, plan.columns, plan.binary, plan.ranges)
        started = time.monotonic()
        spark.read.format("pgsnapshot").option("plan", source.to_json()).load().write.format("noop").mode(
            "overwrite").save()
        seconds = time.monotonic() - started
        conn.execute("COMMIT")
    return seconds


def walspark_figures(dsn: str, tmp: str, name: str, rows: int, partition_rows: int, master: str,
                     postmaster: int) -> dict[str, Any]:  # fmt: skip
    """Steps 2 and 3 on this process's hot path: a Spark of its own, warmed up, then timed.

    ``name`` names the slots and targets, so the compiled and the pure-Python runs share the server."""
    from walspark.spark.session import spark_session
    from walspark.spark.snapshot.initial import run_snapshot
    from walspark.spark.snapshot.task_write import TASK_WRITES

    spark = spark_session(f"walspark-bench-snapshot-{name}", master=master)
    # Warm-up: JVM, Delta's first commit, and one Python worker per core (several tasks).
    run_snapshot(spark, dsn, "warmup", f"warmup_{name}", os.path.join(tmp, f"warm_{name}"), partition_pages=4)
    started, meter, memory = time.monotonic(), CpuMeter(postmaster).start(), RssMeter().start()
    result = run_snapshot(spark, dsn, "pub", f"bench_{name}", os.path.join(tmp, name), partition_rows=partition_rows)
    snapshot, snapshot_cpu = time.monotonic() - started, meter.stop()
    memory.stop()
    [table] = result.tables
    assert table.rows == rows, (table.rows, rows)
    os.environ[TASK_WRITES] = "0"  # the same snapshot, Spark writing the files (CREATE TABLE AS SELECT)
    try:
        started = time.monotonic()
        meter.start()
        result = run_snapshot(spark, dsn, "pub", f"bench_{name}_spark", os.path.join(tmp, f"{name}_spark"),
                              partition_rows=partition_rows)  # fmt: skip
        by_spark, by_spark_cpu = time.monotonic() - started, meter.stop()
    finally:
        del os.environ[TASK_WRITES]
    assert result.tables[0].rows == rows
    meter.start()
    read = read_only(spark, dsn, partition_rows)
    read_cpu = meter.stop()
    parallelism = spark.sparkContext.defaultParallelism  # walspark's session sets 8; local[*] runs a task per core
    spark.stop()
    return {"snapshot": snapshot, "by_spark": by_spark, "read": read, "tasks": table.tasks, "parallelism": parallelism,
            "cpu": {"snapshot (tasks write)": f"{cpu_line(snapshot_cpu)}; {memory.line()}",
                    "snapshot (Spark writes)": cpu_line(by_spark_cpu), "read only": cpu_line(read_cpu)}}  # fmt: skip


def pg_dump(pg: Any, dsn: str) -> float:
    """``pg_dump --data-only`` of the table to /dev/null: seconds from process start to exit."""
    started = time.monotonic()
    subprocess.run([pg.bin("pg_dump"), "--data-only", "--table", "big", "--file", "/dev/null", "--dbname", dsn],
                   check=True, timeout=1800)  # fmt: skip
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows in the table (default 5,000,000)")
    parser.add_argument("--partition-rows", type=int, default=None, help="rows per snapshot task")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--no-pure", action="store_true", help="leave out the pure-Python path's runs")
    args = parser.parse_args()
    task = child_task()
    if task is not None:
        report(task, walspark_figures(task["dsn"], task["tmp"], "pure", task["rows"], task["partition_rows"],
                                      task["master"], task["postmaster"]))  # fmt: skip
        return

    import psycopg

    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.spark.snapshot.initial import DEFAULT_PARTITION_ROWS

    partition_rows = args.partition_rows or DEFAULT_PARTITION_ROWS
    with EmbeddedPostgres(settings={"max_wal_size": "8GB", "shared_buffers": "512MB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="walspark-bench-snapshot-") as tmp:
        dsn = pg.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            print(f"filling a table of {args.rows:,} rows ...", flush=True)
            fill_big_table(conn, args.rows)
            conn.execute("CREATE TABLE warm (id int PRIMARY KEY)")
            conn.execute("INSERT INTO warm SELECT generate_series(1, 20000)")
            conn.execute("CREATE PUBLICATION pub FOR TABLE big")
            conn.execute("CREATE PUBLICATION warmup FOR TABLE warm")
            pages = conn.execute("SELECT pg_relation_size('big') / 8192").fetchone()[0]

            # 1. single-stream COPY (table is now in the OS cache / shared buffers for all runs)
            postmaster = postmaster_pid(pg.data_dir)
            started, meter = time.monotonic(), CpuMeter(postmaster).start()
            nbytes = 0
            with conn.cursor() as cur, cur.copy("COPY big TO STDOUT (FORMAT binary)") as copy:
                for chunk in copy:
                    nbytes += len(chunk)
            copy_seconds, copy_cpu = time.monotonic() - started, cpu_line(meter.stop())
        dump_seconds = pg_dump(pg, dsn)
        runs = {path_name(): walspark_figures(dsn, tmp, "here", args.rows, partition_rows, args.master, postmaster)}
        if not args.no_pure and path_name() != "pure Python":
            print("the pure-Python path, in a child process ...", flush=True)
            runs["pure Python"] = run_pure(__file__, {"dsn": dsn, "tmp": tmp, "rows": args.rows,
                                                      "partition_rows": partition_rows, "master": args.master,
                                                      "postmaster": postmaster})

    copy_rate = args.rows / copy_seconds
    dump_rate = args.rows / dump_seconds
    parallelism = next(iter(runs.values()))["parallelism"]
    print()
    print(f"table: {args.rows:,} rows, {pages:,} pages; Spark {args.master} (default parallelism {parallelism}), "
          f"host CPUs {os.cpu_count()}")
    print("| method | path | tasks | seconds | rows/s | vs COPY | vs pg_dump |")
    print("|---|---|---:|---:|---:|---:|---:|")

    def line(method: str, path: str, tasks: int, seconds: float) -> None:
        rate = args.rows / seconds
        print(f"| {method} | {path} | {tasks} | {seconds:.2f} | {rate:,.0f} | {rate / copy_rate:.2f}× |"
              f" {rate / dump_rate:.2f}× |")

    line("single-stream `COPY TO STDOUT` (binary, bytes read, no decoding)", "server", 1, copy_seconds)
    line("`pg_dump --data-only` to /dev/null", "server", 1, dump_seconds)
    for path, figures in runs.items():
        line("walspark parallel snapshot (decode, tasks write Parquet, one commit; wall clock)", path,
             figures["tasks"], figures["snapshot"])  # fmt: skip
        line("walspark parallel snapshot, Spark writing (`CREATE TABLE AS SELECT`)", path, figures["tasks"],
             figures["by_spark"])  # fmt: skip
        line("walspark parallel read only (decode, `noop` sink)", path, figures["tasks"], figures["read"])
    print(f"(COPY read {nbytes / 1e6:,.0f} MB)")
    print()
    print("Where the CPU went (PostgreSQL: the server's backends; the driver: the process that ran the step):")
    print(f"- single-stream COPY: {copy_cpu}")
    for path, figures in runs.items():
        for step, text in figures["cpu"].items():
            print(f"- walspark {step}, {path}: {text}")


if __name__ == "__main__":
    main()
