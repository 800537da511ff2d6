"""The live replication stream: negotiation, workloads, feedback invariant, idle confirm, keepalives."""

from __future__ import annotations

import time

import psycopg
import pytest
from srcutil import Collector, Workload, drain, fresh_database, setup_source, slot_confirmed, table_ids, wait_for

from walspark.embedded.postgres import EmbeddedPostgres
from walspark.source import ConnectionLost, ReplicationStream, StreamOptions, get_slot
from walspark.source.connect import connect_sql

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(("server", "proto"), [("pg18", 4), ("pg15", 3)])
def test_live_workload_with_negotiated_protocol(server: str, proto: int, request: pytest.FixtureRequest) -> None:
    dsn = request.getfixturevalue(f"{server}_dsn")
    setup_source(dsn, publication='my "pub" ü')
    collector = Collector(proto)
    with ReplicationStream(dsn, "s1", StreamOptions(('my "pub" ü',)), status_interval=0.5) as stream:
        assert stream.options is not None
        assert (stream.options.proto_version, stream.options.streaming) == (proto, "on")
        work = Workload(dsn, clients=3, txns_per_client=20).start()
        drain(stream, collector, until=lambda: len(collector.txns) >= 60, timeout=60)
        work.join()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE t SET v = 'u' WHERE id = 0")
            conn.execute("DELETE FROM t WHERE id = 1")
        drain(stream, collector, until=lambda: len(collector.txns) >= 62, timeout=30)
        last = collector.txns[-1].end_lsn
        stream.send_feedback()
        wait_for(lambda: slot_confirmed(dsn) == last, what="server's confirmed_flush_lsn to follow confirm()")
    commits = [t.commit_lsn for t in collector.txns]
    assert commits == sorted(commits) and len(set(commits)) == len(commits)
    inserted = [i for t in collector.txns[:60] for op, i in t.rows if op == "Insert"]
    assert sorted(inserted) == sorted(work.committed) and len(inserted) == 120
    assert [t.rows for t in collector.txns[60:]] == [[("Update", 0)], [("Delete", 1)]]


def test_confirmed_flush_never_passes_what_the_consumer_confirmed(pg18: EmbeddedPostgres, pg18_dsn: str) -> None:
    setup_source(pg18_dsn)
    collector = Collector(4)
    with ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",)), status_interval=0.1) as stream:
        Workload(pg18_dsn, clients=1, txns_per_client=20).start().join()
        confirmed = 0

        def on_txn() -> bool:
            return len(collector.txns) >= 20

        deadline = time.monotonic() + 30
        while not on_txn():
            assert time.monotonic() < deadline
            item = stream.read(0.2)
            if item is not None and collector.feed(item) is not None and len(collector.txns) == 5:
                confirmed = collector.txns[4].end_lsn
                stream.confirm(confirmed)  # ... and never again
        # more WAL elsewhere (keepalives with a larger wal_end keep coming) while we keep reading
        for _ in fresh_database(pg18, "other"):
            pass
        with psycopg.connect(pg18.dsn(), autocommit=True) as conn:
            conn.execute("SELECT pg_logical_emit_message(false, 'x', 'y')")
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            stream.read(0.1)
        assert stream.positions.received > confirmed
        assert stream.positions.sent_flush == confirmed
        assert slot_confirmed(pg18_dsn) == confirmed
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            flush = conn.execute("SELECT flush_lsn - '0/0'::pg_lsn FROM pg_stat_replication WHERE pid = %s",
                                 (stream.backend_pid,)).fetchone()
            assert flush is not None and int(flush[0]) == confirmed
    assert slot_confirmed(pg18_dsn) == confirmed
    # the proof that nothing was skipped: a new stream gets transactions 6..20 again
    again = Collector(4)
    with ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",))) as stream:
        drain(stream, again, until=lambda: len(again.txns) >= 15, timeout=30)
    assert [t.commit_lsn for t in again.txns] == [t.commit_lsn for t in collector.txns[5:]]


def _generate_wal_elsewhere(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS noise (x text)")
        conn.execute("INSERT INTO noise SELECT repeat('x', 1000) FROM generate_series(1, %s)", (rows,))


@pytest.mark.parametrize("idle_confirm", [True, False])
def test_idle_slot_retained_wal_stays_bounded(pg18: EmbeddedPostgres, pg18_dsn: str, idle_confirm: bool) -> None:
    setup_source(pg18_dsn)
    with connect_sql(pg18_dsn) as conn:
        conn.execute("CREATE TABLE unpublished (x text)")
    other = fresh_database(pg18, "noise")
    other_dsn = next(other)
    try:
        with ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",)), status_interval=0.2,
                               idle_confirm=idle_confirm) as stream, connect_sql(pg18_dsn) as admin:
            start = get_slot(admin, "s1")
            assert start is not None
            _generate_wal_elsewhere(other_dsn, 4000)  # ~5 MB in another database
            _generate_wal_elsewhere(pg18_dsn, 1000)  # and in an unpublished table of this one
            admin.execute("INSERT INTO unpublished SELECT repeat('y', 1000) FROM generate_series(1, 1000)")
            generated = admin.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn",
                                      (start.to_dict()["restart_lsn"],)).fetchone()[0]
            assert generated > 5_000_000

            def retained() -> int:
                stream.read(0.1)
                admin.execute("SELECT pg_log_standby_snapshot()")  # what the bgwriter does every 15 s
                info = get_slot(admin, "s1")
                assert info is not None and info.retained_bytes is not None
                return info.retained_bytes

            if idle_confirm:
                wait_for(lambda: retained() < 1_000_000, timeout=30, interval=0.1,
                         what="the idle slot's retained WAL to shrink")
                assert stream.positions.flushed > start.confirmed_flush_lsn
                assert stream.positions.confirmed == 0  # the consumer never confirmed anything
            else:
                end = time.monotonic() + 1.5
                while time.monotonic() < end:
                    assert retained() >= generated
                assert slot_confirmed(pg18_dsn) == start.confirmed_flush_lsn
    finally:
        other.close()


def test_streamed_large_transaction(pg18_dsn: str) -> None:
    setup_source(pg18_dsn)
    collector = Collector(4)
    # the walsender reads the session settings of its connection: stream after 64 kB
    dsn = pg18_dsn + " options='-c logical_decoding_work_mem=64kB'"
    with ReplicationStream(dsn, "s1", StreamOptions(("pub",)), status_interval=0.2) as stream:
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO t SELECT g, repeat('v', 100) FROM generate_series(1, 5000) g")
        kinds: set[str] = set()

        def read_one() -> bool:
            item = stream.read(0.2)
            if item is not None:
                kinds.add(item.kind)
                txn = collector.feed(item)
                if txn is not None:
                    stream.confirm(txn.end_lsn)
            return bool(collector.txns)

        wait_for(read_one, timeout=30, interval=0, what="the streamed transaction")
        assert {"S", "E", "c"} <= kinds and "B" not in kinds
        assert sorted(i for _, i in collector.txns[0].rows) == list(range(1, 5001))
        stream.send_feedback()
        wait_for(lambda: slot_confirmed(pg18_dsn) == collector.txns[0].end_lsn, what="confirm of a streamed commit")


# ----------------------------------------------------------------------------- keepalives


def _walsender_pid(dsn: str) -> int | None:
    with connect_sql(dsn) as conn:
        info = get_slot(conn, "s1")
        return info.active_pid if info else None


def test_keepalive_reply_requests_are_answered(own_dsn: str) -> None:
    """wal_sender_timeout is 2 s; our own status timer is 60 s: only answering the server's
    reply-requested keepalives keeps the connection up for 5 s."""
    setup_source(own_dsn)
    with ReplicationStream(own_dsn, "s1", StreamOptions(("pub",)), status_interval=60, heartbeat=False,
                           reconnect=None) as stream:
        stream.read(0.1)
        pid = stream.backend_pid
        end = time.monotonic() + 5
        while time.monotonic() < end:
            assert stream.read(0.2) is None
        assert _walsender_pid(own_dsn) == pid
        with connect_sql(own_dsn) as conn:
            age = conn.execute("SELECT extract(epoch FROM now() - reply_time) FROM pg_stat_replication"
                               " WHERE pid = %s", (pid,)).fetchone()
        assert age is not None and float(age[0]) < 1.9


def test_heartbeat_keeps_a_slow_consumer_connected(own_dsn: str) -> None:
    setup_source(own_dsn)
    collector = Collector(4)
    with ReplicationStream(own_dsn, "s1", StreamOptions(("pub",)), status_interval=0.5, reconnect=None) as stream:
        Workload(own_dsn, clients=1, txns_per_client=3).start().join()
        assert collector.feed(stream.read(5)) is None  # Begin
        pid = stream.backend_pid
        time.sleep(4)  # "processing": twice wal_sender_timeout without reading
        drain(stream, collector, until=lambda: len(collector.txns) >= 3, timeout=20)
        assert _walsender_pid(own_dsn) == pid and stream.reconnects == 0


def test_without_feedback_the_server_does_drop_us(own_dsn: str) -> None:
    """The control experiment for the two tests above: the 2 s timeout is real."""
    setup_source(own_dsn)
    with ReplicationStream(own_dsn, "s1", StreamOptions(("pub",)), status_interval=60, heartbeat=False,
                           reconnect=None) as stream:
        stream.read(0.1)
        time.sleep(4)
        with pytest.raises(ConnectionLost):
            for _ in range(50):
                stream.read(0.1)
    assert table_ids(own_dsn) == set()
