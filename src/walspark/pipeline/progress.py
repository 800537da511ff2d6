"""The progress lines of a running pipeline, from Spark's streaming listener.

It only reports, and only this pipeline's query: telling the stager which batches are committed
is the data source's (:mod:`~walspark.spark.datasource.commits`). See docs/design/pipeline.md §6.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from walspark.pipeline.status import Tracker

__all__ = ["HEARTBEAT_SECONDS", "StreamProgress", "count_input_rows", "format_bytes", "format_rate"]

log = logging.getLogger(__name__)

#: While the stream finds nothing new, a line this often says it is up to date (Spark reports an
#: idle query every 10 s, ``spark.sql.streaming.noDataProgressEventInterval``).
HEARTBEAT_SECONDS = 60.0


class StreamProgress:
    """One console line per micro-batch: change rows, rows/s, and how far behind the source.

    Behind the source in time: the batch's latest commit time to the moment its line is said.
    In WAL (slot lag): the server's current position minus the end of the batch just committed,
    what is left to read. While idle, every ``heartbeat_seconds`` a line says the stream is up to
    date and the slot's lag (``slot``: its name). Registered as a Spark streaming listener.
    """

    def __init__(self, dsn: str, say: Callable[[str], None], *, query_name: str | None = None, tracker: Tracker | None = None, slot: str | None = None,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS) -> None:  # fmt: skip
        from pyspark.sql.streaming import StreamingQueryListener

        self.dsn = dsn
        self.say = say
        self.query_name = query_name
        self.tracker = tracker
        self.slot = slot
        self.heartbeat_seconds = heartbeat_seconds
        self.since = datetime.now(UTC)
        self._query_ids: set[str] = set()
        self._said_through = -1  # the last batch id whose line was said (by the listener or catch_up)
        self._lock = threading.RLock()
        self._conn: Any = None  # psycopg's, opened at the first line that asks the server
        self._last_line = self._last_change = time.monotonic()
        progress = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:
                progress.started(event)

            def onQueryProgress(self, event) -> None:
                progress.batch(event.progress)

            def onQueryIdle(self, event) -> None:
                progress.idle(event)

            def onQueryTerminated(self, event) -> None:
                pass

        self.listener = _Listener()

    def batch(self, progress) -> None:
        if not self.ours(progress):
            return
        with self._lock:  # batches come in order (the listener's events, then the query's recent ones)
            if progress.batchId <= self._said_through:
                return
            self._said_through = progress.batchId
        end = None
        try:
            end = json.loads(progress.sources[0].endOffset)["lsn"]
        except (IndexError, KeyError, TypeError, ValueError):
            log.debug("no end offset in the batch's progress", exc_info=True)
        # What the sink took, not Spark's count of rows read (0 for a batch the driver read)
        taken = self.tracker.rows_of(progress.batchId) if self.tracker is not None else None
        rows = progress.numInputRows if taken is None else taken
        self.report(progress.batchId, rows, progress.batchDuration / 1000.0, end)

    def catch_up(self, query) -> None:
        """Say the lines of the ended ``query``'s batches that the listener has not said yet.

        Spark posts progress events to listeners asynchronously: the last batch's event may come
        after the query ended and the run returned (or the process exited), and its line would be
        lost or said in the next run's output. The query's own recent progress is complete when
        it ends; a line said here is not said again when the event comes.
        """
        try:
            recent = list(query.recentProgress)
        except Exception:  # a progress line must never fail the run
            log.debug("could not read the query's recent progress", exc_info=True)
            return
        for progress in recent:
            self.batch(progress)

    def report(self, batch_id: int, rows: int, seconds: float, end_lsn: str | None, note: str = "") -> None:
        """The line of a batch that applied ``rows`` change rows in ``seconds``, ending at ``end_lsn``
        (``note``: said after the rate)."""
        if self.tracker is not None:
            self.tracker.batch_took(seconds)
        if not rows:
            return
        self._last_line = self._last_change = time.monotonic()
        seconds = max(seconds, 1e-3)
        lag = ""
        committed = self.tracker.commit_time_of(batch_id) if self.tracker is not None else None
        if committed is not None:
            lag = f", {format_seconds(max(time.time() - committed / 1e6, 0.0))} behind the source"
        try:
            if end_lsn is not None:
                lag_bytes, retained = self._lag_bytes(end_lsn)
                lag += f", slot lag {format_bytes(lag_bytes)}"
                if self.tracker is not None:
                    self.tracker.lag(lag_bytes, retained)
        except Exception:
            log.debug("could not compute the slot lag", exc_info=True)
        self.say(f"batch {batch_id}: {rows:,} changes applied in {seconds:.1f}s "
                 f"({format_rate(rows / seconds)} rows/s{note}){lag}")  # fmt: skip

    def started(self, event) -> None:
        """Remember this run's query by id: Spark's idle events carry no name."""
        if self.query_name is None or getattr(event, "name", None) == self.query_name:
            self._query_ids.add(str(event.id))

    def idle(self, event) -> None:
        """The query found nothing new: up to date. Said once per ``heartbeat_seconds`` of quiet."""
        if self.query_name is not None and str(getattr(event, "id", "")) not in self._query_ids:
            return  # another query of the session
        now = time.monotonic()
        if now - self._last_line < self.heartbeat_seconds:
            if self.tracker is not None:
                self.tracker.up_to_date(None)
            return
        self._last_line = now
        lag_bytes = retained = None
        try:
            lag_bytes, retained = self._slot_lag_bytes()
        except Exception:
            log.debug("could not read the slot's lag", exc_info=True)
        if self.tracker is not None:
            self.tracker.up_to_date(lag_bytes, retained)
        lag = "" if lag_bytes is None else f", slot lag {format_bytes(lag_bytes)}"
        self.say(f"up to date: no changes for {format_seconds(now - self._last_change)}{lag}")

    def ours(self, progress) -> bool:
        """Whether a progress event is of this run's query: its name, and a batch begun since."""
        from walspark.spark.datasource.commits import is_query_progress

        return is_query_progress(progress, self.query_name, self.since)

    def _ask(self, query: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """``query``'s row (None: no row), on one connection kept for the run."""
        from walspark.source.connect import connect_sql

        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = connect_sql(self.dsn)
            try:
                row = self._conn.execute(query, params).fetchone()
            except Exception:
                self.close()  # a broken connection: the next line connects again
                raise
        return None if row is None else tuple(row)

    def close(self) -> None:
        """Close the connection the lag is asked on (the run ended)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _lag_bytes(self, end_lsn: str) -> tuple[int, int | None]:
        """The server's WAL position minus ``end_lsn``, and the WAL it retains for the slot (None:
        no slot named, or not found), in one round trip."""
        row = self._ask("SELECT pg_current_wal_lsn() - %s::pg_lsn, (SELECT pg_current_wal_lsn() - restart_lsn"
                        " FROM pg_replication_slots WHERE slot_name = %s)", (end_lsn, self.slot))  # fmt: skip
        assert row is not None
        return int(row[0]), _int(row[1])

    def _slot_lag_bytes(self) -> tuple[int | None, int | None]:
        """The server's WAL position minus what the slot has confirmed (an idle stream confirms
        the WAL it skips, so this stays small while nothing is published), and minus its
        ``restart_lsn`` (the WAL the server retains for it)."""
        if self.slot is None:
            return None, None
        row = self._ask("SELECT pg_current_wal_lsn() - confirmed_flush_lsn, pg_current_wal_lsn() - restart_lsn"
                        " FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))  # fmt: skip
        return (None, None) if row is None else (_int(row[0]), _int(row[1]))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def count_input_rows(spark: Any, query_name: str, batch_id: int, rows: int) -> bool:
    """Make Spark's progress of the running batch ``batch_id`` of query ``query_name`` count ``rows``
    input rows; called from ``foreachBatch`` once the batch is applied. False: Spark's count stands.

    Why: Spark's ``numInputRows`` (and the input and processing rates, its UI's and listeners'
    figures) is the ``numOutputRows`` metric of the batch's source scan, which counts only rows
    Spark's own tasks read: 0 for a batch the driver read from its staged segments, twice the
    rows for one read twice. A Python stream reader cannot report metrics of its own, so the
    scan's metric is set here, on the driver, before Spark reads it at the end of the batch.
    """
    try:
        queries = [q for q in spark._jsparkSession.streams().active() if q.name() == query_name]
        execution = queries[0].streamingQuery().lastExecution() if queries else None
        if execution is None or execution.currentBatchId() != batch_id:
            return False
        leaves = execution.executedPlan().collectLeaves()
        scans = [leaf for leaf in (leaves.apply(i) for i in range(leaves.size()))
                 if leaf.getClass().getSimpleName() == "MicroBatchScanExec"]  # fmt: skip
        for i, scan in enumerate(scans):  # one per scan of the source: the batch's rows counted once
            scan.metrics().apply("numOutputRows").set(rows if i == 0 else 0)
        return bool(scans)
    except Exception:  # a progress figure must never fail the batch
        log.debug("could not set the batch's input rows in Spark's progress", exc_info=True)
        return False


def format_rate(per_second: float) -> str:
    """A rate as people read it: 1,664 / 12 / 0.4 (never "0" for a few rows in a slow batch)."""
    return f"{per_second:,.0f}" if per_second >= 10 else f"{per_second:.1f}"


def format_seconds(seconds: float) -> str:
    """A duration as people read it: 0.4 s, 12 s, 3 min 5 s, 2 h 10 min."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min {int(seconds % 60)} s"
    return f"{minutes // 60} h {minutes % 60} min"


def format_bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{max(n, 0) / 1024:.0f} KiB"
