"""SIGKILL ``walspark run`` at random points under a live workload: the target still equals the source.

Issue 7's second acceptance line and issue 9's crash bullet. The whole pipeline runs as
``python -m walspark.cli run`` in its own process group (driver, Spark JVM, Python workers), so a
SIGKILL leaves nothing behind to clean up — exactly like a machine losing power, minus the disk.
The kills land in the window after a batch's first Delta MERGE commit but before its commit-log
entry and the slot confirm (Spark confirms batch N only when it plans N+1), found by polling the
Delta logs; in a longer run also 0-6 s after the snapshot starts, and after a random delay once
the run streams (mostly the middle of a micro-batch: planned in the offset log, not yet in the
commit log; also what tests/spark/test_kill.py does to the stream alone). The state seen at each
kill is printed, so a run shows which windows it hit.

After each kill the workload stops and the restarted pipeline, ``walspark run --once``, drains
the slot; then every Delta table, read with plain Spark, must equal ``SELECT *`` of its source
row by row, and no (table, batch id) may appear twice among the MERGE commits' notes. The next
round resumes writing and streaming on the same data and checkpoint.

The driver's row limit is 4 here (``WALSPARK_DRIVER_MERGE_ROWS``): a batch is hardly ever merged
from the driver whole, so its tables take their engines one by one, as a backlog's large tables
do at the default limit — delta-rs for one of up to ten times the limit in net rows (collected
alone), Spark's MERGE for more — and the kills land between the two engines' commits.

``WALSPARK_CRASH_KILLS`` sets the number of kills. The default run kills once, in the window
only a poll finds (a batch's MERGE in Delta, not yet in the commit log nor the slot confirmed):
a kill inside the snapshot is :func:`test_sigkill_during_the_snapshot_then_rerun_is_complete`'s.
Two or more (the soak run: 10) start with a kill 0-6 s into the snapshot, then alternate the
Delta-written window and random delays. ``WALSPARK_CRASH_SEED`` replays a run's delays.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import psycopg
import pytest
from depth import sweep

from walspark.spark.lake.driver_merge import DRIVER_MERGE_ROWS

from .support import (
    ONCE_TIMEOUT,
    START_TIMEOUT,
    CrashWorkload,
    Pipeline,
    committed_batches,
    create_shop,
    delta_batches,
    mismatches,
    pipeline_state,
    repeated_batches,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _snapshot_started(target: Path) -> bool:
    return (target / "_walspark" / "snapshot.json").exists()


def _wait_for_state(dsn: str, target: Path, pipeline: Pipeline, state: str, *, timeout: float) -> None:
    """Poll until the run is in ``state`` (or the deadline passes: then the kill lands wherever it is)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pipeline.alive() and pipeline_state(dsn, target) != state:
        time.sleep(0.1)  # a poll reads the tables' logs and may ask the server: not a busy loop


def _drain_and_check(dsn: str, spark, pipeline: Pipeline, work: CrashWorkload,  # type: ignore[no-untyped-def]
                     *, expect_batches: bool = True) -> None:
    """Stop writing, let ``--once`` apply everything, then the oracle and the no-double-batch check.

    ``expect_batches=False`` where the final run may legitimately have nothing to stream (its
    snapshot, taken after the writes stopped, already holds every row).
    """
    work.stop()
    pipeline.start(once=True)
    code = pipeline.wait(ONCE_TIMEOUT)
    assert code == 0, f"walspark run --once exited {code}:\n{pipeline.log_tail()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        diff = mismatches(conn, spark, str(pipeline.target))
    assert not diff, f"Delta differs from the source: {diff}"
    batches = delta_batches(spark, str(pipeline.target))
    assert batches or not expect_batches, "no Delta commit carries a batch note: the no-double-apply check would be vacuous"
    assert not repeated_batches(batches), f"batches applied twice: {repeated_batches(batches)}"
    print(f"{len(batches)} Delta commits with batch notes, batch ids {sorted({b for _, b, _ in batches})}, none twice")


#: Each kill costs a pipeline start, a catch-up run and the oracle: minutes on 2 cores.
KILLS = int(sweep("WALSPARK_CRASH_KILLS", "1", "10"))


def _kinds(kills: int) -> list[str]:
    """Where each kill lands: ``snapshot``, ``delta-written`` or ``random`` (see the module's docstring)."""
    if kills == 1:
        return ["delta-written"]
    return ["snapshot"] + ["delta-written" if k % 2 == 1 else "random" for k in range(1, kills)]


@pytest.mark.timeout(900 + 500 * KILLS)
def test_sigkill_at_random_points_keeps_the_target_equal(spark, pg18_dsn, tmp_path):
    """Kill, restart, compare — after *every* kill, not only at the end.

    Each round writes under a live workload while the pipeline runs, kills it, then stops the
    workload and lets the restarted pipeline (``--once``) catch up: the target must equal the
    source right there, and no batch may have been applied twice so far. The next round starts
    a fresh workload on the same data and a fresh pipeline process on the same checkpoint.
    """
    kills = KILLS
    seed = int(os.environ.get("WALSPARK_CRASH_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"kills={kills} seed={seed}")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_shop(conn, customers=500, products=100, orders=600)
    target = tmp_path / "lake"
    pipeline = Pipeline(pg18_dsn, target, tmp_path / "logs", env={DRIVER_MERGE_ROWS: "4"})
    landed: list[str] = []
    transactions = truncates = 0
    work: CrashWorkload | None = None
    try:
        for kill, kind in enumerate(_kinds(kills)):
            work = CrashWorkload(pg18_dsn, rate=10.0, seed=seed + kill).start()
            pipeline.start()
            if kind == "snapshot":
                # The first kill: 0-6 s after the snapshot record appears (inside the copy or just after).
                wait_for(lambda: _snapshot_started(target), timeout=START_TIMEOUT, what="the snapshot", pipeline=pipeline)
                time.sleep(rng.uniform(0.0, 6.0))
            else:
                # Once the run has committed a new batch (it is streaming, not only starting its
                # JVM): the moment a batch's MERGE is in Delta but the batch is not yet in the
                # commit log nor the slot confirmed (a window a random delay rarely hits), or a
                # random delay of a few trigger intervals.
                before = committed_batches(target)
                wait_for(lambda before=before: committed_batches(target) > before, timeout=START_TIMEOUT,
                         what="a new committed batch", pipeline=pipeline)  # fmt: skip
                if kind == "delta-written":
                    _wait_for_state(pg18_dsn, target, pipeline, "mid-batch, Delta written", timeout=120.0)
                else:
                    time.sleep(rng.uniform(0.0, 3.0))
            landed.append(pipeline_state(pg18_dsn, target))
            pipeline.kill()
            print(f"kill {kill + 1}: {landed[-1]} (workload: {work.transactions} txns, {work.truncates} truncates)")
            # The restart after this kill: caught up, the target equals the source (the oracle).
            # Only the last check insists on batch notes: an early round may end in the snapshot.
            _drain_and_check(pg18_dsn, spark, pipeline, work, expect_batches=kill == kills - 1)
            transactions, truncates = transactions + work.transactions, truncates + work.truncates
            print(f"after kill {kill + 1} and its restart: equality held")
    finally:
        pipeline.kill()
        if work is not None:
            work.stop()
    print(f"kills landed: {landed}; workload {transactions} transactions, {truncates} truncates; "
          f"{pipeline.runs} runs; equality held after each of the {kills} restarts")


def test_sigkill_during_the_snapshot_then_rerun_is_complete(spark, pg18_dsn, tmp_path):
    """A kill in the first seconds of the snapshot: the rerun redoes it, and nothing is missing."""
    rng = random.Random(int(os.environ.get("WALSPARK_CRASH_SEED", str(random.randrange(1 << 30)))))
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_shop(conn, customers=500, products=100, orders=600)
    target = tmp_path / "lake"
    pipeline = Pipeline(pg18_dsn, target, tmp_path / "logs")
    work = CrashWorkload(pg18_dsn, rate=25.0, seed=11).start()
    try:
        # Spark's tasks copy the tables, so the snapshot lasts seconds: copied from the driver
        # (~0.1 s a small table), it could end before a kill 0-0.5 s after its record appears.
        pipeline.start(env={"WALSPARK_DRIVER_SNAPSHOT": "0"})
        wait_for(lambda: _snapshot_started(target), timeout=START_TIMEOUT, what="the snapshot", pipeline=pipeline)
        time.sleep(rng.uniform(0.0, 0.5))
        state = pipeline_state(pg18_dsn, target)
        pipeline.kill()
        print(f"killed in state: {state}")
        assert state == "snapshot", "the kill was meant to land inside the snapshot"
        _drain_and_check(pg18_dsn, spark, pipeline, work, expect_batches=False)
    finally:
        pipeline.kill()
        work.stop()


def test_two_truncates_of_one_table_in_one_batch(spark, pg18_dsn, tmp_path):
    """Two truncates of one table committed between two runs: one ``--once`` batch applies both.

    (Once a bug: the batch's truncates were sorted as unorderable objects, and every replay of
    the batch failed, so the pipeline could never pass it.)
    """
    from walspark.pipeline import RunSettings, run_pipeline

    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION tpub FOR TABLE t")
        settings = RunSettings(pg18_dsn, "tpub", "tslot", str(tmp_path / "lake"), once=True)
        run_pipeline(spark, settings)  # the snapshot (empty), the slot
        conn.execute("INSERT INTO t SELECT g, 'a' FROM generate_series(1, 10) g")
        conn.execute("TRUNCATE t")
        conn.execute("INSERT INTO t SELECT g, 'b' FROM generate_series(11, 20) g")
        conn.execute("TRUNCATE t")
        conn.execute("INSERT INTO t SELECT g, 'c' FROM generate_series(21, 25) g")
        run_pipeline(spark, settings)
        want = sorted(tuple(r) for r in conn.execute("SELECT id, v FROM t"))
    got = sorted(tuple(r) for r in spark.read.format("delta").load(str(tmp_path / "lake" / "public" / "t")).collect())
    assert got == want
