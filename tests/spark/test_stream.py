"""Streaming reads of a live slot with a checkpoint and a file sink: exactly once, in order, bounded.

No timed assertions: waits poll for a condition and fail only after a generous bound.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from .support import Workload, committed_end, current_lsn, idle_mark, sink_changes, slot_confirmed

pytestmark = pytest.mark.spark


def _reader(spark, dsn: str, staging: Path, **options: str):
    return (spark.readStream.format("pgoutput")
            .options(dsn=dsn, slot="s", publication="pub", stagingPath=str(staging), **options))


def _start(df, tmp: Path, trigger: dict, name: str = "q"):
    return (df.writeStream.format("parquet").option("path", str(tmp / "out"))
            .option("checkpointLocation", str(tmp / "ckpt")).queryName(name).trigger(**trigger).start())


def _wait_until(condition, what: str, bound: float = 180.0, query=None) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        if query is not None and query.exception() is not None:
            raise query.exception()
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.2)


def _commits(tmp: Path) -> int:
    commits = tmp / "ckpt" / "commits"
    return len([f for f in commits.iterdir() if f.name.isdigit()]) if commits.exists() else 0


def _slot_behind_checkpoint(dsn: str, tmp: Path) -> None:
    """The slot's confirmed_flush_lsn never passes the last committed batch (slot read first)."""
    slot = slot_confirmed(dsn)
    end = committed_end(tmp / "ckpt")
    if end is not None:  # or an idle keepalive position the stager recorded first
        assert slot <= max(end, idle_mark(tmp / "staging")), f"slot confirmed {slot:X} beyond the last committed batch end {end:X}"


def test_stop_write_restart_delivers_every_change_once_in_commit_order(spark, source_dsn, tmp_path):
    work = Workload(source_dsn)
    work.run(10)
    df = _reader(spark, source_dsn, tmp_path / "staging").load()
    query = _start(df, tmp_path, {"processingTime": "200 milliseconds"})
    try:
        work.start()
        for _ in range(20):  # the invariant, sampled while batches commit
            _slot_behind_checkpoint(source_dsn, tmp_path)
            time.sleep(0.25)
        _wait_until(lambda: _commits(tmp_path) >= 4, "four committed batches", query=query)
        work.stop()
        _slot_behind_checkpoint(source_dsn, tmp_path)
    finally:
        work.stop()
        query.stop()
    _slot_behind_checkpoint(source_dsn, tmp_path)
    work.run(15)  # written while the query is down

    query = _start(_reader(spark, source_dsn, tmp_path / "staging").load(), tmp_path, {"availableNow": True})
    assert query.awaitTermination(300)
    assert query.exception() is None
    _slot_behind_checkpoint(source_dsn, tmp_path)
    got = sink_changes(spark, tmp_path / "out")
    assert got == work.changes  # each change once, in commit order (per table and overall)


def test_max_rows_per_batch_and_available_now_stop_at_the_start_position(spark, source_dsn, tmp_path):
    work = Workload(source_dsn)
    work.run(12)
    with psycopg.connect(source_dsn, autocommit=True) as conn, conn.transaction():
        before = len(work.changes)
        for _ in range(6):
            work.txn(conn)
    big = len(work.changes) - before
    assert big > 20
    expected = len(work.changes)

    df = _reader(spark, source_dsn, tmp_path / "staging", maxRowsPerBatch="20").load()
    # Every batch's progress, not only the last 100 (the default): on a slow host the workload
    # below writes enough before the query fixes its end for the big batch to scroll out.
    retention = spark.conf.get("spark.sql.streaming.numRecentProgressUpdates")
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    try:
        query = _start(df, tmp_path, {"availableNow": True})
        work.start(pause=0.01)  # keeps writing while the query runs: it must stop anyway
        try:
            assert query.awaitTermination(300)
        finally:
            work.stop()
        assert query.exception() is None
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", retention)
    assert max(sizes) == big and all(n <= 20 for n in sizes if n != big)
    assert len(sizes) >= expected // 20
    got = sink_changes(spark, tmp_path / "out")
    # Everything committed before the start, then possibly some of what followed: a prefix.
    assert len(got) >= expected and got == work.changes[: len(got)]
    end = committed_end(tmp_path / "ckpt")
    assert end is not None and end <= current_lsn(source_dsn)
    assert slot_confirmed(source_dsn) <= max(end, idle_mark(tmp_path / "staging"))


def test_a_new_column_ends_the_stream_before_it_and_a_restart_picks_it_up(spark, source_dsn, tmp_path):
    work = Workload(source_dsn)
    work.run(5)
    acct_before = [c for c in work.changes if c[0] == "acct"]
    df = _reader(spark, source_dsn, tmp_path / "staging", table="acct").load()  # the schema is fixed here
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE acct ADD COLUMN note text")
        conn.execute("INSERT INTO acct VALUES (1000, 'n', 1, 1000, 'hello')")
    query = _start(df, tmp_path, {"availableNow": True})
    with pytest.raises(StreamingQueryException, match="SchemaChangedError.*new column 'note'"):
        query.awaitTermination(300)
    assert sink_changes(spark, tmp_path / "out", per_table="acct") == acct_before

    df = _reader(spark, source_dsn, tmp_path / "staging", table="acct").load()  # schema read again
    assert "note" in df.schema.fieldNames()
    query = _start(df, tmp_path, {"availableNow": True})
    assert query.awaitTermination(300)
    out = spark.read.option("mergeSchema", "true").parquet(str(tmp_path / "out"))
    rows = out.orderBy("_commit_lsn", "_seq").collect()
    assert len(rows) == len(acct_before) + 1
    assert rows[-1]["id"] == 1000 and rows[-1]["note"] == "hello"


def test_a_transaction_larger_than_a_segment_and_the_staging_budget_goes_through_in_pieces(spark, source_dsn, tmp_path):
    work = Workload(source_dsn)
    work.run(3)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("SET logical_decoding_work_mem = '64kB'")  # streamed by the server too
        with conn.transaction():
            for _ in range(400):
                work.txn(conn)
    work.run(3)
    # a tiny staging budget: the stager pauses whenever Spark has something to consume, yet the big
    # transaction (larger than the budget) still gets staged whole
    df = _reader(spark, source_dsn, tmp_path / "staging", table="acct", binary="true", segmentMaxRows="500",
                 maxRowsPerBatch="100", stagingMaxBytes="20000").load()
    query = _start(df, tmp_path, {"availableNow": True})
    try:
        assert query.awaitTermination(300)
    finally:
        query.stop()
    assert query.exception() is None
    assert sink_changes(spark, tmp_path / "out", per_table="acct") == [c for c in work.changes if c[0] == "acct"]
    big = spark.read.parquet(str(tmp_path / "out")).groupBy("_xid").agg(
        F.count("*").alias("n"), F.min("_seq").alias("lo"), F.max("_seq").alias("hi")).orderBy(F.desc("n")).first()
    assert big["n"] > 2000 and big["lo"] == 0  # positions in the whole transaction, across pieces


def test_heartbeats_move_a_quiet_slot_and_never_past_the_checkpoint(spark, source_dsn, tmp_path):
    work = Workload(source_dsn)
    work.run(3)
    df = _reader(spark, source_dsn, tmp_path / "staging", heartbeatSeconds="0.5").load()
    query = _start(df, tmp_path, {"processingTime": "200 milliseconds"})
    try:
        _wait_until(lambda: _commits(tmp_path) >= 1, "a first batch", query=query)
        with psycopg.connect(source_dsn, autocommit=True) as conn:  # WAL of an unpublished table only
            conn.execute("CREATE TABLE other AS SELECT g FROM generate_series(1, 20000) g")
        quiet_wal = current_lsn(source_dsn)

        def moved() -> bool:
            _slot_behind_checkpoint(source_dsn, tmp_path)
            return slot_confirmed(source_dsn) > quiet_wal

        _wait_until(moved, "the slot to pass WAL written while the published tables were quiet", query=query)
    finally:
        query.stop()
    _slot_behind_checkpoint(source_dsn, tmp_path)
    assert sink_changes(spark, tmp_path / "out") == work.changes


def test_a_slot_moved_past_the_checkpoint_by_another_consumer_fails_the_query(spark, source_dsn, tmp_path):
    work = Workload(source_dsn)
    work.run(3)
    query = _start(_reader(spark, source_dsn, tmp_path / "staging").load(), tmp_path, {"availableNow": True})
    assert query.awaitTermination(300)
    work.run(3)
    with psycopg.connect(source_dsn, autocommit=True) as conn:  # someone else consumes the slot
        deadline = time.monotonic() + 60  # once the finished query's walsender has let it go
        while conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = 's'").fetchone()[0]:
            assert time.monotonic() < deadline, "the finished query still holds slot s"
            time.sleep(0.2)
        conn.execute("SELECT count(*) FROM pg_logical_slot_get_binary_changes('s', NULL, NULL,"
                     " 'proto_version', '1', 'publication_names', 'pub')")
    work.run(1)
    query = _start(_reader(spark, source_dsn, tmp_path / "staging").load(), tmp_path, {"availableNow": True})
    with pytest.raises(StreamingQueryException, match="advanced to .* by another consumer"):
        query.awaitTermination(300)


def test_the_warm_up_starts_the_streams_python_workers_and_reads_nothing(spark):
    """The background read a streaming run starts (``spark/datasource/warmup.py``) ends without
    error and yields no row: its planning worker and its task's worker are left for the stream."""
    from walspark.spark.datasource.warmup import warm_workers

    warmup = warm_workers(spark)
    warmup.wait()
    assert warmup.error is None
    assert spark.read.format("walspark_warmup").schema("x int").load().collect() == []
