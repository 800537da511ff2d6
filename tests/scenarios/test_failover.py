"""Failover under load: the primary SIGKILLed mid-stream, its standby promoted, and the pipeline
goes on from the synchronized slot on the new primary, with no table copied again.

A primary and a ``pg_basebackup`` standby (``sync_replication_slots``, ``hot_standby_feedback``,
its physical slot in the primary's ``synchronized_standby_slots``); a workload writing through a
DSN of both hosts (``target_session_attrs=read-write``); the pipeline streaming an SCD2 table
through the same DSN. After the failover the stream resumes where the tables are (the synced
slot may be behind them: what comes again is skipped), a ``--once`` run drains, and the table's
current rows equal the new primary's while each key's history holds every version once: ``v``
counts a key's updates, so its versions must be a gapless run of ``v``.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import psycopg
import pytest

from walspark.embedded.postgres import EmbeddedPostgres
from walspark.embedded.standby import EmbeddedStandby, kill_server
from walspark.pipeline import Pipeline

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TIMEOUT = 300.0


class _Workload:
    """One account updated per transaction (``v = v + 1``), through whichever host takes writes."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.done, self.stop = dsn, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(1)
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    while not self.stop.wait(0.02):
                        conn.execute("UPDATE acc SET v = v + 1, bal = bal + 1 WHERE id = %s", (rng.randint(1, 200),))
                        self.done += 1
            except psycopg.Error:  # the primary died: retry until the standby is promoted
                self.stop.wait(0.3)


def _wait(condition, handle, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        status = handle.status()
        assert status.state != "failed", f"the pipeline failed while waiting for {what}: {status.error}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_sigkilled_primary_promoted_standby_the_stream_goes_on_without_a_new_copy(spark, tmp_path) -> None:
    with EmbeddedPostgres() as primary:
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TABLE acc (id int PRIMARY KEY, v int NOT NULL, bal int NOT NULL)")
            conn.execute("INSERT INTO acc SELECT g, 0, 100 FROM generate_series(1, 200) g")
            conn.execute("CREATE PUBLICATION pub FOR TABLE acc")
        standby = EmbeddedStandby(primary)
        try:
            standby.start()
            both = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres dbname=postgres "
                    "target_session_attrs=read-write connect_timeout=3")  # fmt: skip
            target = str(tmp_path / "lake")
            lines: list[str] = []
            pipeline = (Pipeline(spark, dsn=both, publication="pub", slot="fo", target=target).scd2("public.acc")
                        .trigger_seconds(0.5).on_progress(lines.append))  # fmt: skip
            work = _Workload(both)
            handle = pipeline.start()
            assert not [line for line in lines if "synchronized_standby_slots" in line or "failover" in line], lines
            work.thread.start()
            _wait(lambda: handle.status().batches >= 3, handle, "the first batches")
            with psycopg.connect(primary.dsn(), autocommit=True) as conn:
                conn.execute("SELECT pg_log_standby_snapshot()")  # the sync worker's first copy needs one
            standby.wait_for_slot("fo", timeout=TIMEOUT)
            kill_server(primary)  # mid-stream, under load
            standby.promote()
            before = handle.status().batches
            _wait(lambda: handle.status().batches >= before + 3, handle, "batches from the promoted standby")
            work.stop.set()
            work.thread.join()
            assert handle.stop(timeout=TIMEOUT)
            pipeline.run_once()
            with psycopg.connect(standby.dsn(), autocommit=True) as conn:
                source = set(conn.execute("SELECT id, v, bal FROM acc").fetchall())
            rows = spark.read.format("delta").load(f"{target}/public/acc").collect()
            assert {(r["id"], r["v"], r["bal"]) for r in rows if r["__END_AT"] is None} == source
            versions: dict[int, list[int]] = defaultdict(list)
            for r in rows:
                versions[r["id"]].append(r["v"])
            broken = {k: sorted(v) for k, v in versions.items() if sorted(v) != list(range(min(v), max(v) + 1))}
            assert not broken, f"versions missing or twice: {dict(list(broken.items())[:5])}"
            operations = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/acc`").collect()]
            assert operations.count("WRITE") + sum("CREATE" in op for op in operations) == 1, operations
        finally:
            standby.stop()
