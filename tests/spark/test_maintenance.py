"""Table maintenance (``walspark.maintain``, ``walspark maintain``): VACUUM and progress rows folded.

Real PostgreSQL 18, the suite's Spark session and real Delta tables: copy-on-write batches leave
the files they replaced on disk; maintenance with a zero retention deletes exactly those, folds
the progress rows to one per table, and changes nothing a reader sees. The schedule that runs it
from a pipeline is checked on its own (no Spark).
"""

from __future__ import annotations

import datetime

import pytest
from click.testing import CliRunner

from walspark.cli import commands  # noqa: F401  (registers the subcommands)
from walspark.cli.main import cli
from walspark.spark.lake.maintenance import MaintenanceSchedule, maintain
from walspark.spark.lake.progress import ProgressTable
from walspark.spark.lake.sink import ApplyChanges
from walspark.storage import location
from walspark.storage.layout import TargetLayout

from .test_apply import assert_equal

pytestmark = pytest.mark.spark


def _referenced(spark, path: str) -> set[str]:
    """The data files the table's current version reads (paths below the table folder)."""
    from deltalake import DeltaTable

    return set(DeltaTable(path).file_uris())


def _on_disk(path: str) -> set[str]:
    return {k for k in location(path).tree_files() if not k.startswith("_delta_log") and k.endswith(".parquet")}


def test_vacuum_deletes_replaced_files_and_folds_progress(source_factory, spark, tmp_path):
    src = source_factory("CREATE TABLE items (id int PRIMARY KEY, v text)")
    target = str(tmp_path / "lake")
    sink = ApplyChanges(target)
    src.sql("INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 100) g")
    src.apply(target, sink)
    for round_ in range(3):  # each batch rewrites the table's file: the old one stays on disk
        src.sql(f"UPDATE items SET v = v || '{round_}' WHERE id % 10 = {round_}")
        src.apply(target, sink)
    sink.flush()
    items = f"{target}/public/items"
    progress = spark.sql(f"DESCRIBE DETAIL delta.`{target}/_walspark/progress`").first()
    assert progress["properties"].get("delta.autoOptimize.autoCompact") == "true", progress
    assert progress["numFiles"] == 4, "one file per append"
    before = _on_disk(items)
    assert len(before) > len(_referenced(spark, items)), "copy-on-write left replaced files"
    last = ProgressTable(spark, TargetLayout(target)).last("walspark", "public", "items")

    done = {m.name: m for m in maintain(spark, target, retain_hours=0)}

    assert set(done) == {"public.items", "_walspark/progress"}, done
    assert not any(m.failed for m in done.values()), done
    assert done["_walspark/progress"].note == "3 progress rows folded", done
    assert done["public.items"].files_after < done["public.items"].files_before
    assert {f"{items}/{f}" for f in _on_disk(items)} == {u.removeprefix("file://") for u in _referenced(spark, items)}
    assert_equal(spark, src, target, "public.items")
    ProgressTable.forget()  # as a restarted pipeline would read it
    assert ProgressTable(spark, TargetLayout(target)).last("walspark", "public", "items") == last
    assert spark.read.format("delta").load(f"{target}/_walspark/progress").count() == 1

    # Again, through the command: nothing left to delete or fold.
    result = CliRunner().invoke(cli, ["maintain", "--target", target, "--retain-hours", "0"])
    assert result.exit_code == 0, result.output
    assert "2 table(s) maintained, 0 bytes freed" in result.output, result.output
    assert "progress rows folded" not in result.output


def test_maintain_names_a_target_without_tables(spark, tmp_path):
    result = CliRunner().invoke(cli, ["maintain", "--target", str(tmp_path / "nothing"), "--retain-hours", "1"])
    assert result.exit_code == 1
    assert "no Delta tables under" in result.output and "--target of walspark run" in result.output


def test_schedule_starts_its_clock_then_keeps_the_rhythm_across_restarts(tmp_path):
    home = TargetLayout(str(tmp_path))
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    schedule = MaintenanceSchedule(home, 24)
    assert not schedule.due(t0), "a first start never maintains: the clock starts"
    assert (location(str(tmp_path / "_walspark")) / "maintenance.json").exists()
    assert not schedule.due(t0 + datetime.timedelta(hours=23))
    assert schedule.due(t0 + datetime.timedelta(hours=24))
    schedule.done(t0 + datetime.timedelta(hours=25))
    restarted = MaintenanceSchedule(home, 24)  # a new process reads the last run
    assert not restarted.due(t0 + datetime.timedelta(hours=48))
    assert restarted.due(t0 + datetime.timedelta(hours=49))
    assert not MaintenanceSchedule(home, 0).due(t0 + datetime.timedelta(days=365)), "0: never"
