"""The pure parts of the data source and the lake: admission control, segment files, options, table names, the fold."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walspark.spark.datasource.options import OptionsError, SourceOptions
from walspark.spark.datasource.schema import parse_table_name
from walspark.staging.offsets import (
    TxnEntry,
    batch_range,
    from_offset,
    is_fresh,
    last_batch,
    last_committed_end,
    plan_end,
    start_checkpoint,
    to_offset,
)
from walspark.staging.segments import (
    SegmentBuilder,
    SegmentMeta,
    delete_through,
    list_segments,
    read_segment,
    remove_incomplete_tail,
    write_segment,
)


def test_offsets_are_lsn_text_and_round_trip():
    assert to_offset(0x1_0000_00A0) == {"lsn": "1/A0"}
    assert from_offset({"lsn": "1/A0"}) == 0x1_0000_00A0
    with pytest.raises(ValueError):
        from_offset({"offset": 3})


def test_plan_end_takes_whole_transactions_within_the_limit_and_at_least_one():
    entries = [TxnEntry(10, 100, 1000), TxnEntry(20, 100, 1000), TxnEntry(30, 500, 5000), TxnEntry(40, 1, 10)]
    assert plan_end(entries, 0) == 40
    assert plan_end(entries, 0, max_rows=250) == 20
    assert plan_end(entries, 20, max_rows=250) == 30  # larger than the limit: alone
    assert plan_end(entries, 30, max_rows=250) == 40
    assert plan_end(entries, 40, max_rows=250) == 40  # nothing new
    assert plan_end(entries, 0, max_bytes=1500) == 10
    assert plan_end(entries, 0, target=25) == 20  # Trigger.AvailableNow
    assert plan_end(entries, 15, max_rows=1000, target=35) == 30


def test_a_checkpoint_begun_from_the_driver_reads_as_a_query_left_it(tmp_path: Path):
    """Batch 0, empty, ending at the slot's position; the driver's next batch follows it as batch 1."""
    checkpoint = tmp_path / "checkpoint"
    assert is_fresh(checkpoint)
    metadata = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"8"}}'
    before = start_checkpoint(checkpoint, 0x1_0000_00A0, metadata)
    assert not is_fresh(checkpoint)  # the query id alone: a query starts at batch 0, not begun again
    assert last_batch(checkpoint) is None and last_committed_end(checkpoint) is None
    assert before.log_next(0x1_0000_00A0) == 0
    assert last_batch(checkpoint) is None  # batch 0 planned, not committed: the query replays it
    before.commit_next()
    logged = (checkpoint / "offsets" / "0").read_text().splitlines()
    assert logged[0] == "v1" and logged[2] == '{"lsn": "1/A0"}'
    assert json.loads(logged[1])["conf"] == json.loads(metadata)["conf"]
    assert (checkpoint / "commits" / "0").read_text() == 'v1\n{"nextBatchWatermarkMs":0}'
    assert last_committed_end(checkpoint) == 0x1_0000_00A0
    first = last_batch(checkpoint)
    assert first is not None and (first.batch_id, first.end) == (0, 0x1_0000_00A0)
    assert batch_range(checkpoint, 0) is None  # a query's first batch starts at its source's initial offset
    assert batch_range(checkpoint, 1) is None  # not planned yet
    assert first.log_next(0x1_0000_00B0) == 1
    assert batch_range(checkpoint, 1) == (0x1_0000_00A0, 0x1_0000_00B0)  # planned: read on the driver from here
    first.commit_next()
    assert last_committed_end(checkpoint) == 0x1_0000_00B0
    used = tmp_path / "used"
    used.mkdir()
    (used / "metadata").write_text('{"id":"x"}')
    assert not is_fresh(used)  # a query started here once (and stopped before its batch 0): not begun again


def _builder(ends: list[int]) -> SegmentBuilder:
    b = SegmentBuilder()
    for i, end in enumerate(ends):
        b.append(end, end - 1, 700 + end, 123, None, end - 2, i, False, b"I" + bytes([i]))
    return b


def test_segments_are_atomic_ordered_and_self_describing(tmp_path: Path):
    meta = SegmentMeta(4, False, True, (TxnEntry(10, 2, 4), TxnEntry(20, 1, 2)))
    b = _builder([10, 10, 20])
    seg = write_segment(tmp_path, 0, b.to_batch([(5, False, b"Rxx", 3)]), meta, first_end=10, last_end=20)
    table, back = read_segment(seg.path)
    assert back == meta
    assert table.column("end_lsn").to_pylist() == [-1, 10, 10, 20]
    assert table.column("version").to_pylist() == [3, None, None, None]
    assert table.column("seq").to_pylist() == [0, 0, 1, 2]
    # a huge transaction in two pieces, the second lost in a crash before its entry was written
    write_segment(tmp_path, 1, _builder([30]).to_batch(), SegmentMeta(4, False, True, ()), first_end=30, last_end=30)
    (tmp_path / "000000000002-x.arrow.tmp").write_bytes(b"partial")
    assert [s.seq for s in list_segments(tmp_path)] == [0, 1]
    assert [s.seq for s in remove_incomplete_tail(tmp_path)] == [0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [seg.path.name]
    assert seg.overlaps(0, 10) and seg.overlaps(15, 25) and not seg.overlaps(20, 30)
    assert delete_through(tmp_path, 19) == 0 and delete_through(tmp_path, 20) == 1


def test_table_names_and_options_are_validated():
    assert parse_table_name("t") == ("public", "t")
    assert parse_table_name('"My Schema"."a.b"') == ("My Schema", "a.b")
    assert parse_table_name('s."x""y"') == ("s", 'x"y')
    with pytest.raises(ValueError):
        parse_table_name("a.b.c")
    o = SourceOptions.parse({"DSN": "host=x", "slot": "s", "publication": "p1, p2", "maxRowsPerBatch": "10",
                             "table": "acct", "stagingpath": "/tmp/x"})
    assert o.publications == ("p1", "p2") and o.max_rows_per_batch == 10 and o.table == "public.acct"
    o.require_stream()
    with pytest.raises(OptionsError, match="peek=true"):
        o.require_batch()
    with pytest.raises(OptionsError, match="unknown option.*maxrowsperbach"):
        SourceOptions.parse({"path": "x", "maxRowsPerBach": "1"})
    with pytest.raises(OptionsError, match="stagingPath"):
        SourceOptions.parse({"dsn": "x", "slot": "s", "publication": "p"}).require_stream()
    with pytest.raises(OptionsError, match="either path"):
        SourceOptions.parse({"dsn": "x", "path": "y"})


def test_table_folders_keep_names_and_never_collide() -> None:
    """Folders keep PostgreSQL's spelling; only what a path cannot hold is %XX-encoded, so the
    mapping is one-to-one (``unquote`` gives the name back) and stays out of ``_walspark``."""
    from urllib.parse import unquote

    from walspark.storage.layout import TargetLayout, path_segment

    assert TargetLayout("/lake/").table('Sché"ma', "Tä'ble.1") == "/lake/Sché\"ma/Tä'ble.1"
    assert TargetLayout("/lake").table("public", "a/b:c%d") == "/lake/public/a%2Fb%3Ac%25d"
    assert TargetLayout("/lake").table("_walspark", "progress") == "/lake/%5Fwalspark/progress"
    assert TargetLayout("/lake").table("s", "_walspark") == "/lake/s/_walspark"  # only the schema level is reserved
    names = ["a/b", "a%2Fb", "a%252Fb", "..", ".", ".x", "%2E", "tab\tx", "a\\b", "名前", "x:y", "_walspark", "%5Fwalspark"]
    segments = [path_segment(n, schema=True) for n in names]
    assert len(set(segments)) == len(names)
    assert all("/" not in s and s not in (".", "..") and not s.startswith(".") for s in segments)
    assert [unquote(s) for s in segments] == names


def test_small_segments_are_read_together_large_ones_alone(tmp_path: Path) -> None:
    """A trickle of small segments is one task's work; a bulk segment still gets a task."""
    from walspark.spark.datasource.stream_reader import group_segments

    sizes = [100, 200, 300, 5000, 50, 60, 9000, 10]
    paths = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"{i:03d}.arrow"
        path.write_bytes(b"x" * size)
        paths.append(path)
    groups = group_segments(paths, target_bytes=1000)
    assert [len(g) for g in groups] == [3, 1, 2, 1, 1]
    assert [p for g in groups for p in g] == [str(p) for p in paths]  # every segment once, in order
    assert group_segments([]) == []


def test_progress_rows_from_the_driver_across_short_runs(tmp_path):
    """The progress table is created, appended to and read with delta-rs, no Spark session: one
    append per process (a --once run each) still gets its files compacted, and a new process
    reads the highest batch and commit LSN per table."""
    from deltalake import DeltaTable

    from walspark.spark.lake import driver_append
    from walspark.spark.lake.progress import AUTO_COMPACT, COMPACT_EVERY, ProgressRow, ProgressTable
    from walspark.storage.layout import TargetLayout

    path = str(tmp_path / "_walspark" / "progress")
    for batch in range(COMPACT_EVERY + 2):
        ProgressTable.forget()  # a new process each time
        ProgressTable._appends.clear()
        ProgressTable(None, TargetLayout(str(tmp_path))).record_many(  # type: ignore[arg-type]
            [ProgressRow("q", "public", "t", batch, 1000 + batch, 1, "scd1")]
        )
        assert driver_append.file_count(path) < COMPACT_EVERY
    ProgressTable.forget()
    last = ProgressTable(None, TargetLayout(str(tmp_path))).last("q", "public", "t")  # type: ignore[arg-type]
    assert last is not None and (last.batch_id, last.commit_lsn) == (COMPACT_EVERY + 1, 1000 + COMPACT_EVERY + 1)
    assert DeltaTable(path).metadata().configuration.get(AUTO_COMPACT) == "true"


def _changes(draw_ops, shuffle) -> pa.Table:
    """A plain batch of one table keyed by ``id`` in the per-table layout's columns the fold reads."""
    ops, ids, olds, values, lsns, seqs = [], [], [], [], [], []
    for n, (op, key, old_key) in enumerate(draw_ops):
        ops.append(op)
        ids.append(None if op == "D" else key)
        if op == "D":
            olds.append({"id": key if old_key is None else old_key})
        else:
            olds.append(None if old_key is None else {"id": old_key})
        values.append(None if op == "D" else f"v{n}")
        lsns.append(100 + n // 3)
        seqs.append(n % 3)
    table = pa.table({
        "_op": pa.array(ops, pa.string()), "_commit_lsn": pa.array(lsns, pa.int64()), "_seq": pa.array(seqs, pa.int64()),
        "id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string()),
        "_old": pa.array(olds, pa.struct([("id", pa.int64())])),
        "_unchanged": pa.array([[] for _ in ops], pa.list_(pa.string())),
    })
    return table.take(pa.array(shuffle(list(range(table.num_rows))), pa.int64()))


#: (operation, key, the old key an update or delete carries: None for an update without one)
_CHANGE = st.tuples(st.sampled_from("IUD"), st.integers(0, 6), st.one_of(st.none(), st.integers(0, 6)))


@settings(max_examples=200, deadline=None)
@given(st.lists(_CHANGE, max_size=40), st.randoms(use_true_random=False))
def test_the_group_by_fold_equals_the_change_by_change_fold(changes, rnd):
    """Differential: the driver's Arrow group-by fold of a batch in which no update moved its key
    gives the rows of the loop, in its order; a batch with a moved key is left to the loop."""
    from walspark.spark.lake.driver_merge import _fold_loop, _fold_plain, fold

    def shuffle(items: list) -> list:
        rnd.shuffle(items)
        return items

    rows = _changes(changes, shuffle)
    quick = _fold_plain(rows, ["id"], ["id", "v"])
    moved = any(op == "U" and old is not None and old != key for op, key, old in changes)
    assert (quick is None) == moved
    assert fold(rows, ["id"], ["id", "v"]).to_pylist() == _fold_loop(rows, ["id"], ["id", "v"]).to_pylist()
    if quick is not None:
        assert quick.schema == _fold_loop(rows, ["id"], ["id", "v"]).schema
