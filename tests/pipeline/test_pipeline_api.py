"""``walspark.Pipeline``: the library form of ``walspark run``, as a notebook uses it.

Real PostgreSQL 18 and the suite's Spark session: ``run_once`` (snapshot, then changes),
``start`` / ``status`` / ``stop`` and a resumed second start (no batch applied twice), errors
raised with the CLI's message, and the builder's own checks.
"""

from __future__ import annotations

import json
import re
import time

import psycopg
import pytest
from deltalake import DeltaTable

from tests.scenarios.support import assert_matches_publication, run_once
from walspark.storage.layout import TargetLayout

pytestmark = pytest.mark.spark


def _shop(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, qty int, note text)")
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO orders SELECT g, g % 7, 'n' || g FROM generate_series(1, 200) g")
        conn.execute("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 20) g")
        conn.execute("CREATE PUBLICATION shop FOR TABLE orders, customers")


def _pipeline(spark, dsn: str, target: str):  # type: ignore[no-untyped-def]
    from walspark import Pipeline

    lines: list[str] = []
    return Pipeline(spark, dsn=dsn, publication="shop", slot="shop_slot", target=target).on_progress(lines.append)


def test_run_once_snapshot_then_changes(spark, pg18_dsn, tmp_path):
    _shop(pg18_dsn)
    target = str(tmp_path / "lake")
    pipeline = _pipeline(spark, pg18_dsn, target)
    first = pipeline.run_once()
    assert first.snapshot_tables == 2
    clock = tmp_path / "lake" / "_walspark" / "maintenance.json"
    assert json.loads(clock.read_text())["last"], "the first run starts the maintenance clock"
    clock.write_text(json.dumps({"last": "2026-01-01T00:00:00+00:00"}))  # as if a day had passed
    lines: list[str] = []
    pipeline = pipeline.maintenance(24, retain_hours=0).on_progress(lines.append)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("UPDATE orders SET qty = qty + 1 WHERE id <= 50")
        conn.execute("DELETE FROM orders WHERE id > 190")
        conn.execute("INSERT INTO orders VALUES (1000, 1, 'new')")
        second = pipeline.run_once()
        assert sum(line.startswith("maintenance done: ") for line in lines) == 1, lines
        assert json.loads(clock.read_text())["last"] > "2026-01-01", "the run recorded its maintenance"
        orders = tmp_path / "lake" / "public" / "orders"  # VACUUM kept only what the table reads
        on_disk = {str(p) for p in orders.rglob("*.parquet") if "_delta_log" not in p.parts}
        assert on_disk == {u.removeprefix("file://") for u in DeltaTable(str(orders)).file_uris()}
        assert second.snapshot_tables is None, "the slot exists: no second snapshot"
        assert second.rows == 50 + 10 + 1 and second.batches >= 1, second
        assert second.rows_by_table == {"public.orders": 61}, second
        assert second.slot_position is not None
        assert_matches_publication(conn, spark, target, "shop", context="after run_once")
    from walspark.pipeline.status import read_status_files

    (status,) = read_status_files(TargetLayout(str(tmp_path / "lake")))  # what `walspark status --target` reads
    assert status["state"] == "finished" and status["slot"] == "shop_slot", status
    assert status["rows"] == 61 and status["slot_position"] == second.slot_position, status


def test_a_run_with_nothing_or_little_to_apply_starts_no_query(spark, pg18_dsn, tmp_path, monkeypatch):
    """An idle ``run_once`` confirms the slot and follows the catalog without a streaming query
    (walspark.pipeline.idle); one with a few changes applies them from the driver as the query's
    next batch (walspark.pipeline.driver_batch); the query goes on after both, none lost or doubled."""
    _shop(pg18_dsn)
    target = str(tmp_path / "lake")
    lines: list[str] = []
    pipeline = _pipeline(spark, pg18_dsn, target).on_progress(lines.append)
    first = pipeline.run_once()  # the snapshot: the checkpoint is begun from the driver, at the slot's position
    assert first.query_starts == 0, first
    checkpoint = tmp_path / "lake" / "_walspark" / "checkpoints" / "shop_slot"
    assert (checkpoint / "commits" / "0").is_file() and (checkpoint / "metadata").is_file()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO orders VALUES (500, 5, 'before the idle run')")
        driver = pipeline.run_once()
        assert driver.query_starts == 0 and driver.rows == 1, driver  # a pending change: the driver batch
        assert any(re.search(r"rows/s; no query started\), [\d.]+ s behind the source, slot lag 0 KiB$", line)
                   for line in lines), lines  # fmt: skip
        slot = "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'shop_slot'"
        before = conn.execute(slot).fetchone()[0]
        conn.execute("ALTER TABLE customers ADD COLUMN email text")  # DDL alone: no change to stream
        conn.execute("CREATE TABLE unpublished (id int)")
        conn.execute("INSERT INTO unpublished SELECT generate_series(1, 100)")  # WAL the slot need not keep
        idle = pipeline.run_once()
        assert idle.query_starts == 0 and idle.rows == 0, idle
        assert any(line.startswith("nothing to apply up to ") for line in lines), lines
        assert conn.execute(slot).fetchone()[0] > before, "the idle run confirmed the slot"
        columns = DeltaTable(str(tmp_path / "lake" / "public" / "customers")).schema().to_arrow().names
        assert "email" in columns, "the idle run followed the catalog"
        conn.execute("UPDATE orders SET qty = 0 WHERE id <= 10")
        conn.execute("INSERT INTO customers VALUES (100, 'new', 'x@example.org')")
        # the window of an idle run killed between its mark and the slot's advance: the mark is
        # ahead of the slot, which stays where it was; the next run streams from there
        from walspark.staging.stager import record_idle_mark

        now = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
        record_idle_mark(str(tmp_path / "lake" / "_walspark" / "staging" / "shop_slot"), int(now))
        after = pipeline.max_rows_per_batch(4).run_once()  # whole transactions: the 10 rows, then 1
        assert after.query_starts == 0 and after.rows == 11 and after.batches == 2, after
        assert_matches_publication(conn, spark, target, "shop", context="after the idle run")
        conn.execute("UPDATE orders SET qty = 1 WHERE id <= 5")
        monkeypatch.setenv("WALSPARK_DRIVER_BATCH", "0")  # the query goes on after the driver's batches
        said = len(lines)
        query = pipeline.run_once()
        assert query.query_starts == 1 and query.rows == 5, query
        # the query's last batch has its line before run_once returns (Spark's listener events come late)
        assert any(line.startswith(f"batch {query.last_batch_id}: 5 changes applied") for line in lines[said:]), lines
        assert_matches_publication(conn, spark, target, "shop", context="after a query following driver batches")
    ids = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert ids == list(range(ids[-1] + 1)) and ids[-1] >= 4, ids  # one numbering from batch 0, no gap
    notes = [(table, json.loads(meta)["batch_id"]) for table in ("orders", "customers")
             for (meta,) in spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/{table}`").select("userMetadata")
             .collect() if meta and "batch_id" in json.loads(meta)]  # fmt: skip
    assert len(notes) == len(set(notes)) and len(notes) >= 3, f"a batch applied twice: {sorted(notes)}"


def _last_apply_by_delta_rs(spark, path: str) -> bool:
    """Whether the newest commit of a batch's apply to the Delta table at ``path`` was delta-rs's."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "engineInfo", "userMetadata").collect()
    applies = [(v, engine) for v, engine, meta in history if meta and "batch_id" in json.loads(meta)]
    return max(applies)[1].startswith("delta-rs")


def test_a_backlog_is_applied_from_the_driver_and_a_query_reads_its_batches_there(spark, pg18_dsn, tmp_path,
                                                                                  monkeypatch):  # fmt: skip
    """A ``--once`` run applies a backlog from the driver (driver_batch), batch by batch within the
    driver's read limit, a batch too big for it left to the query; a query's batch is read on the
    driver from its staged segments too (driver_batch.DriverReads). Either way a big batch of only
    inserts is appended by delta-rs with no Spark job, a big MERGE is still Spark's (from the
    driver's Arrow), and a small table's changes are merged from the driver. Every run equals the
    publication. (Every batch of a target on object storage is Spark's alone:
    tests/scenarios/test_object_storage.py.)"""
    from walspark.pipeline import driver_batch

    _shop(pg18_dsn)
    target = str(tmp_path / "lake")
    lines: list[str] = []
    pipeline = _pipeline(spark, pg18_dsn, target).on_progress(lines.append)
    pipeline.run_once()  # the snapshot
    # "big": over 20 rows; a MERGE of over ten times that many keys is Spark's
    monkeypatch.setenv("WALSPARK_DRIVER_MERGE_ROWS", "20")
    orders, customers = f"{target}/public/orders", f"{target}/public/customers"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:

        def big_inserts(first: int, queries: int, context: str) -> None:
            conn.execute(f"INSERT INTO orders SELECT g, g % 7, 'n' || g FROM generate_series({first}, {first + 299}) g")
            conn.execute("UPDATE customers SET name = name || '!' WHERE id <= 5")
            run = pipeline.run_once()
            assert run.query_starts == queries and run.rows == 305, run
            assert _last_apply_by_delta_rs(spark, orders) and _last_apply_by_delta_rs(spark, customers)
            assert_matches_publication(conn, spark, target, "shop", context=context)

        def scattered_updates(queries: int) -> None:
            for i in range(120):  # a backlog staged in many segments: one batch, not the first segment's alone
                conn.execute(f"UPDATE orders SET qty = qty + 1 WHERE id = {20 + i}")
            run = pipeline.option("segmentMaxRows", 20).run_once()
            assert run.query_starts == queries and run.rows == 120 and run.batches == 1, run

        big_inserts(1001, 0, "big inserts from the driver")
        conn.execute("UPDATE orders SET qty = qty + 1 WHERE id > 1100")
        conn.execute("DELETE FROM orders WHERE id <= 10")
        conn.execute("INSERT INTO customers VALUES (100, 'new')")
        run = pipeline.run_once()
        assert run.query_starts == 0 and run.rows == 211, run
        assert not _last_apply_by_delta_rs(spark, orders), "a MERGE of 210 keys is Spark's"
        assert _last_apply_by_delta_rs(spark, customers)
        assert_matches_publication(conn, spark, target, "shop", context="a big MERGE beside a small one")
        # the batch decoded while it stages (driver_batch.DecodeAhead), in ranges of 400 bytes of
        # changes, each let decode before the batch is read; with a row limit, the ranges past a
        # batch's end are left out and decoded again by the next batch
        ahead: list[tuple[int, int]] = []
        read = driver_batch.DecodeAhead.batches

        def after_every_range(self, end):  # type: ignore[no-untyped-def]
            self.waiting.clear()  # set again once the thread found no whole range left
            assert self.waiting.wait(60)
            batches = read(self, end)
            ahead.append((self.rows_ahead, self.ranges_dropped))
            return batches

        monkeypatch.setattr(driver_batch, "AHEAD_BYTES", 400)
        monkeypatch.setattr(driver_batch.DecodeAhead, "batches", after_every_range)
        for i in range(120):
            conn.execute(f"UPDATE orders SET note = note || '+' WHERE id = {60 + i}")
        run = pipeline.option("segmentMaxRows", 20).max_rows_per_batch(50).run_once()
        assert run.query_starts == 0 and run.rows == 120 and run.batches == 3, run
        assert all(rows > 0 for rows, _ in ahead) and ahead[0][1] > 0, ahead
        assert_matches_publication(conn, spark, target, "shop", context="decoded ahead, batches of 50 rows")
        ahead.clear()
        scattered_updates(0)
        assert len(ahead) == 1 and ahead[0][0] > 0 and ahead[0][1] == 0, ahead
        monkeypatch.setattr(driver_batch.DecodeAhead, "batches", read)
        monkeypatch.setattr(driver_batch, "AHEAD_BYTES", 8 << 20)
        # a head start (what `walspark run --once` begins before its Spark session): the backlog
        # staged and decoded before the run asks; not used when the run's options differ, and then
        # stopped before the query reads what it staged
        from walspark.pipeline import head_start

        for used in (True, False):
            conn.execute("UPDATE orders SET qty = qty + 1 WHERE id <= 30")  # 20 rows left there
            conn.execute("INSERT INTO customers VALUES (%s, 'head')", (200 + used,))
            head = head_start.begin(pipeline.settings(once=True))
            assert head is not None
            head._thread.join()
            assert head.reader is not None and head.ahead is not None and head.found.changes == 21
            # checked before the head start, as the CLI does (its stager holds the slot)
            run = (pipeline if used else pipeline.max_rows_per_batch(100)).run(once=True, check=False)
            assert head_start.claim(pipeline.settings()) is None and head.reader is None
            assert run.rows == 21 and run.query_starts == (0 if used else 1), run
            assert_matches_publication(conn, spark, target, "shop", context=f"head start used: {used}")
        # a driver reading at most 16 KiB of segments a batch (~2.4 KiB a segment of one row): the
        # small transactions from the driver, the big one by the query
        for i in range(3):
            conn.execute(f"UPDATE customers SET name = name || '.' WHERE id = {i + 1}")
        conn.execute("UPDATE orders SET qty = qty + 1 WHERE id > 1000")
        monkeypatch.setenv("WALSPARK_DRIVER_READ_BYTES", "16384")
        said = len(lines)
        run = pipeline.option("segmentMaxRows", 1).run_once()
        assert run.query_starts == 1 and run.rows == 303 and run.batches >= 2, run
        assert any("no query started" in line for line in lines[said:]), lines[said:]
        assert_matches_publication(conn, spark, target, "shop", context="a big transaction left to the query")
        monkeypatch.delenv("WALSPARK_DRIVER_READ_BYTES")
        # a run whose backlog the driver does not take: its query reads each batch on the driver
        monkeypatch.setattr(driver_batch, "enabled", lambda settings, found: False)
        big_inserts(2001, 1, "big inserts of a query read on the driver")
        scattered_updates(1)
        monkeypatch.undo()
        # The query's last batch is committed, but Spark never called its source's commit(end):
        # the slot stands one batch behind. The next run confirms it there before it peeks, so
        # it need not read that batch again (more rows than the peek reads here) nor start a query.
        from walspark.pipeline import idle
        from walspark.staging.offsets import last_committed_end

        end = last_committed_end(tmp_path / "lake" / "_walspark" / "checkpoints" / "shop_slot")
        confirmed = "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'shop_slot'"
        assert end is not None and int(conn.execute(confirmed).fetchone()[0]) < end
        monkeypatch.setattr(idle, "PEEK_ROWS", 100)
        run = pipeline.run_once()
        assert run.query_starts == 0 and run.rows == 0, run
        assert int(conn.execute(confirmed).fetchone()[0]) >= end
        assert_matches_publication(conn, spark, target, "shop", context="nothing pending after a query")


class _SparkProgress:
    """A ``StreamingQueryListener`` in the pipeline's session: each batch's progress, by batch id."""

    def __init__(self, spark, name: str) -> None:  # type: ignore[no-untyped-def]
        from pyspark.sql.streaming import StreamingQueryListener

        self.spark, self.batches = spark, {}
        seen = self.batches

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None: ...
            def onQueryIdle(self, event) -> None: ...
            def onQueryTerminated(self, event) -> None: ...

            def onQueryProgress(self, event) -> None:
                if event.progress.name == name:
                    seen[event.progress.batchId] = json.loads(event.progress.json)

        self.listener = _Listener()
        spark.streams.addListener(self.listener)

    def assert_counts(self, handle) -> None:  # type: ignore[no-untyped-def]
        """Spark's progress of every batch the handle applied says its changes (its events come later)."""
        applied = {p["batchId"]: p["numInputRows"] for p in handle.recentProgress}
        deadline = time.monotonic() + 60
        while not applied.keys() <= self.batches.keys() and time.monotonic() < deadline:
            time.sleep(0.2)
        spark_rows = {b: self.batches[b]["numInputRows"] for b in applied if b in self.batches}
        assert spark_rows == applied, (applied, self.batches)
        for b, rows in applied.items():  # the source's count, and rates made from it
            progress = self.batches[b]
            assert progress["sources"][0]["numInputRows"] == rows, progress
            assert (progress["processedRowsPerSecond"] > 0) == (rows > 0), progress


def test_start_status_stop_and_resume(spark, pg18_dsn, tmp_path):
    _shop(pg18_dsn)
    target = str(tmp_path / "lake")
    port = _free_port()
    pipeline = _pipeline(spark, pg18_dsn, target).trigger_seconds(0.5).sync_check_seconds(1.0).metrics(port)
    progress = _SparkProgress(spark, "walspark-run-shop_slot")
    handle = pipeline.start()
    try:
        _wait(lambda: handle.status().state == "streaming", handle, "streaming")
        assert handle.status().snapshot_tables == 2
        before = _scrape(port)  # Prometheus's view of the same run, scraped while it streams
        assert before[("walspark_state", ("shop_slot", "streaming"))] == 1, before
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO orders SELECT g, 1, 'live' FROM generate_series(201, 260) g")
            _wait(lambda: handle.status().rows >= 60, handle, "the live rows applied")
            # the batch's line (its duration, the slot's lag) comes from Spark's listener, a moment later
            _wait(lambda: _scrape(port).get(("walspark_slot_lag_bytes", ("shop_slot",))) is not None, handle,
                  "the batch's line in the metrics")  # fmt: skip
            after = _scrape(port)
            assert (
                after[("walspark_batches_total", ("shop_slot",))] > before[("walspark_batches_total", ("shop_slot",))]
            )
            assert after[("walspark_changes_applied_total", ("insert", "shop_slot", "public.orders"))] == 60, after
            assert after[("walspark_batch_duration_seconds_count", ("shop_slot",))] >= 1, after
            assert after[("walspark_lag_seconds", ("shop_slot",))] >= 0, after
            assert after[("walspark_slot_retained_wal_bytes", ("shop_slot",))] > 0, after
            assert after[("walspark_tables_copying", ("shop_slot",))] == 0, after
            conn.execute("INSERT INTO customers VALUES (30, 'live')")  # a later batch: read on the driver
            _wait(lambda: handle.status().rows >= 61, handle, "the next live row applied")
            status = handle.status()
            assert status.active and status.batches >= 2 and status.last_batch_id is not None, status
            assert status.slot_position is not None, status
            last = handle.last_progress  # and Structured Streaming's names for the same
            assert last is not None and handle.lastProgress["batchId"] == last.batch_id, handle.recentProgress
            assert sum(p["numInputRows"] for p in handle.recentProgress) == status.rows, handle.recentProgress
            assert handle.isActive and handle.query is not None and handle.query.isActive
            progress.assert_counts(handle)  # Spark's numInputRows: the changes applied, whoever read them
            assert_matches_publication(conn, spark, target, "shop", context="while streaming")
    finally:
        spark.streams.removeListener(progress.listener)
        started = time.monotonic()
        assert handle.stop(timeout=120)
    assert time.monotonic() - started < 60, "stop took too long"
    assert not handle.is_active and handle.status().state == "stopped"
    with pytest.raises(OSError):
        _scrape(port)  # the run's server stopped with it (the next run serves on the same port)
    assert handle.await_termination(0) is True and handle.awaitTermination(0) is True
    assert handle.query is None and not handle.isActive
    assert not [q for q in spark.streams.active if q.name == "walspark-run-shop_slot"]
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("UPDATE orders SET qty = 99 WHERE id > 250")
        conn.execute("INSERT INTO customers VALUES (21, 'late')")
    again = pipeline.start()  # resumes from the checkpoint and the slot: no snapshot, no doubles
    try:
        _wait(lambda: again.status().rows >= 11, again, "the resumed run's rows")
        assert again.status().snapshot_tables is None
        resumed = _scrape(port)  # a run of its own: its counters start from nothing
        assert resumed[("walspark_changes_applied_total", ("update", "shop_slot", "public.orders"))] == 10, resumed
        assert resumed[("walspark_changes_applied_total", ("insert", "shop_slot", "public.customers"))] == 1, resumed
        assert ("walspark_changes_applied_total", ("insert", "shop_slot", "public.orders")) not in resumed, resumed
    finally:
        assert again.stop(timeout=120)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        assert_matches_publication(conn, spark, target, "shop", context="after the resumed run")
    notes = [(table, json.loads(meta)["batch_id"]) for table in ("orders", "customers")
             for (meta,) in spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/{table}`").select("userMetadata")
             .collect() if meta and "batch_id" in json.loads(meta)]  # fmt: skip
    assert notes, "no Delta commit carries a batch note: the no-double-apply check would be vacuous"
    assert len(notes) == len(set(notes)), f"a batch applied twice: {sorted(notes)}"


def _free_port() -> int:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def _scrape(port: int) -> dict[tuple[str, tuple[str, ...]], float]:
    """``/metrics`` as Prometheus reads it: each sample by name and label values (sorted by label name)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(v for _, v in sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip


def _wait(condition, handle, what: str, timeout: float = 300) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if not handle.is_active:
            handle.await_termination()  # raises the pipeline's error
            raise AssertionError(f"the pipeline ended before {what}: {handle.status()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {handle.status()}"
        time.sleep(0.3)


def test_errors_have_the_cli_message(spark, pg18_dsn, tmp_path):
    from walspark import Pipeline
    from walspark.cli.errors import describe
    from walspark.source.errors import SourceError

    _shop(pg18_dsn)
    target = str(tmp_path / "lake")
    wrong = Pipeline(spark, dsn=pg18_dsn, publication="no_such_pub", slot="s1", target=target)
    with pytest.raises(SourceError) as once:
        wrong.run_once()
    with pytest.raises(SourceError) as started:
        wrong.start()  # the preflight runs in the caller's thread: nothing starts
    output = run_once(pg18_dsn, "no_such_pub", "s1", target, expect_exit=1)
    assert describe(once.value, pg18_dsn) in output and "no_such_pub" in output, output
    assert describe(started.value, pg18_dsn) == describe(once.value, pg18_dsn)
    assert not (tmp_path / "lake").exists(), "nothing may be written before the checks pass"
    # A failure inside the running thread comes back from await_termination.
    handle = Pipeline(spark, dsn=pg18_dsn, publication="shop", slot="s2", target=target).start()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _wait(lambda: handle.status().state == "streaming", handle, "streaming")
        conn.execute("DROP PUBLICATION shop")  # the stream's publication disappears under it
        conn.execute("INSERT INTO orders VALUES (5000, 1, 'x')")
    with pytest.raises(Exception) as failed:
        assert handle.await_termination(180), "the pipeline did not fail"
    assert handle.status().state == "failed" and handle.status().error
    assert "shop" in describe(failed.value, pg18_dsn), describe(failed.value, pg18_dsn)


def test_builder_checks_its_inputs(spark, pg18_dsn, tmp_path):
    from walspark import Pipeline
    from walspark.source.errors import InvalidName, OptionError

    _shop(pg18_dsn)
    target = str(tmp_path / "lake")
    with pytest.raises(InvalidName, match="invalid slot name 'Bad-Slot'"):
        Pipeline(spark, dsn=pg18_dsn, publication="shop", slot="Bad-Slot", target=target)
    pipeline = Pipeline(spark, dsn=pg18_dsn, publication="shop", slot="ok_slot", target=target)
    with pytest.raises(OptionError, match="--trigger-seconds"):
        pipeline.trigger_seconds(0)
    with pytest.raises(OptionError, match="--max-rows-per-batch"):
        pipeline.max_rows_per_batch(0)
    nope = pipeline.scd2("public.nope")
    with pytest.raises(OptionError, match=r"--scd2 'public\.nope' is not a table of publication 'shop'"):
        nope.check()
    with pytest.raises(OptionError, match=r"--scd2 'public\.nope'"):
        nope.run_once()
    assert not (tmp_path / "lake").exists()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ok_slot'").fetchone()[0] == 0


def test_a_python_worker_too_slow_to_start_restarts_the_query(spark, pg18_dsn, tmp_path):
    """Spark waits a fixed 10 s for a new Python worker to connect back; on a host whose CPUs are
    all busy, starting one can take longer. ``walspark run`` restarts the query from its checkpoint
    (a bounded number of times in a row) instead of exiting: here the interpreter Spark starts for
    the streaming source sleeps 15 s before its first start, as on an overloaded host."""
    import os
    import subprocess
    import sys

    _shop(pg18_dsn)
    mark = tmp_path / "slept"
    slow = tmp_path / "slow-python"
    slow.write_text(f"""#!/bin/sh
case "$*" in *python_streaming_source_runner*)
    if [ ! -e "{mark}" ]; then touch "{mark}"; sleep 15; fi ;;
esac
exec "{sys.executable}" "$@"
""")
    slow.chmod(0o755)
    target = str(tmp_path / "lake")
    run_once(pg18_dsn, "shop", "shop_slot", target)  # the snapshot, in this process
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("UPDATE orders SET qty = qty + 1 WHERE id <= 20")
    args = [
        sys.executable,
        "-m",
        "walspark.cli",
        "run",
        "--dsn",
        pg18_dsn,
        "--publication",
        "shop",
        "--slot",
        "shop_slot",
        "--target",
        target,
        "--once",
        "--master",
        "local[2]",
    ]
    result = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYSPARK_PYTHON": str(slow), "WALSPARK_DRIVER_BATCH": "0"},
    )
    assert mark.exists(), "the streaming source's interpreter was never started"
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    said = result.stdout + result.stderr
    assert "could not start a Python worker" in said and "restarting the query from its checkpoint (1/5)" in said, said[
        -4000:
    ]
    assert "starting the streaming query" in said, said[-4000:]  # the pause before its first batch, said
    jvm_noise = ("WARNING: Using incubator modules", "Setting default log level", "To adjust logging level")
    assert not [line for line in said.splitlines() if line.startswith(jvm_noise)], said[-4000:]  # only -v shows them
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        assert_matches_publication(conn, spark, target, "shop", context="after the restarted query")
