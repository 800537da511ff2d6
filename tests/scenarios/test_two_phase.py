"""Two-phase commit end to end: ``walspark run`` behaves like a subscriber with ``two_phase = true``.

A prepared transaction reaches Delta at its COMMIT PREPARED (in commit order), never at its
PREPARE, and not at all after ROLLBACK PREPARED. The slot may be confirmed past the PREPARE
before the outcome arrives — PostgreSQL then never sends the prepared changes again — so the
stager keeps them in its prepared store; these scenarios make the server do exactly that (a
``walspark run --once`` between PREPARE and COMMIT PREPARED, with a later transaction so the slot
moves past the PREPARE) and compare every table with what the publication publishes.

Every scenario has a table without a key (``log``): the apply step appends each of its inserts,
so a transaction delivered twice shows up as doubled rows in the oracle.

Ported workloads: ``src/test/subscription/t/021_twophase.pl`` and ``023_twophase_stream.pl``
(their SQL; each run at the TAP test's catch-up points and once as a backlog). Not ported:
021's second subscription with ``copy_data = false`` (walspark has no per-table copy choice: the
snapshot always copies), the publisher crash-restarts (the shared test server cannot be crashed
under other tests; the pipeline's own crash is :func:`test_sigkill_between_prepare_and_commit_prepared`),
and 023's ``streaming = parallel`` half (the same messages, but Stream Abort's layout; the
pipeline's parallel mode is covered by the streaming tests).
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from walspark.protocol import parse_lsn

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark

PUB, SLOT = "tp_pub", "tp_slot"
#: The walsender streams a transaction once it holds more than this in memory (64kB, the minimum).
SMALL_DECODING_MEM = " options='-c logical_decoding_work_mem=64kB'"


@pytest.fixture(params=["pg18", "pg15"])
def dsn(request) -> str:
    """Each scenario on PostgreSQL 18 (protocol 4) and 15 (protocol 3, the first with two-phase pgoutput)."""
    return request.getfixturevalue(f"{request.param}_dsn")


def _connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def _wal(conn: psycopg.Connection) -> int:
    return parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def _slot(conn: psycopg.Connection) -> tuple[int, bool]:
    confirmed, two_phase = conn.execute(
        "SELECT confirmed_flush_lsn::text, two_phase FROM pg_replication_slots WHERE slot_name = %s",
        (SLOT,)).fetchone()
    return (parse_lsn(confirmed) if confirmed else 0), bool(two_phase)  # NULL while the slot is being created


def _store(target: str) -> Path:
    return Path(target) / "_walspark" / "staging" / SLOT / "prepared"


def _pending(target: str) -> list[str]:
    store = _store(target)
    if not store.exists():
        return []
    marked = {p.name.split(".")[0] for p in store.glob("*.committed")}  # committed: staged, awaiting Spark
    return sorted(p.name for p in store.glob("*.prepared") if p.name.split(".")[0] not in marked)


def _move_slot_past(conn: psycopg.Connection, dsn: str, target: str, lsn: int) -> None:
    """Run until the slot is confirmed past ``lsn``.

    A ``--once`` run leaves the slot one batch behind what it applied: Spark confirms a batch
    when it plans the next, so the next run (with a transaction of its own to apply) moves the slot
    past the previous run's batch — before that run's stream opened, so it starts there.
    """
    for _ in range(3):
        if _slot(conn)[0] >= lsn:
            return
        conn.execute("INSERT INTO log VALUES (0, 'moves the slot')")
        run_once(dsn, PUB, SLOT, target)
    assert _slot(conn)[0] >= lsn, "the slot should be past the PREPARE (so the server never resends it)"


def _check(conn: psycopg.Connection, spark, target: str, context: str) -> None:  # type: ignore[no-untyped-def]
    assert_matches_publication(conn, spark, target, PUB, context=context)


def _tables(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    conn.execute("CREATE TABLE log (n int, what text)")  # no key: every insert appended, doubles visible
    conn.execute(f"CREATE PUBLICATION {PUB} FOR TABLE t, log")
    conn.execute("INSERT INTO t SELECT g, 'seed' || g FROM generate_series(1, 5) g")


def test_prepare_then_commit_prepared_in_the_next_run_with_the_slot_past_the_prepare(spark, dsn, tmp_path):
    target = str(tmp_path / "lake")
    with _connect(dsn) as conn:
        _tables(conn)
        run_once(dsn, PUB, SLOT, target)  # snapshot; the stream turns two-phase on for the slot
        conn.execute("BEGIN; INSERT INTO t VALUES (10, 'prepared'); UPDATE t SET v = 'by 2pc' WHERE id = 1;"
                     " DELETE FROM t WHERE id = 2; INSERT INTO log VALUES (1, 'prepared');"
                     " PREPARE TRANSACTION 'p1'")
        after_prepare = _wal(conn)
        conn.execute("INSERT INTO t VALUES (11, 'plain after the prepare'); INSERT INTO log VALUES (2, 'plain')")
        run_once(dsn, PUB, SLOT, target)
        assert _slot(conn)[1], "walspark run should have enabled two-phase decoding on its slot"
        _move_slot_past(conn, dsn, target, after_prepare)
        assert len(_pending(target)) == 1, "the prepared transaction must be in the durable store"
        _check(conn, spark, target, "prepared, not committed: none of its rows")
        conn.execute("COMMIT PREPARED 'p1'")
        conn.execute("INSERT INTO log VALUES (3, 'after the commit prepared')")
        run_once(dsn, PUB, SLOT, target)
        _check(conn, spark, target, "after COMMIT PREPARED in a later run")
        # Gone as soon as the run's last batch (which applied it) is in Spark's commit log: not
        # left for the next run, with the watermark saying durably that Delta has it.
        left = sorted(p.name for p in _store(target).iterdir())
        assert "committed-through" in left and not [n for n in left if n.endswith((".prepared", ".committed"))], left
        # The slot is one batch behind that run: the next one receives the COMMIT PREPARED again
        # (a resend: the watermark says it is in Delta, so it is dropped, not lost or doubled).
        conn.execute("INSERT INTO log VALUES (4, 'one more run')")
        run_once(dsn, PUB, SLOT, target)
        _check(conn, spark, target, "a run after the COMMIT PREPARED")
        left = sorted(p.name for p in _store(target).iterdir())
        assert "committed-through" in left and not [n for n in left if n.endswith((".prepared", ".committed"))], left


def test_rollback_prepared_and_a_prepare_sent_again_after_a_restart(spark, dsn, tmp_path):
    target = str(tmp_path / "lake")
    with _connect(dsn) as conn:
        _tables(conn)
        run_once(dsn, PUB, SLOT, target)
        # Rolled back after a run stored it (and moved the slot past it).
        conn.execute("BEGIN; INSERT INTO t VALUES (20, 'rolled back'); INSERT INTO log VALUES (20, 'rb');"
                     " PREPARE TRANSACTION 'rb'")
        after_prepare = _wal(conn)
        conn.execute("INSERT INTO log VALUES (21, 'plain')")
        run_once(dsn, PUB, SLOT, target)
        _move_slot_past(conn, dsn, target, after_prepare)
        assert len(_pending(target)) == 1
        conn.execute("ROLLBACK PREPARED 'rb'")
        # Prepared last: nothing after it, so the slot stays before this PREPARE and the next run
        # receives it again — stored twice, applied once.
        conn.execute("BEGIN; INSERT INTO t VALUES (30, 'resent'); INSERT INTO log VALUES (30, 'resent');"
                     " PREPARE TRANSACTION 'again'")
        after_prepare = _wal(conn)
        run_once(dsn, PUB, SLOT, target)
        assert _slot(conn)[0] < after_prepare, "nothing after the PREPARE: the slot must stay before it"
        assert len(_pending(target)) == 1
        _check(conn, spark, target, "one rolled back, one prepared")
        conn.execute("COMMIT PREPARED 'again'")
        run_once(dsn, PUB, SLOT, target)
        _check(conn, spark, target, "the PREPARE received twice, committed once")
        assert _pending(target) == []


def test_large_streamed_prepared_transaction_interleaved_with_plain_ones(spark, dsn, tmp_path):
    """A prepared transaction streamed before its PREPARE (Stream Prepare), other transactions on the
    same tables committing between its PREPARE and COMMIT PREPARED, in two runs."""
    target = str(tmp_path / "lake")
    stream_dsn = dsn + SMALL_DECODING_MEM
    with _connect(dsn) as conn:
        _tables(conn)
        run_once(stream_dsn, PUB, SLOT, target)
        conn.execute("BEGIN; INSERT INTO t SELECT g, repeat('x', 100) || g FROM generate_series(1000, 4000) g;"
                     " UPDATE t SET v = 'big ' || v WHERE id % 2 = 0; DELETE FROM t WHERE id % 3 = 0;"
                     " INSERT INTO log SELECT g, 'big' FROM generate_series(1, 500) g;"
                     " PREPARE TRANSACTION 'big'")
        conn.execute("INSERT INTO t VALUES (5000, 'between'); UPDATE t SET v = 'plain update' WHERE id = 1;"
                     " INSERT INTO log VALUES (-1, 'between')")
        after_prepare = _wal(conn)
        run_once(stream_dsn, PUB, SLOT, target)
        _move_slot_past(conn, stream_dsn, target, after_prepare)
        assert len(_pending(target)) == 1
        _check(conn, spark, target, "streamed prepare stored, plain transactions applied")
        conn.execute("INSERT INTO t VALUES (5001, 'still between'); INSERT INTO log VALUES (-2, 'between')")
        conn.execute("COMMIT PREPARED 'big'")
        conn.execute("UPDATE t SET v = 'after' WHERE id = 1000; INSERT INTO log VALUES (-3, 'after')")
        run_once(stream_dsn, PUB, SLOT, target)
        _check(conn, spark, target, "streamed prepared transaction committed between plain ones")
        assert _pending(target) == []


# --------------------------------------------------------------------------- ported TAP workloads


def _021_twophase(conn: psycopg.Connection, catch_up) -> None:  # type: ignore[no-untyped-def]
    """src/test/subscription/t/021_twophase.pl, its SQL (tab_full), ``catch_up`` at its wait_for_catchup points."""
    conn.execute("BEGIN; INSERT INTO tab_full VALUES (11); PREPARE TRANSACTION 'test_prepared_tab_full'")
    catch_up("prepared 11")
    conn.execute("COMMIT PREPARED 'test_prepared_tab_full'")
    catch_up("committed 11")
    conn.execute("BEGIN; INSERT INTO tab_full VALUES (12); PREPARE TRANSACTION 'test_prepared_tab_full'")
    catch_up("prepared 12")
    conn.execute("ROLLBACK PREPARED 'test_prepared_tab_full'")
    catch_up("rolled back 12")
    # the "crash restart" sections: the servers stop right after the PREPARE (no catch-up in between),
    # the outcome comes after the restart
    for outcome, rows in (("ROLLBACK", (12, 13)), ("COMMIT", (12, 13)), ("COMMIT", (14, 15)), ("COMMIT", (16, 17))):
        conn.execute(f"BEGIN; INSERT INTO tab_full VALUES ({rows[0]}); INSERT INTO tab_full VALUES ({rows[1]});"
                     " PREPARE TRANSACTION 'test_prepared_tab'")
        conn.execute(f"{outcome} PREPARED 'test_prepared_tab'")
        catch_up(f"{outcome.lower()} prepared {rows} after a restart")
    # nested transaction: the rolled-back savepoint's row never arrives
    conn.execute("BEGIN; INSERT INTO tab_full VALUES (21); SAVEPOINT sp_inner; INSERT INTO tab_full VALUES (22);"
                 " ROLLBACK TO SAVEPOINT sp_inner; PREPARE TRANSACTION 'outer'")
    catch_up("prepared with a rolled-back savepoint")
    conn.execute("COMMIT PREPARED 'outer'")
    catch_up("committed 21 (not 22)")
    # empty GID
    conn.execute("BEGIN; INSERT INTO tab_full VALUES (51); PREPARE TRANSACTION ''")
    catch_up("prepared with an empty GID")
    conn.execute("ROLLBACK PREPARED ''")
    catch_up("rolled back the empty GID")
    # empty prepared transactions (a row lock only), then a normal change
    conn.execute("BEGIN; SELECT a FROM tab_full WHERE a = 1 FOR SHARE; PREPARE TRANSACTION 'test_empty_prepared'")
    conn.execute("COMMIT PREPARED 'test_empty_prepared'")
    conn.execute("BEGIN; SELECT a FROM tab_full WHERE a = 1 FOR SHARE; PREPARE TRANSACTION 'test_empty_prepared'")
    conn.execute("ROLLBACK PREPARED 'test_empty_prepared'")
    conn.execute("INSERT INTO tab_full VALUES (31)")
    catch_up("empty prepared transactions, then 31")


def _023_twophase_stream(conn: psycopg.Connection, catch_up) -> None:  # type: ignore[no-untyped-def]
    """src/test/subscription/t/023_twophase_stream.pl (``test_streaming``), its SQL; the transactions are
    made large enough (3..5000, as the test's PostgreSQL 15 version) to be streamed at 64kB."""
    big = ("BEGIN; INSERT INTO test_tab SELECT i, md5(i::text) FROM generate_series(3, 5000) s(i);"
           " UPDATE test_tab SET b = md5(b) WHERE mod(a,2) = 0; DELETE FROM test_tab WHERE mod(a,3) = 0;"
           " PREPARE TRANSACTION 'test_prepared_tab'")
    conn.execute(big)
    catch_up("streamed prepare")
    conn.execute("COMMIT PREPARED 'test_prepared_tab'")
    catch_up("commit prepared")
    conn.execute("DELETE FROM test_tab WHERE a > 2")
    conn.execute(big)
    catch_up("streamed prepare (to roll back)")
    conn.execute("ROLLBACK PREPARED 'test_prepared_tab'")
    catch_up("rollback prepared")
    conn.execute(big)  # "crash restart": prepared before, committed after
    catch_up("streamed prepare before the restart")
    conn.execute("COMMIT PREPARED 'test_prepared_tab'")
    catch_up("commit prepared after the restart")
    conn.execute("DELETE FROM test_tab WHERE a > 2")
    conn.execute(big)
    catch_up("streamed prepare, then an insert outside it")
    conn.execute("INSERT INTO test_tab VALUES (99999, 'foobar')")
    conn.execute("ROLLBACK PREPARED 'test_prepared_tab'")
    catch_up("rolled back, the outside insert kept")
    conn.execute("DELETE FROM test_tab WHERE a > 2")
    conn.execute(big)
    catch_up("streamed prepare, then an insert outside it, then commit")
    conn.execute("INSERT INTO test_tab VALUES (99999, 'foobar')")
    conn.execute("COMMIT PREPARED 'test_prepared_tab'")
    catch_up("committed with the outside insert")
    conn.execute("DELETE FROM test_tab WHERE a > 2")
    # the serialized-changes case: a small prepared transaction on the second table
    conn.execute("BEGIN; INSERT INTO test_tab_2 values(1); PREPARE TRANSACTION 'xact'")
    catch_up("small prepare on test_tab_2")
    conn.execute("COMMIT PREPARED 'xact'")
    catch_up("committed on test_tab_2")


def _setup_021(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE tab_full (a int PRIMARY KEY)")
    conn.execute("BEGIN; INSERT INTO tab_full SELECT generate_series(1,10); PREPARE TRANSACTION 'some_initial_data'")
    conn.execute("COMMIT PREPARED 'some_initial_data'")
    conn.execute(f"CREATE PUBLICATION {PUB} FOR TABLE tab_full")


def _setup_023(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE test_tab (a int primary key, b varchar)")
    conn.execute("INSERT INTO test_tab VALUES (1, 'foo'), (2, 'bar')")
    conn.execute("CREATE TABLE test_tab_2 (a int)")
    conn.execute(f"CREATE PUBLICATION {PUB} FOR TABLE test_tab, test_tab_2")


PORTS = {
    "021_twophase": (_setup_021, _021_twophase, ""),
    "023_twophase_stream": (_setup_023, _023_twophase_stream, SMALL_DECODING_MEM),
}


#: The servers and modes each port runs in. PostgreSQL 15 (protocol 3) runs the backlog only: its
#: catch-up runs would repeat the messages of the backlog in smaller batches, and a prepared
#: transaction finished in a later run is the subject of the pg15 variants of the tests below.
SERVER_MODES = [("pg18", "catch-up"), ("pg18", "backlog"), ("pg15", "backlog")]
_SERVER_MODE_PARAMS = [pytest.param(s, m, id=f"{s}-{m}") for s, m in SERVER_MODES]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("server", "mode"), _SERVER_MODE_PARAMS)
@pytest.mark.parametrize("port", sorted(PORTS))
def test_ported_tap_workload(spark, request, tmp_path, port, server, mode):
    dsn = request.getfixturevalue(f"{server}_dsn")
    setup, workload, extra = PORTS[port]
    target = str(tmp_path / "lake")
    run_dsn = dsn + extra
    with _connect(dsn) as conn:
        setup(conn)
        run_once(run_dsn, PUB, SLOT, target)
        _check(conn, spark, target, f"{port}: snapshot")

        def catch_up(point: str) -> None:
            if mode == "catch-up":
                run_once(run_dsn, PUB, SLOT, target)
                _check(conn, spark, target, f"{port}: {point}")

        workload(conn, catch_up)
        if mode == "backlog":
            run_once(run_dsn, PUB, SLOT, target)
            _check(conn, spark, target, f"{port}: the whole workload as one backlog")
        assert _pending(target) == []
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
                            ).fetchone()[0] == 0


# --------------------------------------------------------------------------- a crash


def test_sigkill_between_prepare_and_commit_prepared(spark, pg18_dsn, tmp_path):
    """``walspark run`` (a process, Spark JVM included) is killed once the slot is past a PREPARE whose
    COMMIT PREPARED has not happened yet; another is killed right after a PREPARE. The restarted run
    gets only the COMMIT PREPARED for the first (the server will not decode that PREPARE again),
    and the oracle must still match."""
    from reliability.support import PUBLICATION, Pipeline, wait_for

    target = tmp_path / "lake"
    pipeline = Pipeline(pg18_dsn, target, tmp_path / "logs", slot=SLOT)
    with _connect(pg18_dsn) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE log (n int, what text)")
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE t, log")
        conn.execute("INSERT INTO t SELECT g, 'seed' FROM generate_series(1, 10) g")
        pipeline.start()
        try:
            wait_for(lambda: _slot_exists(conn) and _slot(conn)[1], timeout=600, what="streaming with two-phase",
                     pipeline=pipeline)
            conn.execute("BEGIN; INSERT INTO t SELECT g, 'prepared' FROM generate_series(100, 2100) g;"
                         " INSERT INTO log SELECT g, 'prepared' FROM generate_series(1, 50) g;"
                         " PREPARE TRANSACTION 'crash1'")
            past = _wal(conn)
            conn.execute("INSERT INTO t VALUES (11, 'plain'); INSERT INTO log VALUES (-1, 'plain')")
            wait_for(lambda: _slot(conn)[0] >= past, timeout=300, what="the slot to pass the PREPARE",
                     pipeline=pipeline)
            # A second prepared transaction, killed right after it (stored or not: either way the slot
            # is not past it, so it comes again).
            conn.execute("BEGIN; UPDATE t SET v = 'second' WHERE id <= 5; INSERT INTO log VALUES (-2, 'second');"
                         " PREPARE TRANSACTION 'crash2'")
            time.sleep(0.3)
        finally:
            pipeline.kill()
        conn.execute("COMMIT PREPARED 'crash1'")
        conn.execute("INSERT INTO log VALUES (-3, 'after the kill')")
        conn.execute("COMMIT PREPARED 'crash2'")
        pipeline.start(once=True)
        code = pipeline.wait(900)
        assert code == 0, f"walspark run --once exited {code}:\n{pipeline.log_tail()}"
        assert_matches_publication(conn, spark, str(target), PUBLICATION, context="after SIGKILL and restart")
        assert _pending(str(target)) == []


def _slot_exists(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)).fetchone() is not None
