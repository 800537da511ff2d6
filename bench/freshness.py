"""Commit-to-visible latency of the streaming pipeline at a steady moderate write rate (`./dev bench freshness`).

Why: throughput says how much walspark can carry; freshness says how old the data a reader of
the Delta table sees is, which is what a CDC user feels. A writer commits ``--rate`` single-row
transactions per second (default 20) into a published table whose ``at`` column is
``clock_timestamp()`` (taken inside the transaction, a hair before its commit), while
``walspark.Pipeline`` — the code of ``walspark run`` — streams with a ``--trigger`` of 0.5 s. A sampler
reads the Delta table every ``--sample`` seconds (0.5) with plain Spark for rows it has not seen
yet; a row's latency is the time it was first seen minus its ``at``. Both clocks are this host's.

The figure includes the sampling interval (a row is seen up to one sample late) and the
sampler's own Spark reads, which share the machine with the pipeline — as a real reader would.
Rows of the first ``--warm`` seconds (default 10) are left out: the first batches pay the
query's start.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time

import psycopg

from streaming import add_stream_options, start_pipeline  # bench/streaming.py, beside this script

_T0 = time.perf_counter()


def log(text: str) -> None:
    """Progress on stderr, so stdout carries only the result table."""
    print(f"[{time.perf_counter() - _T0:6.1f}s] {text}", file=sys.stderr, flush=True)


def writer(dsn: str, rate: float, seconds: float, done: threading.Event, errors: list[BaseException]) -> None:
    """One autocommit insert every 1/rate s on a fixed schedule (no drift when a commit is slow)."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            started, n = time.monotonic(), 0
            while (due := started + n / rate) < started + seconds:
                if (pause := due - time.monotonic()) > 0:
                    time.sleep(pause)
                conn.execute("INSERT INTO fresh (at, payload) VALUES (clock_timestamp(), repeat('x', 200))")
                n += 1
    except BaseException as exc:  # reported by main
        errors.append(exc)
    finally:
        done.set()


def pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="transactions/s (default 20)")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of writes (default 60)")
    parser.add_argument("--warm", type=float, default=10.0, help="seconds of rows left out at the start (10)")
    add_stream_options(parser, sample=0.5, what="Delta")
    args = parser.parse_args()

    from walspark import Pipeline
    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.source.slots import create_slot
    from walspark.spark.session import spark_session

    with EmbeddedPostgres() as pg, tempfile.TemporaryDirectory(prefix="walspark-bench-freshness-") as tmp:
        dsn = pg.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE fresh (id bigserial PRIMARY KEY, at timestamptz NOT NULL, payload text)")
            conn.execute("CREATE PUBLICATION fresh_pub FOR TABLE fresh")
            create_slot(conn, "fresh_slot")  # the table is empty: no snapshot needed
        spark = spark_session("walspark-bench-freshness", master=args.master)
        target = f"{tmp}/lake"
        pipeline = (Pipeline(spark, dsn=dsn, publication="fresh_pub", slot="fresh_slot", target=target)
                    .trigger_seconds(args.trigger).on_progress(log))  # fmt: skip
        failures: list[BaseException] = []
        handle = start_pipeline(pipeline, timeout=300)
        log(f"streaming; writing {args.rate:g} txn/s for {args.seconds:g} s, sampling Delta every {args.sample:g} s")
        done = threading.Event()
        threading.Thread(target=writer, args=(dsn, args.rate, args.seconds, done, failures), daemon=True).start()
        path = f"{target}/public/fresh"
        seen: dict[int, float] = {}  # id -> latency (s)
        commit_at: dict[int, float] = {}
        last_id, drained_after = 0, None
        started = time.time()
        while True:
            tick = time.monotonic()
            try:
                rows = (spark.read.format("delta").load(path).where(f"id > {last_id}")
                        .selectExpr("id", "unix_micros(at)").collect())  # fmt: skip
            except Exception:  # noqa: BLE001 - the Delta table exists after the first batch
                rows = []
            now = time.time()
            for row_id, micros in rows:
                seen[row_id] = now - micros / 1e6
                commit_at[row_id] = micros / 1e6
                last_id = max(last_id, row_id)
            if handle.exception is not None:
                failures.append(handle.exception)
            if failures:
                raise SystemExit(f"failed: {failures[0]!r}")
            if done.is_set():
                with psycopg.connect(dsn) as conn:
                    total = conn.execute("SELECT count(*) FROM fresh").fetchone()[0]  # type: ignore[index]
                if len(seen) >= total:
                    break
                drained_after = drained_after or time.monotonic()
                if time.monotonic() - drained_after > 300:
                    raise SystemExit("the pipeline did not deliver every row within 300 s")
            time.sleep(max(0.0, args.sample - (time.monotonic() - tick)))
        handle.stop(timeout=120)
        spark.stop()
    kept = [lat for rid, lat in seen.items() if commit_at[rid] >= started + args.warm]
    print("| rate (txn/s) | trigger (s) | sample (s) | rows measured | p50 (s) | p95 (s) | max (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.rate:g} | {args.trigger:g} | {args.sample:g} | {len(kept):,} | {pct(kept, 50):.2f} |"
          f" {pct(kept, 95):.2f} | {max(kept):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
