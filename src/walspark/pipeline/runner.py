"""One run of the pipeline, start to end, in the calling thread.

The code of ``walspark run`` and of :class:`walspark.Pipeline`; neither adds logic of its own. See
docs/design/pipeline.md §6 for why a kill at any point leaves the target equal to the source at
some commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from walspark.pipeline.preflight import needs_snapshot
from walspark.pipeline.progress import StreamProgress
from walspark.pipeline.queries import run_queries
from walspark.pipeline.settings import RunSettings
from walspark.pipeline.status import Tracker, status_writer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from walspark.storage.layout import TargetLayout

__all__ = ["check_change_logs", "run_pipeline"]


def run_pipeline(spark: SparkSession, settings: RunSettings, *, say: Callable[[str], None] = print,
                 tracker: Tracker | None = None, on_sync: Callable[[object], None] | None = None) -> int:  # fmt: skip
    """Run the pipeline; returns the number of query (re)starts. Stops on ``KeyboardInterrupt`` or
    ``settings.stop.request()`` (from any thread: the query stops between batches).

    ``tracker`` records the phases and batches for :meth:`PipelineHandle.status`; ``on_sync``
    receives the :class:`TableSync` once it exists (the handle asks it which tables are copying).
    """
    from walspark.spark import register
    from walspark.spark.session import check_python_workers

    tracker = tracker or Tracker()
    tracker.publish_to(status_writer(settings.layout, settings.slot))  # for `walspark status --target`
    if tracker.state == "created":
        tracker.phase("starting")
    check_python_workers(spark)
    register(spark)
    if settings.change_data_feed:  # read where tables are made or written: the snapshot, the sink, the sync
        from walspark.spark.lake.tables import CHANGE_DATA_FEED

        spark.conf.set(CHANGE_DATA_FEED, "true")
    if settings.on_slot_loss == "resnapshot":  # a lost slot made again, every table to be copied again
        from walspark.pipeline.slot_loss import resnapshot_lost_slot

        resnapshot_lost_slot(settings, say)
    snapshot = needs_snapshot(settings)
    if not snapshot:  # a new snapshot copies every table again: what an older run left no longer counts
        check_change_logs(spark, settings.layout, say)
    warmup = None
    if not settings.once or snapshot:  # a query will run: its first batch finds its Python workers started
        # (a --once run without a snapshot usually applies its few changes from the driver)
        from walspark.spark.datasource.warmup import warm_workers

        warmup = warm_workers(spark)
    starts = None  # None: the run failed
    try:
        starts = _run(spark, settings, say, tracker, on_sync, snapshot=snapshot)
        return starts
    finally:
        if warmup is not None:
            if starts == 0 and warmup.running:  # seconds on a busy host: said, not a silent pause
                say("waiting for Spark's Python workers to finish starting (begun in case the run needed a query)")
            warmup.wait()  # a session stopped under its job logs errors


def _run(spark: SparkSession, settings: RunSettings, say: Callable[[str], None], tracker: Tracker,
         on_sync: Callable[[object], None] | None, *, snapshot: bool) -> int:  # fmt: skip
    from walspark.spark.lake.sink import ApplyChanges

    if snapshot:
        from walspark.spark.snapshot.initial import run_snapshot
        from walspark.spark.tablesync.state import SyncStore

        tracker.phase("snapshot")
        say(f"snapshot: copying the tables of publication {settings.publication} at slot {settings.slot}'s"
            " consistent point")  # fmt: skip
        result = run_snapshot(spark, settings.dsn, settings.publication, settings.slot, settings.target,
                              progress=lambda update: say(update.line()), state=settings.state,
                              failover=settings.failover_slot)  # fmt: skip
        tracker.snapshot_done(len(result.tables))
        say(f"snapshot of {len(result.tables)} table(s) done; streaming from {result.consistent_point_text}")
        SyncStore(settings.layout).reset()  # every table is freshly copied
    from walspark.spark.tablesync.sync import TableSync
    from walspark.staging.offsets import last_committed_end

    catalog = None
    if settings.catalog_schema:
        from walspark.spark.lake.catalog_tables import CatalogTables

        catalog = CatalogTables(spark, settings.layout, settings.catalog_schema, say)
    sync = TableSync(spark, settings.dsn, settings.publication, settings.layout,
                     check_seconds=settings.sync_check_seconds, chunk_rows=settings.sync_chunk_rows,
                     say=say, catalog=catalog)  # fmt: skip
    sink = (ApplyChanges(settings.target).app_id(settings.app_id or f"walspark-run/{settings.slot}")
            .scd2(*settings.scd2).state(settings.state).table_sync(sync))  # fmt: skip
    sync.attach(sink)
    if on_sync is not None:
        on_sync(sync)
    progress = StreamProgress(settings.dsn, say, query_name=settings.query_name, tracker=tracker,
                              slot=settings.slot)  # fmt: skip
    spark.streams.addListener(progress.listener)
    sync.resume_after(last_committed_end(settings.checkpoint))
    sync.start()  # tables that joined, left or are to be re-copied: before the first batch
    if not settings.once:
        say(f"streaming slot {settings.slot} into {settings.target} (Ctrl-C stops after the current batch)")
    try:
        starts = run_queries(spark, settings, sink, sync, say, tracker, progress)
        if settings.once and not settings.stop.requested.is_set():
            sync.finish()  # --once ends with every table copied and handed off to the stream
    finally:
        sync.stop()
        spark.streams.removeListener(progress.listener)
        progress.close()
    sink.close()  # the last batch's progress rows, written in the background
    from walspark.staging.two_phase import release_committed_prepared

    release_committed_prepared(settings.staging, settings.checkpoint)  # the last batch's, not the next run's
    return starts


def check_change_logs(spark: SparkSession, layout: TargetLayout, say: Callable[[str], None]) -> None:
    """What an older walspark's change-log mode left (:mod:`walspark.spark.lake.upgrade`): raise
    :class:`~walspark.spark.lake.upgrade.UnfoldedChangeLogs` for changes a table lacks, unless
    that table is to be copied again (a ``walspark resnapshot`` request, or a copy under way),
    whose copy holds them; say once per run that the change logs are no longer written."""
    from walspark.spark.lake.upgrade import UnfoldedChangeLogs, change_logs, mark_copied, unfolded_change_logs
    from walspark.spark.tablesync.state import SyncStore

    if not change_logs(layout):
        return
    store = SyncStore(layout)
    copying = {t for _, tables, _ in store.pending_requests() for t in tables}
    copying |= {(s.schema, s.table) for s in store.all() if s.syncing}
    unfolded = []
    for log in unfolded_change_logs(spark, layout):
        if (log.schema, log.table) in copying:
            mark_copied(layout, log)
        else:
            unfolded.append(log)
    if unfolded:
        raise UnfoldedChangeLogs(layout, unfolded)
    say(f"{layout.changes}: change logs of an older walspark's --change-log mode, every change in its table; "
        "no longer written (delete the folder once nothing reads it)")  # fmt: skip
