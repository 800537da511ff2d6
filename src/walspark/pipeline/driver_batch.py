"""A ``--once`` run's pending changes applied from the driver, as the query's next micro-batches.

The same objects in the same order as the query, leaving the checkpoint as the query would have,
so a crash at any step is a batch the next query replays. See docs/design/pipeline.md §6 for the
steps.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from walspark.pipeline.settings import RunSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from walspark.pipeline.idle import Pending
    from walspark.pipeline.status import Tracker
    from walspark.staging.offsets import CommittedBatch

__all__ = [
    "APPLIED",
    "BARRIER",
    "DRIVER_BATCH",
    "DRIVER_READ_BYTES",
    "QUERY",
    "ArrowFrame",
    "DriverReads",
    "Outcome",
    "apply_from_driver",
    "begin_checkpoint",
    "enabled",
    "source_options",
]

log = logging.getLogger(__name__)

#: Environment variable: ``0`` makes every ``--once`` run with pending changes start the query,
#: and every batch of a query read by Spark.
DRIVER_BATCH = "WALSPARK_DRIVER_BATCH"
#: Most bytes of staged segments a query's batch may have to be read on the driver
#: (:class:`DriverReads`; default 256 MiB); ``0``: never.
DRIVER_READ_BYTES = "WALSPARK_DRIVER_READ_BYTES"
_DEFAULT_READ_BYTES = 256 << 20
#: A range of staged changes :class:`DecodeAhead` decodes while the rest stages: the pgoutput
#: bytes it waits for (each range reads the segments at its edges again, so not too small).
AHEAD_BYTES = 8 << 20
AHEAD_POLL_SECONDS = 0.05


#: What :func:`apply_from_driver` left: everything applied; a schema change ahead (the batches
#: before it applied: declare the new shape and read on); the rest is the query's.
Outcome = Literal["applied", "barrier", "query"]
APPLIED: Outcome = "applied"
BARRIER: Outcome = "barrier"
QUERY: Outcome = "query"


def _turned_off() -> bool:
    return os.environ.get(DRIVER_BATCH, "1") == "0"


def enabled(settings: RunSettings, found: Pending) -> bool:
    """Whether the pending changes may be applied from the driver (before anything is staged): a
    few (within the sink's row limit for merges from the driver, ``WALSPARK_DRIVER_MERGE_ROWS``),
    or any backlog when the query's batches would be read on the driver anyway (:class:`DriverReads`),
    batch by batch within its byte limit."""
    from walspark.spark.lake.driver_merge import row_limit
    from walspark.storage import location

    if _turned_off() or not found.transactions:
        return False
    if not all(location(p).is_local for p in (settings.target, settings.checkpoint, settings.staging)):
        return False
    limit = row_limit()
    few = not found.more and min(settings.max_rows_per_batch or found.changes, found.changes) <= limit
    return bool(limit) and (few or DriverReads.enabled(settings))


def source_options(settings: RunSettings) -> dict[str, str]:
    """The ``pgoutput`` data source's options of a run's query (and of its driver batches)."""
    from walspark.storage import current_settings

    options = {"dsn": settings.dsn, "slot": settings.slot, "publication": settings.publication,
               "stagingPath": settings.staging, **current_settings().to_options(),  # executors reach the staging
               **settings.options}  # fmt: skip
    if settings.max_rows_per_batch:
        options["maxRowsPerBatch"] = str(settings.max_rows_per_batch)
    if DriverReads.enabled(settings) and "maxbytesperbatch" not in {k.lower() for k in options}:
        options["maxBytesPerBatch"] = str(DriverReads.batch_bytes())  # read on the driver (DriverReads)
    return options


def begin_checkpoint(spark: SparkSession, settings: RunSettings, lsn: int) -> bool:
    """Begin the run's fresh checkpoint with an empty batch 0 ending at ``lsn`` (the slot's
    confirmed position), as the query's first micro-batch would; False: leave it to the query
    (this path turned off, a checkpoint not on local disk, a Spark without the class below)."""
    from walspark import _injection
    from walspark.staging.offsets import start_checkpoint
    from walspark.storage import location

    if _turned_off() or not location(settings.checkpoint).is_local:
        return False
    try:  # the offset log's metadata line as this session's query would write it
        metadata = json.loads(spark._jvm.org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqMetadata  # type: ignore[union-attr]
                              .apply(0, int(time.time() * 1000), spark._jsparkSession.conf()).json())  # fmt: skip
        conf = metadata["conf"]
        for key in [k for k, v in conf.items() if v is None]:  # a setting left at its default: its value
            conf[key] = spark.conf.get(key, None)
            if conf[key] is None:
                del conf[key]
    except Exception as exc:  # noqa: BLE001 - the query writes its checkpoint itself
        log.debug("checkpoint not begun from the driver: %s", exc)
        return False
    before = start_checkpoint(settings.checkpoint, lsn, json.dumps(metadata, separators=(",", ":")))
    before.log_next(lsn)
    _injection.point("checkpoint-logged")
    before.commit_next()
    return True


def apply_from_driver(spark: SparkSession, settings: RunSettings, sink: Any, source: Any, schema: Any,
                      tracker: Tracker, report: Callable[..., None], reader: Any = None,
                      ahead: DecodeAhead | None = None) -> Outcome:  # fmt: skip
    """Apply what is pending from the driver as the query's next batches (see the module docstring),
    once :func:`enabled` said so: ``source`` is the run's ``PgoutputDataSource``, ``schema`` the
    schema the query would declare (the tables already follow it).

    Returns :data:`APPLIED` when everything up to the server's position is applied;
    :data:`BARRIER` when a schema change stopped the reader after the batches before it (the
    caller declares the new shape and calls again); :data:`QUERY` when the query should run
    instead, or for the rest: nothing applied, or a batch whose staged segments hold more than
    :data:`DRIVER_READ_BYTES` (one large transaction) next; nothing of it is written then but
    staged segments. ``report(batch_id, rows,
    seconds, end, note)`` prints a batch's line (:meth:`walspark.pipeline.progress.StreamProgress.report`);
    ``reader``: ``source``'s stream reader of ``schema`` if one is made already (a head start's,
    :mod:`walspark.pipeline.head_start`), stopped here as a new one would be; ``ahead``: its
    decoding ahead, used for the first batch if that starts where it does.
    """
    from walspark.staging.offsets import last_batch

    last = last_batch(settings.checkpoint)
    if last is None:
        return QUERY
    reader = reader or source.streamReader(schema)
    try:
        reader.prepareForTriggerAvailableNow()
        applied = 0
        while True:  # as Trigger.AvailableNow: batches until everything up to the target is applied
            began = time.monotonic()
            if ahead is None or ahead.begin != last.end:
                if ahead is not None:
                    ahead.stop()
                ahead = DecodeAhead(reader, last.end).start()  # what is staged decoded while the rest stages
            done = _next_batch(spark, reader, schema, sink, last, tracker, settings.staging, ahead)
            ahead = None
            if isinstance(done, str):
                return done  # QUERY: a batch too big to read here, the query's from the batches applied
            if done is None:
                if reader.schema_barrier() is not None:
                    return BARRIER
                return APPLIED if applied else QUERY
            last, rows = done
            applied += 1
            report(last.batch_id, rows, time.monotonic() - began, last.end_text, "; no query started")
    finally:
        if ahead is not None:
            ahead.stop()
        reader.stop()  # the stager's last act: the slot's confirmation


def _next_batch(spark: SparkSession, reader: Any, schema: Any, sink: Any, last: CommittedBatch,
                tracker: Tracker, staging: str, ahead: DecodeAhead) -> tuple[CommittedBatch, int] | Outcome | None:  # fmt: skip
    """Plan, log, apply and commit the batch after ``last``, its staged transactions decoded by
    ``ahead`` as they come (stopped here): the committed batch and its rows; None when there is
    none (everything up to the target applied, or a schema change ahead); :data:`QUERY` when it
    is too big to read here (nothing logged)."""
    from walspark import _injection
    from walspark.spark.datasource.schema import SchemaChangedError
    from walspark.staging.offsets import from_offset, to_offset

    start = to_offset(last.end)
    try:
        try:
            end = from_offset(reader.latestOffset(start, reader.getDefaultReadLimit()))
        except SchemaChangedError:
            return None
        if end <= last.end:
            return None  # everything up to the target applied, or a schema change next (staging stops before it)
        reader.partitions(start, to_offset(end))  # once its segments are written
        limit = read_bytes()
        if limit and staged_bytes(staging, last.end, end)[1] > limit:
            log.debug("the batch after %d is left to the query: over %d bytes staged", last.batch_id, limit)
            return QUERY
        batch_id = last.log_next(end)
        _injection.point("driver-batch-logged")
        table, arrow = read_rows(spark, reader, schema, ahead.batches(end))
    finally:
        ahead.stop()
    tracker.batch_applied(batch_id, sink.foreach_batch(ArrowFrame(spark, table, schema), batch_id, arrow=arrow))
    _injection.point("driver-batch-applied")
    last.commit_next()
    reader.commit(to_offset(end))
    return last.next(end), table.num_rows


def read_rows(spark: SparkSession, reader: Any, schema: Any, batches: Any) -> tuple[Any, Any]:
    """A batch's rows from their decoded Arrow ``batches`` (:meth:`DecodeAhead.batches`, or
    :func:`decoded` from its partitions) as the query's ``reader`` gives them, and in the Arrow
    types ``DataFrame.toArrow()`` would give them."""
    import pyarrow as pa

    table = pa.Table.from_batches(list(batches), schema=reader.arrow_schema())
    return table, table.cast(arrow_schema(spark, schema))


def decoded(reader: Any, partitions: Any) -> list[Any]:
    """The Arrow batches of ``partitions``, decoded here by the query's ``reader``."""
    return [b for p in partitions for b in reader.read(p)]


def _range_after(entries: list[Any]) -> tuple[int | None, int]:
    """Where the first staged transactions of :data:`AHEAD_BYTES` in all end, and their bytes;
    (None, 0) while fewer are staged."""
    size = 0
    for entry in entries:
        size += entry.bytes
        if size >= AHEAD_BYTES:
            return entry.end_lsn, size
    return None, 0


class DecodeAhead:
    """A driver batch's staged transactions decoded in a thread of their own while the rest of the
    backlog is still staging (the planning of the batch waits until all of it is staged).

    Consecutive ranges ``(a, b]`` of what is staged, each once it holds :data:`AHEAD_BYTES` of
    changes, each decoded as a partition of its own, as a query's batches are: rows are filtered
    by their transaction's end, every range starts with the Relation messages in force, so their
    rows one after the other are the rows of one decode of the whole (tests/pipeline/
    test_pipeline_api.py checks the batch against the slot). A range past the planned end, one
    whose decoding failed, and what is staged after the last range are decoded by
    :meth:`batches` in the caller's thread (beside the thread's last range), which reports
    their errors as before. It stops past :func:`read_bytes` of changes, a batch too big to be
    read here anyway.
    """

    def __init__(self, reader: Any, start: int) -> None:
        self.reader, self.begin = reader, start
        self._ranges: list[tuple[int, list[Any]]] = []  # (end, batches) after ``start``, in order
        #: set while no whole range is staged past those decoded: the thread waits for staging
        self.waiting = threading.Event()
        #: what :meth:`batches` took from the thread: rows, and ranges past the end left out
        self.rows_ahead = self.ranges_dropped = 0
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._decoding: int | None = None  # the end of the range the thread decodes now
        self._thread = threading.Thread(target=self._run, name="walspark-decode-ahead", daemon=True)

    def start(self) -> DecodeAhead:
        if AHEAD_BYTES:
            self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread (once the range it decodes is done)."""
        with self._lock:
            self._halt.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        covered, done, budget = self.begin, 0, read_bytes()
        try:
            while not (budget and done > budget):
                upto, size = _range_after(self.reader.staged_transactions(covered))
                with self._lock:
                    if self._halt.is_set():
                        return
                    self._decoding = upto
                if upto is None:
                    self.waiting.set()
                    self._halt.wait(AHEAD_POLL_SECONDS)
                    continue
                self.waiting.clear()
                batches = decoded(self.reader, self.reader.staged_partitions(covered, upto))
                with self._lock:
                    self._ranges.append((upto, batches))
                    self._decoding = None
                covered, done = upto, done + size
        except Exception as exc:  # noqa: BLE001 - the caller decodes this range again, and reports
            log.debug("decoding ahead stopped after %d range(s): %s", len(self._ranges), exc)

    def batches(self, end: int) -> list[Any]:
        """The Arrow batches of the transactions ending in ``(begin, end]`` (all of them staged):
        the ranges decoded; the rest decoded here, beside the thread's range under way."""
        with self._lock:
            self._halt.set()
            ranges, decoding = list(self._ranges), self._decoding
        out, covered = [], self.begin
        for upto, batches in ranges:
            if upto > end:
                self.ranges_dropped += 1
                continue
            out += batches
            covered = upto
        middle = decoding if decoding is not None and decoding <= end else covered  # the thread's, to come
        rest = decoded(self.reader, self.reader.staged_partitions(middle, end)) if middle < end else []
        self.stop()
        if middle > covered:
            last = self._ranges[-1] if self._ranges else None
            if last is not None and last[0] == middle:
                out += last[1]
            else:  # its decoding failed: here, reporting the error
                out += decoded(self.reader, self.reader.staged_partitions(covered, middle))
        self.rows_ahead = sum(b.num_rows for b in out)
        log.debug("%d of the batch's rows decoded while it staged", self.rows_ahead)
        return out + rest


class DriverReads:
    """A running query's micro-batches read on the driver from their staged segments (as a
    driver batch is, :func:`read_rows`), for the sink to apply from Arrow: a big batch of inserts
    is then appended by delta-rs without a Spark job (:mod:`walspark.spark.lake.driver_merge`),
    where Spark would decode it in tasks, convert it, cache it, aggregate it and write it again.

    Whatever the sink takes from Spark instead (a big MERGE) reads the query's own DataFrame. A
    batch whose segments hold over :data:`DRIVER_READ_BYTES` is left to Spark alone, so the
    driver's memory stays bounded whatever the backlog; so is every batch of a target or staging
    directory not on local disk, and the query's first batch (its start is not in the offset log).
    """

    def __init__(self, spark: SparkSession, settings: RunSettings, options: dict[str, str], schema: Any) -> None:
        self.spark, self.settings, self.schema = spark, settings, schema
        self.limit = read_bytes()
        self.on = self.enabled(settings)
        self._options = options
        self._reader: Any = None
        self._types: Any = None

    @staticmethod
    def enabled(settings: RunSettings) -> bool:
        """Whether a query of these settings has its batches read on the driver."""
        from walspark.spark.lake.driver_merge import row_limit
        from walspark.storage import location

        return (not _turned_off() and bool(read_bytes()) and bool(row_limit())
                and all(location(p).is_local for p in (settings.target, settings.checkpoint, settings.staging)))  # fmt: skip

    @staticmethod
    def batch_bytes() -> int:
        """The ``maxBytesPerBatch`` that keeps a query's batches readable on the driver: the
        pgoutput bytes of its transactions, which their segments hold with Arrow's framing and
        the tables' Relation messages, at half the segments' limit. (A transaction over it is
        still a batch of its own, read by Spark.)"""
        return max(read_bytes() // 2, 1)

    def __call__(self, batch_id: int) -> Any:
        """The batch's rows as ``toArrow()`` would give them, or None: Spark reads them."""
        if not self.on:
            return None
        from walspark.spark.datasource.stream_reader import SegmentPartition
        from walspark.staging.offsets import batch_range

        span = batch_range(self.settings.checkpoint, batch_id)
        if span is None:
            log.debug("batch %d read by Spark: its range is not in the offset log", batch_id)
            return None
        start, end = span
        segments, size = staged_bytes(self.settings.staging, start, end)
        if size > self.limit:
            log.debug("batch %d read by Spark: %d bytes staged, over %d", batch_id, size, self.limit)
            return None
        began = time.monotonic()
        reader = self._stream_reader()
        partition = SegmentPartition(tuple(s.uri for s in segments), start, end, self._types)
        arrow = read_rows(self.spark, reader, self.schema, decoded(reader, [partition]))[1]
        log.debug("batch %d read on the driver: %d rows from %d segments (%d bytes) in %.2f s",
                  batch_id, arrow.num_rows, len(segments), size, time.monotonic() - began)  # fmt: skip
        return arrow

    def _stream_reader(self) -> Any:
        """The query's reader, used here only to decode (it starts no stager); the catalog's user
        types read once, as the query's own reader does at its start."""
        if self._reader is None:
            from walspark.source.catalog import user_types
            from walspark.source.connect import connect_sql
            from walspark.spark.datasource.source import PgoutputDataSource

            with connect_sql(self.settings.dsn) as conn:
                self._types = user_types(conn)
            self._reader = PgoutputDataSource(self._options).streamReader(self.schema)
        return self._reader


def staged_bytes(staging: str, start: int, end: int) -> tuple[list[Any], int]:
    """The staged segments holding the transactions of ``(start, end]``, and their bytes on disk."""
    from walspark.staging.segments import list_segments
    from walspark.storage import location

    segments = [s.path for s in list_segments(location(staging) / "segments") if s.overlaps(start, end)]
    return segments, sum(s.size() for s in segments)


def read_bytes() -> int:
    """:data:`DRIVER_READ_BYTES`, or its default."""
    try:
        return max(int(os.environ.get(DRIVER_READ_BYTES, _DEFAULT_READ_BYTES)), 0)
    except ValueError:
        return _DEFAULT_READ_BYTES


def arrow_schema(spark: SparkSession, schema: Any) -> Any:
    """The Arrow schema ``DataFrame.toArrow()`` gives a batch of ``schema`` in this session."""
    from pyspark.sql.pandas.types import to_arrow_schema

    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    return to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                           prefers_large_types=large)  # fmt: skip


class ArrowFrame:
    """A batch's rows as the sink's DataFrame, made from their Arrow table on first use.

    The sink reads a small batch's rows from the Arrow it is given and asks for the DataFrame
    only when a table is applied by Spark; making it costs ~0.9 s
    of py4j and JVM work in a fresh session. Its schema, columns and session are known at once;
    anything else is the DataFrame's (made once, whichever apply thread asks first).
    """

    def __init__(self, spark: SparkSession, table: Any, schema: Any) -> None:
        self.sparkSession = spark
        self.schema = schema
        self.columns = schema.fieldNames()
        self._table = table
        self._lock = threading.Lock()
        self._frame: Any = None

    def persist(self) -> ArrowFrame:
        """Nothing to do: the rows are on the driver already (and a Spark MERGE reads its own
        table's rows from Arrow, not this frame)."""
        return self

    def unpersist(self) -> ArrowFrame:
        return self

    def __getattr__(self, name: str) -> Any:
        with self._lock:
            if self._frame is None:
                self._frame = self.sparkSession.createDataFrame(self._table, self.schema)
        return getattr(self._frame, name)
