"""An UPDATE-heavy backlog drained by walspark beside PostgreSQL's own subscriber (`./dev bench oltp`).

pgbench is initialised at ``--scale`` (10: 1,000,000 accounts) and its four tables are published.
Before any change every consumer takes its starting point on the same primary:

- **PostgreSQL's subscriber**: a second embedded PostgreSQL 18 with pgbench's tables (empty),
  ``CREATE SUBSCRIPTION … WITH (streaming = parallel)``, its initial copy done, then disabled;
- **pg_recvlogical**: a slot of its own;
- **walspark, cold**: a target whose snapshot this process took, drained later by a new
  ``walspark run --once`` process (its JVM, its Spark start, as a cron job would run it);
- **walspark, warm**: a target drained by ``Pipeline.run_once()`` on this process's session.

Then an unthrottled pgbench backlog (``-t`` transactions per client, 4 clients by default; a
TPC-B-like transaction is 3 UPDATEs and an INSERT), then each consumer drains it alone, timed:
the subscriber from ``ALTER SUBSCRIPTION … ENABLE`` until its history table holds the source's
rows (its transactions apply in commit order, the history row last), ``pg_recvlogical`` from
process start to ``--endpos``, walspark's runs from call to return. Every mirror — the
subscriber's tables and each walspark target — is then checked equal to the source, row by row.
Last, ``walspark run --once`` with nothing pending, as a new process.

With ``--streaming-seconds`` (default 0: off), pgbench at the rate the server sustains alone is
also run beside a streaming pipeline (``bench/pgbench_run.py``), with the mirror's lag every 30 s.
Progress on stderr, the table on stdout.
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

import psycopg
from common import log, recvlogical  # bench/common.py, beside this script
from psycopg import sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from walspark.embedded.postgres import EmbeddedPostgres

TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")
#: The columns each mirror is compared on (``filler`` is blank padding) and whether rows are keyed.
COMPARED = {
    "pgbench_accounts": "aid, bid, abalance",
    "pgbench_branches": "bid, bbalance",
    "pgbench_tellers": "tid, bid, tbalance",
    "pgbench_history": "tid, bid, aid, delta, mtime",
}
PUBLICATION = "oltp_pub"


@dataclass(frozen=True, slots=True)
class Drain:
    consumer: str
    seconds: float
    note: str = ""


def pgbench(pg: EmbeddedPostgres, dsn: str, *args: str) -> str:
    out = subprocess.run([pg.bin("pgbench"), *args, dsn], check=True, capture_output=True, text=True, timeout=3600)
    return out.stdout + out.stderr


def pgbench_database(pg: EmbeddedPostgres, scale: int) -> str:
    """A database ``oltp`` on ``pg`` initialised by pgbench at ``scale``, its four tables published; its DSN."""
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE oltp")
    dsn = pg.dsn("oltp")
    log(f"pgbench -i at scale {scale} ({100_000 * scale:,} accounts)")
    pgbench(pg, dsn, "-i", "-q", "-s", str(scale))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {', '.join(TABLES)}")
    return dsn


def one(dsn: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchone()[0]  # type: ignore[index]


def source_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    """The compared columns of ``table``, sorted (a multiset for the keyless history)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT {COMPARED[table]} FROM {table}").fetchall()
    return sorted(tuple(r) for r in rows)


def delta_rows(spark: SparkSession, path: str, table: str) -> list[tuple[Any, ...]]:
    """The same columns of a walspark mirror, read with delta-rs (not the code under test), or with
    Spark's Delta reader where delta-rs reads no deletion vectors (the 1,000,000 accounts have them)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaProtocolError

    columns = [c.strip() for c in COMPARED[table].split(",")]
    try:
        arrow = DeltaTable(path).to_pyarrow_table(columns=columns)
    except DeltaProtocolError:
        arrow = spark.read.format("delta").load(path).select(*columns).toArrow()
    values = [arrow.column(c).to_pylist() for c in columns]
    if "mtime" in columns:  # timestamp without time zone: delta-rs reads it naive, as psycopg does
        values[columns.index("mtime")] = [v.replace(tzinfo=None) if v is not None else None
                                          for v in values[columns.index("mtime")]]  # fmt: skip
    return sorted(zip(*values, strict=True))


def check_equal(consumer: str, source: dict[str, list[tuple[Any, ...]]], read: Any) -> str:
    """``4 tables equal`` or SystemExit naming the first table that differs."""
    for table in TABLES:
        mirror = read(table)
        if mirror != source[table]:
            missing = len(set(source[table]) - set(mirror))
            extra = len(set(mirror) - set(source[table]))
            raise SystemExit(
                f"{consumer}: {table} differs from the source ({len(mirror):,} rows against "
                f"{len(source[table]):,}; {missing:,} source rows missing, {extra:,} not in the source)"
            )
    return f"{len(TABLES)} tables equal"


def make_subscriber(pg_sub: EmbeddedPostgres, primary_dsn: str, scale: int) -> str:
    """The subscriber's database with pgbench's tables, its initial copy done, the subscription disabled."""
    with psycopg.connect(pg_sub.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE oltp")
    dsn = pg_sub.dsn("oltp")
    pgbench(pg_sub, dsn, "-i", "-q", "-I", "dtp", "-s", str(scale))  # drop, create tables, keys: no rows
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SUBSCRIPTION oltp_sub CONNECTION {} PUBLICATION {}"
                             " WITH (streaming = parallel, copy_data = true)")
                     .format(sql.Literal(primary_dsn), sql.Identifier(PUBLICATION)))  # fmt: skip
        deadline = time.monotonic() + 1800
        while conn.execute("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'").fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise SystemExit("the subscriber's initial copy did not finish in 30 minutes")
            time.sleep(0.2)
        conn.execute("ALTER SUBSCRIPTION oltp_sub DISABLE")
    return dsn


def wait_inactive(primary_dsn: str, slot: str) -> None:
    """Until no walsender holds ``slot`` (a disabled subscription's worker takes a moment to exit)."""
    deadline = time.monotonic() + 60
    while one(primary_dsn, "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)):
        if time.monotonic() > deadline:
            raise SystemExit(f"slot {slot} is still active a minute after the subscription was disabled")
        time.sleep(0.1)


def drain_subscriber(sub_dsn: str, history_rows: int) -> float:
    """Seconds from ENABLE until the subscriber's history holds ``history_rows``."""
    started = time.perf_counter()
    with psycopg.connect(sub_dsn, autocommit=True) as conn:
        conn.execute("ALTER SUBSCRIPTION oltp_sub ENABLE")
        deadline = time.monotonic() + 1800
        while conn.execute("SELECT count(*) FROM pgbench_history").fetchone()[0] < history_rows:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise SystemExit("the subscriber did not apply the backlog in 30 minutes")
            time.sleep(0.02)
    return time.perf_counter() - started


def walspark_cli(dsn: str, slot: str, target: str) -> tuple[float, str]:
    """``walspark run --once`` as a new process: its wall seconds and its last batch line."""
    env = {**os.environ, "WALSPARK_DSN": dsn}
    argv = [sys.executable, "-m", "walspark.cli", "run", "--publication", PUBLICATION, "--slot", slot,
            "--target", target, "--once"]  # fmt: skip
    started = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"walspark run --once failed ({out.returncode}): {(out.stderr or out.stdout)[-2000:]}")
    batches = [line for line in (out.stdout + out.stderr).splitlines() if re.search(r"batch \d+:", line)]
    return seconds, "; ".join(b.split("] ", 1)[-1] for b in batches[-3:]) or "no batch"


def backlog(args: argparse.Namespace, spark: SparkSession, pg: EmbeddedPostgres, tmp: str) -> list[str]:
    """The backlog scenario: every consumer's drain of the same pgbench changes, then the checks."""
    from walspark import Pipeline
    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.source.slots import create_slot

    dsn = pgbench_database(pg, args.scale)
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_slot(conn, "oltp_recv")
    targets = {"cold": f"{tmp}/cold", "warm": f"{tmp}/warm"}
    pipelines = {name: Pipeline(spark, dsn=dsn, publication=PUBLICATION, slot=f"oltp_{name}", target=target)
                 .on_progress(log) for name, target in targets.items()}  # fmt: skip
    for name, pipe in pipelines.items():
        log(f"walspark ({name}): its snapshot")
        pipe.run_once()
    with EmbeddedPostgres(settings={"max_wal_size": "8GB", "shared_buffers": "512MB"}) as pg_sub:
        log("PostgreSQL's subscriber: a second server, its initial copy")
        sub_dsn = make_subscriber(pg_sub, dsn, args.scale)
        wait_inactive(dsn, "oltp_sub")
        per_client = args.transactions // args.clients
        log(
            f"pgbench: {per_client * args.clients:,} transactions, {args.clients} clients, unthrottled"
            " (no consumer running)"
        )
        out = pgbench(pg, dsn, "-n", "-c", str(args.clients), "-j", str(max(1, args.clients // 2)),
                      "-t", str(per_client))  # fmt: skip
        tps = re.search(r"tps = ([\d.]+)", out)
        endpos = one(dsn, "SELECT pg_current_wal_lsn()::text")
        history = one(dsn, "SELECT count(*) FROM pgbench_history")
        changes = 4 * per_client * args.clients
        log(f"pgbench: {float(tps.group(1)) if tps else float('nan'):,.0f} txn/s; {changes:,} changes up to {endpos}")
        drains = [Drain("PostgreSQL's subscriber (streaming = parallel), rows applied",
                        drain_subscriber(sub_dsn, history))]  # fmt: skip
        log(f"subscriber: {drains[-1].seconds:.2f} s")
        drains.append(Drain("pg_recvlogical → /dev/null", recvlogical(pg, dsn, "oltp_recv", PUBLICATION, endpos)))
        log(f"pg_recvlogical: {drains[-1].seconds:.2f} s")
        seconds, batches = walspark_cli(dsn, "oltp_cold", targets["cold"])
        drains.append(Drain("walspark run --once (cold: a new process)", seconds, batches))
        log(f"walspark cold: {seconds:.2f} s ({batches})")
        started = time.perf_counter()
        pipelines["warm"].run_once()
        drains.append(Drain("Pipeline.run_once() (warm: a running session)", time.perf_counter() - started))
        log(f"walspark warm: {drains[-1].seconds:.2f} s")
        log("checking every mirror against the source")
        source = {table: source_rows(dsn, table) for table in TABLES}
        checks = {"PostgreSQL's subscriber": check_equal("subscriber", source, lambda t: source_rows(sub_dsn, t))}
        for name, target in targets.items():
            checks[f"walspark {name}"] = check_equal(
                f"walspark ({name})", source, lambda t, target=target: delta_rows(spark, f"{target}/public/{t}", t)
            )
    idle, idle_batches = walspark_cli(dsn, "oltp_cold", targets["cold"])
    drains.append(Drain("walspark run --once, nothing pending", idle, idle_batches))
    log(f"walspark, nothing pending: {idle:.2f} s")
    return report(drains, changes, checks, args.scale)


def report(drains: list[Drain], changes: int, checks: dict[str, str], scale: int) -> list[str]:
    subscriber = drains[0]
    print(f"\n| consumer ({changes:,} changes; scale {scale}) | seconds | changes/s | × subscriber's rate | note |")
    print("|---|---:|---:|---:|---|")
    for d in drains:
        pending = "nothing pending" not in d.consumer
        rate = f"{changes / d.seconds:,.0f}" if pending else "—"
        ratio = f"{subscriber.seconds / d.seconds:.2f}" if pending else "—"
        print(f"| {d.consumer} | {d.seconds:.2f} | {rate} | {ratio} | {d.note} |")
    print()
    for consumer, verdict in checks.items():
        print(f"{consumer}: {verdict}")
    cold, warm, idle = drains[2], drains[3], drains[4]
    lines = [
        f"goal, warm ≥ 0.5 × the subscriber's changes/s: {subscriber.seconds / warm.seconds:.2f} "
        f"({'met' if warm.seconds <= 2 * subscriber.seconds else 'NOT met'})",
        f"goal, cold ≤ subscriber + nothing-pending + 5 s = {subscriber.seconds + idle.seconds + 5:.1f} s: "
        f"{cold.seconds:.1f} s ({'met' if cold.seconds <= subscriber.seconds + idle.seconds + 5 else 'NOT met'})",
        f"goal, nothing pending ≤ 8 s: {idle.seconds:.1f} s ({'met' if idle.seconds <= 8 else 'NOT met'})",
    ]
    for line in lines:
        print(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10, help="pgbench scale (default 10: 1,000,000 accounts)")
    parser.add_argument("--transactions", type=int, default=50_000, help="backlog transactions in all (default 50,000)")
    parser.add_argument("--clients", type=int, default=4, help="pgbench clients (default 4)")
    parser.add_argument(
        "--streaming-seconds",
        type=float,
        default=0.0,
        help="also stream pgbench at the server's sustained rate for this long (default 0: off)",
    )
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    args = parser.parse_args()

    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.spark.session import spark_session

    settings = {"max_wal_size": "8GB", "shared_buffers": "512MB", "max_replication_slots": "20",
                "max_wal_senders": "20", "max_worker_processes": "16",
                "max_logical_replication_workers": "8"}  # fmt: skip
    with EmbeddedPostgres(settings=settings) as pg, tempfile.TemporaryDirectory(prefix="walspark-bench-oltp-") as tmp:
        spark = spark_session("walspark-bench-oltp", master=args.master)
        backlog(args, spark, pg, tmp)
        if args.streaming_seconds > 0:
            from pgbench_run import report as streaming_report  # bench/pgbench_run.py, beside this script
            from pgbench_run import run_mode

            result = run_mode(spark, pg, tmp, "merge", scale=args.scale, clients=args.clients, calibrate=10.0,
                              seconds=args.streaming_seconds, trigger=1.0)  # fmt: skip
            streaming_report([result])
        spark.stop()


if __name__ == "__main__":
    main()
