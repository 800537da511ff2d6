"""Reconnects (terminated walsender, server restart) deliver every transaction exactly once;
errors that retrying cannot fix are raised at once."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest
from srcutil import Collector, Workload, setup_source, table_ids, wait_for

from walspark.embedded.postgres import EmbeddedPostgres, free_port
from walspark.source import (
    DuplicateFilter,
    PermissionDenied,
    PublicationNotFound,
    Reconnected,
    ReconnectExhausted,
    ReconnectPolicy,
    ReplicationStream,
    SlotInUse,
    SlotInvalidated,
    SlotNotFound,
    StreamOptions,
    WalLevelNotLogical,
    create_slot,
    get_slot,
)
from walspark.source.connect import connect_sql

pytestmark = pytest.mark.timeout(150)

FAST = ReconnectPolicy(max_attempts=40, max_elapsed=60, initial_delay=0.05, max_delay=0.5)


def _terminate_walsender(dsn: str) -> None:
    with connect_sql(dsn) as conn:
        conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                     " WHERE slot_name = 's1' AND active_pid IS NOT NULL")


def _consume(stream: ReplicationStream, *, expected: set[int] | None, disrupt: dict[int, object],
             work: Workload | None = None, dsn: str = "", timeout: float = 90) -> tuple[Collector, DuplicateFilter]:
    """Read, dedupe, collect; run disruptions at given transaction counts.

    Confirms like a batching sink: everything delivered so far, every 0.3 s — so at any instant
    some received transactions are unconfirmed and come again after a reconnect.
    """
    collector = Collector(4)
    filt = DuplicateFilter(4)
    events: list[Reconnected] = []
    deadline = time.monotonic() + timeout
    done = 0
    pending = dict(disrupt)
    next_batch = time.monotonic() + 0.3
    while True:
        if time.monotonic() >= next_batch:
            if collector.txns:
                stream.confirm(collector.txns[-1].end_lsn)
            next_batch = time.monotonic() + 0.3
        if expected is None and work is not None and not any(t.is_alive() for t in work._threads):
            expected = table_ids(dsn)
        got = {i for t in collector.txns for _, i in t.rows}
        if expected is not None and got >= expected:
            break
        assert time.monotonic() < deadline, f"only {len(got)} rows after {timeout}s"
        item = stream.read(0.2)
        if item is None:
            continue
        if isinstance(item, Reconnected):
            events.append(item)
        kept = filt.feed(item)
        if kept is None:
            continue
        txn = collector.feed(kept)
        if txn is None:
            continue
        done += 1
        action = pending.pop(done, None)
        if action is not None:
            action()  # type: ignore[operator]
    assert len(events) == len(disrupt) == stream.reconnects
    return collector, filt


def _check_exactly_once(collector: Collector, truth: set[int]) -> None:
    rows = [i for t in collector.txns for _, i in t.rows]
    assert len(rows) == len(set(rows)), "a row was delivered twice"
    assert set(rows) == truth
    commits = [t.commit_lsn for t in collector.txns]
    assert commits == sorted(commits) and len(set(commits)) == len(commits)


def test_terminated_walsender_resumes_exactly_once(pg18_dsn: str) -> None:
    setup_source(pg18_dsn)
    seen: list[Reconnected] = []
    with ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",)), status_interval=0.2, reconnect=FAST,
                           on_reconnect=seen.append) as stream:
        work = Workload(pg18_dsn, clients=3, txns_per_client=60, pause=0.003).start()
        collector, filt = _consume(stream, expected=None, work=work, dsn=pg18_dsn, disrupt={
            25: lambda: _terminate_walsender(pg18_dsn),
            90: lambda: _terminate_walsender(pg18_dsn),
        })
        work.join()
    _check_exactly_once(collector, table_ids(pg18_dsn))
    assert len(collector.txns) == 180
    assert len(seen) == 2 and all(e.start_lsn > 0 for e in seen)
    assert filt.dropped_transactions > 0  # unconfirmed transactions did come again and were dropped


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_server_restart_resumes_exactly_once(own_pg: EmbeddedPostgres, own_dsn: str, mode: str) -> None:
    """A fast shutdown waits until every walsender's client confirmed all that was sent (so the
    consumer keeps reading and confirming meanwhile — the idle confirm of the shutdown
    checkpoint lets it finish); an immediate one is a crash: the slot comes back with its last
    saved position, older than ours."""
    setup_source(own_dsn)
    restarter = threading.Thread(target=own_pg.restart, args=(mode,))
    with ReplicationStream(own_dsn, "s1", StreamOptions(("pub",)), status_interval=0.2, reconnect=FAST) as stream:
        work = Workload(own_dsn, clients=2, txns_per_client=60, pause=0.005).start()
        collector, _ = _consume(stream, expected=None, work=work, dsn=own_dsn, disrupt={30: restarter.start})
        work.join()
        restarter.join()
    truth = table_ids(own_dsn)
    assert len(truth) > 60  # enough traffic around the restart (failed attempts are not retried)
    _check_exactly_once(collector, truth)


# ----------------------------------------------------------------------------- fatal errors


def test_missing_slot_or_publication_fails_at_once(pg18_dsn: str) -> None:
    with pytest.raises(SlotNotFound, match="walspark slot create"):
        ReplicationStream(pg18_dsn, "nope", StreamOptions(("pub",))).open()
    setup_source(pg18_dsn)
    with pytest.raises(PublicationNotFound, match="'other'"):
        ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub", "other"))).open()


def test_slot_dropped_while_streaming_is_not_retried(pg18_dsn: str) -> None:
    setup_source(pg18_dsn)
    seen: list[Reconnected] = []
    policy = ReconnectPolicy(max_attempts=5, initial_delay=0.05)
    with ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",)), reconnect=policy,
                           on_reconnect=seen.append) as stream:
        stream.read(0.2)
        with connect_sql(pg18_dsn) as conn:
            conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 's1'")
            wait_for(lambda: not get_slot(conn, "s1").active, what="slot released")  # type: ignore[union-attr]
            conn.execute("SELECT pg_drop_replication_slot('s1')")
        began = time.monotonic()
        with pytest.raises(SlotNotFound):
            while True:
                stream.read(0.2)
        assert time.monotonic() - began < 5  # one attempt, not five with backoff
        with pytest.raises(SlotNotFound):  # and it stays failed
            stream.read(0)
    assert seen == []


def test_open_waits_while_the_slot_is_still_held(pg18_dsn: str) -> None:
    """A restarted consumer may find its slot held by the walsender of its crashed predecessor."""
    setup_source(pg18_dsn)
    holder = ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",))).open()
    threading.Timer(0.5, holder.close).start()
    policy = ReconnectPolicy(max_attempts=30, initial_delay=0.1, max_delay=0.2)
    with ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",)), reconnect=policy) as stream:
        assert stream.backend_pid is not None and stream.backend_pid != holder.backend_pid
    with pytest.raises(SlotInUse):
        with ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",))):
            ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",)), retry_on_open=False).open()


def test_role_without_replication_is_refused(pg18: EmbeddedPostgres, pg18_dsn: str) -> None:
    setup_source(pg18_dsn)
    role = f"norepl_{int(time.time() * 1000) % 10**8}"
    with psycopg.connect(pg18.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        with pytest.raises(PermissionDenied, match="REPLICATION"):
            ReplicationStream(f"{pg18_dsn} user={role}", "s1", StreamOptions(("pub",))).open()
    finally:
        with psycopg.connect(pg18.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")


def test_wal_level_not_logical() -> None:
    with EmbeddedPostgres(settings={"wal_level": "replica"}) as server:
        with connect_sql(server.dsn()) as conn:
            conn.execute("CREATE PUBLICATION pub")
            with pytest.raises(WalLevelNotLogical, match="wal_level = logical"):
                create_slot(conn, "s1")
        with pytest.raises(WalLevelNotLogical):
            ReplicationStream(server.dsn(), "s1", StreamOptions(("pub",))).open()


def test_invalidated_slot_says_resnapshot(own_pg: EmbeddedPostgres, own_dsn: str) -> None:
    from click.testing import CliRunner

    from walspark.cli import commands  # noqa: F401
    from walspark.cli.main import cli

    setup_source(own_dsn)
    with connect_sql(own_pg.dsn()) as admin:
        admin.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        admin.execute("SELECT pg_reload_conf()")
        try:
            with connect_sql(own_dsn) as conn:
                for _ in range(4):
                    conn.execute("INSERT INTO t SELECT coalesce(max(id), 0) + 1, 'x' FROM t")
                    conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
                info = wait_for(lambda: (i := get_slot(conn, "s1")) is not None and i.invalidated and i,
                                what="slot invalidation")
                assert info.wal_status == "lost" and info.invalidation_reason == "wal_removed"
        finally:
            admin.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            admin.execute("SELECT pg_reload_conf()")
    with pytest.raises(SlotInvalidated, match=r"'s1' was invalidated \(wal_removed\).*walspark slot drop --slot s1"):
        ReplicationStream(own_dsn, "s1", StreamOptions(("pub",))).open()
    res = CliRunner().invoke(cli, ["status", "--dsn", own_dsn, "--slot", "s1"])
    assert res.exit_code == 0 and "INVALIDATED" in res.output and "walspark slot drop --slot s1" in res.output


def test_reconnect_gives_up_without_leaking_the_password(pg18_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    setup_source(pg18_dsn)
    secret = "Sup3r-Secret-pw"
    caplog.set_level(logging.DEBUG, logger="walspark")
    policy = ReconnectPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.02)
    with ReplicationStream(pg18_dsn, "s1", StreamOptions(("pub",)), reconnect=policy) as stream:
        stream.read(0.2)
        # from now on every (re)connect goes to a port nobody listens on, with a password
        stream.dsn = f"host=127.0.0.1 port={free_port()} user=app password={secret} connect_timeout=2"
        _terminate_walsender(pg18_dsn)
        with pytest.raises(ReconnectExhausted) as info:
            while True:
                stream.read(0.2)
    message = str(info.value)
    assert "after 3 attempt(s)" in message and "password=***" in message
    assert secret not in message and "\n" not in message
    assert "reconnect attempt 3" in caplog.text
    assert secret not in caplog.text
