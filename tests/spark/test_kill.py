"""SIGKILL the Spark driver mid-stream, again and again, while a workload runs: exactly once anyway.

The streaming query runs in a separate ``python -c`` process (driver, JVM and Python workers in
one process group, killed together with SIGKILL — no shutdown hook runs). After every kill the
slot must not be confirmed past the last batch committed in the checkpoint; at the end a final
Trigger.AvailableNow run drains the slot and the file sink must hold every change exactly once,
in commit order. ``WALSPARK_KILLS`` sets the number of kills (1 by default, 10 in the soak run).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from depth import sweep

from .support import Workload, committed_end, idle_mark, sink_changes, slot_confirmed

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DRIVER = """
import json, sys
args = json.loads(sys.argv[1])
from walspark.spark.session import spark_session
spark = spark_session("walspark-kill-test", master="local[2]",
                      conf={"spark.sql.warehouse.dir": args["warehouse"], "spark.sql.shuffle.partitions": "2"})
df = (spark.readStream.format("pgoutput")
      .options(dsn=args["dsn"], slot="s", publication="pub", stagingPath=args["staging"],
               maxRowsPerBatch="2000").load())
writer = (df.writeStream.format("parquet").option("path", args["out"])
          .option("checkpointLocation", args["checkpoint"]))
if args["available_now"]:
    writer = writer.trigger(availableNow=True)
else:
    writer = writer.trigger(processingTime="200 milliseconds")
query = writer.start()
print("query started", flush=True)
query.awaitTermination()
"""


def _commits(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([f for f in commits.iterdir() if f.name.isdigit()]) if commits.exists() else 0


def _driver(dsn: str, tmp: Path, run: int, *, available_now: bool) -> subprocess.Popen:
    args = {"dsn": dsn, "staging": str(tmp / "staging"), "out": str(tmp / "out"), "checkpoint": str(tmp / "ckpt"),
            "warehouse": str(tmp / "warehouse"), "available_now": available_now}
    log = open(tmp / f"driver-{run}.log", "wb")  # closed with the process
    return subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(args)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=tmp)


def _check_slot(dsn: str, checkpoint: Path) -> None:
    """The slot never passes the last committed batch, or an idle position the stager recorded."""
    slot = slot_confirmed(dsn)
    end = committed_end(checkpoint)
    bound = max(end or 0, idle_mark(checkpoint.parent / "staging"))
    assert end is None or slot <= bound, f"slot at {slot:X} is beyond the last committed batch end {end:X}"


def test_sigkill_of_the_driver_loses_and_duplicates_nothing(spark, source_dsn, tmp_path):
    kills = int(sweep("WALSPARK_KILLS", "1", "10"))
    seed = int(os.environ.get("WALSPARK_KILL_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"kills={kills} seed={seed}")
    checkpoint = tmp_path / "ckpt"
    work = Workload(source_dsn)
    work.run(5)
    work.start(pause=0.1)
    try:
        for run in range(kills):
            before = _commits(checkpoint)
            t0 = time.monotonic()
            proc = _driver(source_dsn, tmp_path, run, available_now=False)
            deadline = time.monotonic() + 240
            while _commits(checkpoint) < before + 1:  # let it make progress first
                assert proc.poll() is None, (tmp_path / f"driver-{run}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the restarted query made no progress"
                time.sleep(0.1)
            time.sleep(rng.uniform(0, 2.0))  # then kill at a random point of the next batches
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            print(f"run {run}: killed after {_commits(checkpoint) - before} new batches, {time.monotonic() - t0:.0f}s")
            _check_slot(source_dsn, checkpoint)
    finally:
        work.stop()
    t0 = time.monotonic()
    proc = _driver(source_dsn, tmp_path, kills, available_now=True)  # drain everything, then stop
    assert proc.wait(timeout=300) == 0, (tmp_path / f"driver-{kills}.log").read_text()[-3000:]
    _check_slot(source_dsn, checkpoint)
    print(f"drained {len(work.changes)} changes in {time.monotonic() - t0:.0f}s")
    got = sink_changes(spark, tmp_path / "out")
    assert len(got) == len(work.changes) and got == work.changes
