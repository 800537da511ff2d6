"""The stager's prepared-transaction store: durable from PREPARE until Spark holds the commit."""

from __future__ import annotations

import pytest

from walspark.changes.assembly import PreparedTransaction, TransactionAssembler
from walspark.protocol import BeginPrepare, Insert, Prepare, TupleData, encode_message
from walspark.staging.prepared import PreparedStore


def _prepared(xid: int, gid: str, *values: str) -> PreparedTransaction:
    asm = TransactionAssembler(3, hand_over_prepared=True)
    messages = [BeginPrepare(prepare_lsn=0x2000, end_lsn=0x2010, prepare_timestamp=7, xid=xid, gid=gid)]
    messages += [Insert(xid=None, relation_id=1, new_tuple=TupleData("t", (v.encode(),))) for v in values]
    messages += [Prepare(prepare_lsn=0x2000, end_lsn=0x2010, prepare_timestamp=7, xid=xid, gid=gid)]
    events = []
    for i, m in enumerate(messages):
        events += asm.feed(0x1000 + i * 16, encode_message(m))
    [txn] = events
    return txn


def _values(txn) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [data for _lsn, _in_stream, data in txn.messages()]


def test_stored_at_prepare_survives_a_restart_and_commits_with_the_commit_lsns(tmp_path):
    store = PreparedStore(tmp_path).load()
    relation = (0x900, False, b"R-description")
    txn = _prepared(41, "g", "a", "b")
    store.put(txn, [relation])
    txn.release()
    (tmp_path / "junk.prepared.tmp").write_bytes(b"half")  # a crashed write

    again = PreparedStore(tmp_path).load()  # a new process
    assert not (tmp_path / "junk.prepared.tmp").exists()
    entry = again.get(41, "g")
    assert entry is not None and entry.committed_end is None and again.get(41, "other") is None
    committed = again.committed(entry, commit_lsn=0x5000, end_lsn=0x5010, timestamp=9,
                                epilogue=[(0x900, False, b"R-now")])
    assert (committed.xid, committed.gid, committed.commit_lsn, committed.end_lsn, committed.commit_timestamp) == (
        41, "g", 0x5000, 0x5010, 9)
    data = _values(committed)
    assert data[0] == b"R-description" and data[-1] == b"R-now" and len(data) == 4  # prelude, 2 inserts, epilogue
    assert committed.count == 3


def test_committed_entries_go_once_spark_has_them_and_the_watermark_remembers(tmp_path):
    store = PreparedStore(tmp_path).load()
    for xid in (1, 2):
        txn = _prepared(xid, f"g{xid}", "x")
        store.put(txn, [])
        txn.release()
    first = store.get(1, "g1")
    store.resolve(first, 0x5010)
    assert store.release_through(0x5000) == 0 and store.get(1, "g1") is not None  # Spark not there yet
    reloaded = PreparedStore(tmp_path).load()  # the resolution is durable (file name)
    assert reloaded.get(1, "g1").committed_end == 0x5010
    resolved = reloaded.get(1, "g1")
    held = reloaded.committed(resolved, commit_lsn=0x5000, end_lsn=0x5010, timestamp=1)  # a resend being staged
    assert reloaded.release_through(0x6000) == 1
    assert len(_values(held)) == 1  # an open entry stays readable after Spark let it go
    held.release()
    with pytest.raises(FileNotFoundError):  # a resend arriving after: the stager checks the watermark
        reloaded.committed(resolved, commit_lsn=0x5000, end_lsn=0x5010, timestamp=1)
    assert reloaded.get(1, "g1") is None and reloaded.watermark == 0x6000
    assert [e.key for e in reloaded.pending()] == [reloaded.get(2, "g2").key]
    assert PreparedStore(tmp_path).load().watermark == 0x6000
    assert reloaded.drop(2, "g2") and not reloaded.drop(2, "g2")
    assert len(PreparedStore(tmp_path).load()) == 0


def test_a_prepare_sent_again_replaces_the_stored_copy_even_a_committed_one(tmp_path):
    store = PreparedStore(tmp_path).load()
    txn = _prepared(5, "same", "old")
    store.resolve(store.put(txn, []), 0x7000)
    txn.release()
    txn = _prepared(5, "same", "new")
    store.put(txn, [])
    txn.release()
    entry = store.get(5, "same")
    assert entry.committed_end is None
    assert [p.suffix for p in tmp_path.iterdir()] == [".prepared"]
    assert _values(store.committed(entry, commit_lsn=1, end_lsn=2, timestamp=3))[-1].endswith(b"new")


def test_the_store_knows_whether_it_saw_every_prepare_of_the_slot(tmp_path):
    fresh = PreparedStore(tmp_path / "a").load()
    assert not fresh.complete
    fresh.begin(slot_had_two_phase=False, start_lsn=0x100)  # this stream turns two-phase on
    fresh.begin(slot_had_two_phase=True, start_lsn=0x200)  # later starts change nothing
    assert fresh.complete and PreparedStore(tmp_path / "a").load().complete
    late = PreparedStore(tmp_path / "b").load()
    late.begin(slot_had_two_phase=True, start_lsn=0x100)  # prepares before this start may be missing
    assert not late.complete and not PreparedStore(tmp_path / "b").load().complete
