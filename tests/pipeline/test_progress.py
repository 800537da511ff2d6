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
