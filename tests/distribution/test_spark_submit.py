"""``spark-submit`` of walspark on a (local) cluster, the way docs/deploying.md's "spark-submit and pip" says.

``--master local-cluster[1,1,1024]`` runs a master, a worker and an executor JVM beside
the driver, the executor with its own Python workers: the snapshot's and the stream's read
tasks run there, so walspark must be importable on the executors (here: installed in the venv
that ``PYSPARK_PYTHON`` names, as on every node of a cluster) and Delta's jars must travel with
``--jars``. The driver's session must keep spark-submit's master: the event log shows the
executors that were added and the master the application ran with.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
import pytest
from scenarios.support import assert_matches_publication

from .support import Installed

#: The entry script docs/deploying.md documents: spark-submit runs a Python file, which runs walspark's CLI.
ENTRY = "from walspark.cli.main import main\n\nmain()\n"


def _submit(venv: Installed, jars: str, entry: Path, events: Path, dsn: str, target: Path, *extra: str,
            env: dict[str, str] | None = None) -> str:  # fmt: skip
    """One ``walspark run --once`` as a spark-submit application (master, workers, executors on loopback)."""
    return venv.run([
        "spark-submit", "--master", "local-cluster[1,1,1024]", "--jars", jars, *extra,
        "--conf", f"spark.pyspark.python={venv.venv / 'bin' / 'python'}",
        "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events.as_uri()}",
        "--conf", "spark.eventLog.rolling.enabled=false", "--conf", "spark.eventLog.compress=false",
        str(entry), "run", "--dsn", dsn, "--publication", "pub_submit", "--slot", "submit_slot",
        "--target", str(target), "--once",
    ], timeout=600, env=env)


def _applications(events: Path) -> list[list[dict]]:
    return [[json.loads(line) for line in log.read_text().splitlines() if line.strip()]
            for log in sorted(events.iterdir())]


@pytest.mark.slow
@pytest.mark.spark
def test_spark_submit_on_a_local_cluster_runs_once(installed: Installed, pg18_dsn: str, spark,
                                                    tmp_path: Path) -> None:
    entry = tmp_path / "walspark_job.py"
    entry.write_text(ENTRY)
    events = tmp_path / "events"
    events.mkdir()
    target = tmp_path / "lake"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, name text, price numeric(10,2),"
                     " tags text[], seen timestamptz)")
        conn.execute("INSERT INTO public.items SELECT g, 'item ' || g, g * 1.25, ARRAY['a', g::text],"
                     " timestamptz '2026-01-01 00:00+00' + g * interval '1 minute' FROM generate_series(1, 500) g")
        conn.execute("CREATE PUBLICATION pub_submit FOR TABLE public.items")

    jars = installed.run(["walspark", "jars", "--spark-submit"]).split()[1]
    started = time.monotonic()
    _submit(installed, jars, entry, events, pg18_dsn, target)  # the initial snapshot, read by executor tasks
    first = time.monotonic() - started
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO public.items SELECT g, 'new ' || g, g, NULL, now() FROM generate_series(501, 600) g")
        conn.execute("UPDATE public.items SET price = price + 1, tags = tags || '{u}' WHERE id % 7 = 0")
        conn.execute("DELETE FROM public.items WHERE id % 11 = 0")
    # the stream: changes since the snapshot, decoded by the query's tasks on the executors (a --once
    # run with this few changes would otherwise apply them from the driver: walspark.pipeline.driver_batch)
    _submit(installed, jars, entry, events, pg18_dsn, target, env={"WALSPARK_DRIVER_BATCH": "0"})
    print(f"\nspark-submit runs: snapshot {first:.0f}s, stream {time.monotonic() - started - first:.0f}s")

    with psycopg.connect(pg18_dsn) as conn:
        assert_matches_publication(conn, spark, str(target), "pub_submit", context="after spark-submit runs")
        assert conn.execute("SELECT count(*) FROM public.items").fetchone() == (546,)  # 600 rows less the 54 multiples of 11

    applications = _applications(events)
    assert len(applications) == 2
    for app in applications:
        environment = next(e for e in app if e["Event"] == "SparkListenerEnvironmentUpdate")
        properties = environment["Spark Properties"]
        assert properties["spark.master"] == "local-cluster[1,1,1024]"
        assert properties["spark.driver.host"] in ("127.0.0.1", "localhost")  # loopback only (SPARK_LOCAL_IP)
        added = [e for e in app if e["Event"] == "SparkListenerExecutorAdded"]
        executors = {e["Executor ID"] for e in added}
        assert len(executors) == 1, executors
        assert {e["Executor Info"]["Host"] for e in added} == {"127.0.0.1"}
        tasks = [e for e in app if e["Event"] == "SparkListenerTaskEnd"]
        assert {t["Task Info"]["Executor ID"] for t in tasks} <= executors and tasks  # none on the driver
