"""The progress lines: only this run's query (by name, by when the batch began), its rows and rates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from walspark.pipeline.progress import StreamProgress


def _event(name: str, started: datetime) -> SimpleNamespace:
    """The fields of a Spark ``StreamingQueryProgress`` the filter reads, in Spark's own format."""
    return SimpleNamespace(name=name, timestamp=started.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z")


def test_a_late_event_of_an_earlier_run_under_the_same_name_is_not_this_runs() -> None:
    lines: list[str] = []
    progress = StreamProgress("dbname=unused", lines.append, query_name="walspark-run-s")
    assert not progress.ours(_event("walspark-run-s", progress.since - timedelta(seconds=3)))
    assert progress.ours(_event("walspark-run-s", progress.since + timedelta(seconds=1)))
    assert not progress.ours(_event("walspark-run-other", progress.since + timedelta(seconds=1)))


def test_an_event_without_a_timestamp_is_judged_by_its_name() -> None:
    progress = StreamProgress("dbname=unused", print, query_name="q")
    assert progress.ours(SimpleNamespace(name="q", timestamp=None))
    assert progress.since <= datetime.now(UTC)


def test_rates_of_small_batches_are_not_rounded_to_zero() -> None:
    from walspark.pipeline.progress import format_rate

    assert [format_rate(r) for r in (0.43, 5.0, 12.4, 1664.2)] == ["0.4", "5.0", "12", "1,664"]


def test_the_line_counts_the_change_rows_the_sink_took_not_the_rows_spark_read() -> None:
    """Change-log mode reads a batch twice (Spark's ``numInputRows`` doubles); the line says what the
    sink applied, or held for a table being copied."""
    from walspark.pipeline.status import Tracker

    tracker = Tracker()
    applied = SimpleNamespace(schema="public", table="t", rows=3, skipped=False, commit_lsn=None)
    held = SimpleNamespace(schema="public", table="u", rows=2, skipped=True, commit_lsn=None)
    tracker.batch_applied(7, [applied, held])
    lines: list[str] = []
    progress = StreamProgress("dbname=unused host=/nonexistent", lines.append, query_name="q", tracker=tracker)
    event = SimpleNamespace(name="q", timestamp=None, batchId=7, numInputRows=10, batchDuration=11_600,
                            sources=[SimpleNamespace(endOffset='{"lsn": "0/10"}')])
    progress.batch(event)
    assert lines == ["batch 7: 5 changes applied in 11.6s (0.4 rows/s)"], lines
    assert tracker.status().rows == 3  # the status counts applied rows only


def test_a_batch_line_says_how_far_behind_the_source_it_applied() -> None:
    """The batch's latest commit time (from the sink's results) to the moment of its line."""
    import time

    from walspark.pipeline.status import Tracker

    tracker = Tracker()
    committed = int((time.time() - 90) * 1e6)  # its last transaction committed 90 s ago
    tracker.batch_applied(3, [SimpleNamespace(schema="public", table="t", rows=2, skipped=False, commit_lsn=None,
                                              commit_time_us=committed)])  # fmt: skip
    lines: list[str] = []
    StreamProgress("dbname=unused", lines.append, tracker=tracker).report(3, 2, 0.5, None)
    assert lines and lines[0].startswith("batch 3: 2 changes applied in 0.5s (4.0 rows/s), 1 min 3"), lines
    assert lines[0].endswith(" s behind the source"), lines
    assert 89 <= tracker.status().lag_seconds <= 100


def test_an_idle_stream_says_it_is_up_to_date_once_per_interval(pg18_dsn: str) -> None:
    """Spark reports an idle query every 10 s; the heartbeat says so once per interval, with the
    slot's lag, for this run's query only (idle events carry an id, no name)."""
    import psycopg

    from walspark.pipeline.status import Tracker

    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('beat', 'pgoutput')")
    tracker = Tracker()
    lines: list[str] = []
    progress = StreamProgress(pg18_dsn, lines.append, query_name="q", tracker=tracker, slot="beat",
                              heartbeat_seconds=0.0)  # fmt: skip
    progress.started(SimpleNamespace(name="other", id="2"))
    progress.started(SimpleNamespace(name="q", id="1"))
    progress.idle(SimpleNamespace(id="2"))  # another query's idleness says nothing of this run
    assert lines == []
    progress.idle(SimpleNamespace(id="1"))
    assert len(lines) == 1 and lines[0].startswith("up to date: no changes for "), lines
    assert lines[0].endswith(" KiB") and ", slot lag " in lines[0], lines
    status = tracker.status()
    assert status.lag_seconds == 0.0 and status.slot_lag_bytes is not None, status
    assert status.slot_retained_bytes is not None and status.slot_retained_bytes >= 0, status  # the metrics' gauge
    progress.heartbeat_seconds = 3600.0
    progress.idle(SimpleNamespace(id="1"))  # within the interval: quiet
    assert len(lines) == 1, lines
