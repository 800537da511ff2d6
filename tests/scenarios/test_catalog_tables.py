"""``walspark run --catalog-schema``: the tables by name in a Hive metastore that outlives the process.

Every run and the reader are child processes: the embedded Derby metastore is persistent only
across JVMs, and serves one at a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.spark

#: A new Spark session, in its own process, on the metastore of a target: the tables it lists in
#: the schema, and the rows of each (an SCD2 history's current versions), read by name.
READER = """
import json, sys
from walspark.spark.session import spark_session
from walspark.storage.layout import TargetLayout

spark = spark_session("reader", master="local[1]", short_lived=True,
                      metastore=TargetLayout(sys.argv[1]).metastore)
names = sorted(r.tableName for r in spark.sql("SHOW TABLES IN cdc").collect())
rows = {}
for name in names:
    frame = spark.table(f"cdc.{name}")
    if "__END_AT" in frame.columns:
        frame = frame.where("__END_AT IS NULL").drop("__START_AT", "__END_AT")
    rows[name] = {"columns": frame.columns, "rows": sorted(map(list, frame.collect()))}
print(json.dumps(rows))
spark.stop()
"""


def _child(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _run(dsn: str, target: Path, cwd: Path) -> str:
    done = _child(["-m", "walspark.cli", "run", "--dsn", dsn, "--publication", "pub", "--slot", "s", "--target",
                   str(target), "--once", "--master", "local[2]", "--catalog-schema", "cdc", "--scd2", "public.a"],
                  cwd)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stderr


def _source(conn: psycopg.Connection, table: str) -> list[list[object]]:
    return sorted(list(row) for row in conn.execute(f"SELECT * FROM {table}").fetchall())


def test_tables_by_name_from_a_new_session_after_a_rename_and_a_recopy(pg18_dsn, tmp_path):
    from click.testing import CliRunner

    from walspark.cli import commands  # noqa: F401  (registers the subcommands)
    from walspark.cli.main import cli

    target, cwd = tmp_path / "lake", tmp_path / "cwd"
    cwd.mkdir()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE a, b")
        conn.execute("INSERT INTO a SELECT g, 'a' FROM generate_series(1, 5) g; "
                     "INSERT INTO b SELECT g, 'b' FROM generate_series(1, 4) g")  # fmt: skip
        first = _run(pg18_dsn, target, cwd)
        assert "catalog: cdc.a is public.a" in first and "catalog: cdc.b is public.b" in first, first
        # renamed at the source: the old name leaves the catalog, the new one comes with its copy
        conn.execute("ALTER TABLE b RENAME TO b2; INSERT INTO b2 VALUES (10, 'renamed')")
        # a column added (the name stays) and a re-copy of the history
        conn.execute("ALTER TABLE a ADD COLUMN w int DEFAULT 7; UPDATE a SET v = 'later' WHERE id = 1")
        asked = CliRunner().invoke(cli, ["resnapshot", "--target", str(target), "--table", "public.a"])
        assert asked.exit_code == 0, asked.output
        second = _run(pg18_dsn, target, cwd)
        assert "catalog: cdc.b dropped" in second and "catalog: cdc.b2 is public.b2" in second, second
        read = _child(["-c", READER, str(target)], cwd)
        assert read.returncode == 0, read.stdout + read.stderr
        tables = json.loads(read.stdout.strip().splitlines()[-1])
        assert sorted(tables) == ["a", "b2"], tables
        assert tables["a"]["columns"] == ["id", "v", "w"]
        assert tables["a"]["rows"] == _source(conn, "a")
        assert tables["b2"]["rows"] == _source(conn, "b2")
    assert not (cwd / "derby.log").exists() and not (cwd / "metastore_db").exists(), list(cwd.iterdir())
    assert (target / "_walspark" / "metastore" / "metastore_db").is_dir()
