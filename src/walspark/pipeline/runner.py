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

__all__ = ["run_pipeline"]


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
    snapshot = needs_snapshot(settings)
    warmup = None
    if not settings.once or snapshot:  # a query will run: its first batch finds its Python workers started
        # (a --once run without a snapshot usually applies its few changes from the driver)
        from walspark.spark.datasource.warmup import warm_workers

        warmup = warm_workers(spark)
    try:
        return _run(spark, settings, say, tracker, on_sync, snapshot=snapshot)
    finally:
        if warmup is not None:
            warmup.wait()


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

    sync = TableSync(spark, settings.dsn, settings.publication, settings.layout,
                     check_seconds=settings.sync_check_seconds, chunk_rows=settings.sync_chunk_rows,
                     say=say)  # fmt: skip
    sink = (ApplyChanges(settings.target).app_id(settings.app_id or f"walspark-run/{settings.slot}")
            .scd2(*settings.scd2).state(settings.state).table_sync(sync))  # fmt: skip
    if settings.change_log:
        sink = sink.change_log(settings.fold_seconds)
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
    ok = False
    try:
        starts = run_queries(spark, settings, sink, sync, say, tracker, progress)
        if settings.once and not settings.stop.requested.is_set():
            sync.finish()  # --once ends with every table copied and handed off to the stream
        ok = True
    finally:
        sync.stop()
        spark.streams.removeListener(progress.listener)
        progress.close()
        if not ok:
            sink.abort()  # no background fold outlives a failed run
    sink.close()  # the last batch's progress rows, written in the background; change logs folded
    from walspark.staging.two_phase import release_committed_prepared

    release_committed_prepared(settings.staging, settings.checkpoint)  # the last batch's, not the next run's
    return starts
