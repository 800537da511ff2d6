"""Commit-to-visible freshness at a steady write rate, change log against MERGE (`./dev bench freshness`).

Why: throughput says how much walspark can carry; freshness says how old the data a reader sees
is, which is what a CDC user feels. The soak benchmark's writer (``bench/soak.py``)
offers ``--rate`` changes/s (default 1,000) for ``--seconds`` (60) into ``--tables`` published tables
(4) of ``--rows`` rows (20,000, copied by the pipeline's snapshot first): mostly updates of random
keys setting ``at = clock_timestamp()``, 5 % inserts and 5 % deletes, ``--per-txn`` changes (50)
per transaction. ``walspark.Pipeline`` — the code of ``walspark run`` — streams with a ``--trigger``
of 0.5 s, twice, each on a fresh server and target:

* ``merge``, the reference: each micro-batch MERGEd into the mirrors (the default mode);
* ``merge-cdf``: the same, with Delta's change data feed on the mirrors (the snapshot taken by a
  ``--once`` run first, then ``ALTER TABLE ... SET TBLPROPERTIES (delta.enableChangeDataFeed =
  true)``, then the stream): what a downstream job reading ``readChangeFeed`` waits for, since a
  MERGE's feed rows are committed with it;
* ``change-log`` (``walspark run --change-log``): each micro-batch appended to the change logs,
  the mirrors folded from them in the background.

Every ``--sample`` s (0.5) a reader outside Spark (delta-rs) takes each table's newest ``at`` from
the Delta log's file statistics (no data read) of the change log and of the mirror; the age of
the newest visible change (now − ``at``) is one sample per table. For the change-log mode a third
reader, in the benchmark's Spark session and a thread of its own, runs the fresh read
(``walspark.read_table(...).agg(max(at))``, mirror + unfolded change log) of one table at a time,
round-robin, as often as a query allows (at most every sample). Samples of the first ``--warm`` seconds (20) are left out: the first batches pay the
query's start. The age includes up to one sample interval and the writer's gap between two
transactions of a table, so it is an upper bound of commit → visible. Both clocks are this host's.
Each mode also reports its CPU seconds from the first write until the pipeline stopped (change-log
mode: every change log folded), of walspark's processes (driver with the writer's thread, Spark
JVM, Python workers) and of PostgreSQL (bench/common.py's ``CpuMeter``), and per change offered.
Goals: change log p95 ≤ 1.5 s and mirror p95 ≤ 5 s at 1,000 changes/s over 4 tables.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import CpuMeter, log, pct, postmaster_pid  # bench/common.py, beside this script
from soak import Batches, Lake, Writer, create_tables  # bench/soak.py, beside this script
from streaming import add_stream_options, start_pipeline  # bench/streaming.py, beside this script

GOALS = {("change-log", "change log"): 1.5, ("change-log", "mirror"): 5.0}


def fresh_read_age(spark, target: str, table: str) -> float | None:  # type: ignore[no-untyped-def]
    """Age of the newest change a fresh read sees (one Spark query)."""
    from pyspark.sql import functions as F

    from walspark import read_table

    newest = read_table(spark, target, ("public", table)).agg(F.max("at")).first()[0]
    return None if newest is None else time.time() - newest.timestamp()


def measure(args: argparse.Namespace, spark, mode: str, batches: Batches) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """One mode's samples per reader ("change log", "mirror", "fresh read")."""
    from walspark import Pipeline
    from walspark.embedded.postgres import EmbeddedPostgres

    wanted = ["mirror"] if mode != "change-log" else ["change log", "mirror", "fresh read"]
    ages: dict[str, list[float]] = {r: [] for r in wanted if r in args.readers.split(",")}
    with EmbeddedPostgres() as pg, tempfile.TemporaryDirectory(prefix="walspark-bench-freshness-") as tmp:
        dsn = pg.dsn()
        create_tables(dsn, args.tables, args.rows)
        target = Path(tmp) / "lake"
        pipeline = Pipeline(spark, dsn=dsn, publication="soak_pub", slot="soak_slot", target=str(target))
        pipeline = pipeline.trigger_seconds(args.trigger).on_progress(lambda _line: None)
        enabled = None
        if mode == "merge-cdf":  # the snapshot first, then the mirrors' change data feed, then the stream
            pipeline.run_once()
            for t in range(args.tables):
                spark.sql(f"ALTER TABLE delta.`{target}/public/soak_{t}` "
                          "SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")  # fmt: skip
            enabled = spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/soak_0` LIMIT 1").first()["version"]
        if mode == "change-log":
            pipeline = pipeline.change_log(True, args.fold_seconds)
        log(f"{mode}: snapshot of {args.tables} x {args.rows:,} rows, then streaming (trigger {args.trigger:g} s)")
        handle = start_pipeline(pipeline, timeout=900)
        batches.handle = handle
        readers = {"mirror": Lake(target, args.tables), "change log": Lake(target / "_changes", args.tables)}
        writer = Writer(dsn, args.tables, args.rows, args.rate, args.per_txn, 0.05, args.seconds)
        meter = CpuMeter(postmaster_pid(pg.data_dir)).start()
        writer.thread.start()
        began = time.monotonic()
        log(f"{mode}: offering {args.rate:g} changes/s for {args.seconds:g} s, sampling every {args.sample:g} s")
        stop = threading.Event()

        def fresh_reads() -> None:
            """The fresh read's samples, in a thread of their own: a Spark query takes longer than a sample."""
            turn = 0
            while not stop.is_set():
                tick = time.monotonic()
                if writer.started is not None and tick - writer.started >= args.warm:
                    try:
                        age = fresh_read_age(spark, str(target), f"soak_{turn % args.tables}")
                    except Exception as exc:  # noqa: BLE001 - a table not copied yet; reported at the end
                        log(f"fresh read failed: {exc}")
                        age = None
                    turn += 1
                    if age is not None:
                        ages["fresh read"].append(age)
                stop.wait(max(0.0, args.sample - (time.monotonic() - tick)))

        reader = threading.Thread(target=fresh_reads, daemon=True)
        if "fresh read" in ages:
            reader.start()
        try:
            while writer.thread.is_alive():
                tick = time.monotonic()
                if handle.exception is not None or not handle.is_active:
                    raise SystemExit(f"the pipeline failed: {handle.exception or handle.status()}")
                warm = writer.started is not None and tick - writer.started >= args.warm
                now = time.time()
                for name, lake in readers.items():
                    if name in ages:
                        newest = lake.newest()
                        if warm:
                            ages[name] += [now - n for n in newest if n is not None]
                time.sleep(max(0.0, args.sample - (time.monotonic() - tick)))
            if writer.error is not None:
                raise SystemExit(f"the writer failed: {writer.error!r}")
            log(f"{mode}: {writer.changes:,} changes offered in {writer.seconds:g} s")
        finally:
            stop.set()
            if reader.is_alive():
                reader.join()
            handle.stop(timeout=300)
        cpu = meter.stop()  # from the first write until the pipeline stopped (change-log mode: all folded)
        if enabled is not None:  # what a downstream job reads: the change feed since it was enabled
            feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", enabled)
            log(f"{mode}: {feed.load(f'{target}/public/soak_0').count():,} change feed rows in soak_0")
    ages["offered (changes/s)"] = [writer.changes / args.seconds]
    ages["cpu"] = [sum(v for k, v in cpu.items() if k not in ("wall", "PostgreSQL")), cpu["PostgreSQL"], cpu["wall"],
                   writer.changes]  # fmt: skip
    ages["batches"] = batches.sink_share(began + args.warm, time.monotonic())  # type: ignore[assignment]
    return ages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="changes/s offered, all tables (default 1,000)")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of writes per mode (default 60)")
    parser.add_argument("--tables", type=int, default=4, help="published tables (default 4)")
    parser.add_argument("--rows", type=int, default=20_000, help="initial rows per table (default 20,000)")
    parser.add_argument("--per-txn", type=int, default=50, help="changes per transaction (default 50)")
    parser.add_argument("--warm", type=float, default=20.0, help="seconds of samples left out at the start (20)")
    parser.add_argument("--fold-seconds", type=float, default=0.0, help="change-log mode: seconds between folds (0)")
    parser.add_argument("--modes", default="merge,change-log", help="modes to run, in order (merge,change-log)")
    parser.add_argument("--readers", default="change log,mirror,fresh read",
                        help="what to sample (default all: 'change log,mirror,fresh read'); without the fresh "
                             "read, its Spark queries do not compete with the pipeline for the cores")  # fmt: skip
    add_stream_options(parser, sample=0.5, what="freshness")
    args = parser.parse_args()

    from walspark.spark.session import spark_session

    spark = spark_session("walspark-bench-freshness", master=args.master)
    batches = Batches()
    batches.listen(spark)
    results = {mode: measure(args, spark, mode, batches) for mode in args.modes.split(",")}
    spark.stop()
    print(f"\nfreshness at {args.rate:g} changes/s offered over {args.tables} tables, trigger {args.trigger:g} s, "
          f"sample {args.sample:g} s ({args.seconds:g} s of writes per mode, the first {args.warm:g} s left out)\n")
    print("| mode | visible in | offered (chg/s) | samples | p50 (s) | p95 (s) | max (s) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    timings = {mode: ages.pop("batches") for mode, ages in results.items()}
    costs = {mode: ages.pop("cpu") for mode, ages in results.items()}
    for mode, ages in results.items():
        offered = ages.pop("offered (changes/s)")[0]
        for reader, values in ages.items():
            print(f"| {mode} | {reader} | {offered:,.0f} | {len(values)} | {pct(values, 50):.2f} | {pct(values, 95):.2f} "
                  f"| {max(values, default=float('nan')):.2f} |")
    print("\n| mode | micro-batches | batch p50 (s) | batch p95 (s) | in the sink p50 (s) | in the sink p95 (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, pairs in timings.items():
        whole, sink = [d for d, _ in pairs], [a for _, a in pairs]
        print(f"| {mode} | {len(pairs)} | {pct(whole, 50):.2f} | {pct(whole, 95):.2f} | {pct(sink, 50):.2f} "
              f"| {pct(sink, 95):.2f} |")
    print("\n| mode | CPU s, walspark (driver, JVM, workers) | CPU s, PostgreSQL | wall (s) | CPU ms per change |")
    print("|---|---:|---:|---:|---:|")
    for mode, (ours, server, wall, changes) in costs.items():
        print(f"| {mode} | {ours:.1f} | {server:.1f} | {wall:.1f} | {1000 * ours / max(changes, 1):.2f} |")
    print()
    for (mode, reader), goal in GOALS.items():
        if mode in results and reader in results[mode]:
            p95 = pct(results[mode][reader], 95)
            print(f"goal: {reader} p95 <= {goal:g} s ({mode}): {p95:.2f} s, {'met' if p95 <= goal else 'NOT met'}",
                  file=sys.stdout)


if __name__ == "__main__":
    main()
