"""A target an older walspark's change-log mode wrote: its unfolded changes are never passed by.

The change log (``<target>/_changes/<schema>/<table>``, a ``_batch_id`` column) and its fold
plan are made here as that walspark left them after a crash mid-stream: batches 3-5 appended,
3-4 folded. No pipeline runs: the check is what a run does before anything else.
"""

from __future__ import annotations

import pytest

from walspark.pipeline.runner import check_change_logs
from walspark.spark.lake.upgrade import UnfoldedChangeLogs
from walspark.spark.tablesync.state import request_resnapshot
from walspark.storage import TargetLayout


def test_unfolded_change_logs_stop_a_run_until_the_table_is_copied_again(spark, tmp_path) -> None:
    layout = TargetLayout(str(tmp_path / "lake"))
    said: list[str] = []
    check_change_logs(spark, layout, said.append)  # no change logs: nothing to say
    assert said == []
    rows = spark.createDataFrame([(1, 3), (2, 4), (3, 5)], "id long, _batch_id long")
    rows.write.format("delta").save(layout.change_log("public", "t"))
    rows.drop("_batch_id").write.format("delta").save(layout.table("public", "t"))
    layout.fold_plan("public", "t").write_json({"after": 2, "upto": 4, "done": True})
    with pytest.raises(UnfoldedChangeLogs) as raised:
        check_change_logs(spark, layout, said.append)
    message = str(raised.value)
    assert "\n" not in message and "public.t (batches 5-5)" in message
    assert "walspark run --once --change-log" in message and "walspark resnapshot" in message
    request_resnapshot(layout, [("public", "t")])  # the fix: the copy holds every change of the log
    check_change_logs(spark, layout, said.append)
    assert layout.fold_plan("public", "t").read_json() == {"after": 4, "upto": 5, "done": True}
    assert len(said) == 1 and "no longer written" in said[0]
    check_change_logs(spark, layout, said.append)  # folded through its last batch now, request or not
    assert len(said) == 2
