"""Committed transactions → change rows as Arrow record batches, one batch per relation version.

The change-row contract (ARCHITECTURE.md), one row per Insert/Update/Delete and one per table
of a Truncate:

========================  ===========================  ==========================================
column                    Arrow type                   meaning
========================  ===========================  ==========================================
``_commit_lsn``           int64                        commit LSN of the transaction
``_lsn``                  int64                        LSN of the change message
``_seq``                  int32                        position of the change in its transaction
``_xid``                  int64                        transaction id
``_commit_time``          timestamp[us, UTC]           commit time
``_origin``               string                       replication origin, if any
``_op``                   string                       ``I`` insert, ``U`` update, ``D`` delete,
                                                       ``T`` truncate
``_schema``, ``_table``   string                       the source table
``_relation_version``     int32                        shape version (see :mod:`.relations`)
``_key``                  list<string>                 replica identity columns
``_new``                  struct<table's columns>      the row after (I, U); null for D, T
``_old``                  struct<table's columns>      the old row (U with REPLICA IDENTITY FULL,
                                                       D) or only its key columns (U that changed
                                                       the key, D with a key identity); else null
``_unchanged``            list<string>                 columns of ``_new`` whose value was not
                                                       sent (unchanged TOAST): *not* NULL
========================  ===========================  ==========================================

Batches are built column-wise with :mod:`walspark.values` (no per-row Python objects for the
values). Rows are grouped by relation version because one Arrow schema fits one shape.

Where the compiled hot path is in force (:mod:`walspark.compiled`), a row change is not decoded
into a message object at all: ``walspark_c`` checks it and notes where its TupleData parts
start, and at :meth:`ChangeRowBuilder.build` gathers each column's values straight into Arrow
buffers. Anything it does not accept goes through the pure-Python decoder, which decodes it or
raises the reference error, so the two paths give the same rows and the same errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType

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
        self._pending: dict[tuple[int, int], _Pending] = {}
        self.rows = 0

    def add_transaction(self, txn: CommittedTransaction) -> None:
        self.add(TransactionFacts.of(txn), txn.messages())

    def add(self, facts: TransactionFacts, messages: Iterable[tuple[int, bool, bytes]]) -> None:
        """Decode one committed transaction's data messages (``(lsn, in_stream, bytes)``)."""
        self.add_numbered(facts, ((seq, *message) for seq, message in enumerate(messages)))

    def add_numbered(self, facts: TransactionFacts, messages: Iterable[tuple[int, int, bool, bytes]]) -> None:
        """Like :meth:`add`, with each message's position in its transaction given (``(seq, lsn, in_stream,
        bytes)``): for a part of a transaction decoded apart from the rest (a segment piece, a filtered
        subset), so that ``_seq`` stays the position in the whole transaction."""
        version = self.protocol_version
        scan = self.speedups.scan_row_change if self.speedups is not None else None
        for seq, lsn, in_stream, data in messages:
            if scan is not None and data.__class__ is bytes and (version >= 2 or not in_stream):
                head = scan(data, in_stream)
                if head is not None:  # a valid Insert / Update / Delete, its values left in place
                    kind, _, relation_id, key_pos, old_pos, new_pos = head
                    old = (data, old_pos) if old_pos >= 0 else (data, key_pos) if key_pos >= 0 else None
                    self._row(facts, lsn, seq, _OPS[kind], relation_id, (data, new_pos) if new_pos >= 0 else None, old)
                    continue
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
        pending = self._pending.get((relation_id, version.version))
        if pending is None:
            pending = self._pending[(relation_id, version.version)] = _Pending(version)
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
        out = [(pending.version, self._batch(pending)) for pending in self._pending.values()]
        self._pending.clear()
        self.rows = 0
        return out

    def row_schema(self, version: RelationVersion) -> pa.Schema:
        """The Arrow schema of the change rows of one relation version."""
        from walspark.values import arrow_schema

        row = pa.struct(list(arrow_schema(version.columns, self.registry, self.options, binary=self.binary)))
        return pa.schema([*ENVELOPE, pa.field("_new", row), pa.field("_old", row), UNCHANGED_FIELD])

    def _batch(self, pending: _Pending) -> pa.RecordBatch:
        version = pending.version
        n = len(pending.op)
        new, unchanged = self._struct(version, pending.new)
        old, _ = self._struct(version, pending.old)
        key = list(version.key_columns)
        envelope = [
            pa.array(pending.commit_lsn, pa.int64()),
            pa.array(pending.lsn, pa.int64()),
            pa.array(pending.seq, pa.int32()),
            pa.array(pending.xid, pa.int64()),
            pa.array(pending.commit_time, pa.timestamp("us", tz="UTC")),
            pa.array(pending.origin, pa.string()),
            pa.array(pending.op, pa.string()),
            pa.array([version.schema] * n, pa.string()),
            pa.array([version.table] * n, pa.string()),
            pa.array([version.version] * n, pa.int32()),
            pa.array([key] * n, pa.list_(pa.string())),
        ]
        return pa.RecordBatch.from_arrays([*envelope, new, old, unchanged], schema=self.row_schema(version))

    def _struct(self, version: RelationVersion,
                tuples: list[TupleData | Part | None]) -> tuple[pa.StructArray, pa.Array]:  # fmt: skip
        mask = pa.array([t is None for t in tuples], pa.bool_())
        width = len(version.columns)
        if self.speedups is not None and all(t is None or t.__class__ is tuple for t in tuples):
            gathered = self.speedups.gather_columns(tuples, width)
            if gathered is not None:
                batch, unchanged = decode_gathered(version.columns, gathered, len(tuples), self.registry, self.options,
                                                   binary=self.binary)  # fmt: skip
                return pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema), mask=mask), unchanged
        # The pure-Python path; parts the compiled scan located are read by the reference reader.
        absent = TupleData("n" * width, (None,) * width)
        filled = [absent if t is None else read_tuple_data(*t) if t.__class__ is tuple else t for t in tuples]
        batch, unchanged = decode_tuples(version.columns, filled, self.registry, self.options, binary=self.binary)
        struct = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema), mask=mask)
        return struct, unchanged
