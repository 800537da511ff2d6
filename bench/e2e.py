"""End-to-end throughput, PostgreSQL commit to Delta commit, beside the server's own delivery (`./dev bench e2e`).

Why a side-by-side: a rows/s figure alone says as much about the machine as about walspark. Each
scenario therefore also times ``pg_recvlogical`` streaming *the same changes* (a second slot
created at the same point, ``--endpos`` at the same LSN) into /dev/null — the fastest the server's
walsender delivers them — and prints the ratio.

1. **bulk**: ``--rows`` (default 1,000,000) rows inserted in ``--txns`` large transactions into a
   published table while no pipeline runs; the slot was created before the load (SQL interface,
   no snapshot needed: the table was empty). Then ``Pipeline(...).run_once()`` — the code of
   ``walspark run --once`` — is timed from its call to its return: staging, decoding, MERGE into
   Delta, slot confirm.
2. **sustained**: a pgbench-like transaction (update an account, update its branch, insert a
   history row with ``clock_timestamp()``) at a fixed ``--rate`` for ``--seconds`` while
   ``Pipeline(...).start()`` streams with a 1 s trigger. Reports the offered and applied change rates, the
   lag (now minus the newest history row visible in Delta, sampled every 2 s) and the time to
   drain after the writes stop.
3. **pgbench**: PostgreSQL's own pgbench at the rate the server sustains alone here, for
   ``--pgbench-seconds`` (300) (``bench/pgbench_run.py`` says how): offered against applied changes/s and the lag every 30 s.

Spark's one-off start-up (JVM, Delta, Python workers) is paid by a small warm-up pipeline before
anything is timed, as a long-running pipeline pays it once. Progress on stderr, tables on stdout.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from common import (  # bench/common.py, beside this script
    CpuMeter,
    RssMeter,
    cpu_line,
    log,
    pct,
    postmaster_pid,
    recvlogical,
)
from streaming import start_pipeline  # bench/streaming.py, beside this script

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from walspark.embedded.postgres import EmbeddedPostgres

#: What walspark's stream asks of PostgreSQL 18 by default; pg_recvlogical gets the same.
def pipeline(spark: SparkSession, dsn: str, publication: str, slot: str, target: str):  # type: ignore[no-untyped-def]
    """The pipeline of ``walspark run`` (:class:`walspark.Pipeline`), its lines to the log."""
    from walspark import Pipeline

    return Pipeline(spark, dsn=dsn, publication=publication, slot=slot, target=target).on_progress(log)


def warm_up(spark: SparkSession, dsn: str, tmp: str, name: str = "warm") -> None:
    """A tiny pipeline through every stage, so no timed figure pays Spark's or Delta's first use.

    ``name`` names its table, publication, slot and target: a child process on the same server
    warms up its own Spark with a name of its own."""
    from walspark.source.slots import create_slot

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION {name}_pub FOR TABLE {name}")
        create_slot(conn, f"{name}_slot")
        conn.execute(f"INSERT INTO {name} SELECT g, 'v' || g FROM generate_series(1, 5000) g")
        conn.execute(f"UPDATE {name} SET v = 'w' WHERE id % 3 = 0")
    pipeline(spark, dsn, f"{name}_pub", f"{name}_slot", f"{tmp}/{name}").run_once()


@dataclass
class Row:
    scenario: str
    path: str
    changes: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.changes / self.seconds if self.seconds else float("nan")


#: The bulk messages as ``./dev bench decode`` reads them (protocol 1, text), for the decoding figure.
PEEK_OPTIONS = {"proto_version": "1", "publication_names": "bulk_pub"}


def bulk(spark: SparkSession, pg: EmbeddedPostgres, dsn: str, tmp: str, rows: int, txns: int,
         pure: bool) -> tuple[list[Row], list[str]]:  # fmt: skip
    """The bulk load: walspark run --once on each hot path vs the server's delivery of the same backlog.

    Four slots made before the load see the same changes: one for the SQL peek (which is also
    decoded here, in this process, on both paths, to weigh decoding against the whole run),
    one for ``pg_recvlogical`` and one per walspark run — the compiled path in this process,
    the pure-Python path in a child (``bench/paths.py``). Returns the table's rows and the lines
    on decoding."""
    from decode import best_of, peek_all, run_rows  # bench/decode.py, beside this script
    from paths import run_pure

    from walspark.compiled import speedups
    from walspark.source.slots import create_slot

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE bulk (id bigint PRIMARY KEY, qty int, label text, at timestamptz,"
                     " amount numeric(12, 2))")  # fmt: skip
        conn.execute("CREATE PUBLICATION bulk_pub FOR TABLE bulk")
        for slot in ("bulk_slot", "bulk_recv", "bulk_peek", "bulk_pure"):
            create_slot(conn, slot)
    # The walspark runs: path -> its slot, its target and the module ChangeRowBuilder runs with.
    paths: dict[str, tuple[str, str, object]] = {}
    if speedups is not None:
        paths["compiled"] = ("bulk_slot", f"{tmp}/bulk", speedups)
    if pure:
        paths["pure Python"] = ("bulk_pure", f"{tmp}/bulk_pure", None)
    # Each walspark target first takes the empty table in (its copy, then in sync), so the timed
    # runs stream the backlog: a table new to a target would be copied instead, not decoded.
    for slot, target, _ in paths.values():
        log(f"bulk: {slot} takes the empty table in")
        pipeline(spark, dsn, "bulk_pub", slot, target).run_once()
    with psycopg.connect(dsn, autocommit=True) as conn:
        per = -(-rows // txns)
        log(f"bulk: inserting {rows:,} rows in {txns} transactions (pipeline not running)")
        for first in range(0, rows, per):
            conn.execute("INSERT INTO bulk SELECT g, g %% 1000, 'item-' || g, TIMESTAMPTZ '2024-01-01' + g * INTERVAL '1s',"
                         " (g %% 100000) / 100.0 FROM generate_series(%s::bigint, %s::bigint) g",
                         (first + 1, min(rows, first + per)))  # fmt: skip
        endpos = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]
    log("bulk: pg_recvlogical to /dev/null")
    server = recvlogical(pg, dsn, "bulk_recv", "bulk_pub", endpos)
    log(f"bulk: pg_recvlogical {server:.1f} s; the SQL peek")
    messages, peek = peek_all(pg, PEEK_OPTIONS, "bulk_peek")
    decoded = {name: best_of(1, lambda m=module, ms=messages: run_rows(ms, m, 1, False))[1]  # type: ignore[misc]
               for name, (_, _, module) in paths.items()}  # fmt: skip
    del messages
    log(f"bulk: peek {peek:.1f} s; decoding (CPU) {', '.join(f'{k} {v:.2f} s' for k, v in decoded.items())};"
        " now walspark run --once")
    out = [Row("bulk", "server SQL peek → client", rows, peek, "protocol 1, as ./dev bench decode"),
           Row("bulk", "pg_recvlogical → /dev/null", rows, server, "server's delivery, process start to exit")]
    lines = []
    for name, (slot, target, module) in paths.items():
        if module is not None:
            seconds, cpu, memory = _run_once_timed(spark, dsn, slot, target, postmaster_pid(pg.data_dir))
        else:
            log("bulk: walspark run --once on the pure-Python path (a child process)")
            figures = run_pure(__file__, {"dsn": dsn, "slot": slot, "target": target, "tmp": tmp,
                                          "postmaster": postmaster_pid(pg.data_dir)})
            seconds, cpu, memory = figures["seconds"], figures["cpu"], figures["memory"]
        landed = spark.read.format("delta").load(f"{target}/public/bulk").count()
        if landed != rows:
            raise SystemExit(f"bulk ({name}): Delta holds {landed:,} rows, expected {rows:,}")
        out.append(Row("bulk", f"walspark run --once → Delta, {name}", rows, seconds,
                       f"{txns} transactions; {landed:,} rows checked"))  # fmt: skip
        lines.append(f"bulk, {name}: decoding the same messages took {decoded[name]:.2f} s of CPU"
                     f" (ChangeRowBuilder, one process) = {decoded[name] / seconds:.1%} of the run's wall time")
        lines.append(f"bulk, {name}: {cpu} (PostgreSQL: the walsender and backends; Python workers: the tasks"
                     " and the source's process, where the stager runs; the driver: planning, applying)")  # fmt: skip
        lines.append(f"bulk, {name}: {memory}")
    return out, lines


def _run_once_timed(spark: SparkSession, dsn: str, slot: str, target: str,
                    postmaster: int) -> tuple[float, str, str]:  # fmt: skip
    """Seconds of ``Pipeline(...).run_once()`` (``walspark run --once``) over the bulk backlog, where
    the CPU went meanwhile, and the peak resident memory of the driver, the JVM and a worker."""
    started, meter, memory = time.perf_counter(), CpuMeter(postmaster).start(), RssMeter().start()
    pipeline(spark, dsn, "bulk_pub", slot, target).run_once()
    seconds, used = time.perf_counter() - started, cpu_line(meter.stop())
    memory.stop()
    return seconds, used, memory.line()


def pure_child(task: dict) -> None:  # type: ignore[type-arg]
    """The child of :func:`bulk`: its own Spark (pure-Python workers), warmed up, then the timed run."""
    from paths import report

    from walspark.spark.session import spark_session

    spark = spark_session("walspark-bench-e2e-pure")
    warm_up(spark, task["dsn"], task["tmp"], name="warm_pure")
    seconds, cpu, memory = _run_once_timed(spark, task["dsn"], task["slot"], task["target"], task["postmaster"])
    report(task, {"seconds": seconds, "cpu": cpu, "memory": memory})
    spark.stop()


class Bench:
    """pgbench-like writer at a fixed rate: one account, its branch, one history row per transaction."""

    def __init__(self, dsn: str, rate: float, seconds: float, accounts: int) -> None:
        self.dsn, self.rate, self.seconds, self.accounts = dsn, rate, seconds, accounts
        self.transactions = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import random

        rng = random.Random(1)
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                started = time.monotonic()
                while (due := started + self.transactions / self.rate) < started + self.seconds:
                    if (pause := due - time.monotonic()) > 0:
                        time.sleep(pause)
                    aid, delta = rng.randint(1, self.accounts), rng.randint(-5000, 5000)
                    bid = 1 + aid % 10
                    with conn.transaction():
                        conn.execute("UPDATE accounts SET abalance = abalance + %s WHERE aid = %s", (delta, aid))
                        conn.execute("UPDATE branches SET bbalance = bbalance + %s WHERE bid = %s", (delta, bid))
                        conn.execute("INSERT INTO history (aid, bid, delta, mtime) VALUES (%s, %s, %s,"
                                     " clock_timestamp())", (aid, bid, delta))  # fmt: skip
                    self.transactions += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc


def sustained(spark: SparkSession, pg: EmbeddedPostgres, dsn: str, tmp: str, rate: float, seconds: float,
              trigger: float) -> tuple[list[Row], dict[str, float]]:  # fmt: skip
    """The streaming scenario: fixed-rate writes while the pipeline streams; lag sampled from Delta."""
    from walspark.source.slots import create_slot

    accounts = 100_000
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE branches (bid int PRIMARY KEY, bbalance bigint NOT NULL, filler char(88))")
        conn.execute("CREATE TABLE accounts (aid int PRIMARY KEY, bid int NOT NULL, abalance bigint NOT NULL,"
                     " filler char(84))")  # fmt: skip
        conn.execute("CREATE TABLE history (hid bigserial PRIMARY KEY, aid int, bid int, delta int,"
                     " mtime timestamptz)")  # fmt: skip
        conn.execute("INSERT INTO branches SELECT g, 0, '' FROM generate_series(1, 10) g")
        conn.execute("INSERT INTO accounts SELECT g, 1 + g %% 10, 0, '' FROM generate_series(1, %s) g", (accounts,))
        conn.execute("CREATE PUBLICATION bench_pub FOR TABLE branches, accounts, history")
    # The initial rows go through the snapshot (the pipeline creates the slot), untimed: the
    # figure is about the stream. pg_recvlogical's slot is created once the snapshot is done.
    target = f"{tmp}/sustained"
    handle = start_pipeline(pipeline(spark, dsn, "bench_pub", "bench_slot", target).trigger_seconds(trigger),
                            timeout=600)  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_slot(conn, "bench_recv")
    log(f"sustained: streaming; writing {rate:g} txn/s for {seconds:g} s")
    writer = Bench(dsn, rate, seconds, accounts)
    history_path = f"{target}/public/history"
    started = time.perf_counter()
    writer.thread.start()
    lags: list[float] = []
    while writer.thread.is_alive():
        time.sleep(2.0)
        newest = _newest_micros(spark, history_path)
        if newest is not None:
            lags.append(time.time() - newest / 1e6)
    written_at = time.perf_counter()
    if writer.error:
        raise SystemExit(f"sustained: the writer failed: {writer.error!r}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        source_history = conn.execute("SELECT count(*) FROM history").fetchone()[0]  # type: ignore[index]
        endpos = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]
    log("sustained: writes done; waiting for the pipeline to drain")
    deadline = time.monotonic() + 900
    while _count(spark, history_path) < source_history:
        if not handle.is_active or time.monotonic() > deadline:
            raise SystemExit(f"sustained: the pipeline did not drain: {handle.exception or handle.status()}")
        time.sleep(0.5)
    drained_at = time.perf_counter()
    handle.stop(timeout=120)
    changes = 3 * writer.transactions
    server = recvlogical(pg, dsn, "bench_recv", "bench_pub", endpos)
    rows = [
        Row("sustained", "workload (offered)", changes, written_at - started,
            f"{writer.transactions:,} txns at {writer.transactions / (written_at - started):.1f} txn/s"),
        Row("sustained", "pg_recvlogical → /dev/null", changes, server, "same changes, afterwards, from a second slot"),
        Row("sustained", "walspark run → Delta", changes, drained_at - started,
            f"trigger {trigger:g} s; until the last row was visible"),
    ]
    lag = {"p50": pct(lags, 50), "p95": pct(lags, 95), "max": max(lags) if lags else float("nan"),
           "drain": drained_at - written_at, "samples": float(len(lags))}  # fmt: skip
    return rows, lag


def _newest_micros(spark: SparkSession, path: str) -> int | None:
    try:
        return spark.read.format("delta").load(path).selectExpr("max(unix_micros(mtime))").first()[0]
    except Exception:  # noqa: BLE001 - the table may not exist before the first batch
        return None


def _count(spark: SparkSession, path: str) -> int:
    try:
        return spark.read.format("delta").load(path).count()
    except Exception:  # noqa: BLE001 - not created yet
        return 0


def print_table(rows: list[Row]) -> None:
    print("| scenario | path | changes | seconds | changes/s | note |")
    print("|---|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r.scenario} | {r.path} | {r.changes:,} | {r.seconds:.2f} | {r.rate:,.0f} | {r.note} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="bulk: rows inserted (default 1,000,000)")
    parser.add_argument("--txns", type=int, default=4, help="bulk: transactions they are inserted in (default 4)")
    parser.add_argument("--rate", type=float, default=100.0, help="sustained: transactions/s (default 100)")
    parser.add_argument("--seconds", type=float, default=60.0, help="sustained: seconds of writes (default 60)")
    parser.add_argument("--trigger", type=float, default=1.0, help="sustained: trigger interval (default 1 s)")
    parser.add_argument("--pgbench-seconds", type=float, default=300.0, help="pgbench: seconds per mode (default 300)")
    parser.add_argument("--scale", type=int, default=1, help="pgbench: scale (default 1: 100,000 accounts)")
    parser.add_argument("--clients", type=int, default=2, help="pgbench: clients (default 2)")
    parser.add_argument("--only", choices=("bulk", "sustained", "pgbench"), default=None, help="run one scenario")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--no-pure", action="store_true", help="bulk: leave out the pure-Python path's run")
    args = parser.parse_args()
    from paths import child_task

    task = child_task()
    if task is not None:
        pure_child(task)
        return

    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.spark.session import spark_session

    with EmbeddedPostgres(settings={"max_wal_size": "8GB", "shared_buffers": "512MB"}) as pg, \
            tempfile.TemporaryDirectory(prefix="walspark-bench-e2e-") as tmp:  # fmt: skip
        dsn = pg.dsn()
        spark = spark_session("walspark-bench-e2e", master=args.master)
        log("warm-up pipeline")
        warm_up(spark, dsn, tmp)
        results: list[Row] = []
        lag: dict[str, float] | None = None
        decoding: list[str] = []
        if args.only in (None, "bulk"):
            rows, decoding = bulk(spark, pg, dsn, tmp, args.rows, args.txns, pure=not args.no_pure)
            results += rows
        if args.only in (None, "sustained"):
            rows, lag = sustained(spark, pg, dsn, tmp, args.rate, args.seconds, args.trigger)
            results += rows
        benched = []
        if args.only in (None, "pgbench"):
            from pgbench_run import run_mode  # bench/pgbench_run.py, beside this script

            benched = [run_mode(spark, pg, tmp, "merge", scale=args.scale, clients=args.clients, calibrate=10.0,
                                seconds=args.pgbench_seconds, trigger=args.trigger)]  # fmt: skip
        spark.stop()
    print_table(results)
    print()
    for scenario in ("bulk", "sustained"):
        for reference in ("pg_recvlogical", "server SQL peek"):
            server = next((r for r in results if r.scenario == scenario and r.path.startswith(reference)), None)
            for ours in (r for r in results if r.scenario == scenario and r.path.startswith("walspark")):
                if server:
                    print(f"{scenario}: {ours.path} / {reference} ="
                          f" {ours.rate / server.rate:.3f} ({ours.rate:,.0f} vs {server.rate:,.0f} changes/s)")
    for line in decoding:
        print(line)
    offered = next((r for r in results if r.path.startswith("workload")), None)
    ours = next((r for r in results if r.scenario == "sustained" and r.path.startswith("walspark")), None)
    if offered and ours:
        # At a rate below both limits, what matters is keeping up: applied over offered, where
        # walspark's figure also pays the drain after the writes stopped.
        print(f"sustained: walspark / offered workload = {ours.rate / offered.rate:.3f}"
              f" ({ours.rate:,.0f} vs {offered.rate:,.0f} changes/s, drain included)")
    if benched:
        from pgbench_run import report

        report(benched)
    if lag is not None:
        print(f"\nsustained lag (now − newest row visible in Delta, {int(lag['samples'])} samples every 2 s):"
              f" p50 {lag['p50']:.2f} s, p95 {lag['p95']:.2f} s, max {lag['max']:.2f} s;"
              f" drain after the writes stopped {lag['drain']:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
