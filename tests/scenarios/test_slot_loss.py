"""A slot lost while walspark was away: the run stops with one line, or (``on_slot_loss("resnapshot")``)
creates the slot again and copies every table again, each replaced in one Delta version.

A PostgreSQL of its own (its ``max_slot_wal_keep_size`` is made small while the pipeline is away,
and WAL switched until the slot's ``wal_status`` is ``lost``); in-process ``Pipeline`` runs: a
snapshot and changes; changes made while away (lost with the slot's WAL); a default run stops
with the reason and the fix; a resnapshot run (one of its hand-offs stopped between the replace
and the record of it, and repeated) makes every table equal to the source, each table's history
gaining exactly one version (the replace: no empty or half-copied version in between) with the
old one readable by time travel; then exactly once again (an SCD2 table without duplicate
versions); last, the slot dropped instead of invalidated stops the default run in one line too,
and with the option is made again with every table asked for again.
"""

from __future__ import annotations

import time
from collections import Counter

import psycopg
import pytest

from walspark import _injection
from walspark.embedded.postgres import EmbeddedPostgres
from walspark.pipeline import Pipeline
from walspark.source.errors import SlotInvalidated, SlotNotFound

pytestmark = [pytest.mark.spark]

TABLES = ("m", "h")  # m a mirror, h an SCD2 history


def _lose_slot(dsn: str, slot: str) -> None:
    """Invalidate ``slot``: WAL past a 1 MB ``max_slot_wal_keep_size`` removed at a checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        conn.execute("SELECT pg_reload_conf()")
        try:
            deadline = time.monotonic() + 60
            while True:
                for _ in range(3):
                    conn.execute("INSERT INTO m SELECT max(id) + 1, 0 FROM m")
                    conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
                row = conn.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
                if row is not None and row[0] == "lost":
                    return
                assert time.monotonic() < deadline, f"slot {slot} not invalidated: wal_status {row}"
        finally:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")


def _assert_equal(conn: psycopg.Connection, spark, target: str, context: str) -> None:  # type: ignore[no-untyped-def]
    """The mirror's rows, and the history's current rows, are the source's; the history holds each
    (key, value) version once (``v`` only grows, so a version twice is a duplicate). A history just
    copied has the source's rows and no validity columns yet (its next batch adds them, as after
    the initial snapshot)."""
    for table in TABLES:
        source = sorted(conn.execute(f"SELECT id, v FROM {table}").fetchall())
        rows = spark.read.format("delta").load(f"{target}/public/{table}").collect()
        current = sorted((r["id"], r["v"]) for r in rows if table == "m" or r.asDict().get("__END_AT") is None)
        assert current == source, f"{context}: {table} differs from the source ({len(current)} / {len(source)} rows)"
        twice = [k for k, n in Counter((r["id"], r["v"]) for r in rows).items() if n > 1]
        assert not twice, f"{context}: {table} holds versions twice: {twice[:5]}"


def _version(spark, path: str) -> int:  # type: ignore[no-untyped-def]
    return int(spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["version"])


def test_lost_slot_stops_or_copies_every_table_again_in_one_version(spark, tmp_path) -> None:
    target = str(tmp_path / "lake")
    lines: list[str] = []
    with EmbeddedPostgres() as pg, psycopg.connect(pg.dsn(), autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)")
            conn.execute(f"INSERT INTO {table} SELECT g, 0 FROM generate_series(1, 300) g")
        conn.execute("CREATE PUBLICATION pub FOR TABLE m, h")
        pipeline = (Pipeline(spark, dsn=pg.dsn(), publication="pub", slot="sl", target=target).scd2("public.h")
                    .sync_check_seconds(0.5).on_progress(lines.append))  # fmt: skip
        pipeline.run_once()  # the snapshot
        conn.execute("UPDATE m SET v = v + 1 WHERE id <= 100; UPDATE h SET v = v + 1 WHERE id <= 100")
        pipeline.run_once()
        _assert_equal(conn, spark, target, "before the slot is lost")

        # away: changes the slot then loses with its WAL
        conn.execute("UPDATE m SET v = v + 1 WHERE id > 200; DELETE FROM h WHERE id > 280; "
                     "INSERT INTO h SELECT g, 5 FROM generate_series(301, 320) g")  # fmt: skip
        _lose_slot(pg.dsn(), "sl")
        with pytest.raises(SlotInvalidated) as stopped:
            pipeline.run_once()
        line = str(stopped.value)
        assert "\n" not in line and "'sl' was invalidated (wal_removed)" in line, line
        assert "--on-slot-loss resnapshot" in line and "walspark slot drop --slot sl" in line, line

        paths = {t: f"{target}/public/{t}" for t in TABLES}
        before = {t: _version(spark, p) for t, p in paths.items()}
        old_rows = {t: spark.read.format("delta").load(p).count() for t, p in paths.items()}

        def stop_once(name: str, **context: object) -> None:
            """m's hand-off stops once between its replace and the record of it (a crash there)."""
            if name == "copy-swapped" and context["table"] == "public.m" and not stopped_at:
                stopped_at.append(name)
                raise RuntimeError("injected: stopped between the replace and its record")

        stopped_at: list[str] = []
        again = pipeline.on_slot_loss("resnapshot")
        previous = _injection.install(stop_once)
        try:
            again.run_once()
        except Exception as exc:  # noqa: BLE001 - the hand-off failed in the run's thread (its checker tries again)
            assert "injected" in str(exc), exc
            again.run_once()
        finally:
            _injection.install(previous)
        assert stopped_at, "m's copy did not replace it"
        said = "\n".join(lines)
        assert "'sl' was invalidated (wal_removed): created again at" in said, said[-3000:]
        _assert_equal(conn, spark, target, "after the re-copy")
        for table, path in paths.items():
            history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(f"version > {before[table]}").collect()
            assert [h["operation"] for h in history] == ["CREATE OR REPLACE TABLE AS SELECT"], (table, history)
            old = spark.read.format("delta").option("versionAsOf", before[table]).load(path)
            assert old.count() == old_rows[table], f"{table}: the version before the re-copy is not readable"

        # exactly once from there on
        conn.execute("UPDATE m SET v = v + 1 WHERE id % 3 = 0; UPDATE h SET v = v + 1 WHERE id % 3 = 0; "
                     "DELETE FROM m WHERE id % 7 = 0; DELETE FROM h WHERE id = 1")  # fmt: skip
        again.run_once()
        _assert_equal(conn, spark, target, "streaming after the re-copy")
        again.run_once()
        _assert_equal(conn, spark, target, "a run with nothing new")

        # the slot dropped while the target holds its tables: the default stops in one line too
        conn.execute("SELECT pg_drop_replication_slot('sl')")
        with pytest.raises(SlotNotFound) as gone:
            pipeline.run_once()
        assert "\n" not in str(gone.value) and "'sl' is gone from the source" in str(gone.value), str(gone.value)
        assert "--on-slot-loss resnapshot" in str(gone.value), str(gone.value)

        # with the option, a dropped slot is made again and every table is asked for again (the
        # steps before the stream; the copies themselves are those above)
        from walspark.pipeline.slot_loss import resnapshot_lost_slot
        from walspark.spark.tablesync.state import SyncStore

        settings = again.settings(once=True)
        start = resnapshot_lost_slot(settings, lines.append)
        assert start is not None and "'sl' was gone from the source: created again at" in lines[-1], lines[-1]
        row = conn.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                           "WHERE slot_name = 'sl'").fetchone()  # fmt: skip
        assert row is not None and int(row[0]) == start
        asked = sorted(t for _, tables, _ in SyncStore(settings.layout).pending_requests() for t in tables)
        assert asked == [("public", "h"), ("public", "m")], asked
        assert resnapshot_lost_slot(settings, lines.append) is None  # done: the slot is not lost any more
