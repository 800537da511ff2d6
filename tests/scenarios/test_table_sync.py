"""Tables joining, leaving and re-copied while the pipeline runs (issue 14), against the oracle.

The quick cases go through ``walspark run --once`` (in-process); the streaming acceptance cases
are in test_table_sync_stream.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark


def _states(target: str) -> dict[str, dict]:
    path = Path(target) / "_walspark" / "tablesync" / "state.json"
    if not path.exists():
        return {}
    return {f"{t['schema']}.{t['table']}": t for t in json.loads(path.read_text())["tables"]}


def _replicate_a_and_b(conn: psycopg.Connection, dsn: str, target: str, b_rows: int) -> None:
    """Tables a (20 rows) and b in publication pub, copied by a first run."""
    conn.execute("CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text)")
    conn.execute("CREATE PUBLICATION pub FOR TABLE a, b")
    conn.execute("INSERT INTO a SELECT g, 'a' FROM generate_series(1, 20) g; "
                 f"INSERT INTO b SELECT g, 'b' FROM generate_series(1, {int(b_rows)}) g")
    run_once(dsn, "pub", "s", target)


def test_added_table_is_copied_then_streamed(spark, pg18_dsn, tmp_path):
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, v text); CREATE PUBLICATION pub FOR TABLE a")
        conn.execute("INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 50) g")
        run_once(pg18_dsn, "pub", "s", target)
        conn.execute("CREATE TABLE b (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 3000) g")
        conn.execute("ALTER PUBLICATION pub ADD TABLE b")
        conn.execute("UPDATE b SET v = 'changed' WHERE id <= 10; DELETE FROM b WHERE id > 2990")
        conn.execute("INSERT INTO a VALUES (51, 'late')")
        out = run_once(pg18_dsn, "pub", "s", target)
        assert "public.b" in out and "in sync" in out, out
        assert _states(target)["public.b"]["state"] == "ready"
        assert_matches_publication(conn, spark, target, "pub", context="after the added table's copy")
        conn.execute("UPDATE b SET v = 'again' WHERE id <= 20; INSERT INTO b VALUES (5000, 'new')")
        run_once(pg18_dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="streaming the added table")


@pytest.mark.parametrize("server", ["pg18_dsn", "pg15_dsn"])
def test_removed_then_readded_table_is_copied_again(spark, server, request, tmp_path):
    pg18_dsn = request.getfixturevalue(server)  # the membership signature's catalogs differ by version
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _replicate_a_and_b(conn, pg18_dsn, target, b_rows=20)
        conn.execute("ALTER PUBLICATION pub DROP TABLE b")
        conn.execute("UPDATE b SET v = 'while out' WHERE id < 10; INSERT INTO b VALUES (100, 'out')")
        run_once(pg18_dsn, "pub", "s", target)
        assert _states(target)["public.b"]["state"] == "left"
        conn.execute("ALTER PUBLICATION pub ADD TABLE b")
        conn.execute("DELETE FROM b WHERE id = 1; INSERT INTO a VALUES (21, 'x')")
        run_once(pg18_dsn, "pub", "s", target)
        assert _states(target)["public.b"]["gen"] == 1
        assert_matches_publication(conn, spark, target, "pub", context="after the re-add")
        # dropped and added again between two runs: the membership row is new, so it is re-copied
        conn.execute("ALTER PUBLICATION pub DROP TABLE b; UPDATE b SET v = 'gone again'; "
                     "ALTER PUBLICATION pub ADD TABLE b")
        run_once(pg18_dsn, "pub", "s", target)
        assert _states(target)["public.b"]["gen"] == 2
        assert_matches_publication(conn, spark, target, "pub", context="after a drop and re-add between runs")


def test_resnapshot_recopies_a_damaged_table(spark, pg18_dsn, tmp_path):
    from click.testing import CliRunner

    from walspark.cli import commands  # noqa: F401  (registers the subcommands)
    from walspark.cli.main import cli
    from walspark.spark.tables import table_path

    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _replicate_a_and_b(conn, pg18_dsn, target, b_rows=200)
        # the Delta table is damaged behind the pipeline's back: streaming alone never repairs it
        spark.sql(f"DELETE FROM delta.`{table_path(target, 'public', 'b')}` WHERE id < 50")
        conn.execute("UPDATE b SET v = 'later' WHERE id > 150; INSERT INTO a VALUES (21, 'x')")
        bad = CliRunner().invoke(cli, ["resnapshot", "--target", target, "--table", "public.b"])
        assert bad.exit_code == 0, bad.output
        conn.execute("DELETE FROM b WHERE id = 200")
        out = run_once(pg18_dsn, "pub", "s", target)
        assert "public.b is in sync" in out, out
        assert _states(target)["public.b"]["gen"] == 1
        assert_matches_publication(conn, spark, target, "pub", context="after the re-copy")
        assert not list((Path(target) / "_walspark" / "tablesync" / "requests").glob("*.json"))
        missing = CliRunner().invoke(cli, ["resnapshot", "--target", str(tmp_path / "nowhere"), "--table", "b"])
        assert missing.exit_code == 1 and "no walspark pipeline" in missing.output
