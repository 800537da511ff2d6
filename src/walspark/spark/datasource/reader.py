"""Batch reads: capture files, split into parallel partitions, and peeks of a live slot.

See docs/design/staging.md for where a capture is cut and why a peek is one task.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from walspark.capture import CaptureFile, capture_rows
from walspark.changes.assembly import CommittedTransaction, TransactionAssembler
from walspark.changes.relations import RelationCache
from walspark.changes.rows import TransactionFacts
from walspark.protocol import Relation, Type, decode_message
from walspark.spark.datasource.decode import DecodeConfig, TaskDecoder
from walspark.spark.datasource.options import SourceOptions
from walspark.spark.datasource.schema import OutputLayout, merge_structs
from walspark.values import TypeRegistry, spark_schema

__all__ = [
    "CapturePartition",
    "CapturePlan",
    "CaptureReader",
    "PeekPartition",
    "PeekReader",
    "capture_layout",
    "decode_rows",
    "iter_capture_rows",
    "plan_capture",
]

_B, _C, _R, _Y, _O = (ord(c) for c in "BCRYO")
_S, _E, _c, _A, _p = (ord(c) for c in "SEcAp")
_b, _P, _K, _r = (ord(c) for c in "bPKr")
_INTERESTING = np.array([_B, _C, _R, _Y, _O, _S, _E, _c, _A, _p, _b, _P, _K, _r], dtype=np.uint8)
_IPC_SUFFIXES = (".arrow", ".feather", ".ipc")

Prelude = tuple[tuple[bool, bytes, int | None], ...]


@dataclass(frozen=True, slots=True)
class CapturePartition(InputPartition):
    """Rows ``[start_row, end_row)`` of a capture; no transaction is open at either end."""

    path: str
    start_row: int
    end_row: int
    prelude: Prelude
    config: DecodeConfig


@dataclass(frozen=True, slots=True)
class CapturePlan:
    """What the driver's pass over a capture found."""

    config: DecodeConfig
    total_rows: int
    partitions: tuple[CapturePartition, ...]
    tables: dict[str, StructType] = field(hash=False)


def _first_bytes(data: pa.BinaryArray) -> np.ndarray:
    """The kind byte of every message of a binary column, without touching the rest."""
    offsets = np.frombuffer(data.buffers()[1], dtype=np.int32, count=data.offset + len(data) + 1)[data.offset :]
    values = data.buffers()[2]
    if values is None or len(data) == 0:
        return np.zeros(len(data), dtype=np.uint8)
    raw = np.frombuffer(values, dtype=np.uint8)
    starts = offsets[:-1]
    return raw[np.minimum(starts, len(raw) - 1)]


def plan_capture(path: str, *, partition_rows: int = 100_000, num_partitions: int | None = None) -> CapturePlan:
    """One pass over a capture: safe cut points, preludes, and each table's merged shape."""
    capture = CaptureFile(path)
    info = capture.info
    proto = info.protocol_version
    total = capture.num_rows
    if num_partitions:
        target = max(1, math.ceil(total / num_partitions))
    else:
        target = partition_rows
    config = DecodeConfig(proto, info.streaming_parallel, info.binary)
    assembler = TransactionAssembler(proto, streaming_parallel=info.streaming_parallel, window=True)
    cache = RelationCache()
    registry = TypeRegistry()
    rels: dict[int, tuple[bool, bytes, int | None]] = {}
    types: dict[int, tuple[bool, bytes, int | None]] = {}
    shapes: dict[str, list[StructType]] = {}
    seen_shapes: set[tuple[int, int]] = set()  # (relation id, version)

    def apply(in_stream: bool, data: bytes, lsn: int) -> None:
        message = decode_message(data, protocol_version=proto, in_stream=in_stream, parallel_abort=None, lsn=lsn)
        if isinstance(message, Relation):
            version = cache.apply(message)
            rels[message.relation_id] = (in_stream, data, version.version)
            key = (version.qualified_name, version.version)
            if (message.relation_id, version.version) not in seen_shapes:
                seen_shapes.add((message.relation_id, version.version))
                shapes.setdefault(key[0], []).append(spark_schema(list(message.columns), registry, binary=info.binary))
        elif isinstance(message, Type):
            types[message.type_oid] = (in_stream, data, None)

    def snapshot() -> Prelude:
        return tuple(types.values()) + tuple(rels.values())

    partitions: list[CapturePartition] = []
    cut_start, prelude = 0, snapshot()
    in_plain = in_block = in_prepare = False
    plain_schema: list[tuple[bytes, int]] = []
    row0 = 0
    for batch in capture.iter_batches():
        data = batch.column("data")
        kinds = _first_bytes(data)
        lsns = batch.column("lsn")
        for i in np.flatnonzero(np.isin(kinds, _INTERESTING)).tolist():
            k = int(kinds[i])
            row = row0 + i
            safe_after = False
            if in_block:
                if k in (_R, _Y, _O, _E):
                    assembler.feed(lsns[i].as_py(), data[i].as_py())
                    in_block = k != _E
                continue
            if k == _B:
                in_plain = True
            elif k == _C:
                if in_plain:
                    in_plain = False
                    for raw, lsn in plain_schema:
                        apply(False, raw, lsn)
                    plain_schema.clear()
                    safe_after = True
            elif k in (_R, _Y):
                if in_plain:
                    plain_schema.append((data[i].as_py(), lsns[i].as_py()))
                elif in_prepare:
                    assembler.feed(lsns[i].as_py(), data[i].as_py())
            elif k == _O:
                if in_prepare:
                    assembler.feed(lsns[i].as_py(), data[i].as_py())
            else:  # streamed and two-phase control messages: let the assembler judge
                if k == _S:
                    in_block = True
                elif k == _b:
                    in_prepare = True
                elif k == _P:
                    in_prepare = False
                for event in assembler.feed(lsns[i].as_py(), data[i].as_py()):
                    if isinstance(event, CommittedTransaction):
                        for lsn, in_stream, raw in event.messages():
                            apply(in_stream, raw, lsn)
                        event.release()
                safe_after = k in (_c, _A, _K, _r)
            if (
                safe_after
                and not (in_plain or in_block or in_prepare)
                and assembler.open_transactions == 0
                and row + 1 - cut_start >= target
                and row + 1 < total
            ):
                partitions.append(CapturePartition(str(path), cut_start, row + 1, prelude, config))
                cut_start, prelude = row + 1, snapshot()
        row0 += len(batch)
    if total > cut_start or not partitions:
        partitions.append(CapturePartition(str(path), cut_start, total, prelude, config))
    assembler.close()
    tables = {name: merge_structs(name, structs) for name, structs in shapes.items()}
    return CapturePlan(config, total, tuple(partitions), tables)


def _capture_chunks(path: str) -> Iterator[tuple[int, Callable[[], pa.Table | pa.RecordBatch]]]:
    """(row count, loader) of each Parquet row group / IPC record batch, in file order."""
    if Path(path).suffix in _IPC_SUFFIXES:
        reader = ipc.open_file(pa.memory_map(path))
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)  # memory-mapped: no copy until sliced and converted
            yield batch.num_rows, functools.partial(_same, batch)
    else:
        parquet = pq.ParquetFile(path)
        for g in range(parquet.metadata.num_row_groups):
            yield (
                parquet.metadata.row_group(g).num_rows,
                functools.partial(parquet.read_row_group, g, columns=["lsn", "data"]),
            )


def _same(value: pa.RecordBatch) -> pa.RecordBatch:
    return value


def iter_capture_rows(path: str, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(lsn, data)`` of rows ``[start, end)``, reading only the row groups / batches around them."""
    offset = 0
    for n, load in _capture_chunks(path):
        if offset >= end:
            break
        if offset + n > start:
            lo, hi = max(start - offset, 0), min(end - offset, n)
            chunk = capture_rows(load().slice(lo, hi - lo), path)  # any tool's capture: int64 lsn, binary data
            yield from zip(chunk.column("lsn").to_pylist(), chunk.column("data").to_pylist())
        offset += n


def decode_rows(
    rows: Iterator[tuple[int, bytes]], decoder: TaskDecoder, *, streaming_parallel: bool | None, memory_budget: int
) -> Iterator[pa.RecordBatch]:
    """Assemble raw messages into committed transactions and decode them (tasks)."""
    assembler = TransactionAssembler(
        decoder.config.protocol_version, streaming_parallel=streaming_parallel, memory_budget=memory_budget, window=True
    )  # a capture or a peek
    try:
        for lsn, data in rows:
            for event in assembler.feed(lsn, data):
                if isinstance(event, CommittedTransaction):
                    try:
                        yield from decoder.add(
                            TransactionFacts.of(event), ((seq, *m) for seq, m in enumerate(event.messages()))
                        )
                    finally:
                        event.release()
        yield from decoder.flush()
    finally:
        assembler.close()


class CaptureReader(DataSourceReader):
    """``spark.read.format("pgoutput").option("path", ...)``: a capture file, decoded in parallel."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[CapturePartition]:
        plan = plan_capture(
            self.options.path or "",
            partition_rows=self.options.partition_rows,
            num_partitions=self.options.num_partitions,
        )
        return list(plan.partitions)

    def read(self, partition: CapturePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        decoder = TaskDecoder(partition.config, self.schema, self.options.table, chunk_rows=self.options.batch_rows)
        decoder.seed(partition.prelude)
        rows = iter_capture_rows(partition.path, partition.start_row, partition.end_row)
        yield from decode_rows(
            rows,
            decoder,
            streaming_parallel=partition.config.streaming_parallel,
            memory_budget=self.options.memory_budget,
        )


def capture_layout(options: SourceOptions) -> OutputLayout:
    """The output layout of a capture: its tables' shapes merged (a capture has no catalog)."""
    plan = plan_capture(options.path or "", partition_rows=1 << 62)
    return OutputLayout.build(plan.tables, options.table)


@dataclass(frozen=True, slots=True)
class PeekPartition(InputPartition):
    """The slot's pending changes up to ``upto_lsn``, peeked (not consumed)."""

    dsn: str
    slot: str
    plugin_options: tuple[tuple[str, str], ...]
    upto_lsn: int
    config: DecodeConfig


class PeekReader(DataSourceReader):
    """``spark.read.format("pgoutput").option("dsn", ...).option("peek", "true")``: a live slot, not consumed."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[PeekPartition]:
        import psycopg

        from walspark.protocol import parse_lsn
        from walspark.spark.datasource.catalog import catalog_layout

        options = self.options
        assert options.dsn and options.slot
        with psycopg.connect(options.dsn, autocommit=True) as conn:
            resolved = options.stream_options().resolve(conn.info.server_version)
            _, types = catalog_layout(conn, options.publications, options.table, binary=options.binary)
            (upto,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()  # type: ignore[misc]  # one row
        config = DecodeConfig(resolved.proto_version, resolved.streaming_parallel, resolved.binary, types)
        return [PeekPartition(options.dsn, options.slot, tuple(resolved.plugin_options()), parse_lsn(upto), config)]

    def read(self, partition: PeekPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        import psycopg

        from walspark.source.sqlinterface import slot_changes

        decoder = TaskDecoder(partition.config, self.schema, self.options.table, chunk_rows=self.options.batch_rows)
        with psycopg.connect(partition.dsn) as conn:
            rows = slot_changes(conn, partition.slot, dict(partition.plugin_options), upto_lsn=partition.upto_lsn)
            yield from decode_rows(
                rows,
                decoder,
                streaming_parallel=partition.config.streaming_parallel,
                memory_budget=self.options.memory_budget,
            )
