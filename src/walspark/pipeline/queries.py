"""The streaming query of a pipeline: start it, restart it after each schema change, stop it cleanly.

A restart that stops at the same transaction again ends the run with :class:`SchemaStuckError` —
never a restart loop. See docs/design/pipeline.md §6.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from walspark.pipeline.progress import StreamProgress, count_input_rows
from walspark.pipeline.settings import RunSettings
from walspark.pipeline.status import Tracker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from walspark.pipeline.head_start import HeadStart
    from walspark.spark.datasource.commits import CommitNotes

__all__ = ["MAX_SCHEMA_RESTARTS", "STOP_GRACE_SECONDS", "WORKER_START_BACKOFF", "WORKER_START_RETRIES", "SchemaStuckError", "check_progress", "follow_catalog",
           "maintain_if_due", "past_barrier", "run_queries", "skip_query", "stop_between_batches"]  # fmt: skip

#: Restarts after schema changes before a run gives up. Each restart passes at least one
#: transaction (else the run stops at once, see :class:`SchemaStuckError`), so this only bounds a
#: backlog with very many DDL statements in one run; the next run goes on.
MAX_SCHEMA_RESTARTS = 1000

#: Query restarts after Spark failed to start a Python worker in time, in a row (no batch applied
#: in between). Spark waits a fixed 10 s for a new worker process to connect back; on a host whose
#: CPUs are all busy, starting Python and importing pyspark can take longer. Each restart waits a
#: little longer first (:data:`WORKER_START_BACKOFF` seconds times the attempt), so a burst of
#: load can pass. The restarted query resumes from its checkpoint, so nothing is lost or applied
#: twice; a host where it keeps happening gets the error.
WORKER_START_RETRIES = 5
WORKER_START_BACKOFF = 3.0
_WORKER_START_FAILURES = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)

#: How long a stop waits for the running batch to end before interrupting it.
STOP_GRACE_SECONDS = 20.0


class SchemaStuckError(RuntimeError):
    """A schema change the pipeline cannot get past: the restarted query stopped at the same place."""


def run_queries(spark: SparkSession, settings: RunSettings, sink: Any, sync: Any, say: Callable[[str], None],
                tracker: Tracker | None = None, progress: StreamProgress | None = None) -> int:  # fmt: skip
    """Start the streaming query, again after each schema change; returns how many were started.

    Returns early (0 starts) when a stop was requested before the first query, or when a
    ``--once`` run needs none (:func:`skip_query`). ``progress`` prints the batch lines; the data
    source's :class:`~walspark.spark.datasource.commits.CommitNotes` tell its stager which batches
    are committed.
    """
    from walspark.spark.datasource.commits import CommitNotes

    commits = CommitNotes(settings.staging, settings.query_name)
    spark.streams.addListener(commits.listener)
    try:
        return _run_queries(spark, settings, sink, sync, say, tracker, progress, commits)
    finally:
        spark.streams.removeListener(commits.listener)


def _run_queries(spark: SparkSession, settings: RunSettings, sink: Any, sync: Any, say: Callable[[str], None],
                 tracker: Tracker | None, progress: StreamProgress | None, commits: CommitNotes) -> int:  # fmt: skip
    from pyspark.errors import StreamingQueryException

    from walspark.pipeline.driver_batch import DriverReads, source_options
    from walspark.pipeline.head_start import barrier_before
    from walspark.spark.datasource.schema import is_schema_change
    from walspark.spark.lake.maintenance import MaintenanceSchedule

    starts = worker_failures = 0
    schedule = MaintenanceSchedule(settings.layout, settings.maintenance_hours)
    barrier = barrier_before(settings)  # a previous run's, if it stopped at one
    tracker = tracker or Tracker()
    progress = progress or StreamProgress(settings.dsn, say, tracker=tracker)

    while not settings.stop.requested.is_set():
        options = source_options(settings)
        if settings.once and starts == 0 and skip_query(spark, settings, sink, sync, options, schedule, say, tracker,
                                                        progress):  # fmt: skip
            return starts
        if settings.once and starts == 0:  # its first batch comes seconds later, after Spark's start-up
            say("starting the streaming query (Spark plans it and starts its Python processes before its first batch)")
        starts += 1
        changes = spark.readStream.format("pgoutput").options(**options).load()
        follow_catalog(spark, sink, changes.schema, sync.published())
        reads = DriverReads(spark, settings, options, changes.schema)

        def apply(batch_df, batch_id: int, reads: DriverReads = reads) -> None:
            applied = tracker.batch_applied(batch_id, sink.foreach_batch(batch_df, batch_id, arrow=reads(batch_id)))
            count_input_rows(spark, settings.query_name, batch_id, applied.rows)  # Spark's numInputRows

        writer = (
            changes.writeStream.foreachBatch(apply)
            .option("checkpointLocation", settings.checkpoint)
            .queryName(settings.query_name)
        )
        writer = (
            writer.trigger(availableNow=True)
            if settings.once
            else writer.trigger(processingTime=f"{settings.trigger_seconds} seconds")
        )
        query = writer.start()
        applied = tracker.batches
        tracker.query_started()
        if tracker.state in ("starting", "snapshot"):
            tracker.phase("streaming")
        settings.stop.deferred = True
        try:
            while not query.awaitTermination(0.5):  # type: ignore[arg-type]  # seconds, a float too; short steps: a stop request is seen between them
                if settings.stop.requested.is_set():
                    raise KeyboardInterrupt
                if not settings.once:  # a --once run maintains after its batches, below
                    maintain_if_due(spark, settings, schedule, say)
        except StreamingQueryException as exc:
            progress.catch_up(query)
            commits.catch_up(query)
            if is_schema_change(exc) and starts <= MAX_SCHEMA_RESTARTS:
                barrier = past_barrier(settings, barrier, say, "restarting the query")
                continue
            if any(failure in str(exc) for failure in _WORKER_START_FAILURES):
                worker_failures = 1 if tracker.batches > applied else worker_failures + 1
                if worker_failures <= WORKER_START_RETRIES:
                    tracker.error("PythonWorkerStartTimeout")  # got past: counted in the metrics
                    say(
                        f"Spark could not start a Python worker within its 10 s (a busy host): restarting the query "
                        f"from its checkpoint ({worker_failures}/{WORKER_START_RETRIES})"
                    )
                    settings.stop.requested.wait(WORKER_START_BACKOFF * worker_failures)
                    continue
            raise
        except KeyboardInterrupt:
            tracker.phase("stopping")
            say("stopping (the last batch completes or is replayed on the next run)")
            stop_between_batches(query)
            return starts
        finally:
            settings.stop.deferred = False
        progress.catch_up(query)  # the last batches' lines, whose listener events may come later
        commits.catch_up(query)
        if settings.once:  # everything the slot held is applied: DDL of since can be followed in full
            follow_catalog(spark, sink, changes.schema, sync.published(), drained=True)
            maintain_if_due(spark, settings, schedule, say)
        return starts
    return starts


def skip_query(spark: SparkSession, settings: RunSettings, sink: Any, sync: Any, options: dict[str, str],
               schedule: Any, say: Callable[[str], None], tracker: Tracker, progress: StreamProgress) -> bool:  # fmt: skip
    """A ``--once`` run that needs no query (:mod:`walspark.pipeline.idle`): nothing pending (the
    slot confirmed), or plain transactions (applied from the driver as the next batches,
    :mod:`walspark.pipeline.driver_batch`, past schema changes as the query's restarts get past
    them); then the catalog followed and maintenance as a drained query would. True if so: the
    run starts no query."""
    from walspark.pipeline.head_start import claim

    early = claim(settings)  # what a head start found, and the backlog it staged meanwhile
    try:
        return _skip_query(spark, settings, sink, sync, options, schedule, say, tracker, progress,
                           early.take(options, sync.store) if early else None)  # fmt: skip
    finally:
        if early is not None:
            early.close()  # before any query reads the slot


def _skip_query(spark: SparkSession, settings: RunSettings, sink: Any, sync: Any, options: dict[str, str],
                schedule: Any, say: Callable[[str], None], tracker: Tracker, progress: StreamProgress,
                head: HeadStart | None) -> bool:  # fmt: skip
    from walspark.pipeline.driver_batch import APPLIED, BARRIER, apply_from_driver, begin_checkpoint, enabled
    from walspark.pipeline.head_start import barrier_before
    from walspark.pipeline.idle import confirm_idle, pending
    from walspark.protocol import format_lsn
    from walspark.spark.datasource.source import PgoutputDataSource

    found = head.found if head is not None else pending(settings, sync.store)
    if found is None or (found.transactions and not enabled(settings, found)):
        return False
    if found.first_batch_end is not None and not begin_checkpoint(spark, settings, found.first_batch_end):
        return False
    if head is not None and head.reader is not None:
        source, schema, reader, ahead = head.source, head.schema, head.reader, head.ahead
    else:
        source, reader, ahead = PgoutputDataSource(options), None, None
        schema = source.schema()  # the query's own schema, computed here in-process
    if not found.transactions:
        confirm_idle(settings, found.position)
        say(f"nothing to apply up to {format_lsn(found.position)}: no query started")
    else:
        if tracker.state in ("starting", "snapshot"):
            tracker.phase("streaming")
        follow_catalog(spark, sink, schema, sync.published())  # as before a query
        barrier, restarts = barrier_before(settings), 0
        while (
            outcome := apply_from_driver(spark, settings, sink, source, schema, tracker, progress.report, reader, ahead)
        ) == BARRIER:
            reader = ahead = None
            restarts += 1  # a schema change: declared and followed as a query's restart does
            if restarts > MAX_SCHEMA_RESTARTS:
                return False
            barrier = past_barrier(settings, barrier, say, "reading on")
            source = PgoutputDataSource(options)
            schema = source.schema()
            follow_catalog(spark, sink, schema, sync.published())
        if outcome != APPLIED:
            return False
    follow_catalog(spark, sink, schema, sync.published(), drained=True)
    maintain_if_due(spark, settings, schedule, say)
    return True


def maintain_if_due(spark: SparkSession, settings: RunSettings, schedule: Any, say: Callable[[str], None]) -> None:
    """Maintain the Delta tables when the schedule says so (:mod:`walspark.spark.lake.maintenance`).

    Called between the waits on the running query: the stream goes on meanwhile (maintenance
    commits are Delta transactions of their own, and VACUUM keeps what the retention covers),
    and a stop request ends it between tables.
    """
    if not schedule.due():
        return
    from walspark.spark.lake.maintenance import maintain

    retention = "each table's retention" if settings.retain_hours is None else f"{settings.retain_hours:g} h"
    say(
        f"maintaining the Delta tables (progress rows folded, small files compacted, VACUUM of files older "
        f"than {retention})"
    )
    done = maintain(spark, settings.target, state=settings.state, retain_hours=settings.retain_hours,
                    stop=settings.stop.requested, say=say)  # fmt: skip
    freed = sum(m.bytes_before - m.bytes_after for m in done)
    say(f"maintenance done: {len(done)} table(s), {freed:,} bytes freed")
    schedule.done()


def stop_between_batches(query: Any) -> None:
    """Stop the query when no batch runs (bounded by :data:`STOP_GRACE_SECONDS`).

    Interrupting a batch is safe (it is replayed), but Spark's stream thread then unwinds through
    the interrupted Delta and Python-worker calls, noisily; between batches it just ends.
    """
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline and query.isActive and query.status.get("isTriggerActive"):
        time.sleep(0.1)
    query.stop()


def follow_catalog(spark: SparkSession, sink: Any, schema: Any, tables: Any, drained: bool = False) -> None:
    """Bring the existing Delta tables to the catalog's columns (before a query, and after one that
    drained the slot): DDL is not streamed, and a table altered but not written to since would
    otherwise lag behind. ``tables``: the published ``(schema, table)`` pairs as the table sync
    last read them (a table it has not seen yet is being copied, with the catalog's columns)."""
    from walspark.spark.datasource.schema import OutputLayout

    declared = OutputLayout.from_schema(schema, None).tables
    sink.follow_catalog(spark, [(s, t, declared[f"{s}.{t}"]) for s, t in tables if f"{s}.{t}" in declared],
                        drained=drained)  # fmt: skip


def past_barrier(settings: RunSettings, previous: Any, say: Callable[[str], None], how: str) -> Any:
    """A schema change stopped the stream: check it is not where the last one stopped
    (:func:`check_progress`), say so, and return it; ``how`` the run goes on ("restarting the query")."""
    barrier = check_progress(settings, previous)
    say(f"schema changed in the source ({barrier.line() if barrier else 'see the log'}): {how} with the new shape")
    return barrier


def check_progress(settings: RunSettings, previous: Any) -> Any:
    """The barrier the query just stopped at; :class:`SchemaStuckError` if it is where the last one was.

    The stager records every shape of the stopping transaction that did not fit, and the next
    query declares them, so a restart that stops before the same transaction again would do so
    for ever: the shapes cannot share one schema (a column with two incompatible types inside one
    transaction, say). Stop with what the user can do instead.
    """
    from walspark.protocol import format_lsn
    from walspark.staging.barrier import read_barrier

    barrier = read_barrier(settings.staging)
    if barrier is not None and previous is not None and barrier.end_lsn == previous.end_lsn:
        reasons = "; ".join(sorted({f"table {t}: {r}" for t, r in (*previous.reasons, *barrier.reasons)}))
        raise SchemaStuckError(
            f"cannot get past the schema change in the transaction ending at {format_lsn(barrier.end_lsn)} "
            f"({reasons}): its changes do not fit one schema. Start over from a new snapshot: drop the "
            f"slot ('walspark slot drop --slot {settings.slot}') and run into a new --target, which copies the "
            "tables as they are now"
        )
    return barrier
