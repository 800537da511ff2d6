"""Failover slots without Spark: a primary and its ``pg_basebackup`` standby, the notes that say
when a slot is not protected, a SIGKILLed primary, the promoted standby's synchronized slot
streamed through a DSN listing both hosts; and PostgreSQL 15's one line of a slot a failover loses.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from walspark.embedded.postgres import EmbeddedPostgres, debian_bindir
from walspark.embedded.standby import EmbeddedStandby, kill_server
from walspark.source.options import StreamOptions
from walspark.source.preflight import protection_notes
from walspark.source.slots import create_slot, get_slot
from walspark.source.stream import ReplicationStream


def _advance(dsn: str, slot: str, rounds: int = 1) -> None:
    """Write, log a running-xacts record and consume the slot: its catalog xmin moves on, which the
    slot sync worker waits for before its first copy."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(rounds):
            conn.execute("INSERT INTO t SELECT coalesce(max(id), 0) + 1 FROM t")
            conn.execute("SELECT pg_log_standby_snapshot()")
            conn.execute(
                "SELECT count(*) FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, 'proto_version', '1',"
                " 'publication_names', 'pub')",
                (slot,),
            )


def test_a_failover_slot_survives_a_sigkilled_primary_and_the_notes_say_when_it_would_not() -> None:
    with EmbeddedPostgres() as primary:
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
            conn.execute("CREATE PUBLICATION pub FOR TABLE t")
            (unsynced,) = protection_notes(conn, "s", None)
            assert "'s'" in unsynced and "synchronized_standby_slots" in unsynced and "pg_reload_conf" in unsynced
            create_slot(conn, "plain")
            assert any("'plain' is not a failover slot" in n and "FAILOVER true" in n
                       for n in protection_notes(conn, "plain", get_slot(conn, "plain")))  # fmt: skip
        standby = EmbeddedStandby(primary)
        try:
            standby.start()
            with psycopg.connect(primary.dsn(), autocommit=True) as conn:
                create_slot(conn, "s", failover=True)
                info = get_slot(conn, "s")
                assert info is not None and info.failover and protection_notes(conn, "s", info) == []
            deadline = time.monotonic() + 120
            while True:  # the sync worker copies the slot once its catalog xmin moved on
                _advance(primary.dsn(), "s")
                try:
                    standby.wait_for_slot("s", timeout=1)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
            with psycopg.connect(primary.dsn(), autocommit=True) as conn:
                conn.execute("INSERT INTO t VALUES (-1)")  # after the synced position: streamed after the failover
            with psycopg.connect(standby.dsn(), autocommit=True) as conn:
                (note,) = protection_notes(conn, "s", get_slot(conn, "s"))
                assert "'s' on this standby is synchronized" in note and "target_session_attrs" in note
                assert protection_notes(conn, "plain", get_slot(conn, "plain"))[0].startswith(
                    "replication slot 'plain' is not synchronized to this standby"
                )
            kill_server(primary)
            standby.promote()
            both = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres dbname=postgres "
                    "target_session_attrs=read-write connect_timeout=5")  # fmt: skip
            with psycopg.connect(both, autocommit=True) as conn:
                info = get_slot(conn, "s")
                assert info is not None and info.synced and not info.invalidated
            with ReplicationStream(both, "s", StreamOptions(("pub",))) as stream:
                assert stream.start_lsn >= (info.confirmed_flush_lsn or 0)
                deadline = time.monotonic() + 60
                commits = 0
                while commits == 0 and time.monotonic() < deadline:
                    item = stream.read(0.5)
                    if item is not None and getattr(item, "payload", b"")[:1] == b"C":
                        commits += 1
                assert commits, "the promoted standby's synchronized slot streamed nothing"
        finally:
            standby.stop()


def test_postgresql_15_says_a_failover_loses_the_slot() -> None:
    bindir = debian_bindir(15)
    if bindir is None:
        pytest.skip("Debian's PostgreSQL 15 is not installed")
    with EmbeddedPostgres(bindir=bindir) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            (note,) = protection_notes(conn, "s", None)
    assert note.startswith("replication slot 's': PostgreSQL 15 has no failover slots") and "17+" in note
