"""A pipeline's status as another process reads it: the file the tracker keeps, ``walspark status --target``."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

from click.testing import CliRunner

from walspark.cli import commands  # noqa: F401  (registers the subcommands)
from walspark.cli.main import cli
from walspark.pipeline.status import Tracker, read_status_files, status_writer
from walspark.storage.layout import TargetLayout


def test_the_status_file_follows_phases_batches_and_failures(tmp_path) -> None:
    target = tmp_path / "lake"
    home = TargetLayout(str(target))
    tracker = Tracker()
    tracker.publish_to(status_writer(home, "shop_slot"))
    tracker.phase("starting")
    tracker.phase("streaming")
    (record,) = read_status_files(home)
    assert record["state"] == "streaming" and record["running"] is True  # this process writes it
    assert record["pid"] == os.getpid() and record["batches"] == 0
    committed = int((time.time() - 2) * 1e6)
    tracker.batch_applied(4, [SimpleNamespace(schema="public", table="t", rows=49, skipped=False,
                                              commit_lsn=0x1A2B3C, commit_time_us=committed)])  # fmt: skip
    tracker.failed("the slot was dropped: create it again and re-snapshot")  # a phase: written at once
    (record,) = read_status_files(home)
    assert record["state"] == "failed" and record["running"] is False
    assert record["last_batch_id"] == 4 and record["rows"] == 49 and record["slot_position"] == "0/1A2B3C"
    assert 1.5 <= record["lag_seconds"] < 60

    out = CliRunner().invoke(cli, ["status", "--target", str(target)])
    assert out.exit_code == 0, out.output
    lines = dict(line.split(None, 1) if " " in line else (line, "") for line in out.output.splitlines())
    assert lines["state"].strip() == "failed", out.output
    assert "batch 4: 49 change rows" in out.output and "s behind the source" in out.output, out.output
    assert "error       the slot was dropped" in out.output, out.output
    as_json = json.loads(CliRunner().invoke(cli, ["status", "--target", str(target), "--slot", "shop_slot",
                                                  "--json"]).output)  # fmt: skip
    assert as_json["state"] == "failed" and as_json["tables_copying"] == [], as_json


def test_a_target_without_a_pipeline_is_one_line(tmp_path) -> None:
    out = CliRunner().invoke(cli, ["status", "--target", str(tmp_path / "nowhere")])
    assert out.exit_code == 1 and out.output.count("\n") == 1, out.output
    assert "no pipeline status under" in out.output and "no `walspark run` has written" in out.output, out.output
    usage = CliRunner().invoke(cli, ["status"], env={"WALSPARK_DSN": ""})
    assert usage.exit_code == 2 and "--target for a pipeline" in usage.output, usage.output


def test_recent_progress_keeps_the_last_batches_with_structured_streaming_keys() -> None:
    tracker = Tracker()
    assert tracker.recent_progress() == ()
    for batch_id in range(70):
        rows = [SimpleNamespace(schema="public", table=t, rows=batch_id, commit_lsn=0x1_0000_0000 + batch_id,
                                commit_time_us=int(time.time() * 1e6), skipped=False) for t in ("a", "b")]
        held = SimpleNamespace(schema="public", table="c", rows=7, commit_lsn=None, skipped=True)  # a table being copied
        tracker.batch_applied(batch_id, [*rows, held])
    recent = tracker.recent_progress()
    assert [p.batch_id for p in recent] == list(range(6, 70))  # the last 64, oldest first
    last = recent[-1].as_dict()
    assert last["batchId"] == 69 and last["numInputRows"] == 138 and last["rowsByTable"] == {"public.a": 69, "public.b": 69}
    assert last["commitLsn"] == "1/45" and 0 <= last["lagSeconds"] < 60
    assert last["timestamp"].endswith("+00:00") and last["timestamp"][:4].isdigit()
