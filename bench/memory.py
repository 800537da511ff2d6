"""Peak memory of the consumer for one huge transaction, streamed (`./dev bench memory`).

Starts an embedded PostgreSQL 18, writes ONE transaction of --rows rows (default 5,000,000)
into a published table, and consumes it from the slot with streaming on: replication stream →
duplicate filter → transaction assembler with a memory budget (--budget-mib, default 64) that
spills to disk. The consumer runs in a child process so that its peak resident set size, read
from the OS (getrusage ru_maxrss), is its own. It prints the budget, the peak RSS, the
consumer's baseline (RSS after imports, before reading) and the rows seen at commit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CONSUMER = r"""
import json, resource, sys, time
from walspark.changes.live import LiveTransactions
from walspark.source.options import StreamOptions
from walspark.source.stream import ReplicationStream

dsn, budget, expected, spill = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stream = ReplicationStream(dsn, "big", StreamOptions(("pub",), streaming="on"), status_interval=5.0)
live = LiveTransactions(stream, memory_budget=budget, spill_dir=spill)
rows = 0
started = time.monotonic()
while rows < expected:
    for txn in live.read(timeout=1.0) or []:
        rows += sum(1 for _, _, data in txn.messages() if data[:1] == b"I")
        streamed = txn.streamed
        txn.release()
        live.confirm(txn.end_lsn)
seconds = time.monotonic() - started
spilled = live.assembler.spilled_transactions
peak_accounted = live.assembler.peak_memory_bytes
live.close()
print(json.dumps({"rows": rows, "baseline_kib": baseline, "seconds": seconds, "streamed": streamed,
                  "spilled_transactions": spilled, "peak_accounted_bytes": peak_accounted,
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def run(rows: int, budget_mib: int) -> dict:
    import psycopg

    from walspark.embedded.postgres import EmbeddedPostgres

    with EmbeddedPostgres(settings={"logical_decoding_work_mem": "64MB", "max_wal_size": "8GB"}) as pg:
        dsn = pg.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE big (id bigint PRIMARY KEY, payload text, amount numeric(12,2))")
            conn.execute("CREATE PUBLICATION pub FOR TABLE big")
            conn.execute("SELECT pg_create_logical_replication_slot('big', 'pgoutput')")
            started = time.monotonic()
            conn.execute(
                "INSERT INTO big SELECT g, md5(g::text), g %% 100000 / 100.0 FROM generate_series(1, %s) g", (rows,)
            )
            write_seconds = time.monotonic() - started
        spill = pg.base_dir / "spill"
        out = subprocess.run(
            [sys.executable, "-c", CONSUMER, dsn, str(budget_mib << 20), str(rows), str(spill)],
            check=True,
            capture_output=True,
            text=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result["write_seconds"] = write_seconds
        result["budget_mib"] = budget_mib
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--budget-mib", type=int, default=64)
    args = parser.parse_args()
    result = run(args.rows, args.budget_mib)
    mib = 1024
    print(f"{'rows in one transaction':<34}{result['rows']:>14,}")
    print(f"{'streamed by the server':<34}{result['streamed']!s:>14}")
    print(f"{'assembler memory budget':<34}{result['budget_mib']:>11} MiB")
    print(f"{'assembler peak (accounted)':<34}{result['peak_accounted_bytes'] / 2**20:>11.1f} MiB")
    print(f"{'consumer RSS after imports':<34}{result['baseline_kib'] / mib:>11.1f} MiB")
    print(f"{'consumer peak RSS (OS)':<34}{result['peak_kib'] / mib:>11.1f} MiB")
    print(f"{'spilled transactions':<34}{result['spilled_transactions']:>14}")
    print(f"{'server write time':<34}{result['write_seconds']:>12.1f} s")
    print(f"{'consume time (stream to commit)':<34}{result['seconds']:>12.1f} s")
    print(f"{'consume rate':<34}{result['rows'] / result['seconds']:>10,.0f} rows/s")


if __name__ == "__main__":
    main()
