"""The whole pipeline (``walspark run``, streaming) rides out the server's faults: nothing lost or doubled.

The source tests prove the replication stream survives a terminated walsender and a restarted
server; this one proves the pipeline built on it does — stager, Spark micro-batches, MERGE and
slot confirm — without a restart of ``walspark run``. A live ``walspark run`` process streams
the shop while its workload writes; the walsender is terminated, then the server is
restarted fast and then immediately (a crash: no shutdown checkpoint). After each fault the run
must still be alive and commit new batches. Finally the writes stop, and the *same* process must
catch up: every Delta table equals its source row by row (polled until it does, or a deadline),
and no (table, batch id) was applied twice.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import psycopg
import pytest

from walspark.embedded.postgres import EmbeddedPostgres

from . import support
from .support import SLOT, CrashWorkload, Pipeline, committed_batches, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

#: Deadlines, not expectations (a 2-core host shared with other suites).
START_TIMEOUT = 600.0
CATCH_UP_TIMEOUT = 600.0


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    """A server of this test alone: it is restarted, and a crash restart must not hit others."""
    with EmbeddedPostgres(settings={"wal_sender_timeout": "5s", "log_min_messages": "fatal"}) as pg:
        yield pg


def _walsender_pid(dsn: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)).fetchone()
    return None if row is None else row[0]


def _terminate_walsender(dsn: str, pipeline: Pipeline) -> None:
    wait_for(lambda: _walsender_pid(dsn) is not None, timeout=START_TIMEOUT, what="an active walsender",
             pipeline=pipeline)  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))


def _still_streaming(target, pipeline: Pipeline, what: str) -> None:  # type: ignore[no-untyped-def]
    """The run survived the fault: alive, and it commits a batch made after it."""
    before = committed_batches(target)
    wait_for(lambda: committed_batches(target) > before + 1, timeout=START_TIMEOUT,
             what=f"new batches after {what}", pipeline=pipeline)  # fmt: skip
    assert pipeline.alive(), f"walspark run exited after {what}:\n{pipeline.log_tail()}"
    print(f"{what}: still streaming ({committed_batches(target)} batches committed)")


def test_walsender_terminations_and_server_restarts_under_a_live_pipeline(spark, server, tmp_path):
    dsn = server.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        support.create_shop(conn, customers=500, products=100, orders=500)
    target = tmp_path / "lake"
    pipeline = Pipeline(dsn, target, tmp_path / "logs")
    work: CrashWorkload | None = CrashWorkload(dsn, rate=10.0, seed=5).start()
    try:
        pipeline.start()
        wait_for(lambda: committed_batches(target) > 0, timeout=START_TIMEOUT, what="the first batch",
                 pipeline=pipeline)  # fmt: skip
        _terminate_walsender(dsn, pipeline)
        _still_streaming(target, pipeline, "walsender terminated")
        for mode in ("fast", "immediate"):
            assert work is not None
            work.stop()  # its connection would die with the server
            work = None
            # The fast stop lasts until the run has committed what it was sent: a batch in flight
            # takes a minute or more on a loaded 2-core host (CI), beyond pg_ctl's usual 60 s.
            began = time.monotonic()
            server.restart(mode, stop_timeout=int(START_TIMEOUT))
            print(f"server restarted ({mode}) in {time.monotonic() - began:.1f} s")
            work = CrashWorkload(dsn, rate=10.0, seed=6 if mode == "fast" else 7).start()
            _still_streaming(target, pipeline, f"server restarted ({mode})")
        assert work is not None
        work.stop()
        work = None
        # The same process catches up: poll the oracle until the lake equals the source.
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while True:
            assert pipeline.alive(), f"walspark run exited:\n{pipeline.log_tail()}"
            with psycopg.connect(dsn, autocommit=True) as conn:
                diff = support.mismatches(conn, spark, str(target))
            if not diff:
                break
            assert time.monotonic() < deadline, f"Delta still differs from the source: {diff}"
            time.sleep(1.0)  # the oracle reads with delta-rs: no Spark job competes with the run
        batches = support.delta_batches(spark, str(target))
        assert batches, "no Delta commit carries a batch note: the no-double-apply check would be vacuous"
        assert not support.repeated_batches(batches), f"batches applied twice: {support.repeated_batches(batches)}"
        print(f"caught up: equality held; {len(batches)} noted commits, none twice; {pipeline.runs} run")
        # SIGTERM (what a service manager sends) under a live workload: a clean stop, exit 0 —
        # not an interrupted py4j call — and a --once run afterwards catches up.
        work = CrashWorkload(dsn, rate=10.0, seed=8).start()
        done = committed_batches(target)
        wait_for(lambda: committed_batches(target) > done + 1, timeout=START_TIMEOUT, what="batches under load",
                 pipeline=pipeline)  # fmt: skip
        assert pipeline.proc is not None
        pipeline.proc.send_signal(signal.SIGTERM)
        code = pipeline.wait(120)
        log = pipeline.log_tail(100_000)
        assert code == 0 and "stopping" in log, f"exit {code}:\n{log[-8000:]}"
        work.stop()
        work = None
        pipeline.start(once=True)
        assert pipeline.wait(CATCH_UP_TIMEOUT) == 0, pipeline.log_tail()
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert not support.mismatches(conn, spark, str(target)), "after the SIGTERM stop and a --once run"
    finally:
        pipeline.kill()
        if work is not None:
            work.stop()
