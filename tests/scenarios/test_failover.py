"""Failover under load, then a planned switchover: the primary SIGKILLed mid-stream and its
standby promoted, then a standby of that new primary promoted after a clean stop of it; one
pipeline goes on from the synchronized slot on each new primary, with no table copied again.

Three servers from one ``initdb``: a primary and a ``pg_basebackup`` standby
(``sync_replication_slots``, ``hot_standby_feedback``, its physical slot in the primary's
``synchronized_standby_slots``); after the failover, the same made of the promoted standby
(``pg_basebackup`` of it, its slot named in the new primary's ``synchronized_standby_slots``).
A workload writes through a DSN of the three hosts (``target_session_attrs=read-write``), and
the pipeline streams an SCD2 table through the same DSN. The clean stop sends the standby all
the WAL, and its walsender waits for walspark to confirm what it was sent. After each promotion
the stream resumes where the tables are (the synced slot may be behind them: what comes again
is skipped); a last change is waited for, and the table's current rows equal the last primary's
while each key's history holds every version once: ``v`` counts a key's updates, so its
versions must be a gapless run of ``v``.
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
from walspark.source.preflight import protection_notes
from walspark.source.slots import get_slot

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
        time.sleep(0.2)


def _lsn(text: str | None) -> int:
    high, _, low = (text or "0/0").partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def test_sigkilled_primary_then_planned_switchover_the_stream_goes_on_without_a_new_copy(spark, tmp_path) -> None:
    with EmbeddedPostgres() as primary:
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TABLE acc (id int PRIMARY KEY, v int NOT NULL, bal int NOT NULL)")
            conn.execute("INSERT INTO acc SELECT g, 0, 100 FROM generate_series(1, 200) g")
            conn.execute("CREATE PUBLICATION pub FOR TABLE acc")
        standby = EmbeddedStandby(primary)
        third = EmbeddedStandby(standby, slot="walspark_standby2")  # the switchover's: its port is known now
        try:
            standby.start()
            ports = ",".join(str(server.port) for server in (primary, standby, third))
            hosts = (f"host=127.0.0.1,127.0.0.1,127.0.0.1 port={ports} user=postgres dbname=postgres "
                     "target_session_attrs=read-write connect_timeout=3")  # fmt: skip
            target = str(tmp_path / "lake")
            lines: list[str] = []
            pipeline = (Pipeline(spark, dsn=hosts, publication="pub", slot="fo", target=target).scd2("public.acc")
                        .trigger_seconds(0.5).on_progress(lines.append))  # fmt: skip
            work = _Workload(hosts)
            handle = pipeline.start()
            assert not [line for line in lines if "synchronized_standby_slots" in line or "failover" in line], lines
            work.thread.start()
            _wait(lambda: handle.status().batches >= 1, handle, "the first batch")
            standby.wait_for_slot("fo", timeout=TIMEOUT)
            kill_server(primary)  # the failover: mid-stream, under load
            standby.promote()
            third.start()  # the planned switchover: a standby of the new primary, the slot synced to it,
            third.wait_for_slot("fo", timeout=TIMEOUT)  # which needs the stream to go on from the new primary,
            standby.shutdown()  # a clean stop (its WAL all reaches the standby first), the promotion
            third.promote()
            before = handle.status().batches
            _wait(lambda: handle.status().batches > before, handle, "a batch after the switchover")
            work.stop.set()
            work.thread.join()
            with psycopg.connect(third.dsn(), autocommit=True) as conn, conn.transaction():
                conn.execute("UPDATE acc SET v = v + 1, bal = bal + 1 WHERE id = 1")  # the last change
                marker = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::int8").fetchone()
            _wait(lambda: _lsn(handle.status().slot_position) >= marker[0], handle, "the last change")
            assert handle.stop(timeout=TIMEOUT)
            with psycopg.connect(third.dsn(), autocommit=True) as conn:
                source = set(conn.execute("SELECT id, v, bal FROM acc").fetchall())
            rows = spark.read.format("delta").load(f"{target}/public/acc").collect()
            assert {(r["id"], r["v"], r["bal"]) for r in rows if r["__END_AT"] is None} == source
            versions: dict[int, list[int]] = defaultdict(list)
            for r in rows:
                versions[r["id"]].append(r["v"])
            broken = {k: sorted(v) for k, v in versions.items() if sorted(v) != list(range(min(v), max(v) + 1))}
            assert not broken, f"versions missing or twice: {dict(list(broken.items())[:5])}"
            copies = [line for line in lines if "copy" in line or "copying" in line]
            assert len(copies) == 1 and copies[0].startswith("snapshot: copying"), lines
            alarming = ("failover", "synchronized_standby_slots", "warning", "failed", "lost", "again", "starts over")
            assert not [line for line in lines if any(word in line for word in alarming)], lines
            with psycopg.connect(third.dsn(), autocommit=True) as conn:  # a primary with no standby (yet)
                (note,) = protection_notes(conn, "fo", get_slot(conn, "fo"))
            assert "no standby is named in synchronized_standby_slots" in note, note
            operations = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/acc`").collect()]
            assert operations.count("WRITE") + sum("CREATE" in op for op in operations) == 1, operations
        finally:
            third.stop()
            standby.stop()
