"""Transaction assembly: messages in stream order → committed transactions in commit order."""

from __future__ import annotations

import pytest

from walspark.changes.assembly import NonTransactionalMessage, TransactionAssembler
from walspark.protocol import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Insert,
    Message,
    Origin,
    Prepare,
    ProtocolError,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    TupleData,
    encode_message,
)


def insert(value: str, xid: int | None = None) -> Insert:
    return Insert(xid=xid, relation_id=1, new_tuple=TupleData("t", (value.encode(),)))


def feed(assembler: TransactionAssembler, *messages, start_lsn: int = 0x1000):
    events = []
    for i, message in enumerate(messages):
        events += assembler.feed(start_lsn + i * 16, encode_message(message))
    return events


def values(txn) -> list[str]:
    """The last character of each message: the one-letter value of the test's inserts."""
    return [data[-1:].decode() for _lsn, _in_stream, data in txn.messages()]


def test_plain_transactions_come_out_at_commit_with_their_facts():
    asm = TransactionAssembler(1)
    events = feed(
        asm,
        Begin(final_lsn=0x2000, commit_timestamp=5, xid=700),
        Origin(commit_lsn=0x99, name="upstream"),
        insert("a"),
        insert("b"),
        Commit(commit_lsn=0x2000, end_lsn=0x2010, commit_timestamp=5),
    )
    [txn] = events
    assert (txn.xid, txn.commit_lsn, txn.end_lsn, txn.commit_timestamp) == (700, 0x2000, 0x2010, 5)
    assert (txn.origin, txn.origin_lsn, txn.streamed, txn.count) == ("upstream", 0x99, False, 2)
    assert values(txn) == ["a", "b"]
    assert all(not in_stream for _, in_stream, _ in txn.messages())


def test_interleaved_streamed_transactions_with_subtransaction_abort():
    asm = TransactionAssembler(2)
    events = feed(
        asm,
        StreamStart(xid=10, first_segment=True),
        insert("a", 10),
        insert("x", 11),  # subtransaction 11 of 10, rolled back below
        StreamStop(),
        StreamStart(xid=20, first_segment=True),
        insert("c", 20),
        StreamStop(),
        StreamStart(xid=10, first_segment=False),
        insert("b", 10),
        StreamStop(),
        StreamAbort(xid=10, subxid=11),
        StreamCommit(xid=20, commit_lsn=0x3000, end_lsn=0x3010, commit_timestamp=7),
        StreamCommit(xid=10, commit_lsn=0x4000, end_lsn=0x4010, commit_timestamp=8),
    )
    assert [(t.xid, values(t)) for t in events] == [(20, ["c"]), (10, ["a", "b"])]
    assert events[1].streamed and all(in_stream for _, in_stream, _ in events[1].messages())


def test_aborted_streamed_transaction_yields_nothing():
    asm = TransactionAssembler(4, streaming_parallel=True)
    events = feed(
        asm,
        StreamStart(xid=10, first_segment=True),
        insert("a", 10),
        StreamStop(),
        StreamAbort(xid=10, subxid=10, abort_lsn=0x5000, abort_timestamp=9),
    )
    assert events == [] and asm.open_transactions == 0 and asm.memory_bytes == 0


def test_two_phase_commit_prepared_and_rollback_prepared():
    asm = TransactionAssembler(3)
    events = feed(
        asm,
        BeginPrepare(prepare_lsn=0x2000, end_lsn=0x2010, prepare_timestamp=1, xid=5, gid="g1"),
        insert("a"),
        Prepare(prepare_lsn=0x2000, end_lsn=0x2010, prepare_timestamp=1, xid=5, gid="g1"),
        BeginPrepare(prepare_lsn=0x2100, end_lsn=0x2110, prepare_timestamp=1, xid=6, gid="g2"),
        insert("b"),
        Prepare(prepare_lsn=0x2100, end_lsn=0x2110, prepare_timestamp=1, xid=6, gid="g2"),
    )
    assert events == []
    assert asm.confirm_floor() == 0x2000  # the earliest pending prepare
    events = feed(
        asm,
        RollbackPrepared(prepare_end_lsn=0x2110, rollback_end_lsn=0x3010, prepare_timestamp=1,
                         rollback_timestamp=2, xid=6, gid="g2"),
        CommitPrepared(commit_lsn=0x3100, end_lsn=0x3110, commit_timestamp=3, xid=5, gid="g1"),
        start_lsn=0x3000,
    )
    [txn] = events
    assert (txn.gid, txn.commit_lsn, values(txn)) == ("g1", 0x3100, ["a"])
    assert asm.confirm_floor() is None


def test_streamed_prepare():
    asm = TransactionAssembler(3)
    events = feed(
        asm,
        StreamStart(xid=9, first_segment=True),
        insert("a", 9),
        StreamStop(),
        StreamPrepare(prepare_lsn=0x2000, end_lsn=0x2010, prepare_timestamp=1, xid=9, gid="sp"),
        CommitPrepared(commit_lsn=0x3000, end_lsn=0x3010, commit_timestamp=2, xid=9, gid="sp"),
    )
    assert [(t.gid, values(t)) for t in events] == [("sp", ["a"])]


def test_non_transactional_message_is_delivered_at_once():
    asm = TransactionAssembler(1)
    message = Message(xid=None, transactional=False, lsn=0x10, prefix="p", content=b"hi")
    [event] = feed(asm, message)
    assert isinstance(event, NonTransactionalMessage) and event.message == message


def test_memory_budget_spills_and_reads_back_in_order(tmp_path):
    asm = TransactionAssembler(2, memory_budget=10_000, spill_dir=tmp_path)
    messages = [StreamStart(xid=10, first_segment=True)]
    messages += [insert(chr(97 + i % 26) * 200, 10) for i in range(500)]
    messages += [StreamStop(), StreamAbort(xid=10, subxid=10)]  # one aborted, spilled too
    messages += [StreamStart(xid=11, first_segment=True)]
    messages += [insert(chr(97 + i % 26) * 200, 11 if i % 2 else 12) for i in range(500)]
    messages += [StreamStop(), StreamAbort(xid=11, subxid=12)]
    messages += [StreamCommit(xid=11, commit_lsn=0x9000, end_lsn=0x9010, commit_timestamp=1)]
    [txn] = feed(asm, *messages)
    assert asm.spilled_transactions >= 2
    assert asm.peak_memory_bytes <= 10_000 + 1000
    kept = [data for _, _, data in txn.messages()]
    assert [data[-1:].decode() for data in kept] == [chr(97 + i % 26) for i in range(500) if i % 2]
    txn.release()
    asm.close()
    assert list(tmp_path.iterdir()) == []


def test_a_window_after_the_prepare_skips_its_outcome_and_reads_on():
    """A capture or peek starting after a PREPARE (``window``): its COMMIT/ROLLBACK PREPARED has no
    changes to give here; the transactions after it come out as usual."""
    asm = TransactionAssembler(3, window=True)
    events = feed(
        asm,
        CommitPrepared(commit_lsn=0x3000, end_lsn=0x3010, commit_timestamp=3, xid=5, gid="before"),
        Begin(final_lsn=0x3100, commit_timestamp=4, xid=7),
        insert("x"),
        Commit(commit_lsn=0x3100, end_lsn=0x3110, commit_timestamp=4),
        RollbackPrepared(prepare_end_lsn=0x2110, rollback_end_lsn=0x3210, prepare_timestamp=1,
                         rollback_timestamp=5, xid=6, gid="also before"),
    )
    [txn] = events
    assert (txn.xid, values(txn), asm.outcomes_before_window) == (7, ["x"], 2)


@pytest.mark.parametrize(
    "messages",
    [
        [insert("a")],
        [Commit(commit_lsn=1, end_lsn=2, commit_timestamp=0)],
        [Begin(final_lsn=1, commit_timestamp=0, xid=1), Begin(final_lsn=1, commit_timestamp=0, xid=2)],
        [StreamStop()],
        [CommitPrepared(commit_lsn=1, end_lsn=2, commit_timestamp=0, xid=1, gid="nope")],
    ],
    ids=["insert-outside", "commit-outside", "nested-begin", "stop-outside", "unknown-gid"],
)
def test_out_of_order_messages_raise_assembly_error_with_lsn(messages):
    with pytest.raises(ProtocolError, match=r"LSN 0/10[01]0"):
        feed(TransactionAssembler(3), *messages)


def test_relation_outside_a_transaction_reaches_the_next_transaction():
    """After a reconnect the duplicate filter passes a dropped transaction's Relation alone."""
    from walspark.protocol import Relation, RelationColumn

    relation = Relation(xid=None, relation_id=1, namespace="public", relation_name="t", replica_identity="d",
                        columns=(RelationColumn(flags=1, name="id", type_oid=23, type_modifier=-1),))
    asm = TransactionAssembler(1)
    [txn] = feed(
        asm,
        relation,
        Begin(final_lsn=0x2000, commit_timestamp=5, xid=700),
        insert("a"),
        Commit(commit_lsn=0x2000, end_lsn=0x2010, commit_timestamp=5),
    )
    assert [data[:1] for _, _, data in txn.messages()] == [b"R", b"I"]


def test_hand_over_prepared_gives_the_prepare_and_its_outcomes_and_holds_nothing():
    from walspark.changes.assembly import PreparedOutcome, PreparedTransaction

    asm = TransactionAssembler(3, hand_over_prepared=True)
    [prepared] = feed(
        asm,
        BeginPrepare(prepare_lsn=0x2000, end_lsn=0x2010, prepare_timestamp=1, xid=5, gid="g1"),
        Origin(commit_lsn=0x77, name="up"),
        insert("a"),
        Prepare(prepare_lsn=0x2000, end_lsn=0x2010, prepare_timestamp=1, xid=5, gid="g1"),
    )
    assert isinstance(prepared, PreparedTransaction)
    assert (prepared.xid, prepared.gid, prepared.prepare_lsn, prepared.end_lsn, prepared.origin) == (
        5, "g1", 0x2000, 0x2010, "up")
    assert values(prepared) == ["a"] and prepared.count == 1
    prepared.release()
    assert asm.open_transactions == 0 and asm.memory_bytes == 0 and asm.confirm_floor() is None
    # The outcomes come even for a gid the assembler never saw (the consumer holds it, maybe since
    # before a restart); a streamed prepare is handed over the same way.
    events = feed(
        asm,
        CommitPrepared(commit_lsn=0x3100, end_lsn=0x3110, commit_timestamp=3, xid=5, gid="g1"),
        RollbackPrepared(prepare_end_lsn=0x2110, rollback_end_lsn=0x3210, prepare_timestamp=1,
                         rollback_timestamp=4, xid=6, gid="g2"),
        StreamStart(xid=9, first_segment=True),
        insert("b", 9),
        StreamStop(),
        StreamPrepare(prepare_lsn=0x4000, end_lsn=0x4010, prepare_timestamp=5, xid=9, gid="sp"),
        start_lsn=0x3000,
    )
    assert events[:2] == [
        PreparedOutcome(0x3000, 5, "g1", True, 0x3100, 0x3110, 3),
        PreparedOutcome(0x3010, 6, "g2", False, 0, 0x3210, 4),
    ]
    assert isinstance(events[2], PreparedTransaction) and events[2].streamed and values(events[2]) == ["b"]
    assert [in_stream for _, in_stream, _ in events[2].messages()] == [True]
