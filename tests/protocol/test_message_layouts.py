"""Byte vectors written field by field from "Logical Replication Message Formats" (PG 16 docs).

Each test spells a message the way the documentation lists it — one line per field — and
checks that the decoder reads exactly those fields and the encoder writes exactly those
bytes. This pins the layouts independently of the encoder/decoder symmetry.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime

import pytest

from walspark.protocol import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Prepare,
    Relation,
    RelationColumn,
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


def Byte1(c: str) -> bytes:
    return c.encode("ascii")


def Int8(v: int) -> bytes:
    return struct.pack(">B", v)


def Int16(v: int) -> bytes:
    return struct.pack(">H", v)


def Int32(v: int) -> bytes:
    return struct.pack(">i" if v < 0 else ">I", v)


def Int64(v: int) -> bytes:
    return struct.pack(">q" if v < 0 else ">Q", v)


def String(s: str) -> bytes:
    return s.encode("utf-8") + b"\0"


LSN_A = 0x0000_0001_0000_00F0  # 1/F0
LSN_B = 0x0000_0001_0000_0120  # 1/120
TS = 757_382_400_000_000  # 2024-01-01 00:00:00 UTC in microseconds since 2000-01-01
XID = 7_654_321
SUBXID = 7_654_399


def check(data: bytes, message: object, *, version: int = 4, in_stream: bool = False,
          parallel_abort: bool | None = False) -> None:
    assert decode_message(data, protocol_version=version, in_stream=in_stream,
                          parallel_abort=parallel_abort) == message
    assert encode_message(message) == data  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- protocol 1


def test_begin() -> None:
    data = (Byte1("B")
            + Int64(LSN_B)      # final LSN of the transaction
            + Int64(TS)         # commit timestamp
            + Int32(XID))       # Xid
    check(data, Begin(final_lsn=LSN_B, commit_timestamp=TS, xid=XID), version=1)
    assert Begin(LSN_B, TS, XID).commit_time == datetime(2024, 1, 1, tzinfo=UTC)


def test_commit() -> None:
    data = (Byte1("C")
            + Int8(0)           # flags, currently unused
            + Int64(LSN_A)      # LSN of the commit
            + Int64(LSN_B)      # end LSN of the transaction
            + Int64(TS))        # commit timestamp
    check(data, Commit(commit_lsn=LSN_A, end_lsn=LSN_B, commit_timestamp=TS), version=1)


def test_origin() -> None:
    data = Byte1("O") + Int64(LSN_A) + String("node_a")
    check(data, Origin(commit_lsn=LSN_A, name="node_a"), version=1)


def test_logical_decoding_message() -> None:
    data = (Byte1("M")
            + Int8(1)                 # flags: transactional
            + Int64(LSN_A)            # LSN of the message
            + String("wal2x")         # prefix
            + Int32(5)                # length of the content
            + b"hello")               # content
    check(data, Message(xid=None, transactional=True, lsn=LSN_A, prefix="wal2x", content=b"hello"), version=1)
    assert LogicalMessage is Message


def test_relation() -> None:
    data = (Byte1("R")
            + Int32(16384)            # relation OID
            + String("public")        # namespace
            + String("orders")        # relation name
            + Int8(ord("d"))          # replica identity (relreplident)
            + Int16(2)                # number of columns
            + Int8(1) + String("id") + Int32(23) + Int32(-1)            # key column int4
            + Int8(0) + String("note") + Int32(1043) + Int32(36))       # varchar(32)
    relation = Relation(
        xid=None, relation_id=16384, namespace="public", relation_name="orders", replica_identity="d",
        columns=(RelationColumn(flags=1, name="id", type_oid=23, type_modifier=-1),
                 RelationColumn(flags=0, name="note", type_oid=1043, type_modifier=36)))
    check(data, relation, version=1)
    assert [c.is_key for c in relation.columns] == [True, False]


def test_relation_in_pg_catalog_has_empty_namespace() -> None:
    data = Byte1("R") + Int32(1) + String("") + String("t") + Int8(ord("f")) + Int16(0)
    relation = decode_message(data, protocol_version=1, in_stream=False)
    assert isinstance(relation, Relation)
    assert relation.namespace == "" and relation.schema == "pg_catalog"


def test_type() -> None:
    data = Byte1("Y") + Int32(90001) + String("public") + String("mood")
    check(data, Type(xid=None, type_oid=90001, namespace="public", type_name="mood"), version=1)


def test_tuple_data_all_four_column_kinds() -> None:
    data = (Byte1("I") + Int32(16384) + Byte1("N")
            + Int16(4)                                    # number of columns
            + Byte1("t") + Int32(2) + b"42"              # text value
            + Byte1("n")                                  # NULL
            + Byte1("u")                                  # unchanged TOASTed value
            + Byte1("b") + Int32(4) + b"\x00\x00\x00\x2a")  # binary value (int4 42)
    insert = Insert(xid=None, relation_id=16384,
                    new_tuple=TupleData("tnub", (b"42", None, None, b"\x00\x00\x00\x2a")))
    check(data, insert, version=1)
    assert insert.new_tuple.columns == (("t", b"42"), ("n", None), ("u", None), ("b", b"\0\0\0*"))
    assert TupleData.from_columns(insert.new_tuple.columns) == insert.new_tuple
    assert len(insert.new_tuple) == 4


def test_update_without_old_tuple() -> None:
    data = Byte1("U") + Int32(16384) + Byte1("N") + Int16(1) + Byte1("t") + Int32(1) + b"x"
    check(data, Update(None, 16384, None, None, TupleData("t", (b"x",))), version=1)


def test_update_with_key() -> None:
    data = (Byte1("U") + Int32(16384)
            + Byte1("K") + Int16(1) + Byte1("t") + Int32(1) + b"1"
            + Byte1("N") + Int16(1) + Byte1("t") + Int32(1) + b"2")
    check(data, Update(None, 16384, key_tuple=TupleData("t", (b"1",)), old_tuple=None,
                       new_tuple=TupleData("t", (b"2",))), version=1)


def test_update_with_old_tuple() -> None:
    data = (Byte1("U") + Int32(16384)
            + Byte1("O") + Int16(2) + Byte1("t") + Int32(1) + b"1" + Byte1("n")
            + Byte1("N") + Int16(2) + Byte1("t") + Int32(1) + b"1" + Byte1("u"))
    check(data, Update(None, 16384, key_tuple=None, old_tuple=TupleData("tn", (b"1", None)),
                       new_tuple=TupleData("tu", (b"1", None))), version=1)


@pytest.mark.parametrize("tag", ["K", "O"])
def test_delete(tag: str) -> None:
    data = Byte1("D") + Int32(16384) + Byte1(tag) + Int16(1) + Byte1("t") + Int32(2) + b"17"
    td = TupleData("t", (b"17",))
    expected = Delete(None, 16384, key_tuple=td if tag == "K" else None, old_tuple=td if tag == "O" else None)
    check(data, expected, version=1)


def test_truncate() -> None:
    data = (Byte1("T")
            + Int32(2)          # number of relations
            + Int8(1 | 2)       # option bits: CASCADE | RESTART IDENTITY
            + Int32(16384) + Int32(16390))
    truncate = Truncate(xid=None, options=3, relation_ids=(16384, 16390))
    check(data, truncate, version=1)
    assert truncate.cascade and truncate.restart_identity


# ------------------------------------------------------------------- protocol 2: streaming


def test_stream_start() -> None:
    data = Byte1("S") + Int32(XID) + Int8(1)  # Xid, first segment
    check(data, StreamStart(xid=XID, first_segment=True), version=2)
    check(Byte1("S") + Int32(XID) + Int8(0), StreamStart(xid=XID, first_segment=False), version=2)


def test_stream_stop() -> None:
    check(Byte1("E"), StreamStop(), version=2, in_stream=True)


def test_stream_commit() -> None:
    data = Byte1("c") + Int32(XID) + Int8(0) + Int64(LSN_A) + Int64(LSN_B) + Int64(TS)
    check(data, StreamCommit(xid=XID, commit_lsn=LSN_A, end_lsn=LSN_B, commit_timestamp=TS), version=2)


def test_stream_abort_without_abort_info() -> None:
    data = Byte1("A") + Int32(XID) + Int32(SUBXID)  # Xid, subtransaction Xid
    for version in (2, 3, 4):
        check(data, StreamAbort(xid=XID, subxid=SUBXID), version=version)


def test_stream_abort_protocol_4_parallel_adds_abort_lsn_and_timestamp() -> None:
    data = Byte1("A") + Int32(XID) + Int32(XID) + Int64(LSN_A) + Int64(TS)
    abort = StreamAbort(xid=XID, subxid=XID, abort_lsn=LSN_A, abort_timestamp=TS)
    check(data, abort, version=4, parallel_abort=True)
    check(data, abort, version=4, parallel_abort=None)  # options unknown: by length
    assert abort.abort_time == datetime(2024, 1, 1, tzinfo=UTC)
    assert StreamAbort(XID, XID).abort_time is None


@pytest.mark.parametrize("kind", ["M", "R", "Y", "I", "U", "D", "T"])
def test_xid_follows_the_kind_byte_inside_a_streamed_block(kind: str) -> None:
    bodies = {
        "M": Int8(0) + Int64(LSN_A) + String("p") + Int32(0),
        "R": Int32(1) + String("s") + String("t") + Int8(ord("d")) + Int16(0),
        "Y": Int32(1) + String("s") + String("t"),
        "I": Int32(1) + Byte1("N") + Int16(0),
        "U": Int32(1) + Byte1("N") + Int16(0),
        "D": Int32(1) + Byte1("K") + Int16(0),
        "T": Int32(1) + Int8(0) + Int32(1),
    }
    outside = Byte1(kind) + bodies[kind]
    inside = Byte1(kind) + Int32(SUBXID) + bodies[kind]
    top = decode_message(outside, protocol_version=2, in_stream=False)
    streamed = decode_message(inside, protocol_version=2, in_stream=True)
    assert top.xid is None  # type: ignore[union-attr]
    assert streamed.xid == SUBXID  # type: ignore[union-attr]
    assert encode_message(top) == outside and encode_message(streamed) == inside


# ------------------------------------------------------------------ protocol 3: two-phase


def test_begin_prepare() -> None:
    data = (Byte1("b") + Int64(LSN_A) + Int64(LSN_B) + Int64(TS) + Int32(XID) + String("gid-1"))
    check(data, BeginPrepare(prepare_lsn=LSN_A, end_lsn=LSN_B, prepare_timestamp=TS, xid=XID, gid="gid-1"),
          version=3)


def test_prepare() -> None:
    data = (Byte1("P") + Int8(0) + Int64(LSN_A) + Int64(LSN_B) + Int64(TS) + Int32(XID) + String("gid-1"))
    check(data, Prepare(prepare_lsn=LSN_A, end_lsn=LSN_B, prepare_timestamp=TS, xid=XID, gid="gid-1"), version=3)


def test_commit_prepared() -> None:
    data = (Byte1("K") + Int8(0) + Int64(LSN_A) + Int64(LSN_B) + Int64(TS) + Int32(XID) + String("gid-1"))
    check(data, CommitPrepared(commit_lsn=LSN_A, end_lsn=LSN_B, commit_timestamp=TS, xid=XID, gid="gid-1"),
          version=3)


def test_rollback_prepared() -> None:
    data = (Byte1("r") + Int8(0)
            + Int64(LSN_A)       # end LSN of the prepared transaction
            + Int64(LSN_B)       # end LSN of the rollback
            + Int64(TS)          # prepare timestamp
            + Int64(TS + 1)      # rollback timestamp
            + Int32(XID) + String("gid-1"))
    message = RollbackPrepared(prepare_end_lsn=LSN_A, rollback_end_lsn=LSN_B, prepare_timestamp=TS,
                               rollback_timestamp=TS + 1, xid=XID, gid="gid-1")
    check(data, message, version=3)


def test_stream_prepare() -> None:
    data = (Byte1("p") + Int8(0) + Int64(LSN_A) + Int64(LSN_B) + Int64(TS) + Int32(XID) + String("gid-1"))
    check(data, StreamPrepare(prepare_lsn=LSN_A, end_lsn=LSN_B, prepare_timestamp=TS, xid=XID, gid="gid-1"),
          version=3)


def test_messages_are_frozen() -> None:
    import dataclasses

    begin = decode_message(Byte1("B") + Int64(1) + Int64(2) + Int32(3), protocol_version=1, in_stream=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        begin.xid = 4  # type: ignore[misc, union-attr]
    assert hash(begin) == hash(Begin(1, 2, 3))
