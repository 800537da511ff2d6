"""Parallel snapshot vs a single-stream COPY of the same table, same run (`./dev bench snapshot`).

Starts an embedded PostgreSQL 18, fills one table of --rows rows (default 5,000,000; a bigint
key, an int, a short text, a timestamptz, a numeric), then measures, in this order:

1. **single-stream COPY**: ``COPY big TO STDOUT (FORMAT binary)`` through psycopg, reading every
   byte into the client (no decoding) — the fastest one connection can pull the table;
2. **walspark snapshot**: :func:`walspark.spark.snapshot.initial.run_snapshot` on Spark ``local[*]``:
   slot creation with an exported snapshot, CTID-range tasks (binary COPY + decoding into Arrow),
   and the Delta table written — the whole thing, wall clock;
3. **walspark read only**: the same tasks into Spark's ``noop`` sink (read + decode, no Delta),
   to show what the copy itself costs apart from writing Parquet/Delta.

Spark's one-off start-up (JVM, Delta's first use) is paid by a warm-up snapshot of a tiny table
(several tasks, so every Python worker is started) before the timed run, since a long-running
pipeline pays it once. Prints a table with rows/s,
task count and the ratio.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def read_only(spark, dsn: str, partition_rows: int) -> float:  # noqa: ANN001
    """The same CTID-range tasks into Spark's ``noop`` sink: read + decode without Delta."""
    import psycopg

    from walspark.spark.snapshot.initial import plan_partitions, publication_tables
    from walspark.spark.snapshot.snapshot_source import SnapshotSourcePlan, register

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows in the table (default 5,000,000)")
    parser.add_argument("--partition-rows", type=int, default=None, help="rows per snapshot task")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    args = parser.parse_args()

    import psycopg

    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.spark.session import spark_session
    from walspark.spark.snapshot.initial import DEFAULT_PARTITION_ROWS, run_snapshot

    with EmbeddedPostgres(settings={"max_wal_size": "8GB", "shared_buffers": "512MB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="walspark-bench-snapshot-") as tmp:
        dsn = pg.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            print(f"filling a table of {args.rows:,} rows ...", flush=True)
            conn.execute("CREATE TABLE big (id bigint PRIMARY KEY, qty int, label text, at timestamptz,"
                         " amount numeric(12, 2))")
            conn.execute("INSERT INTO big SELECT g, g %% 1000, 'item-' || g, TIMESTAMPTZ '2024-01-01' + g * INTERVAL '1s',"
                         " (g %% 100000) / 100.0 FROM generate_series(1, %s) g", (args.rows,))
            conn.execute("VACUUM ANALYZE big")
            conn.execute("CREATE TABLE warm (id int PRIMARY KEY)")
            conn.execute("INSERT INTO warm SELECT generate_series(1, 20000)")
            conn.execute("CREATE PUBLICATION pub FOR TABLE big")
            conn.execute("CREATE PUBLICATION warmup FOR TABLE warm")
            pages = conn.execute("SELECT pg_relation_size('big') / 8192").fetchone()[0]

            # 1. single-stream COPY (table is now in the OS cache / shared buffers for both runs)
            started = time.monotonic()
            nbytes = 0
            with conn.cursor() as cur, cur.copy("COPY big TO STDOUT (FORMAT binary)") as copy:
                for chunk in copy:
                    nbytes += len(chunk)
            copy_seconds = time.monotonic() - started

        spark = spark_session("walspark-bench-snapshot", master=args.master)
        # Warm-up: JVM, Delta's first commit, and one Python worker per core (several tasks).
        run_snapshot(spark, dsn, "warmup", "warmup", os.path.join(tmp, "warm"), partition_pages=4)
        started = time.monotonic()
        result = run_snapshot(spark, dsn, "pub", "bench", os.path.join(tmp, "target"),
                              partition_rows=args.partition_rows or DEFAULT_PARTITION_ROWS)
        snap_seconds = time.monotonic() - started
        [table] = result.tables
        assert table.rows == args.rows, (table.rows, args.rows)
        read_seconds = read_only(spark, dsn, args.partition_rows or DEFAULT_PARTITION_ROWS)
        cores = spark.sparkContext.defaultParallelism
        spark.stop()

    copy_rate = args.rows / copy_seconds
    snap_rate = args.rows / snap_seconds
    print()
    print(f"table: {args.rows:,} rows, {pages:,} pages; Spark {args.master} ({cores} cores), "
          f"host CPUs {os.cpu_count()}")
    print(f"{'method':<48} {'tasks':>6} {'seconds':>9} {'rows/s':>12}")
    print(f"{'single-stream COPY TO STDOUT (binary, read only)':<48} {1:>6} {copy_seconds:>9.2f} {copy_rate:>12,.0f}")
    print(f"{'walspark parallel snapshot (decode + Delta)':<48} {table.tasks:>6} {snap_seconds:>9.2f} "
          f"{snap_rate:>12,.0f}")
    print(f"{'walspark parallel read only (decode, noop sink)':<48} {table.tasks:>6} {read_seconds:>9.2f} "
          f"{args.rows / read_seconds:>12,.0f}")
    print(f"ratio snapshot / COPY: {snap_rate / copy_rate:.2f}x   (COPY read {nbytes / 1e6:,.0f} MB)")


if __name__ == "__main__":
    main()
