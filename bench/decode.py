"""Decode benchmark: walspark's pgoutput decoder beside pypgoutput and the server's own delivery rate.

Run with ``./dev bench decode`` (``--messages N``, default 1,000,000; ``--binary``).

Two walspark figures each: messages to message objects (the decoder), and messages to Arrow
change rows (the hot path of a Spark task: decoding, values, Arrow columns) on the pure-Python
path and on the compiled one (``walspark_c``), side by side.

Why these three figures: the decoder's job is to never be the bottleneck of a replication
stream, so its speed only means something next to (a) how fast PostgreSQL itself delivers
the same messages — timed twice, through the SQL interface (``pg_logical_slot_peek_binary_changes``
fetched by a client) and through the walsender (``pg_recvlogical`` writing to /dev/null,
from process start to exit) — and (b) the common pure-Python decoder, ``pypgoutput`` 0.0.3,
on the same messages.

The workload is inserts, updates and deletes on a 5-column table (int primary key, text,
int, numeric, timestamptz) written with large multi-row statements, decoded at protocol
version 1 in text mode (all pypgoutput understands: Begin, Commit, Relation, Insert,
Update, Delete, Truncate); ``--binary`` decodes it at protocol 4 with binary tuple data
instead (the servers' figures too), without pypgoutput.

This script is standalone on purpose (no test framework, no imports from tests/): it starts
its own throw-away PostgreSQL 18 and removes it on exit.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg
import workload  # bench/workload.py, beside this script
from common import log  # bench/common.py, beside this script

from walspark.changes.rows import ChangeRowBuilder, TransactionFacts
from walspark.compiled import speedups
from walspark.embedded.postgres import EmbeddedPostgres
from walspark.protocol import Decoder

SLOT = "bench_decode"
RECV_SLOT = "bench_recvlogical"
PUBLICATION = "bench"
#: pypgoutput decodes protocol 1 text data only, so that is what the table uses by default.
OPTIONS = {"proto_version": "1", "publication_names": PUBLICATION}
#: ``--binary``: binary tuple data (pgoutput's ``binary`` option, protocol 4); pypgoutput cannot read it.
BINARY_OPTIONS = {"proto_version": "4", "publication_names": PUBLICATION, "binary": "true"}
#: Rows per statement (one transaction each): large enough to amortise statement overhead,
#: small enough to stay below the default 64MB logical_decoding_work_mem (no spill to disk).
BATCH = 50_000



# --------------------------------------------------------------------------- workload


def prepare(pg: EmbeddedPostgres, messages: int) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        workload.create_table(conn)
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE bench_rows")
        # Two slots made before the first change see the same stream: one is only peeked
        # (never consumed), the other is consumed by pg_recvlogical.
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (RECV_SLOT,))
        # Each row change is one message; each transaction adds a Begin and a Commit.
        workload.write_changes(conn, messages, statement_rows=BATCH)


# --------------------------------------------------------------------------- measurements


@dataclass
class Figure:
    name: str
    messages: int
    nbytes: int
    seconds: float
    note: str = ""
    cpu_seconds: float | None = None  # of this process; tells a slow run from a busy machine

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_rate(self) -> float:
        return self.nbytes / self.seconds / 1e6


def best_of(repeat: int, run: Callable[[], None]) -> tuple[float, float]:
    """Wall and CPU seconds of the fastest of ``repeat`` runs: the least disturbed by the rest of the machine."""
    times = []
    for _ in range(repeat):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(times)


def peek_all(pg: EmbeddedPostgres, options: dict[str, str], slot: str = SLOT) -> tuple[list[bytes], float]:
    """All pending messages of ``slot`` through the SQL interface, and how long that took.

    Binary result format, so each ``bytea`` arrives as ``bytes`` without hex decoding.
    """
    flat = [item for pair in options.items() for item in pair]
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        cursor = conn.cursor(binary=True)
        start = time.perf_counter()
        cursor.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, VARIADIC %s::text[])",
            (slot, flat),
        )
        rows = cursor.fetchall()
        seconds = time.perf_counter() - start
    return [row[0] for row in rows], seconds


def time_recvlogical(pg: EmbeddedPostgres, options: dict[str, str]) -> float:
    """``pg_recvlogical --start`` to /dev/null up to the current WAL position: process start to exit."""
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        endpos = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]
    argv = [pg.bin("pg_recvlogical"), "-d", pg.dsn(), "--slot", RECV_SLOT, "--start", "--no-loop",
            "-f", "/dev/null", "--endpos", endpos]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    start = time.perf_counter()
    subprocess.run(argv, check=True, timeout=600, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_walspark(capture: Sequence[bytes], version: int) -> None:
    decode = Decoder(version).decode
    for data in capture:
        decode(data)


#: Messages per ChangeRowBuilder.build, as in a Spark task (walspark.spark.datasource.decode).
ROWS_CHUNK = 32_768


def run_rows(capture: Sequence[bytes], compiled: object, version: int, binary: bool) -> None:
    """Messages to Arrow change rows, the way a task does it (Begin/Commit are the assembler's)."""
    builder = ChangeRowBuilder(version, speedups=compiled, binary=binary)  # type: ignore[arg-type]
    facts = TransactionFacts(1, 0, 0)
    data = [m for m in capture if m[0] not in (ord("B"), ord("C"))]
    for start in range(0, len(data), ROWS_CHUNK):
        builder.add(facts, ((0, False, m) for m in data[start:start + ROWS_CHUNK]))
        builder.build()


def pypgoutput_decoders() -> dict[int, Callable[[bytes], object]]:
    """pypgoutput's message classes by kind byte: each one decodes the bytes it is built from."""
    from pypgoutput import decoders

    return {ord(kind): cls for kind, cls in (
        ("B", decoders.Begin), ("C", decoders.Commit), ("R", decoders.Relation), ("I", decoders.Insert),
        ("U", decoders.Update), ("D", decoders.Delete), ("T", decoders.Truncate))}


def run_pypgoutput(capture: Sequence[bytes], table: dict[int, Callable[[bytes], object]]) -> None:
    for data in capture:
        table[data[0]](data)


# --------------------------------------------------------------------------- report


def print_table(figures: list[Figure], reference: Figure | None, server: Figure) -> None:
    """The table; without a pypgoutput figure (binary data), its column says so."""
    header = f"{'':<18}{'messages/s':>14}{'MB/s':>10}{'vs pypgoutput':>15}{'vs server':>11}"
    print(header)
    print("-" * len(header))
    for f in figures:
        versus = f"{f.rate / reference.rate:>14.2f}x" if reference is not None else f"{'-':>15}"
        print(f"{f.name:<18}{f.rate:>14,.0f}{f.mb_rate:>10.1f}{versus}{f.rate / server.rate:>10.2f}x")
    print()
    for f in figures:
        cpu = "" if f.cpu_seconds is None else f", {f.cpu_seconds:.3f} s CPU"
        print(f"  {f.name}: {f.messages:,} messages, {f.nbytes / 1e6:.1f} MB in {f.seconds:.3f} s{cpu}{f.note}")
    print(f"  'vs server' compares with the faster server delivery path ({server.name}).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages to produce (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per decoder; the best counts (default 3)")
    parser.add_argument("--binary", action="store_true",
                        help="binary tuple data at protocol 4 (no pypgoutput figure: it reads text only)")
    args = parser.parse_args(argv)
    options = BINARY_OPTIONS if args.binary else OPTIONS
    version = int(options["proto_version"])

    with EmbeddedPostgres() as pg:
        log(f"PostgreSQL {pg.major_version} on {pg.dsn()}; writing the workload")
        prepare(pg, args.messages)
        log("workload written; fetching every message with pg_logical_slot_peek_binary_changes")
        capture, peek_seconds = peek_all(pg, options)
        for _ in range(args.repeat - 1):  # later peeks find WAL in the page cache, like the decoders' reruns
            peek_seconds = min(peek_seconds, peek_all(pg, options)[1])
        count, nbytes = len(capture), sum(map(len, capture))
        kinds: dict[str, int] = {}
        for data in capture:
            kinds[chr(data[0])] = kinds.get(chr(data[0]), 0) + 1
        log(f"{count:,} messages, {nbytes / 1e6:.1f} MB: " + ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items())))
        log("pg_recvlogical --start -f /dev/null (consumes its own slot, so it runs once)")
        recv_seconds = time_recvlogical(pg, options)

    log("walspark decoder")
    walspark_seconds, walspark_cpu = best_of(args.repeat, lambda: run_walspark(capture, version))
    log("walspark change rows, pure Python")
    rows_pure_seconds, rows_pure_cpu = best_of(args.repeat, lambda: run_rows(capture, None, version, args.binary))
    if speedups is not None:
        log("walspark change rows, compiled (walspark_c)")
        rows_c = best_of(args.repeat, lambda: run_rows(capture, speedups, version, args.binary))
    else:
        log("walspark_c is not installed: no compiled figure (./dev setup builds it)")
        rows_c = None
    reference = None
    if not args.binary:
        table = pypgoutput_decoders()
        supported = [data for data in capture if data[0] in table]
        log(f"pypgoutput 0.0.3 decoder ({len(supported):,} of {count:,} messages are kinds it supports)")
        pypgoutput_seconds, pypgoutput_cpu = best_of(args.repeat, lambda: run_pypgoutput(supported, table))
        reference = Figure("pypgoutput", len(supported), sum(map(len, supported)), pypgoutput_seconds,
                           f" (best of {args.repeat})", pypgoutput_cpu)

    peek = Figure("server SQL peek", count, nbytes, peek_seconds, " (server decoding + transfer + client rows)")
    recv = Figure("pg_recvlogical", count, nbytes, recv_seconds, " (walsender to /dev/null, process start to exit)")
    walspark = Figure("walspark", count, nbytes, walspark_seconds, f" (best of {args.repeat})", walspark_cpu)
    rows_pure = Figure("rows, pure", count, nbytes, rows_pure_seconds, " (to Arrow change rows)", rows_pure_cpu)
    rows_compiled = [] if rows_c is None else [
        Figure("rows, compiled", count, nbytes, rows_c[0], " (to Arrow change rows, walspark_c)", rows_c[1])]
    server = max(peek, recv, key=lambda f: f.rate)
    print()
    print_table([peek, recv, walspark, rows_pure, *rows_compiled, *([reference] if reference else [])], reference,
                server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
