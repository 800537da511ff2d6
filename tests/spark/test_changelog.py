"""Change-log mode (issue 16): every batch appended to the table's change log, folded into the
mirror or history in the background, exactly once.

The changes come from the embedded PostgreSQL 18 (the harness of :mod:`.test_apply`); the Delta
tables are read back independently and compared with ``SELECT *``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from walspark.spark.lake.changelog import BATCH_ID, FoldPlan, read_plan, write_plan
from walspark.spark.lake.maintenance import expire_changes, maintain
from walspark.spark.lake.progress import ProgressTable
from walspark.spark.lake.sink import ApplyChanges
from walspark.storage.layout import TargetLayout

from .test_apply import WORKLOAD_DDL, _random_txn, assert_equal

pytestmark = pytest.mark.spark


def _log_rows(spark, target: str, table: str) -> list:
    schema, name = table.split(".")
    return spark.read.format("delta").load(TargetLayout(target).change_log(schema, name)).collect()


def _engines(path: str) -> list[str]:
    """The engine of each commit of a Delta table, in order (its log's commitInfo)."""
    out = []
    for entry in sorted(Path(path, "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            if '"commitInfo"' in line:
                out.append(json.loads(line)["commitInfo"].get("engineInfo", ""))
    return out


def test_batches_go_to_the_change_log_once(source_factory, spark, tmp_path):
    src = source_factory(WORKLOAD_DDL)
    target = str(tmp_path / "lake")
    sink = ApplyChanges(target).app_id("q").change_log(fold_seconds=3600)  # no background fold within the test
    rnd = random.Random(11)
    live: set[int] = set()
    next_id = [1]
    frames = []
    for _ in range(2):
        for _ in range(12):
            _random_txn(src, rnd, live, next_id)
        frames += src.drain()
    changes = 0
    for batch_id, df in enumerate(frames):
        changes += sum(r.rows for r in sink.foreach_batch(df, batch_id))
    rows = _log_rows(spark, target, "public.items") + _log_rows(spark, target, "public.pairs")
    assert len(rows) == changes  # every change once
    assert len({(r["_commit_lsn"], r["_seq"], r["_table"]) for r in rows}) == changes
    assert sorted({r[BATCH_ID] for r in rows}) == list(range(len(frames)))
    assert not (tmp_path / "lake" / "public" / "items").exists()  # nothing folded yet
    # The first batch creates each log through Spark; the next ones are appended from the driver
    # (delta-rs, no Spark job), and so are the progress rows once the table exists.
    assert _engines(TargetLayout(target).change_log("public", "items"))[0].startswith("Apache-Spark")
    assert all(e.startswith("delta-rs") for e in _engines(TargetLayout(target).change_log("public", "items"))[1:])
    sink.flush()
    assert any(e.startswith("delta-rs") for e in _engines(f"{target}/_walspark/progress"))
    # Replays after a crash: with the progress rows (skipped at once), and without them (a crash
    # before they were written: Delta's transaction id skips the append).
    sink.flush()
    for forget in (False, True):
        if forget:
            ProgressTable.forget()
            (tmp_path / "lake" / "_walspark" / "progress").rename(tmp_path / "progress-gone")
        replay = ApplyChanges(target).app_id("q").change_log(fold_seconds=3600)
        replay.foreach_batch(frames[-1], len(frames) - 1)
        replay.close()  # its folds too: two folders of one table at once would conflict (one per run)
        assert len(_log_rows(spark, target, "public.items")) + len(_log_rows(spark, target, "public.pairs")) == changes
    sink.close()
    assert_equal(spark, src, target, "public.items", ("doc",))
    assert_equal(spark, src, target, "public.pairs")
    ProgressTable.forget()


def test_folded_mirror_equals_the_source_and_a_fold_done_again_changes_nothing(source_factory, spark, tmp_path):
    src = source_factory(WORKLOAD_DDL)
    target = str(tmp_path / "lake")
    sink = ApplyChanges(target).app_id("q").change_log(fold_seconds=3600)
    rnd = random.Random(5)
    live: set[int] = set()
    next_id = [1]
    for _ in range(3):
        for _ in range(15):
            _random_txn(src, rnd, live, next_id)
        src.apply(target, sink)
    items_log = TargetLayout(target).change_log("public", "items")
    logged = spark.read.format("delta").load(items_log).count()
    assert logged and expire_changes(spark, TargetLayout(target), items_log, 0) == 0  # not folded: the only copy, kept
    sink.close()
    assert_equal(spark, src, target, "public.items", ("doc",))
    assert_equal(spark, src, target, "public.pairs")
    # A crash after the fold's commit, before its bookkeeping: the plan says not done. The fold
    # is done again, the same range, and changes nothing (Delta's transaction id).
    home = TargetLayout(target)
    plan = read_plan(home, "public", "items")
    assert plan is not None and plan.done and plan.after == -1 and plan.upto >= 3
    write_plan(home, "public", "items", FoldPlan(plan.after, plan.upto, done=False))
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/items`").count()
    ProgressTable.forget()
    again = ApplyChanges(target).app_id("q").change_log(fold_seconds=3600)
    again.drain_folds(spark)
    again.close()
    assert spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/items`").count() == versions
    assert read_plan(home, "public", "items").done
    assert_equal(spark, src, target, "public.items", ("doc",))
    # Folded, so maintenance may expire them (walspark maintain --keep-changes-hours 0).
    done = {m.name: m for m in maintain(spark, target, keep_changes_hours=0, optimize=False)}
    assert f"{logged} folded changes expired" in done["_changes/public.items"].note
    assert spark.read.format("delta").load(items_log).count() == 0
    assert_equal(spark, src, target, "public.items", ("doc",))
    ProgressTable.forget()


def test_a_chain_of_key_changes_over_toast_across_batches_folds(source_factory, spark, tmp_path):
    """A row's key changed in one micro-batch and again in the next, its TOASTed column left alone:
    one fold of both batches follows the chain micro-batch by micro-batch, as the direct apply."""
    src = source_factory("CREATE TABLE docs (id int PRIMARY KEY, body text, n int);")
    target = str(tmp_path / "lake")
    sink = ApplyChanges(target).app_id("q").change_log(fold_seconds=3600)
    body = "".join(random.Random(3).choices("abcdefghijklmnopqrstuvwxyz0123456789", k=20_000))  # stays TOASTed
    src.sql("INSERT INTO docs VALUES (1, %s, 0), (10, %s, 0)", params=(body, body))
    src.apply(target, sink)
    sink.close()  # the mirror holds both rows
    sink = ApplyChanges(target).app_id("q").change_log(fold_seconds=3600)
    src.sql("UPDATE docs SET id = 2, n = 1 WHERE id = 1")
    src.apply(target, sink)
    src.sql("UPDATE docs SET id = 3, n = 2 WHERE id = 2", "UPDATE docs SET n = 5 WHERE id = 10")
    src.apply(target, sink)
    sink.close()  # one fold of both batches
    assert_equal(spark, src, target, "public.docs")
    ProgressTable.forget()
