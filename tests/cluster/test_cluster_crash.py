"""``walspark run`` on a real Spark standalone cluster: SIGKILL of the driver mid-batch, restart, exactly once.

Issue 15's first acceptance line. A master and a worker run as separate processes from
pyspark's own distribution (:mod:`tests.cluster.support`); ``walspark run --master spark://…``
is the driver, a child process in its own process group. The shop's workload writes while the
run takes its initial snapshot and streams; once the run streams, the driver is SIGKILLed while
a batch is planned in the checkpoint's offset log but not yet in its commit log. The workload
stops, the restarted driver (``--once``) catches up, and then every Delta table, read back with
plain Spark, must equal the source row by row, and no (table, batch id) may appear twice among
the Delta commits' batch notes (the oracle of :mod:`tests.reliability.test_crash_run`).

**Nothing from the driver's disk.** The driver runs in a scratch folder of its own (working
dir, temp files, Spark local dirs, and the Delta jars it hands to Spark with ``spark.jars``),
which the workers cannot see where the host allows a mount namespace: executors get the jars
from the driver's file server and everything else from the target, as on a cluster of hosts.
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from depth import sweep
from reliability.support import (
    CrashWorkload,
    Pipeline,
    create_shop,
    delta_batches,
    mismatches,
    repeated_batches,
    wait_for,
)

from walspark.demo import TABLES
from walspark.spark.jars import delta_jars, is_s3a_jar

from .support import SRC, StandaloneCluster, can_hide_folders

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: Deadlines, not expectations: on a 2-core host shared with other suites (load average 15) the
#: catch-up run took 290 s.
START_TIMEOUT = 300.0
ONCE_TIMEOUT = 500.0

#: One executor, as small as the shop allows (the host's memory is shared with other suites),
#: running two tasks at a time.
EXECUTOR_CONF = {"spark.executor.memory": "768m", "spark.executor.cores": "2", "spark.cores.max": "2"}

_SNAPSHOT_DONE = re.compile(r"^snapshot of \d+ table\(s\) done", re.MULTILINE)


def driver_env(home: Path, conf: dict[str, str]) -> dict[str, str]:
    """The driver's environment: every local file it makes under ``home`` (hidden from the workers),
    the worktree's walspark, and ``conf`` for its Spark session.

    The jars are linked under ``home``: the driver hands Delta's to Spark (``spark.jars``), and
    executors can only get them from the driver's file server. hadoop-aws and the AWS SDK bundle
    (~700 MB) are on every node's class path instead, as a cluster's Hadoop installation has
    them; walspark's session sees hadoop-aws there and does not ship them (shipping the SDK to
    each executor of each run would cost more than the rest of the test).
    """
    jars = home / "jars"
    jars.mkdir(exist_ok=True)
    node_jars = []
    for jar in delta_jars(s3a=True).files:  # all of them: the lookup wants hadoop-aws beside Delta for s3a
        (jars / jar.name).symlink_to(jar.resolve())
        if is_s3a_jar(jar):
            node_jars.append(str(jar.resolve()))
    if node_jars:
        conf = {"spark.driver.extraClassPath": os.pathsep.join(node_jars),
                "spark.executor.extraClassPath": os.pathsep.join(node_jars), **conf}  # fmt: skip
    for sub in ("tmp", "local", "warehouse"):
        (home / sub).mkdir(exist_ok=True)
    submit = " ".join(f"--conf {key}={value}" for key, value in conf.items())
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p),
        "PYSPARK_PYTHON": sys.executable,
        "WALSPARK_JARS_DIR": str(jars),
        "WALSPARK_WAREHOUSE": str(home / "warehouse"),
        "TMPDIR": str(home / "tmp"),
        "SPARK_LOCAL_DIRS": str(home / "local"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_SUBMIT_ARGS": f"{submit} pyspark-shell",
    }


def _listing(spark, folder: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """File name -> Hadoop path of a folder's files, through Hadoop (any file system the target is on)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(folder)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return {}
    return {status.getPath().getName(): status.getPath() for status in fs.listStatus(path)}


def _batch_ids(spark, folder: str) -> set[int]:  # type: ignore[no-untyped-def]
    """Batch ids in a checkpoint log folder."""
    return {int(name) for name in _listing(spark, folder) if name.isdigit()}


def _merged_in_delta(spark, target: str, batch: int) -> bool:  # type: ignore[no-untyped-def]
    """Whether a shop table's newest Delta commits carry ``batch``'s note: the batch's MERGE is in
    Delta while the checkpoint has not committed it — the window where a replay must skip it."""
    jvm = spark.sparkContext._jvm
    needle = f'\\"batch_id\\": {batch},'
    for table in TABLES:
        commits = sorted((name, path) for name, path in _listing(spark, f"{target}/shop/{table}/_delta_log").items()
                         if name.endswith(".json"))  # fmt: skip
        for _, path in commits[-2:]:
            stream = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(path)
            try:
                if needle in jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"):
                    return True
            finally:
                stream.close()
    return False


def _pending_batch(spark, checkpoint: str) -> int | None:  # type: ignore[no-untyped-def]
    """The batch planned (offset log) and not committed (commit log), if any: a kill now lands mid-batch."""
    pending = _batch_ids(spark, f"{checkpoint}/offsets") - _batch_ids(spark, f"{checkpoint}/commits")
    return min(pending) if pending else None


def _snapshot_done(pipeline: Pipeline) -> bool:
    """The current run says its initial snapshot is done (it streams from now on)."""
    path = pipeline.log_path
    return path.exists() and _SNAPSHOT_DONE.search(path.read_text(errors="replace")) is not None


def _poll(condition: Callable[[], bool], pipeline: Pipeline, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pipeline.alive():
        if condition():
            return True
        time.sleep(0.1)
    return False


@dataclass(frozen=True, slots=True)
class Lake:
    """Where the run writes, and what reaches it: ``driver_env`` for ``walspark run`` (the driver),
    ``reader_conf`` (Hadoop keys) for the suite's own Spark session that reads the tables back."""

    target: str
    driver_env: dict[str, str] = field(default_factory=dict)
    reader_conf: dict[str, str] = field(default_factory=dict)


#: Which targets run (comma-separated): ``s3``, the acceptance form, by default; ``file`` (a
#: folder the driver and the workers share) on request: it costs as much again and proves less.
LAKES = sweep("WALSPARK_CLUSTER_LAKES", "s3", "s3,file").split(",")


@pytest.fixture(params=LAKES)
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    """``s3``: a bucket on the suite's S3 endpoint (moto's server), reached by the driver with only
    the ``AWS_*`` variables; ``file``: a folder the driver and the workers both see (a cluster's
    shared file system)."""
    if request.param == "file":
        return Lake(str(tmp_path / "lake"))
    from walspark.storage import StorageSettings

    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = endpoint.bucket("cluster")
    # The reading session was started without s3a settings: per-bucket keys reach this bucket only.
    per_bucket = {key.replace("fs.s3a.", f"fs.s3a.bucket.{bucket}.", 1): value
                  for key, value in StorageSettings.from_env(endpoint.env).to_options().items()}  # fmt: skip
    return Lake(f"s3a://{bucket}/lake", driver_env=endpoint.env, reader_conf=per_bucket)


@pytest.mark.timeout(1200)
def test_driver_sigkill_mid_batch_on_a_standalone_cluster(spark, pg18_dsn, tmp_path, driver_home,
                                                          standalone_cluster: StandaloneCluster, lake: Lake):  # fmt: skip
    """Snapshot and streaming under a live workload, the driver killed mid-batch, a restart: exactly once."""
    target = lake.target
    seed = int(os.environ.get("WALSPARK_CRASH_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"seed={seed} cluster={standalone_cluster.url} workers isolated from the driver's disk: "
          f"{standalone_cluster.isolated}")  # fmt: skip
    assert standalone_cluster.isolated or not can_hide_folders()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in lake.reader_conf.items():  # the reading session reaches the target too
        hadoop.set(key, value)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_shop(conn, customers=500, products=100, orders=600)
    pipeline = Pipeline(pg18_dsn, target, tmp_path / "logs", trigger_seconds=1.0, master=standalone_cluster.url,
                        env={**driver_env(driver_home, EXECUTOR_CONF), **lake.driver_env}, cwd=driver_home)  # fmt: skip
    checkpoint = f"{target}/_walspark/checkpoints/{pipeline.slot}"
    work = CrashWorkload(pg18_dsn, rate=3.0, seed=seed, truncate_every=2000).start()
    started = time.monotonic()
    try:
        pipeline.start()
        wait_for(lambda: _snapshot_done(pipeline), timeout=START_TIMEOUT, what="the snapshot", pipeline=pipeline,
                 poll=0.2)  # fmt: skip
        streaming = time.monotonic()
        # A batch planned and not committed; then a random part of it: its MERGEs may be in Delta.
        _poll(lambda: _pending_batch(spark, checkpoint) is not None, pipeline, timeout=120.0)
        if rng.random() < 0.5:  # a random point of that batch (or of the next one)
            time.sleep(rng.uniform(0.0, 3.0))
            _poll(lambda: _pending_batch(spark, checkpoint) is not None, pipeline, timeout=120.0)
        else:  # once a MERGE of the planned batch is in Delta (a random delay seldom hits that window)
            _poll(lambda: (batch := _pending_batch(spark, checkpoint)) is not None
                  and _merged_in_delta(spark, target, batch), pipeline, timeout=120.0)  # fmt: skip
        pipeline.kill()
        pending = _pending_batch(spark, checkpoint)  # what the dead driver left: the state at the kill
        assert pending is not None, "the kill was meant to land mid-batch (a batch planned, not committed)"
        written = sorted({table for table, batch, _ in delta_batches(spark, target) if batch == pending})
        print(f"snapshot done after {streaming - started:.0f} s; driver SIGKILLed in batch {pending} after "
              f"{time.monotonic() - streaming:.1f} s of streaming, its MERGEs already in Delta for {written or 'no table'} "
              f"({work.transactions} txns so far)")  # fmt: skip
        work.stop()
        pipeline.start(once=True)
        code = pipeline.wait(ONCE_TIMEOUT)
        assert code == 0, f"walspark run --once exited {code}:\n{pipeline.log_tail()}"
    except BaseException:
        print(standalone_cluster.log_text())
        raise
    finally:
        pipeline.kill()
        work.stop()
    assert standalone_cluster.executor_logs(), "no executor ran on the cluster"
    if "://" in target:  # everything walspark keeps is in the bucket: nothing of it on a local disk
        assert not list(tmp_path.glob("**/_walspark")), list(tmp_path.glob("**/_walspark"))
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        diff = mismatches(conn, spark, target)
    assert not diff, f"Delta differs from the source: {diff}"
    batches = delta_batches(spark, target)
    assert batches, "no Delta commit carries a batch note: the no-double-apply check would be vacuous"
    assert not repeated_batches(batches), f"batches applied twice: {repeated_batches(batches)}"
    print(f"workload {work.transactions} txns, {work.truncates} truncates; {len(batches)} Delta commits with "
          f"batch notes, none twice; {time.monotonic() - started:.0f} s from the first start")  # fmt: skip
