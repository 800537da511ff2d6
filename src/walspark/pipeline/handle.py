"""A pipeline running in a background thread, and what the caller can do with it.

A thread, so the caller's SparkSession is the one used; :meth:`PipelineHandle.stop` is the clean
way out. See docs/design/pipeline.md §6.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from walspark.pipeline.metrics import serve_metrics
from walspark.pipeline.runner import run_pipeline
from walspark.pipeline.settings import RunSettings
from walspark.pipeline.status import BatchProgress, PipelineStatus, RunSummary, Tracker, error_kind

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["PipelineHandle", "error_line", "run_tracked", "tables_copying"]

log = logging.getLogger(__name__)


def error_line(exc: BaseException, dsn: str | None) -> str:
    """A failure as one redacted line for :attr:`PipelineStatus.error` (never the DSN's password)."""
    from walspark.source.dsn import redact_secrets
    from walspark.source.errors import SourceError

    text = exc.message if isinstance(exc, SourceError) else (str(exc) or type(exc).__name__)
    line = " ".join(text.split())
    return redact_secrets(line if len(line) <= 600 else line[:597] + "...", dsn)


def run_tracked(spark: SparkSession, settings: RunSettings, say: Callable[[str], None], tracker: Tracker,
                on_sync: Callable[[Any], None] | None = None) -> int:  # fmt: skip
    """:func:`run_pipeline` with the tracker's end state set: stopped, finished or failed; its
    metrics served meanwhile (``settings.metrics_port``)."""
    syncs: list[Any] = []

    def seen(sync: Any) -> None:
        syncs.append(sync)
        if on_sync is not None:
            on_sync(sync)

    with serve_metrics(settings, tracker, lambda: tables_copying(syncs[-1] if syncs else None)):
        try:
            starts = run_pipeline(spark, settings, say=say, tracker=tracker, on_sync=seen)
        except BaseException as exc:
            tracker.failed(error_line(exc, settings.dsn), error_kind(exc))
            raise
        tracker.phase("stopped" if settings.stop.requested.is_set() else "finished")
    return starts


def tables_copying(sync: Any) -> tuple[str, ...]:
    """The tables the run's table sync is copying now (``schema.table``, sorted; none without one)."""
    if sync is None:
        return ()
    try:
        return tuple(sorted(f"{s.schema}.{s.table}" for s in sync.store.all() if s.syncing))
    except Exception:  # a status read must not fail on a file being rewritten
        log.debug("could not read the table sync state", exc_info=True)
        return ()


class PipelineHandle:
    """A started pipeline: :meth:`status`, :meth:`stop`, :meth:`await_termination`.

    Returned by :meth:`walspark.Pipeline.start`; the streaming query runs until stopped (or
    until it fails). Safe to call from any thread, including a signal handler (:meth:`stop`
    with ``wait=False``). A Structured Streaming user's names work too: ``isActive``,
    ``awaitTermination``, ``lastProgress`` and ``recentProgress`` (dicts with ``batchId``,
    ``numInputRows`` and ``timestamp``; the query's own progress of a batch has the same
    ``numInputRows``); :attr:`query` is the Spark query underneath while one runs (a schema
    change restarts it under the same name).
    """

    def __init__(self, spark: SparkSession, settings: RunSettings, say: Callable[[str], None]) -> None:
        self.settings = settings
        self._spark = spark
        self._tracker = Tracker()
        self._tracker.phase("starting")
        self._error: BaseException | None = None
        self._sync: Any = None
        self._thread = threading.Thread(target=self._run, args=(spark, say), name=f"walspark-{settings.slot}",
                                        daemon=True)  # fmt: skip

    def _start(self) -> PipelineHandle:
        self._thread.start()
        return self

    def _run(self, spark: SparkSession, say: Callable[[str], None]) -> None:
        try:
            run_tracked(spark, self.settings, say, self._tracker, on_sync=self._on_sync)
        except BaseException as exc:  # kept for await_termination, in the caller's thread
            self._error = exc
            log.debug("the pipeline failed", exc_info=True)

    def _on_sync(self, sync: Any) -> None:
        self._sync = sync

    @property
    def is_active(self) -> bool:
        return self._thread.is_alive()

    @property
    def last_progress(self) -> BatchProgress | None:
        """The last micro-batch applied (None before the first)."""
        recent = self._tracker.recent_progress()
        return recent[-1] if recent else None

    @property
    def recent_progress(self) -> tuple[BatchProgress, ...]:
        """The last micro-batches applied (up to 64), oldest first."""
        return self._tracker.recent_progress()

    @property
    def query(self) -> StreamingQuery | None:
        """The pipeline's Spark streaming query while it runs (named :attr:`RunSettings.query_name
        <walspark.pipeline.settings.RunSettings.query_name>`, one per slot), else None."""
        return next((q for q in self._spark.streams.active if q.name == self.settings.query_name), None)

    # Structured Streaming's names (StreamingQuery), for users who reach for them
    @property
    def isActive(self) -> bool:
        return self.is_active

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        last = self.last_progress
        return None if last is None else last.as_dict()

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        return [p.as_dict() for p in self.recent_progress]

    def awaitTermination(self, timeout: float | None = None) -> bool:
        return self.await_termination(timeout)

    @property
    def exception(self) -> BaseException | None:
        """What ended the pipeline, if it failed (also raised by :meth:`await_termination`)."""
        return self._error

    def status(self) -> PipelineStatus:
        """What is known now without asking Spark or PostgreSQL anything (plus the sync's state file)."""
        return self._tracker.status(tables_copying(self._sync if self._thread.is_alive() else None))

    def summary(self) -> RunSummary:
        """Batches and change rows applied so far, as :meth:`walspark.Pipeline.run_once` returns them."""
        return self._tracker.summary()

    def stop(self, *, wait: bool = True, timeout: float | None = None) -> bool:
        """Ask the pipeline to stop between batches; with ``wait``, wait until its thread ended.

        Returns True once the thread has ended (False: still stopping after ``timeout`` seconds,
        or ``wait=False``). A stop during the initial snapshot takes effect when the snapshot is
        done (it is not cut off half-way); the next start resumes where this one stopped.
        Does not raise the pipeline's error: :meth:`await_termination` does.
        """
        self.settings.stop.request()
        if wait:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the pipeline ends (it runs until :meth:`stop` or a failure); re-raise its error.

        Returns True if it ended, False if ``timeout`` seconds passed first (as Spark's
        ``StreamingQuery.awaitTermination``).
        """
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        if self._error is not None:
            raise self._error
        return True

    def __repr__(self) -> str:
        s = self.status()
        return f"PipelineHandle(slot={self.settings.slot!r}, state={s.state!r}, batches={s.batches}, rows={s.rows})"
