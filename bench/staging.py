"""The stager alone beside the server's own delivery of the same backlog (`./dev bench staging`).

Why: in a bulk ``walspark run --once`` the stager is the one serial step on the driver — every
message passes through its thread before a Spark task sees it — so its rate caps the run's.
``--rows`` inserts (default 1,000,000) in ``--txns`` transactions wait in slots created before
them; then, each on a slot of its own, ``pg_recvlogical`` into /dev/null (the walsender's rate,
process start to exit; run first and last, the faster printed), and the stager (``walspark.staging.stager.Stager``, no Spark) staging
all of them into segments on the compiled and the pure-Python paths (each in a child process,
the path chosen at its start). Printed: seconds, messages/s, the ratio to ``pg_recvlogical`` and
the stager process's CPU per message. Progress on stderr, the table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psycopg
from common import log, recvlogical  # bench/common.py, beside this script

PUBLICATION = "bulk_pub"


def stage(dsn: str, slot: str, txns: int) -> dict[str, float]:
    """Stage the slot's ``txns`` transactions (this process): wall seconds, CPU seconds, messages."""
    from walspark.source.options import StreamOptions
    from walspark.staging.stager import Stager

    class AllFit:
        """The declared schema's part: every table wanted, every shape fits (no Spark here)."""

        table = None

        def wants(self, name: str) -> bool:
            return True

        def misfit(self, *args: object, **kwargs: object) -> str | None:
            return None

    with tempfile.TemporaryDirectory() as directory:
        stager = Stager(dsn=dsn, slot=slot, stream_options=StreamOptions(publication_names=(PUBLICATION,)),
                        directory=directory, layout=AllFit())  # fmt: skip
        wall, cpu = time.perf_counter(), time.process_time()
        stager.start()
        try:
            while len(entries := stager.entries_after(0)) < txns:
                stager.check()
                time.sleep(0.01)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            stager.stop()
    return {"wall": wall, "cpu": cpu, "messages": sum(e.changes for e in entries) + 2 * txns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows inserted (default 1,000,000)")
    parser.add_argument("--txns", type=int, default=4, help="transactions they are inserted in (default 4)")
    parser.add_argument("--child", nargs=2, metavar=("DSN", "SLOT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(stage(args.child[0], args.child[1], args.txns)))
        return

    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.source.slots import create_slot

    paths = {"compiled": {}, "pure Python": {"WALSPARK_PURE_PYTHON": "1"}}
    with EmbeddedPostgres(settings={"max_wal_size": "8GB"}) as pg:
        dsn = pg.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE bulk (id bigint PRIMARY KEY, qty int, label text, at timestamptz,"
                         " price numeric(12,2))")  # fmt: skip
            conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE bulk")
            for slot in ("recv1", "recv2", *(f"s{i}" for i in range(len(paths)))):
                create_slot(conn, slot)
            log(f"inserting {args.rows:,} rows in {args.txns} transactions")
            per = -(-args.rows // args.txns)
            for t in range(args.txns):
                conn.execute("INSERT INTO bulk SELECT g, g %% 1000, 'item-' || g, TIMESTAMPTZ '2024-01-01' + g * "
                             "INTERVAL '1s', g / 100.0 FROM generate_series(%s::bigint, %s::bigint) g",
                             (t * per, min(args.rows, (t + 1) * per) - 1))  # fmt: skip
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
        log("pg_recvlogical to /dev/null")
        server = recvlogical(pg, dsn, "recv1", PUBLICATION, row[0])
        results = {}
        for i, (name, env) in enumerate(paths.items()):
            log(f"the stager, {name}")
            out = subprocess.run([sys.executable, __file__, "--txns", str(args.txns), "--child", dsn, f"s{i}"],
                                 env={**os.environ, **env}, check=True, capture_output=True, text=True)  # fmt: skip
            results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        log("pg_recvlogical to /dev/null again (the faster of the two is printed)")
        server = min(server, recvlogical(pg, dsn, "recv2", PUBLICATION, row[0]))
    messages = results["compiled"]["messages"]
    print("| path | messages | seconds | messages/s | / pg_recvlogical | CPU µs/message |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| pg_recvlogical → /dev/null | {messages:,.0f} | {server:.2f} | {messages / server:,.0f} | 1.00 | — |")
    for name, r in results.items():
        rate = r["messages"] / r["wall"]
        print(f"| stager, {name} | {r['messages']:,.0f} | {r['wall']:.2f} | {rate:,.0f} | "
              f"{rate / (messages / server):.2f} | {r['cpu'] / r['messages'] * 1e6:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
