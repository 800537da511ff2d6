"""``walspark.Pipeline``: the library form of ``walspark run``, for notebooks and programs.

A builder in the style of Delta's; :meth:`Pipeline.run_once` and :meth:`Pipeline.start` run the
preflight checks first, in the caller's thread. It never installs signal handlers nor stops the
session it is given. See docs/design/pipeline.md §6.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from walspark.pipeline.handle import PipelineHandle, run_tracked
from walspark.pipeline.preflight import check_settings, preflight
from walspark.pipeline.settings import RunSettings, StopSwitch
from walspark.pipeline.status import RunSummary, Tracker
from walspark.pipeline.verify import ATTEMPTS, WAIT_SECONDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from walspark.pipeline.verify import VerifyResult

__all__ = ["Pipeline"]

log = logging.getLogger("walspark.pipeline")


def _log_line(text: str) -> None:
    log.info("%s", text)


#: The preflight's notes already said in this process (:meth:`Pipeline._preflight`).
_SAID: set[str] = set()


class Pipeline:
    """Replicate a publication's tables into Delta tables under ``target``, exactly once.

    >>> pipeline = Pipeline(spark, dsn=dsn, publication="shop", slot="shop_slot", target="/lake")
    >>> pipeline.scd2("public.orders").run_once()          # snapshot if needed, then catch up
    >>> handle = pipeline.on_progress(print).start()        # stream in the background
    >>> handle.status(); handle.stop()

    Every published table lands at ``<target>/<schema>/<table>``; walspark's checkpoint and
    bookkeeping live under ``<target>/_walspark``. A slot that does not exist yet is created by
    the initial snapshot. Option methods return a new builder and leave this one as it was (as
    ``ApplyChanges`` does); a builder can run again (e.g. ``start()`` after ``run_once()``) and
    resumes where the last run stopped.
    """

    def __init__(self, spark: SparkSession | None, *, dsn: str, publication: str, slot: str,
                 target: str) -> None:  # fmt: skip
        self._spark = spark  # None: the active session when the pipeline runs (a notebook's ``spark``)
        self._settings = RunSettings(dsn, publication, slot, str(target))
        self._say: Callable[[str], None] = _log_line
        check_settings(self._settings)  # names and shapes at once; the source is asked at run time

    @classmethod
    def from_settings(cls, settings: RunSettings, spark: SparkSession | None = None) -> Pipeline:
        """A builder holding ``settings`` (e.g. ``walspark run``'s options), checked now."""
        pipeline = cls(spark, dsn=settings.dsn, publication=settings.publication, slot=settings.slot,
                       target=settings.target)  # fmt: skip
        return pipeline._set(**{f.name: getattr(settings, f.name) for f in fields(settings)})

    # ------------------------------------------------------------------------------------------
    # options (chainable; each returns a new builder)

    def _with(self, **attributes: Any) -> Pipeline:
        """A copy of this builder with ``attributes`` replaced: the builder itself never changes."""
        new = copy.copy(self)
        new.__dict__.update(attributes)
        return new

    def _set(self, **changes: Any) -> Pipeline:
        settings = replace(self._settings, **changes)
        check_settings(settings)
        return self._with(_settings=settings)

    def scd2(self, *tables: str) -> Pipeline:
        """Keep history (SCD2) for these ``schema.table`` tables (added to earlier ones)."""
        return self._set(scd2=tuple(dict.fromkeys((*self._settings.scd2, *tables))))

    def app_id(self, app_id: str) -> Pipeline:
        """Idempotence scope of the batches' Delta commits (default ``walspark-run/<slot>``)."""
        return self._set(app_id=app_id)

    def trigger_seconds(self, seconds: float) -> Pipeline:
        """Micro-batch interval when streaming (``start``); default 1 s."""
        return self._set(trigger_seconds=float(seconds))

    def max_rows_per_batch(self, rows: int | None) -> Pipeline:
        """Bound on change rows per micro-batch (None: no bound)."""
        return self._set(max_rows_per_batch=rows)

    def sync_check_seconds(self, seconds: float) -> Pipeline:
        """How often tables joining or leaving the publication, and re-copy requests, are checked."""
        return self._set(sync_check_seconds=float(seconds))

    def sync_chunk_rows(self, rows: int) -> Pipeline:
        """Rows per chunk when a table is copied while streaming (a crash resumes by chunk)."""
        return self._set(sync_chunk_rows=int(rows))

    def maintenance(self, every_hours: float, retain_hours: float | None = None) -> Pipeline:
        """Maintain the Delta tables every ``every_hours`` while running (default 24; 0: never):
        compact small files, VACUUM files older than ``retain_hours`` (None: each table's
        retention, Delta's 7 days unless set), fold the progress rows. See :func:`walspark.maintain`."""
        return self._set(
            maintenance_hours=float(every_hours), retain_hours=None if retain_hours is None else float(retain_hours)
        )

    def change_data_feed(self, enabled: bool = True) -> Pipeline:
        """Give every Delta table of a source table (mirror or history) Delta's change data feed:
        created with it, and turned on for a table that lacks it at its next batch (a metadata
        commit). Each batch's changes are then readable as Delta's ``_change_type`` rows
        (``spark.read.option("readChangeFeed", "true")``, delta-rs's ``load_cdf``), and the progress
        table maps their ``_commit_version`` to the batch's LSNs. Sets
        ``spark.walspark.changeDataFeed`` on the run's session; ``False`` leaves tables that have
        the feed as they are (docs/applying.md, "Delta's change data feed")."""
        return self._set(change_data_feed=bool(enabled))

    def failover_slot(self, enabled: bool = True) -> Pipeline:
        """Create the slot as a failover slot, synchronized to standbys (default; PostgreSQL 17+).
        See docs/deploying.md, "Failover and lost slots"."""
        return self._set(failover_slot=bool(enabled))

    def on_slot_loss(self, action: str) -> Pipeline:
        """What a run does when its slot was lost (invalidated while walspark was away, or gone
        while the target holds its tables): ``"stop"`` (default) raises the one-line error with the
        fix; ``"resnapshot"`` creates the slot again and copies every table again into this target,
        each replaced in one Delta commit (the old version stays readable by time travel). See
        docs/deploying.md, "Failover and lost slots"."""
        return self._set(on_slot_loss=str(action))

    def state(self, location: str | None) -> Pipeline:
        """Where walspark keeps its own files (checkpoint, staging, snapshot record, table-sync
        state): a folder or an object-store URI. Default ``<target>/_walspark``."""
        return self._set(state=str(location) if location is not None else None)

    def catalog(self, schema: str | None) -> Pipeline:
        """Register every mirror and SCD2 history by name in the session's catalog, in the schema
        ``schema`` (``name`` or ``catalog.name``): ``schema.<table>``, or ``schema.<pg schema>_<table>``
        outside PostgreSQL's ``public``; renamed, dropped and re-pointed as the publication's tables
        are (docs/applying.md, "Tables in the catalog"). None: no catalog tables (the default)."""
        return self._set(catalog_schema=schema)

    def conf(self, key: str, value: object) -> Pipeline:
        """A Spark setting the pipeline's storage reads before Spark is up (the preflight), e.g.
        ``spark.hadoop.fs.s3a.endpoint``. A session you pass keeps its own settings: set them
        there for Spark's writes; the CLI makes its session with these (``--conf``)."""
        return self._set(conf={**self._settings.conf, key: str(value)})

    def option(self, key: str, value: object) -> Pipeline:
        """An option of the ``pgoutput`` data source (e.g. ``protoVersion``), as ``.option`` in Spark."""
        return self._set(options={**self._settings.options, key: str(value)})

    def metrics(self, port: int | None, host: str = "127.0.0.1") -> Pipeline:
        """Serve Prometheus metrics at ``http://host:port/metrics`` while a run lasts (None: none):
        lag, batches and their durations, changes per table and operation, the phase; a port in
        use is refused by the checks before anything starts. ``host="0.0.0.0"``: every interface,
        for a Prometheus on another host. See docs/monitoring.md."""
        return self._set(metrics_port=None if port is None else int(port), metrics_host=str(host))

    def session(self, spark: SparkSession) -> Pipeline:
        """Run on this SparkSession (instead of the constructor's, or the active one)."""
        return self._with(_spark=spark)

    def on_progress(self, say: Callable[[str], None]) -> Pipeline:
        """Where the progress lines go (one per batch, snapshot progress, restarts): e.g. ``print``.

        Default: the ``walspark.pipeline`` logger at INFO.
        """
        return self._with(_say=say)

    # ------------------------------------------------------------------------------------------
    # running

    def settings(self, *, once: bool = False) -> RunSettings:
        """The :class:`RunSettings` of the next run (a fresh stop switch each time)."""
        return replace(
            self._settings,
            once=once,
            options=dict(self._settings.options),
            conf=dict(self._settings.conf),
            stop=StopSwitch(),
        )

    def check(self) -> Pipeline:
        """Run the preflight checks now (``run_once`` and ``start`` run them too): the DSN, the
        server's settings, the publication, the slot, the ``scd2`` tables. Needs no Spark."""
        self._preflight(self.settings())
        return self

    def _preflight(self, settings: RunSettings) -> None:
        """The preflight checks; each note they return (a failover would cost the slot or
        changes) is said once per process, not at every run of a notebook's or the demo's loop."""
        for note in preflight(settings):
            if note not in _SAID:
                _SAID.add(note)
                self._say(note)

    def _session(self) -> SparkSession:
        if self._spark is not None:
            return self._spark
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is None:
            raise RuntimeError("no SparkSession: pass one to Pipeline(spark, ...) or create one first "
                               "(walspark.spark.session.spark_session() configures Delta Lake)")  # fmt: skip
        return active

    def run_once(self) -> RunSummary:
        """Apply everything committed up to now (the initial snapshot first if needed), then return.

        ``walspark run --once``: runs in the calling thread; returns the batches and change rows
        applied and the slot position reached. Raises the failure as it is (a
        :mod:`walspark.source.errors` class for the source's problems).
        """
        return self.run(once=True)

    def run(self, *, once: bool = False, stop: StopSwitch | None = None, check: bool = True) -> RunSummary:
        """Run in the calling thread: until everything committed now is applied (``once``), else
        until ``stop`` is requested (``stop.request()`` from another thread, or ``stop.signal``
        installed as a signal handler by a program: what ``walspark run`` does, so that a signal
        lands in the thread that waits on the query, as it always did). ``check=False``: the caller
        has just run :meth:`check` (the CLI, before the JVM starts), so the source is not asked twice.
        """
        settings = self.settings(once=once)
        if stop is not None:
            settings = replace(settings, stop=stop)
        if check:
            self._preflight(settings)
        tracker = Tracker()
        tracker.phase("starting")
        run_tracked(self._session(), settings, self._say, tracker)
        return tracker.summary()

    def start(self, *, once: bool = False) -> PipelineHandle:
        """Check the source, then stream in a background thread until the handle's ``stop()``.

        The preflight checks run here, in the caller's thread: a wrong DSN, publication or
        ``scd2`` table raises now, before the thread starts. ``once=True``: the thread does what
        :meth:`run_once` does and ends (Spark's ``availableNow``).
        """
        settings = self.settings(once=once)
        self._preflight(settings)
        return PipelineHandle(self._session(), settings, self._say)._start()

    def verify(self, *tables: str, attempts: int = ATTEMPTS, wait_seconds: float = WAIT_SECONDS) -> VerifyResult:
        """Compare each published table (or these ``schema.table`` ones) with its Delta table,
        without stopping a pipeline that streams: rows and checksums per key range on both sides,
        ranges that differ read again once the lake has applied past the source's read point, so
        changes in flight never show as differences (docs/running.md, "Checking the lake against
        the source"). A key still moving after ``attempts`` re-reads is counted as still changing;
        a re-read waits at most ``wait_seconds`` for the lake. Returns a
        :class:`~walspark.pipeline.verify.VerifyResult`; ``matches`` is False on a real difference.
        """
        from walspark.pipeline.verify import verify_tables

        return verify_tables(self._session(), self.settings(), self._say, tables=tables, attempts=int(attempts),
                             wait_seconds=float(wait_seconds))  # fmt: skip

    def __repr__(self) -> str:
        s = self._settings
        return (f"Pipeline(publication={s.publication!r}, slot={s.slot!r}, target={s.target!r}"
                f"{f', scd2={list(s.scd2)!r}' if s.scd2 else ''})")  # fmt: skip
