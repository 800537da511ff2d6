"""Staging segments: raw pgoutput messages of committed transactions, at rest, in LSN order.

Written once by the stager, atomically, and decoded by Spark tasks alone. Pure file I/O and
Arrow. See docs/design/staging.md for the format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from walspark.staging.offsets import TxnEntry
from walspark.storage import Location, location

__all__ = [
    "SCHEMA",
    "SegmentBuilder",
    "SegmentMeta",
    "SegmentName",
    "delete_through",
    "list_segments",
    "read_meta",
    "read_segment",
    "remove_incomplete_tail",
    "write_segment",
]

SCHEMA = pa.schema(
    [
        pa.field("end_lsn", pa.int64(), nullable=False),
        pa.field("commit_lsn", pa.int64(), nullable=False),
        pa.field("xid", pa.int64(), nullable=False),
        pa.field("commit_ts", pa.int64(), nullable=False),
        pa.field("origin", pa.string()),
        pa.field("lsn", pa.int64(), nullable=False),
        pa.field("seq", pa.int32(), nullable=False),
        pa.field("version", pa.int32()),
        pa.field("in_stream", pa.bool_(), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
    ]
)
PRELUDE = -1
_META_KEY = b"walspark.segment"
_FORMAT = 1
_NAME = re.compile(r"(\d{12})-([0-9A-F]{16})-([0-9A-F]{16})\.arrow")


@dataclass(frozen=True, slots=True, order=True)
class SegmentName:
    """Where a segment is and which transaction end LSNs it spans (from its file name alone)."""

    seq: int
    first_end: int
    last_end: int
    path: Location = field(compare=False)

    @classmethod
    def parse(cls, path: Location) -> SegmentName | None:
        match = _NAME.fullmatch(path.name)
        if match is None:
            return None
        return cls(int(match.group(1)), int(match.group(2), 16), int(match.group(3), 16), path)

    @staticmethod
    def file_name(seq: int, first_end: int, last_end: int) -> str:
        return f"{seq:012d}-{first_end:016X}-{last_end:016X}.arrow"

    def overlaps(self, start: int, end: int) -> bool:
        """Whether it may hold rows of transactions whose end LSN is in ``(start, end]``."""
        return self.last_end > start and self.first_end <= end


@dataclass(frozen=True, slots=True)
class SegmentMeta:
    """How to decode a segment, and the transactions that end in it."""

    protocol_version: int
    streaming_parallel: bool
    binary: bool
    txns: tuple[TxnEntry, ...] = ()

    def encode(self) -> bytes:
        return json.dumps(
            {
                "format": _FORMAT,
                "protocol_version": self.protocol_version,
                "streaming_parallel": self.streaming_parallel,
                "binary": self.binary,
                "txns": [[t.end_lsn, t.changes, t.bytes] for t in self.txns],
            }
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SegmentMeta:
        doc = json.loads(raw)
        if doc.get("format") != _FORMAT:
            raise ValueError(f"unsupported segment format {doc.get('format')!r}")
        return cls(
            int(doc["protocol_version"]),
            bool(doc["streaming_parallel"]),
            bool(doc["binary"]),
            tuple(TxnEntry(int(e), int(c), int(b)) for e, c, b in doc["txns"]),
        )


class SegmentBuilder:
    """Rows of the next segment, accumulated column by column (no per-row objects kept)."""

    __slots__ = ("bytes", "columns", "first_end", "last_end", "rows")

    def __init__(self) -> None:
        self.columns: tuple[list, ...] = tuple([] for _ in SCHEMA)
        self.rows = 0
        self.bytes = 0
        self.first_end: int | None = None
        self.last_end: int | None = None

    def append(
        self,
        end_lsn: int,
        commit_lsn: int,
        xid: int,
        commit_ts: int,
        origin: str | None,
        lsn: int,
        seq: int,
        in_stream: bool,
        data: bytes,
    ) -> None:
        """One row (see :meth:`add_run` for a transaction's rows at once)."""
        self.add_run(end_lsn, commit_lsn, xid, commit_ts, origin, [lsn], [seq], [in_stream], [data], len(data))

    def add_run(
        self,
        end_lsn: int,
        commit_lsn: int,
        xid: int,
        commit_ts: int,
        origin: str | None,
        lsns: list[int],
        seqs: list[int],
        in_stream: list[bool],
        data: list[bytes],
        nbytes: int,
    ) -> None:
        """Rows of one transaction: its columns given once, the messages' as lists (``nbytes`` their size).

        The stager's per-message work is a few list appends; the transaction's own columns are
        repeated here, once per run, not once per message.
        """
        n = len(data)
        if not n:
            return
        c = self.columns
        c[0].extend([end_lsn] * n)
        c[1].extend([commit_lsn] * n)
        c[2].extend([xid] * n)
        c[3].extend([commit_ts] * n)
        c[4].extend([origin] * n)
        c[5].extend(lsns)
        c[6].extend(seqs)
        c[7].extend([None] * n)
        c[8].extend(in_stream)
        c[9].extend(data)
        self.rows += n
        self.bytes += nbytes
        if self.first_end is None:
            self.first_end = end_lsn
        self.last_end = end_lsn

    def extend(self, other: SegmentBuilder) -> None:
        """Append every row of ``other`` (a transaction staged apart, now known to fit)."""
        for mine, theirs in zip(self.columns, other.columns):
            mine.extend(theirs)
        self.rows += other.rows
        self.bytes += other.bytes
        if other.first_end is not None:
            if self.first_end is None:
                self.first_end = other.first_end
            self.last_end = other.last_end

    def to_batch(self, prelude: Iterable[tuple[int, bool, bytes, int | None]] = ()) -> pa.RecordBatch:
        """The rows, after prelude rows ``(lsn, in_stream, data, version)``."""
        pre = list(prelude)
        cols = []
        for i, f in enumerate(SCHEMA):
            values = self.columns[i]
            if pre:
                heads: dict[int, list[Any]] = {
                    0: [PRELUDE] * len(pre), 1: [0] * len(pre), 2: [0] * len(pre), 3: [0] * len(pre),
                    4: [None] * len(pre), 5: [p[0] for p in pre], 6: [0] * len(pre), 7: [p[3] for p in pre],
                    8: [p[1] for p in pre], 9: [p[2] for p in pre],
                }  # fmt: skip
                values = heads[i] + values
            cols.append(pa.array(values, f.type))
        return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)


def write_segment(
    directory: Location | Path | str,
    seq: int,
    batch: pa.RecordBatch,
    meta: SegmentMeta,
    *,
    first_end: int,
    last_end: int,
) -> SegmentName:
    """Write one segment atomically: built in memory, then written whole (see the module docstring)."""
    directory = location(directory)
    name = SegmentName.file_name(seq, first_end, last_end)
    final = directory / name
    schema = SCHEMA.with_metadata({_META_KEY: meta.encode()})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        writer.write_batch(batch.replace_schema_metadata(schema.metadata))
    final.write(sink.getvalue())
    return SegmentName(seq, first_end, last_end, final)


def list_segments(directory: Location | Path | str) -> list[SegmentName]:
    """The segments of a staging directory, in stream order (temporary files ignored)."""
    found = [SegmentName.parse(e) for e in location(directory).list()]
    return sorted(s for s in found if s is not None)


def read_meta(path: Location | Path | str) -> SegmentMeta:
    """A segment's metadata, without reading its rows."""
    with location(path).open_arrow() as source:
        schema = ipc.open_file(source).schema
    return SegmentMeta.decode(schema.metadata[_META_KEY])


def read_segment(path: Location | Path | str) -> tuple[pa.Table, SegmentMeta]:
    """A segment's rows (memory-mapped when local) and metadata."""
    with location(path).open_arrow() as source:
        reader = ipc.open_file(source)
        table = reader.read_all()
    return table, SegmentMeta.decode(reader.schema.metadata[_META_KEY])


def delete_through(directory: Location | Path | str, lsn: int) -> int:
    """Delete the segments whose transactions all end at or before ``lsn``; returns how many."""
    count = 0
    for seg in list_segments(directory):
        if seg.last_end <= lsn:
            seg.path.delete()
            count += 1
    return count


def remove_incomplete_tail(directory: Location | Path | str) -> list[SegmentName]:
    """Drop leftovers of a crash: temporary files, and trailing pieces of an unfinished transaction.

    Returns the segments that remain, in order. Safe because no offset can name an incomplete
    transaction (admission control only sees complete ones).
    """
    directory = location(directory)
    for entry in directory.list():
        if entry.name.endswith(".tmp"):  # local only: an object store never shows a half-written object
            entry.delete()
    segments = list_segments(directory)
    while segments and not read_meta(segments[-1].path).txns:
        segments.pop().path.delete(missing_ok=False)
    return segments


def iter_entries(segments: Iterable[SegmentName]) -> Iterator[TxnEntry]:
    """The complete transactions recorded in ``segments`` (reads metadata only)."""
    for seg in segments:
        yield from read_meta(seg.path).txns
