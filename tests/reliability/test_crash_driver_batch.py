"""SIGKILL a ``--once`` run inside its driver batch: the restart replays it and the target still equals the source.

A ``--once`` run that finds a few plain transactions applies them from the driver as the query's
next micro-batch (:mod:`walspark.pipeline.driver_batch`), and the first run begins the query's
checkpoint the same way. That opens windows of its own, each reached exactly at its injection
point: with ``WALSPARK_TEST_CRASH_AT`` naming it, the driver SIGKILLs its own process group there
(``tests/support/walspark_injection_points.py``):

- ``checkpoint-logged``: the snapshot's run wrote the new checkpoint's query id and an empty
  batch 0 to the offset log, not to the commit log — the restart's query must replay batch 0 and
  apply what was written since as batch 1 (a query id alone is what a query killed at its start
  leaves; ``tests/spark/test_units.py`` reads both states);
- ``driver-batch-logged``: batch N+1 is in the checkpoint's offset log, nothing is applied — the
  restart's query must replay N+1 with the same range, from the staged segments the dead run
  left (the slot is not confirmed past N);
- ``driver-batch-applied``: the Delta tables hold batch N+1, the commit log and the slot do not —
  the replay must skip each table by Delta's transaction id N+1, never applying it twice;
- ``head-start-claimed``: the head start (:mod:`walspark.pipeline.head_start`) staged the pending
  transactions while Spark started, and the run dies as it claims them: segments beyond the
  checkpoint, nothing logged, the slot not confirmed — the restart's query reads them.

Each round writes a few transactions of every kind (inserts, updates of TOASTed and plain
columns, deletes, a truncate), dies at its window (the first round: the snapshot's run dies, then
the writes), then ``walspark run --once`` (no hook) catches up: every Delta table equals ``SELECT *`` of its source and no (table, batch id) is applied twice.
(The hook firing shows the run took the driver's path; a query going on after driver batches,
in one process: ``tests/pipeline/test_pipeline_api.py::test_a_run_with_nothing_or_little_to_apply_starts_no_query``.)
"""

from __future__ import annotations

import signal

import psycopg
import pytest
from walspark_injection_points import CRASH_AT

from .support import ONCE_TIMEOUT, Pipeline, create_shop, delta_batches, mismatches, repeated_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WINDOWS = ("driver-batch-logged", "driver-batch-applied", "head-start-claimed")


def _write(dsn: str, round_: int) -> None:
    """A few transactions of every kind over the shop's tables."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        base = 10_000 * (round_ + 1)
        conn.execute("INSERT INTO shop.customers (id, name, email, signed_up, tags, profile) "
                     "SELECT g, 'c' || g, 'c' || g || '@example.org', now(), ARRAY['t' || g], '{\"k\": 1}' "
                     "FROM generate_series(%s::int, %s::int) g", (base, base + 9))  # fmt: skip
        conn.execute("UPDATE shop.orders SET status = 'shipped' WHERE id %% 7 = %s", (round_ % 7,))
        conn.execute("UPDATE shop.orders SET note = repeat('n' || %s, 3000) WHERE id %% 11 = %s", (round_, round_ % 11))
        conn.execute("DELETE FROM shop.order_items WHERE order_id %% 13 = %s", (round_ % 13,))
        if round_ == 2:
            conn.execute("TRUNCATE shop.order_items")


def _run(pipeline: Pipeline, env: dict[str, str] | None = None) -> str:
    pipeline.start(once=True, env=env)
    code = pipeline.wait(ONCE_TIMEOUT)
    pipeline.proc = None
    log = pipeline.log_path.read_text(errors="replace")
    if env and CRASH_AT in env:
        point = env[CRASH_AT]
        assert code == -signal.SIGKILL and f"injection point: killed at {point}" in log, \
            f"the run was meant to die at {point}, exited {code}:\n{pipeline.log_tail()}"
    else:
        assert code == 0, f"walspark run --once exited {code}:\n{pipeline.log_tail()}"
    return log


def _check(spark, dsn: str, target: str, context: str) -> None:  # type: ignore[no-untyped-def]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert not mismatches(conn, spark, target), f"{context}: {mismatches(conn, spark, target)}"
    batches = delta_batches(spark, target)
    assert batches, "no Delta commit carries a batch note: the no-double-apply check would be vacuous"
    assert not repeated_batches(batches), f"{context}: applied twice: {repeated_batches(batches)}"


@pytest.mark.timeout(1200)
def test_sigkill_in_the_driver_batch_windows_keeps_the_target_equal(spark, pg18_dsn, tmp_path):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_shop(conn, customers=200, products=50, orders=300)
    target = tmp_path / "lake"
    pipeline = Pipeline(pg18_dsn, target, tmp_path / "logs")
    try:
        _run(pipeline, {CRASH_AT: "checkpoint-logged"})  # the snapshot, dead in its checkpoint's batch 0
        for i, point in enumerate(("checkpoint-logged", *WINDOWS)):
            _write(pg18_dsn, i)
            if i:
                _run(pipeline, {CRASH_AT: point})
            log = _run(pipeline)
            assert "no query started" not in log, log  # the pending batch N+1 was replayed by the query
            _check(spark, pg18_dsn, str(target), f"after the kill at {point} and the restart")
    finally:
        pipeline.kill()
