"""Committed transactions → change rows as Arrow record batches, one batch per relation version.

Built column-wise, in C where the compiled hot path is in force, with the same rows and errors as
the pure path. See docs/design/changes.md for the columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pyarrow as pa

from walspark import compiled
from walspark.protocol import (
    Delete,
    Insert,
    Message,
    ProtocolError,
    Relation,
    Truncate,
    TupleData,
    Type,
    Update,
    decode_message,
    read_tuple_data,
)
from walspark.values import ColumnOptions, TypeRegistry, decode_gathered, decode_tuples, default_registry

from .assembly import CommittedTransaction
from .relations import RelationCache, RelationVersion

#: Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
_PG_EPOCH_US = 946_684_800_000_000

ENVELOPE = pa.schema(
    [
        pa.field("_commit_lsn", pa.int64(), nullable=False),
        pa.field("_lsn", pa.int64(), nullable=False),
        pa.field("_seq", pa.int32(), nullable=False),
        pa.field("_xid", pa.int64(), nullable=False),
        pa.field("_commit_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("_origin", pa.string()),
        pa.field("_op", pa.string(), nullable=False),
        pa.field("_schema", pa.string(), nullable=False),
        pa.field("_table", pa.string(), nullable=False),
        pa.field("_relation_version", pa.int32(), nullable=False),
        pa.field("_key", pa.list_(pa.string()), nullable=False),
    ]
)
UNCHANGED_FIELD = pa.field("_unchanged", pa.list_(pa.string()), nullable=False)

#: A TupleData part as the compiled scan leaves it: the message and the part's offset in it.
Part = tuple[bytes, int]
_OPS = {73: "I", 85: "U", 68: "D"}


@dataclass(slots=True)
class _Pending:
    """Rows of one relation version, accumulated column by column."""

    version: RelationVersion
    commit_lsn: list[int] = field(default_factory=list)
    lsn: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    xid: list[int] = field(default_factory=list)
    commit_time: list[int] = field(default_factory=list)
    origin: list[str | None] = field(default_factory=list)
    op: list[str] = field(default_factory=list)
    new: list[TupleData | Part | None] = field(default_factory=list)
    old: list[TupleData | Part | None] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TransactionFacts:
    """What every change row of a transaction shares."""

    xid: int
    commit_lsn: int
    commit_timestamp: int
    origin: str | None = None

    @classmethod
    def of(cls, txn: CommittedTransaction) -> TransactionFacts:
        return cls(txn.xid, txn.commit_lsn, txn.commit_timestamp, txn.origin)


class ChangeRowBuilder:
    """Decodes transactions' messages and accumulates change rows until :meth:`build`.

    ``relations`` is the cache of Relation messages in force; pass the same cache across calls
    (and seed it with the Relation messages a segment carries) so that changes whose Relation
    message came earlier in the stream can be decoded.
    """

    def __init__(
        self,
        protocol_version: int,
        *,
        relations: RelationCache | None = None,
        registry: TypeRegistry | None = None,
        options: ColumnOptions | Mapping[str, ColumnOptions] | None = None,
        binary: bool = False,
        speedups: ModuleType | None = compiled.speedups,
    ) -> None:
        """``speedups``: the compiled module to use (default: :data:`walspark.compiled.speedups`;
        None for the pure-Python path)."""
        self.protocol_version = protocol_version
        self.speedups = speedups
        self.relations = relations if relations is not None else RelationCache()
        self.registry = registry if registry is not None else default_registry()
        self.options = options
        self.binary = binary
        #: Per relation version (by the version object's id), in order of first row: Python
        #: lists, or a compiled RowBatch.
        self._pending: dict[int, Any] = {}
        #: The compiled loop's lookup: relation id -> RowBatch of the version in force, made
        #: under ``relations.generation`` = ``_generation`` (dropped when that changes).
        self._batches: dict[int, Any] = {}
        self._generation = -1
        #: Origins of the compiled rows, by index (0: none), until build.
        self._origins: dict[str | None, int] = {None: 0}
        #: True until build when rows are kept in Python lists (no compiled module, or a
        #: number the compiled rows cannot hold).
        self._pure_rows = speedups is None
        self.rows = 0

    def add_transaction(self, txn: CommittedTransaction) -> None:
        self.add(TransactionFacts.of(txn), txn.messages())

    def add(self, facts: TransactionFacts, messages: Iterable[tuple[int, bool, bytes]]) -> None:
        """Decode one committed transaction's data messages (``(lsn, in_stream, bytes)``)."""
        if self._pure_rows:
            self.add_numbered(facts, ((seq, *message) for seq, message in enumerate(messages)))
        else:
            self._add_compiled(facts, iter(messages), numbered=False)

    def add_numbered(self, facts: TransactionFacts, messages: Iterable[tuple[int, int, bool, bytes]]) -> None:
        """Like :meth:`add`, with each message's position in its transaction given (``(seq, lsn, in_stream,
        bytes)``): for a part of a transaction decoded apart from the rest (a segment piece, a filtered
        subset), so that ``_seq`` stays the position in the whole transaction."""
        if self._pure_rows:
            for seq, lsn, in_stream, data in messages:
                self._message(facts, seq, lsn, in_stream, data)
        else:
            self._add_compiled(facts, iter(messages), numbered=True)

    def _add_compiled(self, facts: TransactionFacts, messages: Iterator[Any], *, numbered: bool) -> None:
        """The C message loop, with each message it hands back handled here, one at a time."""
        env = self._compiled_facts(facts)
        if env is None:
            self._to_pure()
        seq = 0
        while not self._pure_rows:
            if self.relations.generation != self._generation:  # a Relation changed: look up afresh
                self._batches.clear()
                self._generation = self.relations.generation
            assert env is not None  # else the rows went pure above
            added, seq, item = self.speedups.add_row_changes(  # type: ignore[union-attr]
                self._batches, messages, numbered, self.protocol_version, *env, seq
            )
            self.rows += added
            if item is None:
                return
            number, lsn, in_stream, data = item if numbered else (seq, *item)
            self._message(facts, number, lsn, in_stream, data)
            seq += 1
        rest = messages if numbered else ((number, *message) for number, message in enumerate(messages, seq))
        for number, lsn, in_stream, data in rest:
            self._message(facts, number, lsn, in_stream, data)

    def _compiled_facts(self, facts: TransactionFacts) -> tuple[int, int, int, int] | None:
        """The facts as the compiled rows hold them (commit LSN, xid, Unix commit time, origin
        index), or None when one does not fit (the pure path then keeps them as they are)."""
        commit_time = (facts.commit_timestamp + _PG_EPOCH_US if facts.commit_timestamp.__class__ is int
                       else None)  # fmt: skip
        origin = self._origin(facts.origin)
        values = (facts.commit_lsn, facts.xid, commit_time)
        if origin is None or not all(v.__class__ is int and -(1 << 63) <= v < (1 << 63) for v in values):
            return None
        return facts.commit_lsn, facts.xid, commit_time, origin  # type: ignore[return-value]

    def _origin(self, origin: str | None) -> int | None:
        """The index of an origin in this build's list (None for what is not a str or None)."""
        if origin is not None and origin.__class__ is not str:
            return None
        index = self._origins.get(origin)
        if index is None:
            index = self._origins[origin] = len(self._origins)
        return index

    def _to_pure(self) -> None:
        """Keep this build's rows in Python lists from now on, the compiled ones included."""
        self._pure_rows = True
        self._batches.clear()
        names = list(self._origins)
        for key, batch in list(self._pending.items()):
            if batch.__class__ is _Pending:
                continue
            pending = self._pending[key] = _Pending(batch.version)
            (pending.commit_lsn, pending.lsn, pending.seq, pending.xid, pending.commit_time, origins,
             pending.op) = batch.columns()  # fmt: skip
            pending.origin = [names[i] for i in origins]
            pending.new, pending.old = batch.parts(True), batch.parts(False)

    def _message(self, facts: TransactionFacts, seq: int, lsn: int, in_stream: bool, data: bytes) -> None:
        """One message, the pure path's way (the compiled scan, where there is one, spares the
        message object of a row change)."""
        version = self.protocol_version
        if self.speedups is not None and data.__class__ is bytes and (version >= 2 or not in_stream):
            head = self.speedups.scan_row_change(data, in_stream)
            if head is not None:  # a valid Insert / Update / Delete, its values left in place
                kind, _, relation_id, key_pos, old_pos, new_pos = head
                old = (data, old_pos) if old_pos >= 0 else (data, key_pos) if key_pos >= 0 else None
                self._row(facts, lsn, seq, _OPS[kind], relation_id, (data, new_pos) if new_pos >= 0 else None, old)
                return
        message = decode_message(data, protocol_version=version, in_stream=in_stream, parallel_abort=None, lsn=lsn)
        if isinstance(message, Insert):
            self._row(facts, lsn, seq, "I", message.relation_id, message.new_tuple, None)
        elif isinstance(message, Update):
            self._row(facts, lsn, seq, "U", message.relation_id, message.new_tuple,
                      message.old_tuple or message.key_tuple)  # fmt: skip
        elif isinstance(message, Delete):
            self._row(facts, lsn, seq, "D", message.relation_id, None, message.old_tuple or message.key_tuple)
        elif isinstance(message, Truncate):
            for relation_id in message.relation_ids:
                self._row(facts, lsn, seq, "T", relation_id, None, None)
        elif isinstance(message, Relation):
            self.relations.apply(message)
        elif isinstance(message, Type):
            self.relations.apply_type(message)
            self.registry.note_type(message.type_oid, message.namespace, message.type_name)
        else:
            assert isinstance(message, Message)  # transactional logical messages carry no rows

    def _row(self, facts: TransactionFacts, lsn: int, seq: int, op: str, relation_id: int,
             new: TupleData | Part | None, old: TupleData | Part | None) -> None:  # fmt: skip
        version = self.relations.get(relation_id)
        if version is None:
            raise ProtocolError(
                f"change for relation {relation_id} before any Relation message describing it",
                kind={"I": "Insert", "U": "Update", "D": "Delete", "T": "Truncate"}[op],
                offset=0,
                lsn=lsn,
            )
        key = id(version)  # one object per shape and number (see RelationCache._known)
        pending: Any = self._pending.get(key)  # a _Pending, or the compiled RowBatch
        if pending is None:
            pending = self._pending[key] = _Pending(version) if self._pure_rows else self.speedups.RowBatch(version)  # type: ignore[union-attr]
        if pending.__class__ is not _Pending:  # a compiled RowBatch: the C loop takes this relation's next rows
            self._batches[relation_id] = pending
            commit_time = facts.commit_timestamp + _PG_EPOCH_US
            origin = self._origin(facts.origin)
            if pending.add(facts.commit_lsn, lsn, seq, facts.xid, commit_time, origin, op, new, old):
                self.rows += 1
                return
            self._to_pure()  # a number the C row cannot hold
            pending = self._pending[key]
        pending.commit_lsn.append(facts.commit_lsn)
        pending.lsn.append(lsn)
        pending.seq.append(seq)
        pending.xid.append(facts.xid)
        pending.commit_time.append(facts.commit_timestamp + _PG_EPOCH_US)
        pending.origin.append(facts.origin)
        pending.op.append(op)
        pending.new.append(new)
        pending.old.append(old)
        self.rows += 1

    def build(self) -> list[tuple[RelationVersion, pa.RecordBatch]]:
        """The accumulated rows, one record batch per relation version; then start afresh."""
        out = [
            (p.version, self._batch(p) if p.__class__ is _Pending else self._compiled_batch(p))
            for p in self._pending.values()
        ]
        self._pending.clear()
        self._batches.clear()
        self._origins = {None: 0}
        self._pure_rows = self.speedups is None
        self.rows = 0
        return out

    def row_schema(self, version: RelationVersion) -> pa.Schema:
        """The Arrow schema of the change rows of one relation version."""
        from walspark.values import arrow_schema

        row = pa.struct(list(arrow_schema(version.columns, self.registry, self.options, binary=self.binary)))
        return pa.schema([*ENVELOPE, pa.field("_new", row), pa.field("_old", row), UNCHANGED_FIELD])

    def _batch(self, pending: _Pending) -> pa.RecordBatch:
        version = pending.version
        new, unchanged = self._struct(version, pending.new)
        old, _ = self._struct(version, pending.old)
        own = [
            pa.array(pending.commit_lsn, pa.int64()),
            pa.array(pending.lsn, pa.int64()),
            pa.array(pending.seq, pa.int32()),
            pa.array(pending.xid, pa.int64()),
            pa.array(pending.commit_time, pa.timestamp("us", tz="UTC")),
            pa.array(pending.origin, pa.string()),
            pa.array(pending.op, pa.string()),
        ]
        return self._assemble(version, len(pending.op), own, new, old, unchanged)

    def _compiled_batch(self, rows: Any) -> pa.RecordBatch:
        """The record batch of a ``walspark_c.RowBatch``: its envelope wrapped from C buffers."""
        n = len(rows)
        commit_lsn, lsn, seq, xid, commit_time, origin, op_offsets, op_data, max_origin = rows.envelope()

        def fixed(arrow_type: pa.DataType, data: bytes) -> pa.Array:
            return pa.Array.from_buffers(arrow_type, n, [None, pa.py_buffer(data)])

        origins = (pa.nulls(n, pa.string()) if max_origin == 0
                   else pa.array(list(self._origins), pa.string()).take(fixed(pa.int32(), origin)))  # fmt: skip
        own = [
            fixed(pa.int64(), commit_lsn),
            fixed(pa.int64(), lsn),
            fixed(pa.int32(), seq),
            fixed(pa.int64(), xid),
            fixed(pa.timestamp("us", tz="UTC"), commit_time),
            origins,
            pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(op_offsets), pa.py_buffer(op_data)]),
        ]
        new, unchanged = self._compiled_struct(rows, new=True)
        old, _ = self._compiled_struct(rows, new=False)
        return self._assemble(rows.version, n, own, new, old, unchanged)

    def _assemble(self, version: RelationVersion, n: int, own: list[pa.Array], new: pa.StructArray,
                  old: pa.StructArray, unchanged: pa.Array) -> pa.RecordBatch:  # fmt: skip
        """The row's own columns, the relation's (the same in every row: one value taken n times) and the rows."""
        zeros = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))])
        shared = [pa.array([value], arrow_type).take(zeros) for value, arrow_type in (
            (version.schema, pa.string()), (version.table, pa.string()), (version.version, pa.int32()),
            (list(version.key_columns), pa.list_(pa.string())))]  # fmt: skip
        return pa.RecordBatch.from_arrays([*own, *shared, new, old, unchanged], schema=self.row_schema(version))

    def _compiled_struct(self, rows: Any, *, new: bool) -> tuple[pa.StructArray, pa.Array]:
        """One part (new or old) of a RowBatch's rows, gathered in C; the pure path where it cannot."""
        version = rows.version
        gathered = rows.gather(new, len(version.columns))
        if gathered is None:
            return self._struct(version, rows.parts(new))
        mask = pa.Array.from_buffers(pa.bool_(), len(rows), [None, pa.py_buffer(rows.absent(new))])
        return self._gathered_struct(version, gathered, len(rows), mask)

    def _gathered_struct(self, version: RelationVersion, gathered: list, n: int,
                         mask: pa.BooleanArray) -> tuple[pa.StructArray, pa.Array]:  # fmt: skip
        batch, unchanged = decode_gathered(version.columns, gathered, n, self.registry, self.options,
                                           binary=self.binary)  # fmt: skip
        return pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema), mask=mask), unchanged

    def _struct(self, version: RelationVersion,
                tuples: list[TupleData | Part | None]) -> tuple[pa.StructArray, pa.Array]:  # fmt: skip
        mask = pa.array([t is None for t in tuples], pa.bool_())
        width = len(version.columns)
        if self.speedups is not None and all(t is None or t.__class__ is tuple for t in tuples):
            gathered = self.speedups.gather_columns(tuples, width)
            if gathered is not None:
                return self._gathered_struct(version, gathered, len(tuples), mask)
        # The pure-Python path; parts the compiled scan located are read by the reference reader.
        absent = TupleData("n" * width, (None,) * width)
        filled = [absent if t is None else read_tuple_data(*t) if t.__class__ is tuple else t for t in tuples]
        batch, unchanged = decode_tuples(version.columns, filled, self.registry, self.options, binary=self.binary)
        struct = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema), mask=mask)
        return struct, unchanged
