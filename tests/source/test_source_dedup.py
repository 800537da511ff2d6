"""DuplicateFilter on synthetic streams built with walspark.protocol's encoder."""

from __future__ import annotations

import dataclasses

from walspark.protocol.decoder import decode_message
from walspark.protocol.encoder import encode_message
from walspark.protocol.messages import (
    Begin,
    Commit,
    CommitPrepared,
    Insert,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    TupleData,
)
from walspark.source import DuplicateFilter, RawMessage, Reconnected

REL = Relation(None, 16384, "public", "t", "d", (RelationColumn(1, "id", 23, -1),))


def raw(message, lsn: int = 0) -> RawMessage:  # type: ignore[no-untyped-def]
    return RawMessage(lsn, lsn, 0, encode_message(message))


def txn(xid: int, commit: int, *, with_relation: bool = False) -> list[RawMessage]:
    msgs = [raw(Begin(commit, 0, xid), commit - 50)]
    if with_relation:
        msgs.append(raw(REL))
    msgs.append(raw(Insert(None, 16384, TupleData("t", (str(xid).encode(),))), commit - 40))
    msgs.append(raw(Commit(commit, commit + 8, 0), commit + 8))
    return msgs


def kinds(items) -> str:  # type: ignore[no-untyped-def]
    return "".join("!" if isinstance(i, Reconnected) else i.kind for i in items)


def test_resent_transactions_are_dropped_once() -> None:
    f = DuplicateFilter(2)
    first = txn(1, 1000) + txn(2, 2000)
    assert kinds(f.filter(first)) == "BICBIC"
    assert f.delivered_lsn == 2008
    # reconnect: the server resends from the slot's confirmed position (here: 1008)
    again = [Reconnected(1, 1008, "test")] + txn(2, 2000) + txn(3, 3000)
    out = list(f.filter(again))
    assert kinds(out) == "!BIC"
    assert decode_message(out[1].payload, protocol_version=2, in_stream=False).xid == 3
    assert f.dropped_transactions == 1


def test_partial_transaction_before_reconnect_is_delivered_again() -> None:
    f = DuplicateFilter(1)
    t = txn(5, 5000)
    assert kinds(f.filter(t[:2])) == "BI"  # connection drops mid-transaction
    assert kinds(f.filter([Reconnected(1, 0, "x")] + t)) == "!BIC"


def test_relation_messages_of_dropped_transactions_survive() -> None:
    f = DuplicateFilter(1, delivered_lsn=5000)  # e.g. restored from a progress table
    out = list(f.filter(txn(4, 4000, with_relation=True) + txn(6, 6000)))
    assert kinds(out) == "RBIC"


def test_restored_filter_uses_delivered_lsn() -> None:
    f = DuplicateFilter(1, delivered_lsn=2008)  # = end LSN of the commit at 2000
    assert kinds(f.filter(txn(1, 1000) + txn(2, 2000) + txn(3, 3000))) == "BIC"


def test_streamed_duplicates() -> None:
    f = DuplicateFilter(2)
    ins = Insert(9, 16384, TupleData("t", (b"1",)))
    block = [raw(StreamStart(9, True)), raw(dataclasses.replace(REL, xid=9))]
    block += [raw(ins), raw(StreamStop())]
    commit = raw(StreamCommit(9, 7000, 7008, 0), 7008)
    assert kinds(f.filter(block + [commit])) == "SRIEc"
    # after a reconnect the same xid is streamed again: the block and the commit are dropped,
    # the Relation message is kept without its Xid field
    out = list(f.filter([Reconnected(1, 0, "x")] + block + [commit]))
    assert kinds(out) == "!R"
    assert decode_message(out[1].payload, protocol_version=2, in_stream=False) == REL


def test_streamed_duplicate_unknown_xid_becomes_abort() -> None:
    # a filter restored from a progress table does not know the xid: the blocks pass, and the
    # duplicate commit becomes a Stream Abort so the consumer discards them
    f = DuplicateFilter(4, delivered_lsn=8000, streaming_parallel=True)
    ins = Insert(9, 16384, TupleData("t", (b"1",)))
    out = list(f.filter([raw(StreamStart(9, True)), raw(ins), raw(StreamStop()),
                         raw(StreamCommit(9, 7000, 7008, 123), 7008)]))
    assert kinds(out) == "SIEA"
    abort = decode_message(out[-1].payload, protocol_version=4, in_stream=False, parallel_abort=True)
    assert abort == StreamAbort(9, 9, 7000, 123)


def test_two_phase_duplicates() -> None:
    f = DuplicateFilter(3)
    cp = raw(CommitPrepared(3000, 3008, 0, 12, "g1"), 3008)
    rp = raw(RollbackPrepared(2000, 3508, 0, 0, 13, "g2"), 3508)
    assert kinds(f.filter([cp, rp])) == "Kr"
    assert kinds(f.filter([Reconnected(1, 0, "x"), cp, rp])) == "!"
