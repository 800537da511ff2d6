"""The sustained scenario with PostgreSQL's own pgbench (`./dev bench e2e --only pgbench`).

pgbench (shipped with the embedded server) initialises its four tables (scale ``--scale``, 1:
100,000 accounts), all published; the pipeline copies them (its snapshot) and streams. First
pgbench runs alone, unthrottled, for ``--calibrate`` seconds (10): the rate the server sustains
here, on this machine. Then it runs at that rate (``-R``) for ``--seconds`` (300) while the
pipeline streams (a MERGE per batch). A TPC-B-like transaction is 4 changes (3 updates, 1 insert
into the keyless history).

Reported: offered changes/s (pgbench's transactions × 4 over its run), applied changes/s (until
the last history row is in the mirror), and the lag every 30 s — the age of the newest history
row visible in the mirror (delta-rs reads the newest ``mtime`` from the log's file statistics
every 2 s; the window's largest sample) and the 95th percentile of every 2-s sample of the run
(nearest rank). The lag must not grow.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from common import log  # bench/common.py, beside this script
from streaming import start_pipeline  # bench/streaming.py, beside this script

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from walspark.embedded.postgres import EmbeddedPostgres

TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")
WINDOW = 30.0


@dataclass
class PgbenchResult:
    mode: str
    calibrated_tps: float
    transactions: int = 0
    seconds: float = 0.0
    drained: float = 0.0  # seconds from pgbench's start until the last row was in the mirror
    lag: dict[str, list[float]] = field(default_factory=dict)  # reader -> per-window max age
    samples: dict[str, list[float]] = field(default_factory=dict)  # reader -> every sample's age

    def p95(self, reader: str) -> float:
        """The 95th percentile (nearest rank) of ``reader``'s lag samples; NaN without any."""
        values = sorted(self.samples.get(reader, []))
        return values[max(0, -(-95 * len(values) // 100) - 1)] if values else float("nan")

    @property
    def offered(self) -> float:
        return 4 * self.transactions / self.seconds if self.seconds else float("nan")

    @property
    def applied(self) -> float:
        return 4 * self.transactions / self.drained if self.drained else float("nan")


def newest(path: Path, column: str, cache: dict[Path, Any]) -> tuple[float | None, int]:
    """Newest ``column`` (epoch s) and the row count of a Delta table, from its log's statistics."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    try:
        table = cache.get(path)
        if table is None:
            table = cache[path] = DeltaTable(str(path))
        else:
            table.update_incremental()
        field_ = next(f for f in table.schema().fields if f.name == column)
        physical = str(field_.metadata.get("delta.columnMapping.physicalName", column))
        actions = pa.table(table.get_add_actions(flatten=True))
        value = pc.max(actions.column(f"max.{physical}")).as_py()
        rows = pc.sum(actions.column("num_records")).as_py() or 0
    except Exception:  # noqa: BLE001 - not created yet
        return None, 0
    return (None if value is None else value.timestamp()), int(rows)


def pgbench(pg: EmbeddedPostgres, dsn: str, *args: str) -> str:
    out = subprocess.run([pg.bin("pgbench"), *args, dsn], check=True, capture_output=True, text=True, timeout=3600)
    return out.stdout + out.stderr


def run_mode(spark: SparkSession, pg: EmbeddedPostgres, tmp: str, mode: str, *, scale: int, clients: int,
             calibrate: float, seconds: float, trigger: float) -> PgbenchResult:  # fmt: skip
    from walspark import Pipeline

    db = f"pgb_{mode.replace('-', '_')}"
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    dsn = pg.dsn(db)
    log(f"pgbench {mode}: initialising scale {scale}")
    pgbench(pg, dsn, "-i", "-q", "-s", str(scale))
    with psycopg.connect(dsn, autocommit=True) as conn:
        # mtime is CURRENT_TIMESTAMP without a zone; with one, its age is unambiguous
        conn.execute("ALTER TABLE pgbench_history ALTER mtime TYPE timestamptz")
        conn.execute(f"CREATE PUBLICATION pgb_pub FOR TABLE {', '.join(TABLES)}")
    out = pgbench(pg, dsn, "-n", "-c", str(clients), "-j", str(clients), "-T", str(int(calibrate)))
    tps = float(re.search(r"tps = ([\d.]+)", out).group(1))  # type: ignore[union-attr]
    log(f"pgbench {mode}: the server alone sustains {tps:,.0f} txn/s ({4 * tps:,.0f} changes/s)")
    result = PgbenchResult(mode, tps)
    target = Path(tmp) / db
    pipe = Pipeline(spark, dsn=dsn, publication="pgb_pub", slot=f"{db}_slot", target=str(target))
    pipe = pipe.trigger_seconds(trigger).on_progress(lambda _line: None)
    handle = start_pipeline(pipe, timeout=900)
    with psycopg.connect(dsn) as conn:
        base = conn.execute("SELECT count(*) FROM pgbench_history").fetchone()[0]  # type: ignore[index]
    readers = {"mirror": target / "public" / "pgbench_history"}
    cache: dict[Path, Any] = {}
    result.lag = {name: [] for name in readers}
    result.samples = {name: [] for name in readers}
    done = threading.Event()
    outcome: list[str] = []

    def load() -> None:
        try:
            outcome.append(pgbench(pg, dsn, "-n", "-c", str(clients), "-j", str(clients), "-T", str(int(seconds)),
                                   "-R", f"{tps:.0f}"))  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome.append(f"failed: {exc!r}")
        finally:
            done.set()

    log(f"pgbench {mode}: {tps:,.0f} txn/s for {seconds:g} s while the pipeline streams")
    started = time.monotonic()
    threading.Thread(target=load, daemon=True).start()
    window_end, worst = started + WINDOW, {name: 0.0 for name in readers}
    while not done.is_set():
        if not handle.is_active:
            raise SystemExit(f"pgbench {mode}: the pipeline failed: {handle.exception or handle.status()}")
        now = time.time()
        for name, path in readers.items():
            at, _ = newest(path, "mtime", cache)
            if at is not None:
                worst[name] = max(worst[name], now - at)
                result.samples[name].append(now - at)
        if time.monotonic() >= window_end:
            for name in readers:
                result.lag[name].append(worst[name])
            log(f"pgbench {mode}: lag at {window_end - started:.0f} s: "
                + ", ".join(f"{n} {worst[n]:.1f} s" for n in readers))
            window_end, worst = window_end + WINDOW, {name: 0.0 for name in readers}
        done.wait(2.0)
    result.seconds = time.monotonic() - started
    text = outcome[0] if outcome else "no output"
    match = re.search(r"number of transactions actually processed: (\d+)", text)
    if match is None:
        raise SystemExit(f"pgbench {mode}: {text[-500:]}")
    result.transactions = int(match.group(1))
    with psycopg.connect(dsn) as conn:
        total = conn.execute("SELECT count(*) FROM pgbench_history").fetchone()[0]  # type: ignore[index]
    deadline = time.monotonic() + 1200
    while newest(readers["mirror"], "mtime", cache)[1] < total:
        if not handle.is_active or time.monotonic() > deadline:
            raise SystemExit(f"pgbench {mode}: the pipeline did not drain: {handle.exception or handle.status()}")
        time.sleep(1.0)
    result.drained = time.monotonic() - started
    log(f"pgbench {mode}: {total - base:,} history rows in, drained {result.drained - result.seconds:.1f} s after")
    handle.stop(timeout=300)
    return result


def report(results: list[PgbenchResult]) -> None:
    print("\n| mode | server alone (chg/s) | offered (chg/s) | applied (chg/s) | applied / offered "
          "| lag p95 (s) | lag per 30 s (s) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        series = "; ".join(f"{name}: " + ", ".join(f"{v:.1f}" for v in values) for name, values in r.lag.items())
        print(f"| {r.mode} | {4 * r.calibrated_tps:,.0f} | {r.offered:,.0f} | {r.applied:,.0f} "
              f"| {r.applied / r.offered:.3f} | {r.p95('mirror'):.1f} | {series} |")
    for r in results:
        lag = r.lag.get("mirror", [])
        flat = len(lag) >= 4 and max(lag[len(lag) // 2:]) <= 1.5 * max(lag[: len(lag) // 2]) + 2.0
        print(f"goal ({r.mode}): applied >= 0.95 x offered: {r.applied / r.offered:.3f}, "
              f"{'met' if r.applied >= 0.95 * r.offered else 'NOT met'}; mirror lag flat (second half's max "
              f"<= 1.5 x first half's + 2 s): {'met' if flat else 'NOT met'}; mirror lag p95 <= 5 s "
              f"({len(r.samples.get('mirror', []))} samples): {r.p95('mirror'):.1f} s, "
              f"{'met' if r.p95('mirror') <= 5.0 else 'NOT met'}")
