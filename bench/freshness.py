"""Commit-to-visible freshness at a steady write rate, MERGE with and without Delta's change data feed (`./dev bench freshness`).

Why: throughput says how much walspark can carry; freshness says how old the data a reader sees
is, which is what a CDC user feels. The soak benchmark's writer (``bench/soak.py``)
offers ``--rate`` changes/s (default 1,000) for ``--seconds`` (60) into ``--tables`` published tables
(4) of ``--rows`` rows (20,000, copied by the pipeline's snapshot first): mostly updates of random
keys setting ``at = clock_timestamp()``, 5 % inserts and 5 % deletes, ``--per-txn`` changes (50)
per transaction. ``walspark.Pipeline`` — the code of ``walspark run`` — streams with a ``--trigger``
of 0.5 s, once per mode, each on a fresh server and target:

* ``merge``, the reference: each micro-batch MERGEd into the mirrors (the default mode);
* ``merge-cdf``: the same with ``Pipeline.change_data_feed()`` (``walspark run --change-data-feed``),
  the mirrors created with Delta's change data feed: what a downstream job reading
  ``readChangeFeed`` waits for, since a batch's feed rows are committed with its mirror rows.

Every ``--sample`` s (0.5) a reader outside Spark (delta-rs) takes each mirror's newest ``at`` from
the Delta log's file statistics (no data read); the age of the newest visible change (now − ``at``)
is one sample per table. The feed itself is not sampled: its ``_change_data`` files carry no
statistics in the log, and they commit with the mirror's files. Samples of the first ``--warm``
seconds (20) are left out: the first batches pay the query's start. The age includes up to one
sample interval and the writer's gap between two transactions of a table, so it is an upper
bound of commit → visible. Both clocks are this host's. Each mode also reports its CPU seconds
from the first write until the pipeline stopped, of walspark's processes (driver with the
writer's thread, Spark JVM, Python workers) and of PostgreSQL (bench/common.py's ``CpuMeter``),
and per change offered; ``merge-cdf`` also counts one table's change feed rows at the end.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import CpuMeter, log, pct, postmaster_pid  # bench/common.py, beside this script
from soak import Batches, Lake, Writer, create_tables  # bench/soak.py, beside this script
from streaming import add_stream_options, start_pipeline  # bench/streaming.py, beside this script

MODES = ("merge", "merge-cdf")


def measure(args: argparse.Namespace, spark, mode: str, batches: Batches) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """One mode's samples of the mirrors' freshness, its offered rate, CPU and batch timings."""
    from walspark import Pipeline
    from walspark.embedded.postgres import EmbeddedPostgres

    ages: dict[str, list[float]] = {"mirror": []}
    with EmbeddedPostgres() as pg, tempfile.TemporaryDirectory(prefix="walspark-bench-freshness-") as tmp:
        dsn = pg.dsn()
        create_tables(dsn, args.tables, args.rows)
        target = Path(tmp) / "lake"
        pipeline = Pipeline(spark, dsn=dsn, publication="soak_pub", slot="soak_slot", target=str(target))
        pipeline = pipeline.trigger_seconds(args.trigger).on_progress(lambda _line: None)
        if mode == "merge-cdf":  # every table created with the feed, the snapshot's copies too
            pipeline = pipeline.change_data_feed()
        log(f"{mode}: snapshot of {args.tables} x {args.rows:,} rows, then streaming (trigger {args.trigger:g} s)")
        handle = start_pipeline(pipeline, timeout=900)
        batches.handle = handle
        mirrors = Lake(target, args.tables)
        writer = Writer(dsn, args.tables, args.rows, args.rate, args.per_txn, 0.05, args.seconds)
        meter = CpuMeter(postmaster_pid(pg.data_dir)).start()
        writer.thread.start()
        began = time.monotonic()
        log(f"{mode}: offering {args.rate:g} changes/s for {args.seconds:g} s, sampling every {args.sample:g} s")
        try:
            while writer.thread.is_alive():
                tick = time.monotonic()
                if handle.exception is not None or not handle.is_active:
                    raise SystemExit(f"the pipeline failed: {handle.exception or handle.status()}")
                warm = writer.started is not None and tick - writer.started >= args.warm
                now = time.time()
                newest = mirrors.newest()
                if warm:
                    ages["mirror"] += [now - n for n in newest if n is not None]
                time.sleep(max(0.0, args.sample - (time.monotonic() - tick)))
            if writer.error is not None:
                raise SystemExit(f"the writer failed: {writer.error!r}")
            log(f"{mode}: {writer.changes:,} changes offered in {writer.seconds:g} s")
        finally:
            handle.stop(timeout=300)
        cpu = meter.stop()  # from the first write until the pipeline stopped
        if mode == "merge-cdf":  # what a downstream job reads: the change feed since the table's creation
            feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
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
    parser.add_argument("--modes", default=",".join(MODES), help=f"modes to run, in order ({','.join(MODES)})")
    add_stream_options(parser, sample=0.5, what="freshness")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"unknown mode {unknown[0]!r}: choose from {', '.join(MODES)}")

    from walspark.spark.session import spark_session

    spark = spark_session("walspark-bench-freshness", master=args.master)
    batches = Batches()
    batches.listen(spark)
    results = {mode: measure(args, spark, mode, batches) for mode in modes}
    spark.stop()
    print(
        f"\nfreshness at {args.rate:g} changes/s offered over {args.tables} tables, trigger {args.trigger:g} s, "
        f"sample {args.sample:g} s ({args.seconds:g} s of writes per mode, the first {args.warm:g} s left out)\n"
    )
    print("| mode | visible in | offered (chg/s) | samples | p50 (s) | p95 (s) | max (s) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    timings = {mode: ages.pop("batches") for mode, ages in results.items()}
    costs = {mode: ages.pop("cpu") for mode, ages in results.items()}
    for mode, ages in results.items():
        offered = ages.pop("offered (changes/s)")[0]
        for reader, values in ages.items():
            print(
                f"| {mode} | {reader} | {offered:,.0f} | {len(values)} | {pct(values, 50):.2f} | {pct(values, 95):.2f} "
                f"| {max(values, default=float('nan')):.2f} |"
            )
    print("\n| mode | micro-batches | batch p50 (s) | batch p95 (s) | in the sink p50 (s) | in the sink p95 (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, pairs in timings.items():
        whole, sink = [d for d, _ in pairs], [a for _, a in pairs]
        print(
            f"| {mode} | {len(pairs)} | {pct(whole, 50):.2f} | {pct(whole, 95):.2f} | {pct(sink, 50):.2f} "
            f"| {pct(sink, 95):.2f} |"
        )
    print("\n| mode | CPU s, walspark (driver, JVM, workers) | CPU s, PostgreSQL | wall (s) | CPU ms per change |")
    print("|---|---:|---:|---:|---:|")
    for mode, (ours, server, wall, changes) in costs.items():
        print(f"| {mode} | {ours:.1f} | {server:.1f} | {wall:.1f} | {1000 * ours / max(changes, 1):.2f} |")


if __name__ == "__main__":
    main()
