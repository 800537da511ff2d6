"""The data source's task decoding: staged segments → output batches.

:func:`~walspark.spark.datasource.decode.decode_segments` decodes a task's staged segments with
one :class:`~walspark.spark.datasource.decode.TaskDecoder` per run of consecutive segments
written with the same settings, and shapes their rows together
(:meth:`OutputShaper.pieces` / :meth:`~OutputShaper.merge` / :meth:`~OutputShaper.assemble`).
The reference is the same function given one segment at a time: decoding segments together
must give exactly the rows — same Arrow schema, same values, same order — of decoding each alone
and concatenating the results in segment order.

Segments are written as the stager writes them (:class:`_Stager` below follows
``Stager._stage``/``_write``: whole transactions per segment, or the pieces of one transaction
each in a segment of its own; a prelude of the Relation messages in force at the segment's
start for the relations its changes touch, with the stream's version numbers). Pure pyarrow:
no Spark session, no server.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from walspark.changes.relations import RelationCache
from walspark.protocol import Delete, Insert, Relation, RelationColumn, Truncate, TupleData, Update, encode_message
from walspark.protocol.decoder import relation_ids
from walspark.spark.datasource.decode import DecodeConfig, TaskDecoder, decode_segments
from walspark.spark.datasource.output import OutputShaper
from walspark.spark.datasource.schema import ColumnFacts, OutputLayout, TableShape
from walspark.staging.offsets import TxnEntry
from walspark.staging.segments import SegmentBuilder, SegmentMeta, SegmentName, write_segment
from walspark.values import TypeRegistry

# --------------------------------------------------------------------------- the tables


def _int(lo: int, hi: int) -> Callable[[random.Random], bytes]:
    return lambda rng: str(rng.randint(lo, hi)).encode()


def _text(rng: random.Random) -> bytes:
    return rng.choice(["", "ann", "bob", "çé€ü", "a,b", "quote\"d", "x" * rng.randint(0, 40)]).encode()


def _numeric(rng: random.Random) -> bytes:
    return str(Decimal(rng.randint(-10**11, 10**11)).scaleb(-2)).encode()


def _timestamptz(rng: random.Random) -> bytes:
    at = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(0, 10**14))
    return at.strftime("%Y-%m-%d %H:%M:%S.%f+00").encode()


def _bool(rng: random.Random) -> bytes:
    return rng.choice([b"t", b"f"])


def _float8(rng: random.Random) -> bytes:
    return repr(rng.uniform(-1e6, 1e6)).encode()


def _tags(rng: random.Random) -> bytes:
    return ("{" + ",".join(rng.choice(["a", "bb", "NULL", '"c d"']) for _ in range(rng.randint(0, 3))) + "}").encode()


def _date(rng: random.Random) -> bytes:
    return (datetime(2020, 1, 1) + timedelta(days=rng.randint(0, 3000))).strftime("%Y-%m-%d").encode()


@dataclass(frozen=True)
class Col:
    name: str
    oid: int
    typmod: int
    key: bool
    value: Callable[[random.Random], bytes]


@dataclass(frozen=True)
class Table:
    relid: int
    schema: str
    name: str
    identity: str  # 'd' default (old key only when the key changes; delete: key), 'f' full
    shapes: tuple[tuple[Col, ...], ...]  # the table's shapes through the stream; the last one is declared
    missing: dict[str, str] = field(default_factory=dict)  # declared columns' missing values

    @property
    def qname(self) -> str:
        return f"{self.schema}.{self.name}"

    def relation(self, shape: int, xid: int | None) -> Relation:
        return Relation(xid, self.relid, self.schema, self.name, self.identity,
                        tuple(RelationColumn(1 if c.key else 0, c.name, c.oid, c.typmod) for c in self.shapes[shape]))

    def declared(self) -> TableShape:
        cols = self.shapes[-1]
        return TableShape(self.schema, self.name, tuple((c.name, c.oid, c.typmod) for c in cols),
                          tuple(ColumnFacts(i + 1, self.missing.get(c.name)) for i, c in enumerate(cols)))


_ACCT_V1 = (Col("id", 20, -1, True, _int(-2**40, 2**40)), Col("owner", 25, -1, False, _text),
            Col("balance", 1700, ((12 << 16) | 2) + 4, False, _numeric))
_ACCT_V2 = (*_ACCT_V1, Col("note", 25, -1, False, _text))
#: acct: REPLICA IDENTITY DEFAULT; in the stream's course a column added with a constant default
#: (rows of the first shape hold it), then one without.
ACCT = Table(16401, "public", "acct", "d", (_ACCT_V1, _ACCT_V2, (*_ACCT_V2, Col("rating", 23, -1, False, _int(0, 5)))),
             {"note": "none"})
#: ev: REPLICA IDENTITY FULL (updates and deletes carry the whole old row).
EV = Table(16402, "public", "ev", "f", ((Col("id", 23, -1, True, _int(-2**31, 2**31 - 1)),
                                         Col("at", 1184, -1, False, _timestamptz), Col("flag", 16, -1, False, _bool),
                                         Col("score", 701, -1, False, _float8)),))
#: sales.item: a text key, a smallint, a text array, a date.
ITEM = Table(16403, "sales", "item", "d", ((Col("sku", 25, -1, True, _text), Col("qty", 21, -1, False, _int(-999, 999)),
                                             Col("tags", 1009, -1, False, _tags), Col("day", 1082, -1, False, _date)),))
TABLES = {t.qname: t for t in (ACCT, EV, ITEM)}


def output_schema(table: str | None) -> StructType:
    """The source's output schema, built as the stream reader builds it from the catalog."""
    registry = TypeRegistry()
    structs = {t.qname: t.declared().struct(registry) for t in TABLES.values()}
    return OutputLayout.build(structs, table).spark_schema()


#: Segment settings (protocol version, parallel streaming, binary): what a segment's decoder gets.
CONFIGS = ((1, False, False), (2, False, False), (4, True, False))

# --------------------------------------------------------------------------- the stream


@dataclass
class Txn:
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int
    origin: str | None
    messages: list[tuple[int, bool, bytes]]  # (lsn, in_stream, data)
    config: int = 0  # index in CONFIGS
    restart: bool = False  # a new stager process (and walsender session) begins with this transaction
    close_after: bool = False  # the stager writes its pending segment after this transaction
    pieces: int = 1  # > 1: a huge transaction, staged in this many segments of its own


class Source:
    """A toy publisher: transactions of pgoutput messages over :data:`TABLES`, Relation messages
    sent as pgoutput sends them (before a relation's first change in a session, and after its
    shape changed)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.shape = {t.relid: 0 for t in TABLES.values()}
        self.sent: set[int] = set()  # relations described in this session
        self.rows: dict[int, list[list[bytes | None]]] = {t.relid: [] for t in TABLES.values()}
        self.lsn = 0x1_0000_0000
        self.xid = 700

    def new_session(self) -> None:
        self.sent.clear()

    def alter(self, table: Table) -> None:
        """ALTER TABLE: the next shape (its Relation goes out before the table's next change)."""
        if self.shape[table.relid] + 1 < len(table.shapes):
            self.shape[table.relid] += 1
            self.sent.discard(table.relid)
            self.rows[table.relid] = [[*r, None] for r in self.rows[table.relid]]

    def _values(self, table: Table) -> list[bytes | None]:
        cols = table.shapes[self.shape[table.relid]]
        return [c.value(self.rng) if c.key or self.rng.random() > 0.15 else None for c in cols]

    def _old_row(self, table: Table) -> list[bytes | None]:
        rows = self.rows[table.relid]
        return self.rng.choice(rows) if rows else self._values(table)

    def _key_only(self, table: Table, row: list[bytes | None]) -> TupleData:
        cols = table.shapes[self.shape[table.relid]]
        return TupleData("".join("t" if c.key else "n" for c in cols), tuple(v if c.key else None
                                                                            for c, v in zip(cols, row)))

    @staticmethod
    def _tuple(row: Sequence[bytes | None], unchanged: Iterable[int] = ()) -> TupleData:
        skip = set(unchanged)
        return TupleData("".join("u" if i in skip else "n" if v is None else "t" for i, v in enumerate(row)),
                         tuple(None if i in skip else v for i, v in enumerate(row)))

    def txn(self, ops: Sequence[tuple], *, streamed: bool = False, origin: str | None = None) -> Txn:
        """One transaction of ``(table, op)``: op I insert, U update, K update of the key, D delete,
        T truncate (of that table), TT truncate of every table, A alter (then nothing); an insert
        may give its row: ``(table, "I", [b"1", None, ...])``."""
        self.xid += 1
        xid = self.xid if streamed else None
        messages: list = []

        def describe(table: Table) -> None:
            if table.relid not in self.sent:
                messages.append(table.relation(self.shape[table.relid], xid))
                self.sent.add(table.relid)

        for name, op, *values in ops:
            table = TABLES[name]
            if op == "A":
                self.alter(table)
                continue
            if op == "TT":
                for t in TABLES.values():
                    describe(t)
                messages.append(Truncate(xid, 0, tuple(t.relid for t in TABLES.values())))
                continue
            describe(table)
            rows = self.rows[table.relid]
            if op == "I":
                row = list(values[0]) if values else self._values(table)
                rows.append(row)
                messages.append(Insert(xid, table.relid, self._tuple(row)))
            elif op in "UK":
                old = self._old_row(table)
                new = self._values(table)
                cols = table.shapes[self.shape[table.relid]]
                if op == "U":  # the key stays; maybe an unchanged TOASTed text value (not sent)
                    new = [o if c.key else v for c, o, v in zip(cols, old, new)]
                unchanged = [i for i, c in enumerate(cols) if c.oid == 25 and not c.key and self.rng.random() < 0.3]
                key_changed = any(o != v for c, o, v in zip(cols, old, new) if c.key)
                key = self._key_only(table, old) if key_changed and table.identity == "d" else None
                full = self._tuple(old) if table.identity == "f" else None
                messages.append(Update(xid, table.relid, key, full, self._tuple(new, unchanged)))
                rows.append(new)
            elif op == "D":
                old = self._old_row(table)
                if table.identity == "f":
                    messages.append(Delete(xid, table.relid, None, self._tuple(old)))
                else:
                    messages.append(Delete(xid, table.relid, self._key_only(table, old), None))
            elif op == "T":
                messages.append(Truncate(xid, self.rng.choice([0, 1, 2, 3]), (table.relid,)))
                rows.clear()
            else:
                raise AssertionError(op)
        out = []
        for m in messages:
            self.lsn += self.rng.randint(0x18, 0x400)
            out.append((self.lsn, streamed, encode_message(m)))
        self.lsn += 0x30
        commit = self.lsn
        self.lsn += 0x30
        ts = 800_000_000_000_000 + commit
        return Txn(self.xid, commit, self.lsn, ts, origin, out)


# --------------------------------------------------------------------------- the stager


@dataclass(frozen=True)
class Expected:
    """One change row the output must hold, as the stream says it."""

    commit_lsn: int
    seq: int
    op: str
    table: str
    version: int


class _Stager:
    """Writes segments as :class:`walspark.staging.stager.Stager` does (``_stage``/``_write``),
    and notes the change rows they hold with the stream's relation versions."""

    def __init__(self, directory: Path, table: str | None, *, filter_other_tables: bool = True) -> None:
        self.directory = directory
        self.table = table
        self.filter = table is not None and filter_other_tables
        self.seq = 0
        self.segments: list[SegmentName] = []
        self.expected: list[tuple[int, Expected]] = []  # (end LSN, row)
        self.config: int | None = None
        self._new_process()
        self._flush_state()

    def _new_process(self) -> None:
        self.cache = RelationCache()
        self.rels: dict[int, tuple[int, bool, bytes, int]] = {}
        self.wanted: set[int] = set()

    def restart(self, resent: Sequence[Relation] = ()) -> None:
        """A new stager process: its relation cache starts empty (versions from 1 again). Its
        stream starts where the slot was confirmed: the transactions it resends up to what is
        staged are dropped, but their Relation messages (``resent``) are taken (``_absorb``)."""
        self.flush()
        self._new_process()
        for relation in resent:
            self._relation(0, False, encode_message(relation))

    def _relation(self, lsn: int, in_stream: bool, data: bytes) -> None:
        message = _decode_relation(data, in_stream)
        if self.table is None or f"{message.schema}.{message.relation_name}" == self.table:
            self.wanted.add(message.relation_id)
        version = self.cache.apply(message)
        have = self.rels.get(message.relation_id)
        if have is None or have[3] != version.version:
            self.rels = {**self.rels, message.relation_id: (lsn, in_stream, data, version.version)}

    def _flush_state(self) -> None:
        self.pending = SegmentBuilder()
        self.pending_entries: list[TxnEntry] = []
        self.pending_touched: set[int] = set()
        self.pending_snapshot: dict = {}

    def _write(self, builder: SegmentBuilder, snapshot: dict, touched: set[int],
               entries: tuple[TxnEntry, ...]) -> None:  # fmt: skip
        prelude = [snapshot[r] for r in sorted(touched) if r in snapshot]
        meta = SegmentMeta(*CONFIGS[self.config], entries)  # type: ignore[index]
        first = builder.first_end if builder.first_end is not None else entries[0].end_lsn
        last = builder.last_end if builder.last_end is not None else entries[-1].end_lsn
        self.segments.append(write_segment(self.directory, self.seq, builder.to_batch(prelude), meta,
                                           first_end=first, last_end=last))
        self.seq += 1

    def flush(self) -> None:
        if self.pending_entries:
            self._write(self.pending, self.pending_snapshot, self.pending_touched, tuple(self.pending_entries))
        self._flush_state()

    def stage(self, txn: Txn) -> None:
        if txn.restart:
            self.restart()
        if txn.config != self.config:
            self.flush()
            self.config = txn.config
        cut = {len(txn.messages) * k // txn.pieces for k in range(1, txn.pieces)}
        dedicated = txn.pieces > 1
        if dedicated:
            self.flush()
        piece, snapshot, touched = SegmentBuilder(), self.rels, set()
        changes = nbytes = 0
        for seq, (lsn, in_stream, data) in enumerate(txn.messages):
            if seq in cut and piece.rows:
                self._write(piece, snapshot, touched, ())
                piece, snapshot, touched = SegmentBuilder(), self.rels, set()
            kind = chr(data[0])
            if kind in "IUDT":
                rids = relation_ids(data, in_stream)
                if self.filter and self.wanted.isdisjoint(rids):
                    continue
                touched.update(rids)
                changes += 1
                for rid in rids:
                    version = self.cache.get(rid)
                    assert version is not None
                    if self.table is None or version.qualified_name == self.table:
                        self.expected.append((txn.end_lsn, Expected(txn.commit_lsn, seq, kind,
                                                                    version.qualified_name, version.version)))
            elif kind == "R":
                self._relation(lsn, in_stream, data)
            piece.append(txn.end_lsn, txn.commit_lsn, txn.xid, txn.commit_ts, txn.origin, lsn, seq, in_stream, data)
            nbytes += len(data)
        entry = TxnEntry(txn.end_lsn, changes, nbytes)
        if dedicated:
            self._write(piece, snapshot, touched, (entry,))
            return
        if not self.pending_entries:
            self.pending_snapshot = snapshot
        self.pending.extend(piece)
        self.pending_touched |= touched
        self.pending_entries.append(entry)
        if txn.close_after:
            self.flush()


def _decode_relation(data: bytes, in_stream: bool) -> Relation:
    from walspark.protocol import decode_message

    message = decode_message(data, protocol_version=4 if in_stream else 1, in_stream=in_stream, parallel_abort=None)
    assert isinstance(message, Relation)
    return message


def stage(directory: Path, txns: Sequence[Txn], table: str | None, *, filter_other_tables: bool = True) -> _Stager:
    stager = _Stager(directory, table, filter_other_tables=filter_other_tables)
    for txn in txns:
        stager.stage(txn)
    stager.flush()
    return stager


# --------------------------------------------------------------------------- decoding


@dataclass
class Decoded:
    table: pa.Table
    batches: list[pa.RecordBatch]
    decoders: int


def decode(paths: Sequence[object], start: int, end: int, table: str | None, chunk_rows: int) -> Decoded:
    """``decode_segments`` as ``PgoutputStreamReader.read`` calls it."""
    schema = output_schema(table)
    made: list[DecodeConfig] = []

    def make(config: DecodeConfig) -> TaskDecoder:
        made.append(config)
        return TaskDecoder(DecodeConfig(config.protocol_version, config.streaming_parallel, config.binary),
                           schema, table, chunk_rows=chunk_rows)

    batches = list(decode_segments(paths, start, end, make))  # type: ignore[arg-type]
    target = OutputShaper(schema, table).target
    for b in batches:
        assert b.schema.equals(target, check_metadata=True)
    return Decoded(pa.Table.from_batches(batches, schema=target), batches, len(made))


def together_and_alone(segments: Sequence[SegmentName], start: int, end: int, table: str | None,
                       chunk_rows: int) -> tuple[Decoded, pa.Table]:  # fmt: skip
    """Decode the segments together, and each alone; check both give the same rows; return them."""
    paths = [s.path for s in segments]
    together = decode(paths, start, end, table, chunk_rows)
    alone = [decode([p], start, end, table, chunk_rows) for p in paths]
    reference = pa.concat_tables([a.table for a in alone]) if alone else together.table.slice(0, 0)
    assert together.table.schema.equals(reference.schema, check_metadata=True)
    assert together.table.num_rows == reference.num_rows
    for b in [*together.batches, *(b for a in alone for b in a.batches)]:
        assert 0 < b.num_rows <= chunk_rows
    if not together.table.equals(reference):
        raise AssertionError(_difference(together.table, reference))
    return together, reference


def _difference(together: pa.Table, alone: pa.Table) -> str:
    """The first differing row of two tables of the same schema, for the failure message."""
    a, b = together.to_pylist(), alone.to_pylist()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            cols = [k for k in x if x[k] != y[k]]
            return (f"row {i} differs in {cols}:\n together: {[(k, x[k]) for k in cols]}\n"
                    f" alone:    {[(k, y[k]) for k in cols]}\n envelope: "
                    f"{ {k: x[k] for k in ('_commit_lsn', '_seq', '_op', '_table', '_relation_version')} }")
    return f"{len(a)} rows together, {len(b)} alone"


def envelope(table: pa.Table) -> list[Expected]:
    cols = [table.column(c).to_pylist() for c in ("_commit_lsn", "_seq", "_op", "_schema", "_table",
                                                 "_relation_version")]
    return [Expected(c, s, o, f"{n}.{t}", v) for c, s, o, n, t, v in zip(*cols)]


def expected_rows(stager: _Stager, start: int, end: int) -> list[Expected]:
    return [row for at, row in stager.expected if start < at <= end]


# --------------------------------------------------------------------------- a worked example


def _example() -> tuple[Source, list[Txn]]:
    """Six transactions over three tables in six segments (the fifth transaction in two; the last two
    written with protocol 2, streamed); acct gains a column in the fourth."""
    src = Source(seed=7)
    t1 = src.txn([("public.acct", "I"), ("public.ev", "I"), ("sales.item", "I")])  # segment 0
    t1.close_after = True
    t2 = src.txn([("public.acct", "K"), ("public.ev", "U")])  # segment 1 ...
    t3 = src.txn([("public.ev", "D"), ("sales.item", "U"), ("public.acct", "I")])  # ... with t3
    t3.close_after = True
    t4 = src.txn([("public.acct", "A"), ("public.acct", "I"), ("public.acct", "U")])  # segment 2: acct v2
    t4.close_after = True
    t5 = src.txn([("sales.item", "D"), ("public.acct", "D"), ("public.acct", "I")], streamed=True)  # segments 3, 4
    t5.config, t5.pieces = 1, 2
    t6 = src.txn([("public.acct", "I"), ("public.ev", "I")])  # segment 5
    t6.config = 1
    return src, [t1, t2, t3, t4, t5, t6]


def test_worked_example_values_all_tables(tmp_path: Path) -> None:
    """The rows themselves (so two equally wrong outputs cannot pass): ops, commit order, values,
    versions, the old key of a key update, a missing value filled for rows of the older shape."""
    _, txns = _example()
    stager = stage(tmp_path, txns, None)
    assert len(stager.segments) == 6
    together, _ = together_and_alone(stager.segments, 0, txns[-1].end_lsn, None, chunk_rows=1000)
    assert together.decoders == 2  # protocol 1 segments share one decoder, protocol 2 the other
    out = together.table
    assert envelope(out) == expected_rows(stager, 0, txns[-1].end_lsn)
    assert out.column("_op").to_pylist() == list("IIIUUDUIIUDDIII")
    commits = out.column("_commit_lsn").to_pylist()
    assert commits == sorted(commits) and len(set(commits)) == 6
    assert out.column("_table").to_pylist()[:3] == ["acct", "ev", "item"]

    t1_acct = txns[0].messages[1][2]  # Relation acct, then its Insert
    insert = _decode_insert(t1_acct)
    first = out.slice(0, 1).to_pylist()[0]
    assert first["_op"] == "I" and first["_commit_lsn"] == txns[0].commit_lsn and first["_seq"] == 1
    assert first["public.acct"]["id"] == int(insert.new_tuple.values[0])
    assert first["public.acct"]["owner"] == (None if insert.new_tuple.values[1] is None
                                             else insert.new_tuple.values[1].decode())
    assert first["public.acct"]["note"] == "none"  # v1 row: the declared missing value
    assert first["public.acct:old"] is None and first["public.ev"] is None and first["sales.item"] is None
    assert first["_relation_version"] == 1 and first["_key"] == ["id"]

    key_update = out.slice(3, 1).to_pylist()[0]  # t2: acct's key changed: the old key only
    assert key_update["_op"] == "U" and key_update["_table"] == "acct"
    assert key_update["public.acct:old"]["id"] == int(insert.new_tuple.values[0])
    assert key_update["public.acct:old"]["owner"] is None and key_update["public.acct"] is not None

    ev_delete = out.slice(5, 1).to_pylist()[0]  # t3: REPLICA IDENTITY FULL: the whole old row
    assert ev_delete["_op"] == "D" and ev_delete["public.ev"] is None
    deleted = _decode(txns[2].messages[0][2])
    assert isinstance(deleted, Delete) and deleted.key_tuple is None and deleted.old_tuple is not None
    old_id, old_at, old_flag, _ = deleted.old_tuple.values
    assert ev_delete["public.ev:old"]["id"] == int(old_id)  # type: ignore[arg-type]
    assert (ev_delete["public.ev:old"]["at"] is None) == (old_at is None)
    assert ev_delete["public.ev:old"]["flag"] == (None if old_flag is None else old_flag == b"t")

    v2 = [r for r in out.to_pylist() if r["_table"] == "acct" and r["_commit_lsn"] >= txns[3].commit_lsn]
    assert [r["_relation_version"] for r in v2] == [2] * len(v2) and len(v2) == 5
    t4_insert = _decode_insert(txns[3].messages[1][2])
    assert v2[0]["public.acct"]["note"] == (None if t4_insert.new_tuple.values[3] is None
                                            else t4_insert.new_tuple.values[3].decode())


def _decode(data: bytes) -> object:
    from walspark.protocol import decode_message

    return decode_message(data, protocol_version=1, in_stream=False, parallel_abort=None)


def _decode_insert(data: bytes) -> Insert:
    message = _decode(data)
    assert isinstance(message, Insert)
    return message


def test_worked_example_per_table_and_cut_range(tmp_path: Path) -> None:
    """One table's layout, a range cutting transactions off at both ends, batches of 2 rows."""
    _, txns = _example()
    stager = stage(tmp_path, txns, "public.acct")
    start, end = txns[0].end_lsn, txns[4].end_lsn  # t2 .. t5
    segments = [s for s in stager.segments if s.overlaps(start, end)]
    together, _ = together_and_alone(segments, start, end, "public.acct", chunk_rows=2)
    out = together.table
    assert envelope(out) == expected_rows(stager, start, end)
    assert out.column("_op").to_pylist() == list("UIIUDI")
    assert set(out.column("_table").to_pylist()) == {"acct"}
    assert out.column("_relation_version").to_pylist() == [1, 1, 2, 2, 2, 2]
    assert out.column("note").to_pylist()[:2] == ["none", "none"]
    assert txns[0].commit_lsn not in out.column("_commit_lsn").to_pylist()
    assert txns[5].commit_lsn not in out.column("_commit_lsn").to_pylist()


# --------------------------------------------------------------------------- the property

_OPS = st.sampled_from(["I", "I", "U", "K", "D", "T"])  # a Truncate of several tables: its own test
_TABLE = st.sampled_from(sorted(TABLES))


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    txns = draw(st.lists(st.fixed_dictionaries({
        "ops": st.lists(st.tuples(_TABLE, _OPS), min_size=1, max_size=5),
        "close": st.booleans(),
        "pieces": st.sampled_from([1, 1, 1, 2, 3]),
        "switch": st.sampled_from([False, False, False, True]),  # new settings (a new stager process)
        "streamed": st.booleans(),
        "origin": st.sampled_from([None, None, "node_b"]),
    }), min_size=3, max_size=10))
    n = len(txns)
    end = draw(st.integers(0, n - 1))  # the last transaction in the range
    start = draw(st.one_of(st.just(-1), st.integers(-1, end - 1)))  # the last one before it (-1: none)
    return {
        "alters": draw(st.lists(st.integers(1, n - 1), max_size=2)),  # acct gains a column in these transactions
        "seed": draw(st.integers(0, 2**32)),
        "txns": txns,
        "start": start,
        "end": end,
        "table": draw(st.sampled_from([None, None, "public.acct", "sales.item"])),
        "filter": draw(st.booleans()),
        "chunk_rows": draw(st.sampled_from([1, 2, 3, 7, 32_768])),
        "all_segments": draw(st.booleans()),
    }


def _build(plan: dict) -> list[Txn]:
    src = Source(plan["seed"])
    txns: list[Txn] = []
    config = 0
    for i, t in enumerate(plan["txns"]):
        restart = False
        if t["switch"] and i:
            config, restart = (config + 1) % len(CONFIGS), True
            src.new_session()
        ops = list(t["ops"])
        if i in plan["alters"]:
            ops[:0] = [("public.acct", "A"), ("public.acct", "I")]
        txn = src.txn(ops, streamed=t["streamed"] and CONFIGS[config][0] >= 2, origin=t["origin"])
        txn.config, txn.restart, txn.close_after, txn.pieces = config, restart, t["close"], t["pieces"]
        txns.append(txn)
    return txns


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(plan=scenarios())
def test_segments_decoded_together_give_the_rows_of_each_alone(plan: dict, tmp_path_factory) -> None:
    """Random transaction mixes over three tables (inserts, updates with and without a new key,
    deletes, truncates; acct's shape changing), staged into segments of whole transactions or
    pieces of one, settings changing between some; any range of whole transactions; either
    layout; batches from one row up."""
    directory = tmp_path_factory.mktemp("segments")
    txns = _build(plan)
    table = plan["table"]
    stager = stage(directory, txns, table, filter_other_tables=plan["filter"])
    ends = [t.end_lsn for t in txns]
    start = 0 if plan["start"] < 0 else ends[plan["start"]]
    end = ends[plan["end"]]
    segments = stager.segments if plan["all_segments"] else [s for s in stager.segments if s.overlaps(start, end)]
    together, _ = together_and_alone(segments, start, end, table, plan["chunk_rows"])
    assert envelope(together.table) == expected_rows(stager, start, end)
    # one decoder per run of segments with the same settings
    metas = [CONFIGS.index(_settings(s)) for s in segments]
    assert together.decoders == sum(1 for i, c in enumerate(metas) if i == 0 or c != metas[i - 1])
    event(f"segments per decoder > 1: {together.decoders < len(segments)}")
    event(f"batches emitted mid-way: {len(together.batches) > 1}")
    versions = set(together.table.column("_relation_version").to_pylist())
    rows = together.table.num_rows
    event(f"two relation versions in the output: {len(versions) > 1}")
    event(f"rows: {'0' if not rows else '1-9' if rows < 10 else '10+'}")


def _settings(segment: SegmentName) -> tuple[int, bool, bool]:
    from walspark.staging.segments import read_meta

    meta = read_meta(segment.path)
    return meta.protocol_version, meta.streaming_parallel, meta.binary


# --------------------------------------------------------------------------- edge cases


def test_settings_change_in_the_middle_does_not_share_a_decoder(tmp_path: Path) -> None:
    """Protocol 1, then 2, then 1 again: three decoders, the rows of each alone, in order."""
    src = Source(seed=3)
    txns = []
    for config in (0, 0, 1, 1, 0):
        t = src.txn([("public.acct", "I"), ("public.ev", "I"), ("sales.item", "K")], streamed=config == 1)
        t.config, t.close_after = config, True
        txns.append(t)
    stager = stage(tmp_path, txns, None)
    together, _ = together_and_alone(stager.segments, 0, txns[-1].end_lsn, None, chunk_rows=4)
    assert together.decoders == 3
    assert together.table.num_rows == 15
    assert envelope(together.table) == expected_rows(stager, 0, txns[-1].end_lsn)
    assert max(b.num_rows for b in together.batches) == 4


def test_a_shape_change_before_the_range_in_a_segment_in_it(tmp_path: Path) -> None:
    """acct's new shape is described in a transaction the range cuts off, in the segment of the
    range's first transactions (whose changes of acct come without a Relation message): they are
    decoded with the new shape, together and alone."""
    src = Source(seed=19)
    t1 = src.txn([("public.acct", "I", [b"1", b"a", b"1.00"])])
    t1.close_after = True
    src.alter(ACCT)
    t2 = src.txn([("public.acct", "I", [b"2", b"b", b"2.00", b"two"])])  # Relation (4 columns), Insert
    t3 = src.txn([("public.acct", "I", [b"3", b"c", b"3.00", b"three"]), ("public.ev", "I")])
    t3.close_after = True
    t4 = src.txn([("public.acct", "K"), ("public.ev", "D")])
    stager = stage(tmp_path, [t1, t2, t3, t4], None)
    assert len(stager.segments) == 3
    start, end = t2.end_lsn, t4.end_lsn
    segments = [s for s in stager.segments if s.overlaps(start, end)]
    together, _ = together_and_alone(segments, start, end, None, chunk_rows=3)
    assert envelope(together.table) == expected_rows(stager, start, end)
    acct = [r for r in together.table.column("public.acct").to_pylist() if r is not None]
    assert (acct[0]["id"], acct[0]["note"]) == (3, "three")
    assert together.table.column("_relation_version").to_pylist() == [2, 1, 2, 1]


def test_truncate_of_several_tables(tmp_path: Path) -> None:
    """One Truncate of three tables: three rows at one (commit LSN, position); the tables of the
    earlier segment touched in another order than the Truncate names them."""
    src = Source(seed=5)
    t1 = src.txn([("sales.item", "I"), ("public.ev", "I"), ("public.acct", "I")])
    t1.close_after = True
    t2 = src.txn([("public.acct", "TT")])
    stager = stage(tmp_path, [t1, t2], None)
    together, alone = together_and_alone(stager.segments, 0, t2.end_lsn, None, chunk_rows=100)
    assert envelope(alone) == expected_rows(stager, 0, t2.end_lsn)
    assert envelope(together.table) == expected_rows(stager, 0, t2.end_lsn)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.sampled_from(["public", "sales"]),
                               st.sampled_from(["acct", "ev", "item"])), max_size=40),
       shuffle=st.randoms(use_true_random=False))
def test_commit_order_equals_the_sort_by_every_key(rows: list, shuffle: random.Random) -> None:
    """The two-key sort with its fallback gives what the sort by commit LSN, position, schema and
    table gives, ties (rows of one message) or none, in order already or not."""
    from walspark.spark.datasource.output import commit_order

    unique = list(dict.fromkeys(rows))
    shuffle.shuffle(unique)
    lsn, seq, schema, name = (list(c) for c in zip(*unique)) if unique else ([], [], [], [])
    table = pa.table({"_commit_lsn": pa.array(lsn, pa.int64()), "_seq": pa.array(seq, pa.int32()),
                      "_schema": pa.array(schema, pa.string()), "_table": pa.array(name, pa.string()),
                      "row": pa.array(range(len(unique)), pa.int64())})
    every = [("_commit_lsn", "ascending"), ("_seq", "ascending"), ("_schema", "ascending"), ("_table", "ascending")]
    assert commit_order(table).to_pylist() == table.sort_by(every).to_pylist()
    event(f"ties: {len({(a, b) for a, b, _, _ in unique}) < len(unique)}")


# A restarted stager (a query restarted with the same settings, after a crash, say) numbers
# relation versions from 1 again: its relation cache is new. The segments the previous process
# staged and Spark did not take yet stay, so one task may read segments of both processes. Its
# stream starts where the slot was confirmed (at or before the batch's start); what it resends
# up to the staged end is dropped, its Relation messages kept (Stager._absorb).


def test_restarted_stager_a_relation_first_described_inside_a_transaction(tmp_path: Path) -> None:
    """acct's rows before the range share a segment with rows in it (acct's version 2 is in force
    there: the Relation message of a transaction before the range); the transactions resent
    after the restart do not touch acct, so the new process describes it first inside its next
    transaction, as version 1 (no prelude entry). The rows of one segment do not depend on the
    segments read with it."""
    src = Source(seed=17)
    t0 = src.txn([("public.acct", "I")])  # acct version 1 (3 columns)
    src.alter(ACCT)
    ta = src.txn([("public.acct", "I")])  # version 2 (4 columns): the batch's start is after it ...
    t1 = src.txn([("public.ev", "I")])  # ... in its segment
    t1.config = ta.config = t0.config = 1
    stager = stage(tmp_path, [t0], None)
    for t in (ta, t1):
        stager.stage(t)
    stager.restart([EV.relation(0, None)])  # the new stream resends t1
    src.new_session()
    t2 = src.txn([("public.acct", "I")])  # Relation acct, then the Insert
    t2.config = 1
    stager.stage(t2)
    stager.flush()
    assert len(stager.segments) == 3
    expected, _, _ = _restarted_both_ways(stager, ta.end_lsn, t2.end_lsn)
    assert [(e.table, e.version) for e in expected] == [("public.ev", 1), ("public.acct", 1)]


def _restarted_both_ways(stager, start: int, end: int):  # type: ignore[no-untyped-def]
    """The range's two segments (the old process's and the new one's) decoded alone and together:
    equal, one decoder for both, and the stream's rows; returns (expected, alone, together)."""
    segments = [s for s in stager.segments if s.overlaps(start, end)]
    assert len(segments) == 2
    expected = expected_rows(stager, start, end)
    paths = [s.path for s in segments]
    alone = pa.concat_tables([decode([p], start, end, None, 100).table for p in paths])
    assert envelope(alone) == expected
    together = decode(paths, start, end, None, 100)
    assert together.decoders == 1
    assert envelope(together.table) == expected
    assert together.table.equals(alone)
    return expected, alone, together


def test_restarted_stager_versions_of_other_shapes(tmp_path: Path) -> None:
    """Catching up a backlog across two ALTERs of acct (both in the declared schema: the catalog
    had them when the query started): acct was version 2 (4 columns) at the batch's start, and
    version 3 (5 columns) in the range, in the old process's segment. The new process, from the
    batch's start, numbers 4 columns 1 and 5 columns 2; its segment's row is acct version 2 with
    5 columns. Decoded with the old segment, it must keep its fifth column."""
    src = Source(seed=11)
    t0 = src.txn([("public.acct", "I", [b"0", b"z", b"0.00"])])  # version 1 (3 columns)
    t0.close_after = True
    src.alter(ACCT)
    ta = src.txn([("public.acct", "I", [b"1", b"a", b"1.00", b"one"])])  # version 2; the batch starts after it
    ta.close_after = True
    t1 = src.txn([("public.acct", "I", [b"2", b"b", b"2.00", b"two"])])  # version 2
    src.alter(ACCT)
    t2 = src.txn([("public.acct", "I", [b"3", b"c", b"3.00", b"three", b"3"])])  # version 3
    for t in (t0, ta, t1, t2):
        t.config = 1
    stager = stage(tmp_path, [t0, ta, t1, t2], None)
    stager.restart([ACCT.relation(1, None), ACCT.relation(2, None)])  # the new stream resends t1, t2
    src.new_session()
    src.sent.add(ACCT.relid)
    t3 = src.txn([("public.acct", "I", [b"4", b"d", b"4.00", b"four", b"4"])])  # version 2 (new process)
    t3.config = 1
    stager.stage(t3)
    stager.flush()
    assert len(stager.segments) == 4
    expected, alone, together = _restarted_both_ways(stager, ta.end_lsn, t3.end_lsn)
    assert [e.version for e in expected] == [2, 3, 2]
    rows = [(r["id"], r["note"], r["rating"]) for r in alone.column("public.acct").to_pylist()]
    assert rows == [(2, "two", None), (3, "three", 3), (4, "four", 4)]
    assert [(r["id"], r["note"], r["rating"]) for r in together.table.column("public.acct").to_pylist()] == rows


def test_segments_outside_the_range_and_empty_results(tmp_path: Path) -> None:
    """Segments wholly before or after the range decode to nothing, together or alone."""
    src = Source(seed=13)
    txns = [src.txn([("public.acct", "I"), ("sales.item", "I")]) for _ in range(4)]
    for t in txns:
        t.close_after = True
    stager = stage(tmp_path, txns, None)
    together, _ = together_and_alone(stager.segments, txns[1].end_lsn, txns[2].end_lsn, None, chunk_rows=1)
    assert together.table.num_rows == 2 and [b.num_rows for b in together.batches] == [1, 1]
    assert set(together.table.column("_commit_lsn").to_pylist()) == {txns[2].commit_lsn}
    empty, _ = together_and_alone(stager.segments, txns[3].end_lsn, txns[3].end_lsn, None, chunk_rows=1)
    assert empty.table.num_rows == 0 and empty.batches == []
