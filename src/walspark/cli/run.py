"""``walspark run``: stream a publication's changes from a slot into Delta tables, exactly once.

Every published table lands at ``<target>/<schema>/<table>``. A slot that does not exist yet is
created by the initial snapshot (``walspark snapshot``), which copies every table and hands over
at the slot's consistent point; an existing slot streams from its ``confirmed_flush_lsn``.

The pipeline is one Spark streaming query: the ``pgoutput`` source (all tables) and
:class:`walspark.spark.apply.ApplyChanges` as its ``foreachBatch`` sink. The source confirms
the slot only after the sink returned (``commit(end)``), the sink's MERGEs are idempotent per
batch, and the checkpoint lives under ``<target>/_walspark/`` — so a kill at any point and a
restart leave the target equal to the source at some commit.

A schema change (a column added, dropped, renamed or retyped, a table joining the publication)
ends the query with ``SchemaChangedError`` once every earlier change is delivered; ``run``
restarts the query, which declares the catalog's shape and the stream's (docs/design/pipeline.md
§4), and the sink evolves the Delta table. Each restart must get past the transaction that
stopped the previous query; one that stops at the same transaction again cannot, and ``run``
ends with one line saying which table, which change, and what to do — never a restart loop.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from walspark.cli.main import cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Restarts after schema changes before ``run`` gives up. Each restart passes at least one
#: transaction (else ``run`` stops at once, see :class:`SchemaStuckError`), so this only bounds a
#: backlog with very many DDL statements in one ``run`` invocation; the next run goes on.
MAX_SCHEMA_RESTARTS = 1000


class StopSwitch:
    """How ``walspark run`` is asked to stop: SIGTERM, Ctrl-C, or :meth:`request` from any thread.

    While the pipeline waits on its streaming query, a request only sets a flag; the wait, in
    short steps, sees it and stops the query. Raising ``KeyboardInterrupt`` there instead would
    interrupt a py4j call half-way and break the JVM gateway ("Answer from Java side is empty"),
    so a stop meant for a clean exit ended with an error. Elsewhere (the initial snapshot, the
    set-up) a signal still raises ``KeyboardInterrupt`` at once, as before.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.deferred = False  # True while waiting on the query: stop between its batches

    def request(self) -> None:
        self.requested.set()

    def signal(self, signum: int, frame: object) -> None:
        self.requested.set()
        if not self.deferred:
            raise KeyboardInterrupt


class SchemaStuckError(RuntimeError):
    """A schema change the pipeline cannot get past: the restarted query stopped at the same place."""


@dataclass
class RunSettings:
    """What one ``run`` needs (the command's options, typed)."""

    dsn: str
    publication: str
    slot: str
    target: str
    once: bool = False
    scd2: tuple[str, ...] = ()
    app_id: str | None = None
    trigger_seconds: float = 1.0
    max_rows_per_batch: int | None = None
    options: dict[str, str] = field(default_factory=dict)
    stop: StopSwitch = field(default_factory=StopSwitch, repr=False)
    #: Seconds between checks of the publication's tables and of ``walspark resnapshot`` requests.
    sync_check_seconds: float = 5.0
    #: Rows per chunk of a table copied while the stream runs: a crash resumes with the chunks not
    #: yet committed (each wave of chunks is one Delta commit).
    sync_chunk_rows: int = 50_000

    @property
    def home(self) -> str:
        return f"{self.target.rstrip('/')}/_walspark"

    @property
    def checkpoint(self) -> str:
        return f"{self.home}/checkpoints/{self.slot}"

    @property
    def staging(self) -> str:
        return f"{self.home}/staging/{self.slot}"


def _needs_snapshot(settings: RunSettings) -> bool:
    """A missing slot, or a snapshot of this slot that did not complete, means (re)snapshot."""
    import psycopg

    from walspark.source.slots import get_slot
    from walspark.spark.snapshot import read_record

    record = read_record(settings.target)
    if record is not None and record.slot == settings.slot and not record.complete:
        return True
    with psycopg.connect(settings.dsn, autocommit=True) as conn:
        return get_slot(conn, settings.slot) is None


class StreamProgress:
    """One console line per micro-batch: change rows, rows/s, and how far the slot lags the server.

    The lag is the server's current WAL position minus the end of the batch just committed,
    in bytes: what is left to read. Registered as a Spark streaming listener for the query.
    """

    def __init__(self, dsn: str, say, staging: str | None = None) -> None:  # type: ignore[no-untyped-def]
        from pyspark.sql.streaming import StreamingQueryListener

        self.dsn = dsn
        self.say = say
        self.staging = staging
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
        import json

        if self.staging is not None:
            try:  # the batch is in the commit log: let the stager confirm it now (note_committed_end)
                from walspark.protocol import parse_lsn
                from walspark.spark.staging import note_committed_end

                note_committed_end(self.staging, parse_lsn(json.loads(progress.sources[0].endOffset)["lsn"]))
            except Exception:
                log.debug("could not note the committed batch end", exc_info=True)
        rows = progress.numInputRows
        if not rows:
            return
        seconds = max(progress.batchDuration / 1000.0, 1e-3)
        lag = ""
        try:
            end = json.loads(progress.sources[0].endOffset)["lsn"]
            lag = f", slot lag {_format_bytes(self._lag_bytes(end))}"
        except Exception:
            log.debug("could not compute the slot lag", exc_info=True)
        self.say(f"batch {progress.batchId}: {rows:,} changes applied in {seconds:.1f}s "
                 f"({rows / seconds:,.0f} rows/s){lag}")  # fmt: skip

    def _lag_bytes(self, end_lsn: str) -> int:
        from walspark.source.connect import connect_sql

        with connect_sql(self.dsn) as conn:
            return int(conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", (end_lsn,)).fetchone()[0])


def _format_bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{max(n, 0) / 1024:.0f} KiB"


def run_pipeline(spark: SparkSession, settings: RunSettings, *, say=print) -> int:  # type: ignore[no-untyped-def]
    """Run the pipeline; returns the number of query (re)starts. Stops on ``KeyboardInterrupt`` or
    ``settings.stop.request()`` (from any thread: the query stops between batches)."""
    from walspark.spark import register
    from walspark.spark.apply import ApplyChanges

    register(spark)
    if _needs_snapshot(settings):
        from walspark.spark.snapshot import run_snapshot

        result = run_snapshot(spark, settings.dsn, settings.publication, settings.slot, settings.target,
                              progress=lambda update: say(update.line()))  # fmt: skip
        say(f"snapshot of {len(result.tables)} table(s) done; streaming from {result.consistent_point_text}")
        from walspark.spark.tablesync_state import SyncStore

        SyncStore.for_target(settings.target).reset()  # every table is freshly copied
    from walspark.spark.tablesync import TableSync

    sync = TableSync(spark, settings.dsn, settings.publication, settings.target,
                     check_seconds=settings.sync_check_seconds, chunk_rows=settings.sync_chunk_rows,
                     say=say)  # fmt: skip
    sink = (ApplyChanges(settings.target).app_id(settings.app_id or f"walspark-run/{settings.slot}")
            .scd2(*settings.scd2).table_sync(sync))  # fmt: skip
    sync.attach(sink)
    progress = StreamProgress(settings.dsn, say, settings.staging)
    spark.streams.addListener(progress.listener)
    sync.start()  # tables that joined, left or are to be re-copied: before the first batch
    try:
        starts = _run_queries(spark, settings, sink, sync, say)
        if settings.once:
            sync.finish()  # --once ends with every table copied and handed off to the stream
    finally:
        sync.stop()
        spark.streams.removeListener(progress.listener)
    sink.flush()  # the last batch's progress rows, written in the background
    from walspark.spark.two_phase import release_committed_prepared

    release_committed_prepared(settings.staging, settings.checkpoint)  # the last batch's, not the next run's
    return starts


def _run_queries(spark: SparkSession, settings: RunSettings, sink, sync, say) -> int:  # type: ignore[no-untyped-def]
    """Start the streaming query, again after each schema change; returns how many were started."""
    from pyspark.errors import StreamingQueryException

    from walspark.spark.shapes import read_barrier

    starts = 0
    barrier = read_barrier(settings.staging)  # a previous run's, if it stopped at one
    while True:
        starts += 1
        options = {"dsn": settings.dsn, "slot": settings.slot, "publication": settings.publication,
                   "stagingPath": settings.staging, **settings.options}  # fmt: skip
        if settings.max_rows_per_batch:
            options["maxRowsPerBatch"] = str(settings.max_rows_per_batch)
        changes = spark.readStream.format("pgoutput").options(**options).load()
        _follow_catalog(spark, sink, changes.schema, sync.published())
        writer = (
            changes.writeStream.foreachBatch(sink.foreach_batch)
            .option("checkpointLocation", settings.checkpoint)
            .queryName(f"walspark-run-{settings.slot}")
        )
        writer = writer.trigger(availableNow=True) if settings.once else writer.trigger(
            processingTime=f"{settings.trigger_seconds} seconds"
        )
        query = writer.start()
        settings.stop.deferred = True
        try:
            while not query.awaitTermination(0.5):  # short steps: a stop request is seen between them
                if settings.stop.requested.is_set():
                    raise KeyboardInterrupt
        except StreamingQueryException as exc:
            if "SchemaChangedError" in str(exc) and starts <= MAX_SCHEMA_RESTARTS:
                barrier = _check_progress(settings, barrier)
                say(f"schema changed in the source ({barrier.line() if barrier else 'see the log'}): restarting the "
                    "query with the new shape")
                continue
            raise
        except KeyboardInterrupt:
            say("stopping (the last batch completes or is replayed on the next run)")
            _stop_between_batches(query)
            return starts
        finally:
            settings.stop.deferred = False
        if settings.once:  # everything the slot held is applied: DDL of since can be followed in full
            _follow_catalog(spark, sink, changes.schema, sync.published(), drained=True)
        return starts


#: How long a stop waits for the running batch to end before interrupting it.
STOP_GRACE_SECONDS = 20.0


def _stop_between_batches(query) -> None:  # type: ignore[no-untyped-def]
    """Stop the query when no batch runs (bounded by :data:`STOP_GRACE_SECONDS`).

    Interrupting a batch is safe (it is replayed), but Spark's stream thread then unwinds through
    the interrupted Delta and Python-worker calls, noisily; between batches it just ends.
    """
    import time

    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline and query.isActive and query.status.get("isTriggerActive"):
        time.sleep(0.1)
    query.stop()


def _follow_catalog(spark: SparkSession, sink, schema, tables,  # type: ignore[no-untyped-def]
                    drained: bool = False) -> None:  # fmt: skip
    """Bring the existing Delta tables to the catalog's columns (before a query, and after one that
    drained the slot): DDL is not streamed, and a table altered but not written to since would
    otherwise lag behind. ``tables``: the published ``(schema, table)`` pairs as the table sync
    last read them (a table it has not seen yet is being copied, with the catalog's columns)."""
    from walspark.spark.schema import OutputLayout

    declared = OutputLayout.from_schema(schema, None).tables
    sink.follow_catalog(spark, [(s, t, declared[f"{s}.{t}"]) for s, t in tables if f"{s}.{t}" in declared],
                        drained=drained)  # fmt: skip


def _check_progress(settings: RunSettings, previous):  # type: ignore[no-untyped-def]
    """The barrier the query just stopped at; :class:`SchemaStuckError` if it is where the last one was.

    The stager records every shape of the stopping transaction that did not fit, and the next
    query declares them, so a restart that stops before the same transaction again would do so
    for ever: the shapes cannot share one schema (a column with two incompatible types inside one
    transaction, say). Stop with what the user can do instead.
    """
    from walspark.protocol import format_lsn
    from walspark.spark.shapes import read_barrier

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


@cli.command("run")
@click.option("--dsn", required=True, envvar="WALSPARK_DSN", help="Source database (libpq DSN or URI, or $WALSPARK_DSN).")
@click.option("--publication", required=True, help="Publication whose tables are replicated.")
@click.option("--slot", required=True, help="pgoutput slot; created (with the initial snapshot) if missing.")
@click.option("--target", required=True, type=click.Path(file_okay=False), help="Folder of the Delta tables.")
@click.option("--once", is_flag=True, help="Apply everything committed up to now, then exit 0 (availableNow).")
@click.option("--scd2", multiple=True, metavar="SCHEMA.TABLE", help="Keep history (SCD2) for this table; repeatable.")
@click.option("--app-id", default=None, help="Idempotence scope of the batches (default walspark-run/<slot>).")
@click.option("--max-rows-per-batch", type=click.IntRange(1), default=None, help="Bound on change rows per batch.")
@click.option("--trigger-seconds", type=click.FloatRange(0.1), default=1.0, show_default=True,
              help="Micro-batch interval when streaming.")
@click.option("--sync-check-seconds", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="How often tables joining or leaving the publication and re-copy requests are checked.")
@click.option("--sync-chunk-rows", type=click.IntRange(1), default=50_000, show_default=True,
              help="Rows per chunk when a table is copied while streaming (a crash resumes by chunk).")
@click.option("--master", default=None, help="Spark master (default local[*]; under spark-submit, its --master).")
def run(dsn: str, publication: str, slot: str, target: str, once: bool, scd2: tuple[str, ...], app_id: str | None,
        max_rows_per_batch: int | None, trigger_seconds: float, sync_check_seconds: float,
        sync_chunk_rows: int, master: str | None) -> None:  # fmt: skip
    """Replicate the publication's tables into Delta tables under TARGET, exactly once."""
    from walspark.cli.errors import cli_errors, quiet_spark_errors

    settings = RunSettings(dsn, publication, slot, target, once=once, scd2=scd2, app_id=app_id,
                           trigger_seconds=trigger_seconds, max_rows_per_batch=max_rows_per_batch,
                           sync_check_seconds=sync_check_seconds, sync_chunk_rows=sync_chunk_rows)  # fmt: skip
    with cli_errors(dsn):
        preflight(settings)  # before the JVM starts: a wrong DSN or name costs a second, not thirty
        from pyspark.sql import SparkSession

        from walspark.spark.session import spark_session

        # SIGTERM stops like Ctrl-C, between batches when the query runs (see StopSwitch)
        previous = {sig: signal.signal(sig, settings.stop.signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        owned = SparkSession.getActiveSession() is None  # in-process callers (tests) keep their session
        try:
            spark = spark_session("walspark-run", master=master, locations=(target,))
            if owned:
                quiet_spark_errors(spark)
            try:
                run_pipeline(spark, settings, say=lambda text: click.echo(text, err=True))
            finally:
                if owned:
                    spark.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def preflight(settings: RunSettings) -> None:
    """Everything about the source and the options that can fail without Spark, checked first.

    Names, the DSN, reachability, password, database, ``wal_level``, the REPLICATION attribute,
    the publication, and — when this run will take the initial snapshot — SELECT on the
    published tables. ``--scd2`` tables must be published (a typo would otherwise silently keep
    a mirror). Raises the :mod:`walspark.source.errors` class that says what to do.
    """
    from walspark.source.errors import OptionError
    from walspark.source.preflight import check_source
    from walspark.spark.snapshot import read_record

    if "/" in settings.slot or not settings.target:
        raise OptionError("--target must be a folder and --slot a slot name")
    record = read_record(settings.target)
    unfinished = record is not None and record.slot == settings.slot and not record.complete
    check = check_source(settings.dsn, publications=[settings.publication], slot=settings.slot)
    needs_snapshot = unfinished or not check.slot_exists
    if needs_snapshot:
        check_source(settings.dsn, publications=[settings.publication], snapshot=True, replication=False)
    if settings.scd2:
        _check_scd2_tables(settings)


def _check_scd2_tables(settings: RunSettings) -> None:
    """Every ``--scd2`` table must be published by one of the ``--publication`` list's publications.

    ``--publication`` is a comma-separated list (:func:`publication_list`, as the stream and the
    snapshot read it); the tables streamed are the union of the publications' tables.
    """
    from walspark.source.connect import connect_sql
    from walspark.source.errors import OptionError
    from walspark.source.publications import get_publication, publication_list

    names = publication_list(settings.publication)
    published: set[str] = set()
    with connect_sql(settings.dsn) as conn:
        for name in names:
            info = get_publication(conn, name)
            published.update(info.tables if info is not None else ())
    which = f"publication {names[0]!r}" if len(names) == 1 else "publications " + ", ".join(repr(n) for n in names)
    for table in settings.scd2:
        if table not in published:
            raise OptionError(f"--scd2 {table!r} is not a table of {which} "
                              f"(their tables: {', '.join(sorted(published)) or 'none'}); use schema.table")
