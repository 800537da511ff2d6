"""Streaming reads of a live slot: LSN offsets, staged segments, confirmation on commit.

See docs/design/staging.md for what each of Spark's calls does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from walspark.protocol import parse_lsn
from walspark.source.catalog import user_types
from walspark.spark.datasource.decode import DecodeConfig, TaskDecoder, decode_segments
from walspark.spark.datasource.options import SourceOptions
from walspark.spark.datasource.schema import (
    OutputLayout,
    SchemaChangedError,
)
from walspark.staging.offsets import TxnEntry, from_offset, plan_end, to_offset
from walspark.staging.stager import Stager
from walspark.storage import Location, location
from walspark.values import UserTypes, registry_of

__all__ = ["PgoutputStreamReader", "SegmentPartition"]

log = logging.getLogger(__name__)


#: Consecutive staged segments are read by one task until their files reach this size: a trickle
#: of small transactions is staged as many small segments (one every ``segment_max_delay``), and
#: a task per segment would cost far more in scheduling and Python worker round trips than the
#: decoding itself. Large segments (bulk loads) still get a task each, decoded in parallel.
PARTITION_TARGET_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class SegmentPartition(InputPartition):
    """Consecutive staged segments, and the offset range of the batch reading them."""

    paths: tuple[str, ...]
    start: int
    end: int
    types: UserTypes = ()


def group_segments(
    paths: Sequence[Location | Path], target_bytes: int = PARTITION_TARGET_BYTES
) -> list[tuple[str, ...]]:
    """Consecutive segments in groups of about ``target_bytes`` (a segment at or above it alone)."""
    groups: list[tuple[str, ...]] = []
    group: list[str] = []
    size = 0
    for given in paths:
        path = location(given)
        try:
            n = path.size()
        except OSError:
            n = target_bytes  # let the task report a missing segment on its own
        if group and size + n > target_bytes:
            groups.append(tuple(group))
            group, size = [], 0
        group.append(path.uri)
        size += n
    if group:
        groups.append(tuple(group))
    return groups


class PgoutputStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("pgoutput")``: see the module docstring."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._stager: Stager | None = None
        self._types: UserTypes = ()
        self._target: int | None = None

    # ------------------------------------------------------------------ driver side

    def _connect(self):
        import psycopg

        assert self.options.dsn
        return psycopg.connect(self.options.dsn, autocommit=True)

    def _live(self) -> Stager:
        if self._stager is None:
            o = self.options
            with self._connect() as conn:
                self._types = user_types(conn)
            staging = o.staging_location()
            assert o.dsn and o.slot and staging is not None
            self._stager = Stager(
                dsn=o.dsn,
                slot=o.slot,
                stream_options=o.stream_options(),
                directory=staging,
                layout=OutputLayout.from_schema(self.schema, o.table),
                registry=registry_of(self._types),
                segment_max_rows=o.segment_max_rows,
                segment_max_bytes=o.segment_max_bytes,
                segment_max_delay=o.segment_max_delay_ms / 1000,
                staging_max_bytes=o.staging_max_bytes,
                memory_budget=o.memory_budget,
                slot_wait_seconds=o.slot_wait_seconds,
                status_interval=o.status_interval_seconds,
                heartbeat_seconds=o.heartbeat_seconds,
            ).start()
        return self._stager

    def initialOffset(self) -> dict:
        from walspark.source.errors import SlotNotFound
        from walspark.source.slots import get_slot

        assert self.options.slot
        with self._connect() as conn:
            info = get_slot(conn, self.options.slot)
        if info is None:
            raise SlotNotFound(
                f"replication slot {self.options.slot!r} does not exist; create it first "
                "(walspark slot create, or pg_create_logical_replication_slot(name, 'pgoutput'))"
            )
        lsn = info.confirmed_flush_lsn if info.confirmed_flush_lsn is not None else info.restart_lsn
        self._live()
        return to_offset(lsn or 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows_per_batch is not None:
            return ReadMaxRows(self.options.max_rows_per_batch)
        if self.options.max_bytes_per_batch is not None:
            return ReadMaxBytes(self.options.max_bytes_per_batch)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        stager = self._live()
        begin = from_offset(start)
        stager.expect_start(begin)
        stager.check()
        max_rows = max_bytes = None
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
            max_bytes = self.options.max_bytes_per_batch
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        if self._target is not None:  # a backlog in as few batches as its limits allow
            stager.wait_caught_up(self._target, self.options.available_now_timeout_seconds, start=begin,
                                  max_rows=max_rows, max_bytes=max_bytes)  # fmt: skip
        end = plan_end(stager.entries_after(begin), begin, max_rows=max_rows, max_bytes=max_bytes, target=self._target)
        stager.offered(end)
        if end == begin:
            barrier = stager.schema_barrier()
            if barrier is not None and stager.staged_end <= begin:
                raise barrier
        return to_offset(end)

    def reportLatestOffset(self) -> dict | None:
        if self._stager is None:
            return None
        staged = self._stager.staged_end
        return to_offset(staged) if staged else None

    def prepareForTriggerAvailableNow(self) -> None:
        with self._connect() as conn:
            (current,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        self._target = parse_lsn(current)
        log.info("Trigger.AvailableNow: reading up to %s", current)
        self._live().set_target(self._target)

    def partitions(self, start: dict, end: dict) -> list[SegmentPartition]:
        begin, finish = from_offset(start), from_offset(end)
        if finish <= begin:
            return []
        stager = self._live()
        stager.expect_start(begin)
        stager.offered(finish)  # a replay after a restart: staging must not pause before `finish`
        stager.wait_staged(finish, timeout=max(self.options.slot_wait_seconds * 2, 120.0))
        return self.staged_partitions(begin, finish)

    def staged_partitions(self, begin: int, finish: int) -> list[SegmentPartition]:
        """The partitions of the transactions ending in ``(begin, finish]``, staged already (the
        caller knows: :meth:`partitions` waits for them, the driver's decoding ahead asks for
        what is staged)."""
        segments = [s.path for s in self._live().segments_for(begin, finish)]
        return [SegmentPartition(group, begin, finish, self._types) for group in group_segments(segments)]

    def staged_transactions(self, begin: int) -> list[TxnEntry]:
        """The transactions staged so far that end after ``begin``, in order."""
        return self._live().entries_after(begin)

    def commit(self, end: dict) -> None:
        self._live().commit(from_offset(end))

    def schema_barrier(self) -> SchemaChangedError | None:
        """The schema change staging stopped at, if any: the query must restart past it."""
        return self._live().schema_barrier()

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of what :meth:`read` yields."""
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.schema, timezone="UTC")

    def stop(self) -> None:
        if self._stager is not None:
            self._stager.stop()
            self._stager = None

    # ------------------------------------------------------------------ executor side

    def read(self, partition: SegmentPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        o = self.options

        def make(config: DecodeConfig) -> TaskDecoder:
            config = DecodeConfig(config.protocol_version, config.streaming_parallel, config.binary, partition.types)
            return TaskDecoder(config, self.schema, o.table, chunk_rows=o.batch_rows)

        yield from decode_segments(partition.paths, partition.start, partition.end, make, o.storage)
