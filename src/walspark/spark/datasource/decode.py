"""Decoding inside Spark tasks: raw pgoutput messages → the source's Arrow output batches.

Every read path ends here; only Arrow batches cross into Spark. See docs/design/staging.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from walspark.changes.relations import RelationCache
from walspark.changes.rows import ChangeRowBuilder, TransactionFacts
from walspark.protocol import Relation, Type, decode_message
from walspark.protocol.decoder import relation_ids
from walspark.spark.datasource.output import OutputShaper, Piece
from walspark.staging.segments import PRELUDE, read_segment
from walspark.storage import StorageSettings, location
from walspark.values import UserTypes, registry_of

__all__ = ["DecodeConfig", "TaskDecoder", "decode_segments"]

_I, _U, _D, _T, _R, _Y = (ord(c) for c in "IUDTRY")
_ROW_KINDS = frozenset((_I, _U, _D))

#: Rows per output batch (and per ChangeRowBuilder.build): bounded task memory, big enough batches.
DEFAULT_CHUNK_ROWS = 32_768


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """How a part of a stream was produced, and the user types to decode it with (picklable: the
    catalog's rows, :func:`walspark.source.catalog.user_types`)."""

    protocol_version: int
    streaming_parallel: bool | None = False  # None: options unknown, Stream Abort's layout by its length
    binary: bool = False
    types: UserTypes = field(default=())


class TaskDecoder:
    """One task's decoding state: relation cache, change-row builder, output shaper."""

    def __init__(
        self, config: DecodeConfig, schema: StructType, table: str | None, *, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> None:
        self.config = config
        self.registry = registry_of(config.types)
        self.relations = RelationCache()
        self.builder = ChangeRowBuilder(
            config.protocol_version, relations=self.relations, registry=self.registry, binary=config.binary
        )
        self.shaper = OutputShaper(schema, table, self.registry)
        self.table = table
        self.chunk_rows = chunk_rows
        self._names: dict[int, str] = {}  # relation id -> qualified name, for per-table filtering

    def _decode(self, data: bytes, in_stream: bool, lsn: int | None = None):
        return decode_message(
            data, protocol_version=self.config.protocol_version, in_stream=in_stream, parallel_abort=None, lsn=lsn
        )

    def seed(self, prelude: Iterable[tuple[bool, bytes, int | None]]) -> None:
        """Put the prelude's Relation/Type messages ``(in_stream, data, version)`` in force."""
        for in_stream, data, version in prelude:
            message = self._decode(data, in_stream)
            if isinstance(message, Relation):
                self._names[message.relation_id] = f"{message.schema}.{message.relation_name}"
                if version is None:
                    self.relations.apply(message)
                else:
                    self.relations.seed(message, version)
            elif isinstance(message, Type):
                self.relations.apply_type(message)
                self.registry.note_type(message.type_oid, message.namespace, message.type_name)

    def start_segment(self) -> None:
        """Forget the Relation/Type messages in force: the next segment's prelude puts its own in
        force, as in a decoder of its own (rows already taken in stay with their versions)."""
        self.relations.reset()
        self._names.clear()

    def _keep(self, messages: Iterable[tuple[int, int, bool, bytes]]) -> Iterator[tuple[int, int, bool, bytes]]:
        """Per-table mode: drop other tables' row changes before they are decoded."""
        table, names = self.table, self._names
        for item in messages:
            data = item[3]
            kind = data[0]
            if kind in _ROW_KINDS:
                o = 5 if item[2] else 1
                if names.get(int.from_bytes(data[o : o + 4], "big")) != table:
                    continue
            elif kind == _R:
                message = self._decode(data, item[2], item[1])
                assert isinstance(message, Relation)
                names[message.relation_id] = f"{message.schema}.{message.relation_name}"
            elif kind == _T and not any(names.get(r) == table for r in relation_ids(data, item[2])):
                continue
            yield item

    def add(
        self, facts: TransactionFacts, messages: Iterable[tuple[int, int, bool, bytes]]
    ) -> Iterator[pa.RecordBatch]:
        """Take one committed transaction's ``(seq, lsn, in_stream, data)``; yield batches as they fill."""
        for pieces in self._add(facts, messages):
            yield from self._output(pieces)

    def flush(self) -> Iterator[pa.RecordBatch]:
        """Everything accumulated, as output batches in commit order."""
        return self._output(self._take())

    def _add(self, facts: TransactionFacts, messages: Iterable[tuple[int, int, bool, bytes]]) -> Iterator[list[Piece]]:
        """:meth:`add`, yielding the rows as pieces (see :meth:`OutputShaper.merge`) when the builder fills."""
        if self.table is not None:
            messages = self._keep(messages)
        chunk: list[tuple[int, int, bool, bytes]] = []
        for item in messages:
            chunk.append(item)
            if len(chunk) >= self.chunk_rows:
                self.builder.add_numbered(facts, chunk)
                chunk = []
                if self.builder.rows >= self.chunk_rows:
                    yield self._take()
        if chunk:
            self.builder.add_numbered(facts, chunk)
        if self.builder.rows >= self.chunk_rows:
            yield self._take()

    def _take(self) -> list[Piece]:
        """Everything accumulated, as pieces; then start afresh."""
        return self.shaper.pieces(self.builder.build()) if self.builder.rows else []

    def _output(self, pieces: list[Piece]) -> Iterator[pa.RecordBatch]:
        """Pieces (of this decoder or of others on the same output) as output batches."""
        return self.shaper.merge(pieces, self.chunk_rows)


def decode_segments(
    paths: Iterable[str],
    start: int,
    end: int,
    make_decoder: Callable[[DecodeConfig], TaskDecoder],
    storage: StorageSettings | None = None,
) -> Iterator[pa.RecordBatch]:
    """The output rows of the segments' transactions whose end LSN is in ``(start, end]``.

    Consecutive segments written with the same settings (protocol version, binary, ...: what
    ``make_decoder`` gets) share one decoder: each segment's prelude is put in force before its
    transactions, as it would be in a decoder of its own (the relation versions are the stream's,
    not the decoder's), and the rows of one relation version accumulate across segments. A busy
    stream stages a segment of a few transactions every few tens of milliseconds, each touching a
    few of tens of tables; built and shaped segment by segment, their Arrow arrays cost more than
    decoding the messages did.
    ``storage``: how to reach the segments' object store (an executor has no Spark session to ask).
    """
    pending: list[Piece] = []
    rows = 0
    decoder: TaskDecoder | None = None
    config: DecodeConfig | None = None
    for path in paths:
        table, meta = read_segment(location(path, storage))
        wanted = DecodeConfig(meta.protocol_version, meta.streaming_parallel, meta.binary)
        if decoder is None or wanted != config:
            if decoder is not None:
                pending += decoder._take()
            decoder, config = make_decoder(wanted), wanted
        for pieces in _segment_rows(decoder, table, start, end):
            pending += pieces
            rows += sum(n for n, _ in pieces)
            if rows >= decoder.chunk_rows:
                yield from decoder._output(pending)
                pending, rows = [], 0
    if decoder is not None:
        yield from decoder._output(pending + decoder._take())


def _segment_rows(decoder: TaskDecoder, table: pa.Table, start: int, end: int) -> Iterator[list[Piece]]:
    """Feed one segment's transactions in ``(start, end]`` to ``decoder``, its prelude first;
    yields pieces whenever the decoder's builder fills."""
    decoder.start_segment()
    ends = table.column("end_lsn")
    prelude = table.filter(pc.equal(ends, PRELUDE))
    decoder.seed(
        zip(
            prelude.column("in_stream").to_pylist(),
            prelude.column("data").to_pylist(),
            prelude.column("version").to_pylist(),
        )
    )
    # Relation/Type messages of the segment's transactions before the range are in force too.
    kinds = pc.binary_slice(table.column("data"), 0, 1)
    before = table.filter(
        pc.and_(
            pc.and_(pc.greater(ends, PRELUDE), pc.less_equal(ends, start)),
            pc.is_in(kinds, pa.array([b"R", b"Y"], pa.binary())),
        )
    )
    if before.num_rows:
        decoder.seed(
            (s, d, None) for s, d in zip(before.column("in_stream").to_pylist(), before.column("data").to_pylist())
        )
    rows = table.filter(pc.and_(pc.greater(ends, start), pc.less_equal(ends, end)))
    if rows.num_rows == 0:
        return
    end_lsn = rows.column("end_lsn").to_pylist()
    commit_lsn = rows.column("commit_lsn").to_pylist()
    xid = rows.column("xid").to_pylist()
    commit_ts = rows.column("commit_ts").to_pylist()
    origin = rows.column("origin").to_pylist()
    messages = list(
        zip(
            rows.column("seq").to_pylist(),
            rows.column("lsn").to_pylist(),
            rows.column("in_stream").to_pylist(),
            rows.column("data").to_pylist(),
        )
    )
    del rows, table
    i, n = 0, len(end_lsn)
    while i < n:
        j = i
        while j < n and end_lsn[j] == end_lsn[i]:
            j += 1
        facts = TransactionFacts(xid[i], commit_lsn[i], commit_ts[i], origin[i])
        yield from decoder._add(facts, messages[i:j])
        i = j
