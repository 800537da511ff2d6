"""The run's Prometheus metrics without Spark: the tracker's facts as samples, and a port in use.

The metrics scraped while a pipeline streams are checked in
``tests/pipeline/test_pipeline_api.py::test_start_status_stop_and_resume``.
"""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from walspark.cli import commands  # noqa: F401  (registers the subcommands)
from walspark.cli.main import cli
from walspark.pipeline import Pipeline
from walspark.pipeline.metrics import RunMetrics
from walspark.pipeline.status import Tracker, error_kind
from walspark.source.errors import OptionError, SlotInUse


def test_the_metrics_are_the_trackers_facts() -> None:
    tracker = Tracker()
    tracker.phase("starting")
    metrics = RunMetrics(tracker, "s1", lambda: ("public.joined",))
    value = metrics.registry.get_sample_value
    assert value("walspark_state", {"slot": "s1", "walspark_state": "starting"}) == 1
    assert value("walspark_batches_total", {"slot": "s1"}) == 0
    assert value("walspark_lag_seconds", {"slot": "s1"}) is None, "not known before a batch: no sample"
    tracker.phase("streaming")
    result = SimpleNamespace(schema="public", table="t", rows=5, skipped=False, commit_lsn=16, commit_time_us=None,
                             ops=(("I", 3), ("U", 1), ("D", 1)))  # fmt: skip
    held = SimpleNamespace(schema="public", table="joined", rows=2, skipped=True, commit_lsn=None, ops=(("I", 2),))
    tracker.batch_applied(1, [result, held])
    tracker.batch_applied(2, [result])
    tracker.batch_took(1.5)
    tracker.lag(2048, 65536)
    assert value("walspark_state", {"slot": "s1", "walspark_state": "streaming"}) == 1
    assert value("walspark_batches_total", {"slot": "s1"}) == 2
    assert value("walspark_changes_applied_total", {"slot": "s1", "table": "public.t", "op": "insert"}) == 6
    assert value("walspark_changes_applied_total", {"slot": "s1", "table": "public.t", "op": "delete"}) == 2
    assert value("walspark_changes_applied_total", {"slot": "s1", "table": "public.joined", "op": "insert"}) is None
    assert value("walspark_batch_duration_seconds_count", {"slot": "s1"}) == 1
    assert value("walspark_batch_duration_seconds_bucket", {"slot": "s1", "le": "2.5"}) == 1
    assert value("walspark_slot_lag_bytes", {"slot": "s1"}) == 2048
    assert value("walspark_slot_retained_wal_bytes", {"slot": "s1"}) == 65536
    assert value("walspark_tables_copying", {"slot": "s1"}) == 1
    assert value("walspark_table_copying", {"slot": "s1", "table": "public.joined"}) == 1
    tracker.error("PythonWorkerStartTimeout")
    tracker.failed("slot s1 is in use", error_kind(SlotInUse("slot s1 is in use")))
    assert value("walspark_errors_total", {"slot": "s1", "kind": "SlotInUse"}) == 1
    assert value("walspark_errors_total", {"slot": "s1", "kind": "PythonWorkerStartTimeout"}) == 1
    assert value("walspark_state", {"slot": "s1", "walspark_state": "failed"}) == 1
    assert value("walspark_state", {"slot": "s1", "walspark_state": "streaming"}) == 0
    assert tracker.status().changes == {"public.t": {"I": 6, "U": 2, "D": 2}}  # the status file has them too


def test_a_metrics_port_in_use_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        want = f"--metrics-port {port} is in use on 127.0.0.1; choose another port or stop what holds it"
        target = tmp_path / "lake"
        pipeline = Pipeline(None, dsn="host=/nonexistent dbname=x", publication="p", slot="s", target=str(target))
        with pytest.raises(OptionError, match=want):
            pipeline.metrics(port).check()
        result = CliRunner().invoke(cli, ["run", "--dsn", "host=/nonexistent dbname=x", "--publication", "p",
                                          "--slot", "s", "--target", str(target), "--metrics-port", str(port)])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert want in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not target.exists(), "nothing may be written before the checks pass"
