"""The progress listener hears only its own run's query: by name, and by when the batch began."""

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
