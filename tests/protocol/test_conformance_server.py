"""Conformance with a real server: every pgoutput message PostgreSQL actually sends.

The layout tests pin the documentation; this module pins the server. A scripted workload
makes the embedded PostgreSQL 18 emit every message kind of the spec — plain transactions
on tables of each replica identity (default, full, index, nothing), TRUNCATE with CASCADE
and RESTART IDENTITY, transactional and non-transactional logical messages, a transaction
from a replication origin, a user type in a published column, transactions larger than
``logical_decoding_work_mem`` streamed while in progress (committed, aborted, and with a
rolled-back subtransaction) and two-phase transactions (committed, rolled back, streamed).
The slot is then read through the SQL interface (``pg_logical_slot_peek_binary_changes``,
which never consumes, so one workload serves every option set) in text and binary mode at
protocol versions 1 to 4, and once more at protocol 3 from PostgreSQL 15.

For every run, each message must decode and re-encode to exactly the server's bytes, the
decoded stream must make sense as a stream (blocks open and close, changes follow their
Relation, old-tuple parts match the replica identity, ...) and contain the kinds that run's
options can produce. Across all runs every kind of the spec must have been seen.

The workload is written once per server (module-scoped), because peeking leaves the slot
untouched; every run decodes the same WAL with different options.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from walspark.embedded.postgres import EmbeddedPostgres
from walspark.protocol import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Message,
    Origin,
    PgoutputMessage,
    Prepare,
    ProtocolError,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
    decode_message,
    encode_message,
)

psycopg = pytest.importorskip("psycopg")

from walspark.source.sqlinterface import slot_changes  # noqa: E402  (needs psycopg)

#: Every message of "Logical Replication Message Formats", by class name.
ALL_KINDS = frozenset({
    "Begin", "Message", "Commit", "Origin", "Relation", "Type", "Insert", "Update", "Delete",
    "Truncate", "StreamStart", "StreamStop", "StreamCommit", "StreamAbort", "BeginPrepare",
    "Prepare", "CommitPrepared", "RollbackPrepared", "StreamPrepare",
})
PLAIN_KINDS = frozenset({"Begin", "Commit", "Origin", "Message", "Relation", "Type", "Insert", "Update",
                         "Delete", "Truncate"})
STREAM_KINDS = frozenset({"StreamStart", "StreamStop", "StreamCommit", "StreamAbort"})
TWO_PHASE_KINDS = frozenset({"BeginPrepare", "Prepare", "CommitPrepared", "RollbackPrepared", "StreamPrepare"})

#: Rows per "big" transaction: ~250 bytes each, so far beyond the 64kB decoding budget.
BIG = 2000
ORIGIN_NAME = "walspark_o1"
ORIGIN_LSN = 0x1234

SCHEMA = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE ri_default (id int PRIMARY KEY, name text, note text);
CREATE TABLE ri_full (id int PRIMARY KEY, name text, feeling mood);
ALTER TABLE ri_full REPLICA IDENTITY FULL;
CREATE TABLE ri_index (id int NOT NULL, code text NOT NULL, v int);
CREATE UNIQUE INDEX ri_index_code ON ri_index (code);
ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_code;
CREATE TABLE ri_nothing (id int, v text);
ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING;
-- EXTERNAL: stored out of line without compression, so an UPDATE that leaves it alone sends 'u'.
CREATE TABLE toasted (id int PRIMARY KEY, big text, small int);
ALTER TABLE toasted ALTER big SET STORAGE EXTERNAL;
CREATE TABLE parent (id serial PRIMARY KEY, name text);
CREATE TABLE child (id serial PRIMARY KEY, parent_id int REFERENCES parent);
CREATE TABLE big (id int PRIMARY KEY, payload text, feeling mood);
CREATE PUBLICATION pub FOR TABLE ri_default, ri_full, ri_index, toasted, parent, child, big;
-- A table without replica identity cannot publish UPDATE/DELETE (the server refuses the
-- statements), so it is published for inserts and truncates only.
CREATE PUBLICATION pub_inserts FOR TABLE ri_nothing WITH (publish = 'insert, truncate');
"""

PLAIN_WORKLOAD = [
    # replica identity default: no old part for a non-key update, 'K' when the key changes / on delete
    "INSERT INTO ri_default VALUES (1, 'a', 'x'), (2, 'b', NULL), (3, 'c', 'z')",
    "UPDATE ri_default SET note = 'y' WHERE id = 1",
    "UPDATE ri_default SET id = 10 WHERE id = 2",
    "DELETE FROM ri_default WHERE id = 3",
    # full: 'O' on update and delete; a user enum type → Type message
    "INSERT INTO ri_full VALUES (1, 'a', 'ok'), (2, 'b', NULL)",
    "UPDATE ri_full SET feeling = 'happy' WHERE id = 1",
    "DELETE FROM ri_full WHERE id = 2",
    # using index: 'K' only when the index column changes, and on delete
    "INSERT INTO ri_index VALUES (1, 'one', 1), (2, 'two', 2)",
    "UPDATE ri_index SET v = 3 WHERE id = 1",
    "UPDATE ri_index SET code = 'deux' WHERE id = 2",
    "DELETE FROM ri_index WHERE id = 1",
    # nothing: inserts are published, the update and delete are not
    "INSERT INTO ri_nothing VALUES (1, 'a'), (2, 'b')",
    "UPDATE ri_nothing SET v = 'c' WHERE id = 1",
    "DELETE FROM ri_nothing WHERE id = 2",
    # unchanged TOAST value → 'u'
    "INSERT INTO toasted VALUES (1, repeat('t', 5000), 1)",
    "UPDATE toasted SET small = 2 WHERE id = 1",
    # TRUNCATE ... RESTART IDENTITY CASCADE over FK-linked tables (options 3, both relations)
    "INSERT INTO parent (name) VALUES ('p1'), ('p2')",
    "INSERT INTO child (parent_id) VALUES (1), (2)",
    "TRUNCATE parent RESTART IDENTITY CASCADE",
    "TRUNCATE ri_nothing",
    # logical messages, transactional (inside Begin/Commit) and not (on their own)
    "BEGIN",
    "INSERT INTO ri_default VALUES (20, 'm', NULL)",
    "SELECT pg_logical_emit_message(true, 'walspark', 'transactional')",
    "COMMIT",
    "SELECT pg_logical_emit_message(false, 'walspark', 'non-transactional')",
    "SELECT pg_logical_emit_message(false, 'walspark-bytes', '\\x00ff'::bytea)",
]


def _big_insert(first: int, feeling: str = "ok") -> str:
    return (f"INSERT INTO big SELECT g, repeat(md5(g::text), 7), '{feeling}'"
            f" FROM generate_series({first}, {first + BIG - 1}) g")


STREAMED_WORKLOAD = [
    # committed: every change kind, a message, a Relation and Type inside the stream
    "BEGIN",
    _big_insert(1),
    "SELECT pg_logical_emit_message(true, 'walspark', 'inside a streamed transaction')",
    "UPDATE big SET payload = 'updated' WHERE id <= 3",
    "DELETE FROM big WHERE id = 4",
    "INSERT INTO ri_full VALUES (3, 'streamed', 'sad')",
    "TRUNCATE child",
    "COMMIT",
    # aborted as a whole: Stream Abort with subxid = xid
    "BEGIN",
    _big_insert(100_001, "sad"),
    "ROLLBACK",
    # a subtransaction rolled back after it was streamed: Stream Abort for the subxid, then Stream Commit
    "BEGIN",
    _big_insert(200_001),
    "SAVEPOINT s1",
    _big_insert(300_001),
    "ROLLBACK TO SAVEPOINT s1",
    "INSERT INTO big VALUES (400001, 'after the savepoint', 'happy')",
    "COMMIT",
]

TWO_PHASE_WORKLOAD = [
    "BEGIN",
    "INSERT INTO ri_default VALUES (40, 'prepared then committed', NULL)",
    "PREPARE TRANSACTION 'walspark_commit'",
    "COMMIT PREPARED 'walspark_commit'",
    "BEGIN",
    "INSERT INTO ri_default VALUES (41, 'prepared then rolled back', NULL)",
    "PREPARE TRANSACTION 'walspark_rollback'",
    "ROLLBACK PREPARED 'walspark_rollback'",
    # big prepared transactions: streamed while in progress, then Stream Prepare
    "BEGIN",
    _big_insert(500_001),
    "PREPARE TRANSACTION 'walspark_streamed_commit'",
    "COMMIT PREPARED 'walspark_streamed_commit'",
    "BEGIN",
    _big_insert(600_001, "sad"),
    "PREPARE TRANSACTION 'walspark_streamed_rollback'",
    "ROLLBACK PREPARED 'walspark_streamed_rollback'",
]

ORIGIN_WORKLOAD = [
    f"SELECT pg_replication_origin_create('{ORIGIN_NAME}')",
    f"SELECT pg_replication_origin_session_setup('{ORIGIN_NAME}')",
    "BEGIN",
    f"SELECT pg_replication_origin_xact_setup('0/{ORIGIN_LSN:X}', now())",
    "INSERT INTO ri_default VALUES (30, 'from another node', NULL)",
    "COMMIT",
    "SELECT pg_replication_origin_session_reset()",
]


@dataclass(frozen=True)
class Workload:
    """A database on which the whole workload was written, and the slots that saw it."""

    dsn: str
    server_version: int
    #: A slot without two-phase decoding: prepared transactions arrive at COMMIT PREPARED.
    plain_slot: str
    #: A slot created with two_phase: prepared transactions arrive at PREPARE TRANSACTION.
    two_phase_slot: str


@dataclass(frozen=True)
class Run:
    """One read of the slot with one set of pgoutput options.

    ``immediate`` decodes with ``debug_logical_replication_streaming = immediate`` (PostgreSQL
    16+): every transaction is streamed as soon as it has a change, whatever its size. It is
    the only way to see a top-level Stream Abort through the SQL interface of PostgreSQL 18,
    which decodes a transaction only after it ended and, since 18, drops a transaction that
    is known to have aborted instead of streaming it (only a rolled-back subtransaction of a
    live transaction still yields a Stream Abort in the default, buffered mode).
    """

    label: str
    protocol_version: int
    binary: bool
    streaming: str | None  # None (off), "on" or "parallel"
    two_phase: bool  # read the slot created with two_phase (the option is passed too from protocol 3)
    immediate: bool = False

    @property
    def allowed_kinds(self) -> frozenset[str]:
        """Every kind these options let pgoutput send."""
        kinds = PLAIN_KINDS
        if self.streaming:
            kinds |= STREAM_KINDS
        if self.two_phase:
            kinds |= TWO_PHASE_KINDS if self.streaming else TWO_PHASE_KINDS - {"StreamPrepare"}
        return kinds

    @property
    def required_kinds(self) -> frozenset[str]:
        """The kinds the workload must produce with these options.

        Streaming everything at once leaves no room for plain Begin/Commit nor, for the
        prepared transactions, Begin Prepare/Prepare (they become Stream Prepare).
        """
        if self.streaming and self.immediate:
            return self.allowed_kinds - {"Begin", "Commit", "BeginPrepare", "Prepare"}
        return self.allowed_kinds

    def options(self, server_version: int) -> dict[str, str]:
        options = {
            "proto_version": str(self.protocol_version),
            "publication_names": "pub,pub_inserts",
            "messages": "true",
            "binary": "true" if self.binary else "false",
        }
        if server_version >= 160000:
            options["origin"] = "any"  # the option exists since PostgreSQL 16 (15 always sends Origin)
        if self.streaming:
            options["streaming"] = self.streaming
        if self.two_phase and self.protocol_version >= 3:  # pgoutput refuses the option below 3
            options["two_phase"] = "true"
        return options


def _runs(versions: tuple[int, ...], *, immediate: bool) -> list[Run]:
    """Every option set of ``versions``; below protocol 3 each is read from both slots.

    The two-phase slot sends the two-phase messages at protocol 1 and 2 too (the version
    only gates pgoutput's ``two_phase`` option, not what a two-phase slot decodes).
    """
    runs = []
    for version, binary in itertools.product(versions, (False, True)):
        mode = "binary" if binary else "text"
        streamings: tuple[str | None, ...] = (None,) if version < 2 else ("on", "parallel") if version >= 4 else ("on",)
        for streaming, two_phase in itertools.product(streamings, (False, True) if version < 3 else (True,)):
            label = (f"v{version}-{mode}" + (f"-{streaming}" if version >= 4 else "")
                     + ("-2pc-slot" if two_phase and version < 3 else ""))
            runs.append(Run(label, version, binary, streaming, two_phase=two_phase))
            if streaming and immediate:
                runs.append(Run(label + "-immediate", version, binary, streaming, two_phase=two_phase,
                                immediate=True))
    return runs


PG18_RUNS = _runs((1, 2, 3, 4), immediate=True)
PG15_RUNS = _runs((3,), immediate=False)  # 15 has no debug_logical_replication_streaming
PG15_LOW_RUNS = [run for run in _runs((1, 2), immediate=False) if run.two_phase]


# --------------------------------------------------------------------------- the workload


_db_numbers = itertools.count()


def _execute_all(conn: Any, statements: list[str]) -> None:
    for statement in statements:
        conn.execute(statement)


def _write_workload(server: EmbeddedPostgres) -> Iterator[Workload]:
    """Create a database, its publications and both slots, write the workload, drop it all afterwards.

    The slots exist before the first change, so they see all of it. Statements run on an
    autocommit connection: explicit BEGIN/COMMIT/PREPARE TRANSACTION are sent as written.
    """
    name = f"conformance{os.getpid()}_{next(_db_numbers)}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = server.dsn(name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            server_version = conn.info.server_version
            conn.execute(SCHEMA)
            conn.execute("SELECT pg_create_logical_replication_slot('plain', 'pgoutput')")
            conn.execute("SELECT pg_create_logical_replication_slot('two_phase', 'pgoutput', false, true)")
            _execute_all(conn, PLAIN_WORKLOAD)
            _execute_all(conn, STREAMED_WORKLOAD)
            _execute_all(conn, TWO_PHASE_WORKLOAD)
        # A connection of its own: the origin is bound to the session that set it up.
        with psycopg.connect(dsn, autocommit=True) as conn:
            _execute_all(conn, ORIGIN_WORKLOAD)
        yield Workload(dsn, server_version, plain_slot="plain", two_phase_slot="two_phase")
    finally:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                          " WHERE database = %s AND NOT active", (name,))
            admin.execute(f"SELECT pg_replication_origin_drop('{ORIGIN_NAME}')"
                          " FROM pg_replication_origin WHERE roname = %s", (ORIGIN_NAME,))
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _read(workload: Workload, run: Run) -> list[tuple[int, bytes]]:
    """Peek the run's slot with the run's options, as ``(lsn, message bytes)`` pairs.

    The SQL interface decodes in the calling backend, so that session's
    ``logical_decoding_work_mem`` (64kB, the minimum) decides what gets streamed.
    """
    slot = workload.two_phase_slot if run.two_phase else workload.plain_slot
    with psycopg.connect(workload.dsn) as conn:
        conn.execute("SET logical_decoding_work_mem = '64kB'")
        if run.immediate:
            conn.execute("SET debug_logical_replication_streaming = immediate")
        changes = list(slot_changes(conn, slot, run.options(workload.server_version)))
        conn.rollback()
    return changes


@pytest.fixture(scope="module")
def pg18_workload(pg18: EmbeddedPostgres) -> Iterator[Workload]:
    yield from _write_workload(pg18)


@pytest.fixture(scope="module")
def pg15_workload(pg15: EmbeddedPostgres) -> Iterator[Workload]:
    yield from _write_workload(pg15)


#: Kinds seen per run label, filled by the per-run tests and checked by the coverage test.
_seen: dict[str, frozenset[str]] = {}


# --------------------------------------------------------------------------- checks


def _decode_and_reencode(run: Run, changes: list[tuple[int, bytes]]) -> list[tuple[int, PgoutputMessage]]:
    """Decode in stream order with the run's options; every message must re-encode to the same bytes.

    Without the options (protocol 4, Stream Abort's layout by its length: how a capture
    without metadata is read) the stream must decode to exactly the same messages.
    """
    decoder = Decoder(run.protocol_version, streaming_parallel=run.streaming == "parallel")
    unknown = Decoder(4, streaming_parallel=None)
    decoded = []
    for lsn, data in changes:
        message = decoder.decode(data, lsn=lsn)
        assert encode_message(message) == data, f"{type(message).__name__} at {lsn:X} re-encodes differently"
        assert unknown.decode(data, lsn=lsn) == message, f"{type(message).__name__} at {lsn:X} without options"
        decoded.append((lsn, message))
    assert not decoder.in_stream, "the stream ended inside a streamed block"
    return decoded


_IN_BLOCK = (Relation, Type, Insert, Update, Delete, Truncate, Origin)


def _check_stream_is_sensible(run: Run, server_version: int, messages: list[PgoutputMessage]) -> None:
    """The decoded sequence is a well-formed stream, and its contents are what the workload wrote."""
    block: PgoutputMessage | None = None  # the Begin / BeginPrepare / StreamStart that is open
    relations: dict[int, Relation] = {}
    open_begin: Begin | None = None
    streamed: set[int] = set()
    prepared: dict[str, int] = {}
    for message in messages:
        in_stream = isinstance(block, StreamStart)
        if isinstance(message, (Begin, BeginPrepare, StreamStart)):
            assert block is None, f"{type(message).__name__} inside an open {type(block).__name__}"
            block = message
            if isinstance(message, Begin):
                open_begin = message
            if isinstance(message, StreamStart):
                assert message.first_segment == (message.xid not in streamed)
                streamed.add(message.xid)
        elif isinstance(message, Commit):
            assert isinstance(block, Begin)
            assert open_begin is not None and message.commit_lsn == open_begin.final_lsn
            block = None
        elif isinstance(message, Prepare):
            assert isinstance(block, BeginPrepare) and (block.xid, block.gid) == (message.xid, message.gid)
            assert block.prepare_lsn == message.prepare_lsn and block.end_lsn == message.end_lsn
            prepared[message.gid] = message.xid
            block = None
        elif isinstance(message, StreamStop):
            assert in_stream
            block = None
        elif isinstance(message, (StreamCommit, StreamAbort)):
            assert block is None and message.xid in streamed
            if isinstance(message, StreamAbort):
                assert message.abort_lsn is not None if run.streaming == "parallel" else message.abort_lsn is None
                assert (message.abort_timestamp is None) == (message.abort_lsn is None)
        elif isinstance(message, StreamPrepare):
            assert block is None and message.xid in streamed
            prepared[message.gid] = message.xid
        elif isinstance(message, (CommitPrepared, RollbackPrepared)):
            assert block is None and prepared.get(message.gid) == message.xid
        elif isinstance(message, Message):
            if message.transactional:
                assert block is not None
            else:
                assert block is None and message.xid is None
        else:
            assert isinstance(message, _IN_BLOCK)
            assert block is not None, f"{type(message).__name__} outside a transaction"
        if isinstance(message, (Relation, Type, Insert, Update, Delete, Truncate, Message)) and block is not None:
            # the Xid field exists exactly inside streamed blocks
            assert (message.xid is not None) == in_stream
        if isinstance(message, Origin):
            # The origin's commit LSN is only known at commit: a streamed block says 0 (invalid).
            assert message.name == ORIGIN_NAME
            assert message.commit_lsn == (0 if in_stream else ORIGIN_LSN)
        elif isinstance(message, Relation):
            relations[message.relation_id] = message
        elif isinstance(message, (Insert, Update, Delete)):
            assert message.relation_id in relations, "a change before its Relation"
            _check_change(relations[message.relation_id], message)
        elif isinstance(message, Truncate):
            assert all(oid in relations for oid in message.relation_ids)
    assert block is None, "the stream ended inside a block"

    # What the workload wrote, as decoded.
    by_name = {r.relation_name: r for r in relations.values()}
    assert {name: r.replica_identity for name, r in by_name.items()
            if name.startswith("ri_")} == {"ri_default": "d", "ri_full": "f", "ri_index": "i", "ri_nothing": "n"}
    assert [c.name for c in by_name["ri_default"].columns] == ["id", "name", "note"]
    assert [c.flags for c in by_name["ri_default"].columns] == [1, 0, 0]  # key column flagged
    types = [m for m in messages if isinstance(m, Type)]
    assert {(t.namespace, t.type_name) for t in types} == {("public", "mood")}
    assert by_name["ri_full"].columns[2].type_oid == types[0].type_oid
    truncates = [m for m in messages if isinstance(m, Truncate)]
    assert any(t.options == Truncate.CASCADE | Truncate.RESTART_IDENTITY
               and {relations[oid].relation_name for oid in t.relation_ids} == {"parent", "child"}
               for t in truncates)
    logical = {(m.transactional, m.prefix, m.content) for m in messages if isinstance(m, Message)}
    assert {(True, "walspark", b"transactional"), (False, "walspark", b"non-transactional"),
            (False, "walspark-bytes", b"\x00\xff")} <= logical
    kinds = "".join(part.kinds for m in messages for part in _parts(m))
    assert "n" in kinds and "u" in kinds
    assert ("b" in kinds) == run.binary and ("t" in kinds) != run.binary
    if run.streaming:
        aborts = [m for m in messages if isinstance(m, StreamAbort)]
        if run.immediate or server_version < 180000:
            assert any(a.xid == a.subxid for a in aborts), "no top-level Stream Abort"
        assert any(a.xid != a.subxid for a in aborts), "no subtransaction Stream Abort"


def _check_change(relation: Relation, change: Insert | Update | Delete) -> None:
    """Old-row parts follow the replica identity; every tuple has one entry per column."""
    for part in _parts(change):
        assert len(part) == len(part.values) == len(relation.columns)
    if isinstance(change, Insert):
        return
    identity = relation.replica_identity
    assert identity != "n", "UPDATE/DELETE published for a table without replica identity"
    if identity == "f":
        assert change.old_tuple is not None and change.key_tuple is None
    else:
        assert change.old_tuple is None
        if isinstance(change, Delete):
            assert change.key_tuple is not None
        if change.key_tuple is not None:  # only key columns are sent, the others are NULL ('n')
            keys = [c.flags & 1 for c in relation.columns]
            assert all(kind == "n" for kind, key in zip(change.key_tuple.kinds, keys) if not key)


def _parts(change: PgoutputMessage) -> Iterator[TupleData]:
    """The TupleData parts of a change message (none for other messages)."""
    if isinstance(change, Insert):
        yield change.new_tuple
    elif isinstance(change, (Update, Delete)):
        for part in (change.key_tuple, change.old_tuple, getattr(change, "new_tuple", None)):
            if part is not None:
                yield part


def _conform(workload: Workload, run: Run) -> list[tuple[int, PgoutputMessage]]:
    decoded = _decode_and_reencode(run, _read(workload, run))
    messages = [m for _, m in decoded]
    _check_stream_is_sensible(run, workload.server_version, messages)
    seen = frozenset(type(m).__name__ for m in messages)
    assert run.required_kinds <= seen <= run.allowed_kinds
    return decoded


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("run", PG18_RUNS, ids=lambda r: r.label)
def test_pg18_every_message_round_trips_and_the_stream_makes_sense(pg18_workload: Workload, run: Run) -> None:
    decoded = _conform(pg18_workload, run)
    _seen[run.label] = frozenset(type(m).__name__ for _, m in decoded)


def test_pg18_emits_every_kind_of_the_spec(pg18_workload: Workload) -> None:
    """Across the option sets, the server sent every message kind at least once."""
    seen: set[str] = set()
    for run in PG18_RUNS:
        seen |= _seen.get(run.label) or {type(m).__name__ for _, m in _conform(pg18_workload, run)}
    assert seen == ALL_KINDS


def test_pg18_parallel_streaming_sends_stream_abort_with_abort_lsn_and_time(pg18_workload: Workload) -> None:
    """pgoutput picks Stream Abort's layout from the ``streaming`` option, not from the walsender.

    Through the SQL interface too, protocol 4 with ``streaming 'parallel'`` appends the abort
    LSN and timestamp (25 bytes); with ``streaming 'on'`` it does not (9 bytes). The long
    layout is only readable by a decoder told about parallel streaming.
    """
    parallel = next(r for r in PG18_RUNS if r.protocol_version == 4 and r.streaming == "parallel")
    on = next(r for r in PG18_RUNS if r.protocol_version == 4 and r.streaming == "on")
    long_aborts = [(lsn, data) for lsn, data in _read(pg18_workload, parallel) if data[:1] == b"A"]
    short_aborts = [(lsn, data) for lsn, data in _read(pg18_workload, on) if data[:1] == b"A"]
    assert long_aborts and {len(d) for _, d in long_aborts} == {25}
    assert short_aborts and {len(d) for _, d in short_aborts} == {9}
    for lsn, data in long_aborts:
        abort = decode_message(data, protocol_version=4, in_stream=False, parallel_abort=True, lsn=lsn)
        assert isinstance(abort, StreamAbort) and abort.abort_lsn and abort.abort_timestamp
        assert abort.abort_time.year >= 2024
        with pytest.raises(ProtocolError, match="trailing"):
            decode_message(data, protocol_version=4, in_stream=False, parallel_abort=False, lsn=lsn)


@pytest.mark.pg15
@pytest.mark.parametrize("run", PG15_RUNS, ids=lambda r: r.label)
def test_pg15_protocol_3_every_kind_round_trips(pg15_workload: Workload, run: Run) -> None:
    """PostgreSQL 15 speaks protocol 3 at most: everything but the parallel-streaming Stream Abort."""
    decoded = _conform(pg15_workload, run)
    assert {type(m).__name__ for _, m in decoded} == ALL_KINDS


@pytest.mark.pg15
@pytest.mark.parametrize("run", PG15_LOW_RUNS, ids=lambda r: r.label)
def test_pg15_two_phase_slot_sends_two_phase_messages_below_protocol_3(pg15_workload: Workload, run: Run) -> None:
    """As on 18: from a two-phase slot, PostgreSQL 15 sends the two-phase messages at protocol 1 and 2."""
    seen = {type(m).__name__ for _, m in _conform(pg15_workload, run)}
    assert {"BeginPrepare", "Prepare", "CommitPrepared", "RollbackPrepared"} <= seen
    assert ("StreamPrepare" in seen) == (run.protocol_version == 2)
