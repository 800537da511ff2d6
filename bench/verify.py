"""``walspark verify`` of a table beside the snapshot of the same table, one run (`./dev bench verify`).

Starts an embedded PostgreSQL 18, fills the snapshot benchmark's table of --rows rows (default
5,000,000; bench/common.py), takes walspark's initial snapshot of it into a Delta table (timed,
after a warm-up snapshot and verify of a table of the same columns and 20,000 rows pays Spark's
start-up and its code for those types), then verifies the table against its source with
:func:`walspark.pipeline.verify.verify_tables` twice (the first also pays Spark's code generation
and JIT for this table's checksum query) and prints the three times and the ratio to the snapshot's. The table is quiet: the figure is the comparison's own cost (rows and checksums per
key range on both sides at once), which a streaming pipeline's re-reads add to only where ranges
move.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from common import fill_big_table, log  # bench/common.py, beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows in the table (default 5,000,000)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    args = parser.parse_args()

    import psycopg

    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.pipeline import RunSettings
    from walspark.pipeline.verify import verify_tables
    from walspark.spark.session import spark_session
    from walspark.spark.snapshot.initial import run_snapshot

    with EmbeddedPostgres(settings={"max_wal_size": "8GB", "shared_buffers": "512MB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="walspark-bench-verify-") as tmp:
        dsn = pg.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            log(f"filling a table of {args.rows:,} rows ...")
            fill_big_table(conn, args.rows)
            fill_big_table(conn, 20_000, "warm")  # the same columns: both steps warm for their types
            conn.execute("CREATE PUBLICATION pub FOR TABLE big")
            conn.execute("CREATE PUBLICATION warmup FOR TABLE warm")
        spark = spark_session("walspark-bench-verify", master=args.master)
        warm_target = os.path.join(tmp, "warm")
        run_snapshot(spark, dsn, "warmup", "warm_slot", warm_target, partition_pages=4)
        verify_tables(spark, RunSettings(dsn, "warmup", "warm_slot", warm_target), log)
        log("snapshot ...")
        target = os.path.join(tmp, "lake")
        started = time.monotonic()
        run_snapshot(spark, dsn, "pub", "bench_slot", target)
        snapshot = time.monotonic() - started
        settings = RunSettings(dsn, "pub", "bench_slot", target)
        times = []
        for _ in range(2):
            log("verify ...")
            result = verify_tables(spark, settings, log)
            assert result.matches, result
            (table,) = result.tables
            assert table.source_rows == table.lake_rows == args.rows, table
            times.append(result.seconds)
        parallelism = spark.sparkContext.defaultParallelism
        spark.stop()
    print()
    print(f"table: {args.rows:,} rows, {table.ranges} key ranges; Spark {args.master} (default parallelism "
          f"{parallelism}), host CPUs {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    print("| step | seconds | rows/s | vs snapshot |")
    print("|---|---:|---:|---:|")
    for step, seconds in (("walspark snapshot", snapshot), ("walspark verify, first", times[0]),
                          ("walspark verify, again", times[1])):  # fmt: skip
        print(f"| {step} | {seconds:.2f} | {args.rows / seconds:,.0f} | {seconds / snapshot:.2f}× |")


if __name__ == "__main__":
    main()
