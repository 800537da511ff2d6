"""The progress lines of a running pipeline, from Spark's streaming listener.

One line per micro-batch (change rows, rows/s, how far the slot lags the server) goes to the
``say`` callable the caller chose: the CLI's stderr, a notebook's ``print``, a logger. The same
listener tells the stager that a batch reached Spark's commit log, so the slot can be confirmed.
Spark delivers listener events for every query of the session, so only this pipeline's query
(by name) is looked at: a notebook may run other streams beside it. Events reach listeners
asynchronously, so a batch that started before this listener existed (an earlier run's, in the
same session, under the same name) is not this run's and is ignored too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from walspark.pipeline.status import Tracker

__all__ = ["StreamProgress", "format_bytes", "format_rate"]

log = logging.getLogger(__name__)


class StreamProgress:
    """One console line per micro-batch: change rows, rows/s, and how far the slot lags the server.

    The lag is the server's current WAL position minus the end of the batch just committed,
    in bytes: what is left to read. Registered as a Spark streaming listener for the query.
    """

    def __init__(self, dsn: str, say: Callable[[str], None], staging: str | None = None, *,
                 query_name: str | None = None, tracker: Tracker | None = None) -> None:  # fmt: skip
        from pyspark.sql.streaming import StreamingQueryListener

        self.dsn = dsn
        self.say = say
        self.staging = staging
        self.query_name = query_name
        self.tracker = tracker
        self.since = datetime.now(UTC)
        progress = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

            def onQueryProgress(self, event) -> None:  # type: ignore[no-untyped-def]
                progress.batch(event.progress)

            def onQueryIdle(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

            def onQueryTerminated(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

        self.listener = _Listener()

    def batch(self, progress) -> None:  # type: ignore[no-untyped-def]
        if not self.ours(progress):
            return
        end = None
        try:
            end = json.loads(progress.sources[0].endOffset)["lsn"]
            if self.staging is not None:  # the batch is in the commit log: the stager may confirm it now
                from walspark.protocol import parse_lsn
                from walspark.spark.datasource.staging import note_committed_end

                note_committed_end(self.staging, parse_lsn(end))
        except Exception:
            log.debug("could not note the committed batch end", exc_info=True)
        # What the sink took, not Spark's count of rows read (change-log mode reads a batch twice)
        taken = self.tracker.rows_of(progress.batchId) if self.tracker is not None else None
        rows = progress.numInputRows if taken is None else taken
        self.report(progress.batchId, rows, progress.batchDuration / 1000.0, end)

    def report(self, batch_id: int, rows: int, seconds: float, end_lsn: str | None, note: str = "") -> None:
        """The line of a batch that applied ``rows`` change rows in ``seconds``, ending at ``end_lsn``
        (``note``: said after the rate)."""
        if not rows:
            return
        seconds = max(seconds, 1e-3)
        lag = ""
        try:
            if end_lsn is not None:
                lag_bytes = self._lag_bytes(end_lsn)
                lag = f", slot lag {format_bytes(lag_bytes)}"
                if self.tracker is not None:
                    self.tracker.lag(lag_bytes)
        except Exception:
            log.debug("could not compute the slot lag", exc_info=True)
        self.say(f"batch {batch_id}: {rows:,} changes applied in {seconds:.1f}s "
                 f"({format_rate(rows / seconds)} rows/s{note}){lag}")  # fmt: skip

    def ours(self, progress) -> bool:  # type: ignore[no-untyped-def]
        """Whether a progress event is of this run's query: its name, and a batch begun since."""
        if self.query_name is not None and getattr(progress, "name", self.query_name) != self.query_name:
            return False  # another query of the session
        started = getattr(progress, "timestamp", None)
        return not started or datetime.fromisoformat(started) >= self.since

    def _lag_bytes(self, end_lsn: str) -> int:
        from walspark.source.connect import connect_sql

        with connect_sql(self.dsn) as conn:
            return int(conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", (end_lsn,)).fetchone()[0])


def format_rate(per_second: float) -> str:
    """A rate as people read it: 1,664 / 12 / 0.4 (never "0" for a few rows in a slow batch)."""
    return f"{per_second:,.0f}" if per_second >= 10 else f"{per_second:.1f}"


def format_bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{max(n, 0) / 1024:.0f} KiB"
