"""Tables joining, leaving and re-copied while the pipeline runs (issue 14), against the oracle.

The quick cases go through ``walspark run --once`` (in-process); the streaming acceptance cases
are in test_table_sync_stream.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import walspark_injection_points as injection_points
from walspark_injection_points import COPY_FAIL_AFTER_WAVES, COPY_PAUSE, COPY_RELEASE

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark


@pytest.fixture
def injection_actions() -> Iterator[None]:
    """The tests' actions at walspark's injection points, for runs in this process."""
    with injection_points.installed():
        yield


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
    from walspark.storage.layout import TargetLayout

    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _replicate_a_and_b(conn, pg18_dsn, target, b_rows=200)
        # the Delta table is damaged behind the pipeline's back: streaming alone never repairs it
        spark.sql(f"DELETE FROM delta.`{TargetLayout(target).table('public', 'b')}` WHERE id < 50")
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
        misspelt = CliRunner().invoke(cli, ["resnapshot", "--target", target, "--table", "public.bb", "--table", "a"])
        assert misspelt.exit_code == 2, misspelt.output
        assert "public.bb: not a table of the pipeline writing" in misspelt.output, misspelt.output
        assert "public.a, public.b" in misspelt.output, misspelt.output  # the tables it has
        assert not list((Path(target) / "_walspark" / "tablesync" / "requests").glob("*.json"))


def test_copy_resumes_with_the_chunks_not_yet_committed(spark, pg18_dsn, tmp_path, monkeypatch, injection_actions):
    """Acceptance 4, in-process: a copy that fails after its first wave of chunks (test hook) is
    resumed by the next run in a new snapshot, with the chunks not yet committed — not from zero.

    Between the two snapshots every chunk changes: plain updates, updates leaving a TOASTed value
    unchanged, deletes, inserts, and keys moving from an early chunk to a late one and back. Each
    change is matched with the snapshot its key's chunk was read in.
    """
    from delta.tables import DeltaTable

    from walspark.spark.tablesync.copying import METADATA_PREFIX
    from walspark.storage.layout import TargetLayout

    target = str(tmp_path / "lake")
    chunks = ("--sync-chunk-rows", "500")  # 24 chunks, copied 8 at a time (spark.default.parallelism)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, v text); CREATE PUBLICATION pub FOR TABLE a")
        conn.execute("INSERT INTO a VALUES (1, 'a')")
        run_once(pg18_dsn, "pub", "s", target)
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int, big text)")
        conn.execute("ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL")  # out of line, uncompressed
        conn.execute("INSERT INTO t SELECT g, 0, CASE WHEN g % 1000 = 0 THEN repeat('x', 5000) || g END "
                     "FROM generate_series(1, 12000) g")
        conn.execute("ANALYZE t")
        conn.execute("ALTER PUBLICATION pub ADD TABLE t")
        monkeypatch.setenv(COPY_FAIL_AFTER_WAVES, "1")
        out = run_once(pg18_dsn, "pub", "s", target, *chunks, expect_exit=1)
        monkeypatch.delenv(COPY_FAIL_AFTER_WAVES)
        assert "key ranges" in out and "fails after 1 wave" in out, out
        assert _states(target)["public.t"]["state"] == "copying"

        conn.execute("UPDATE t SET v = v + 1 WHERE id % 500 = 7")
        conn.execute("UPDATE t SET v = 99 WHERE id % 1000 = 0")  # the TOASTed value is left unchanged
        conn.execute("DELETE FROM t WHERE id % 700 = 3")
        conn.execute("UPDATE t SET id = id + 100000 WHERE id IN (5, 11005)")  # first chunk / last chunk -> after the last
        conn.execute("UPDATE t SET id = -id WHERE id IN (11010, 20)")  # last chunk / first chunk -> before the first
        conn.execute("INSERT INTO t SELECT g, 1, 'new' FROM generate_series(20001, 20100) g")
        conn.execute("INSERT INTO a VALUES (2, 'b')")
        out = run_once(pg18_dsn, "pub", "s", target, *chunks)
        assert "resuming the copy of public.t: 8 of 24 chunks were committed before" in out, out
        assert "public.t is in sync" in out, out

        history = DeltaTable.forPath(spark, TargetLayout(target).table("public", "t")).history().collect()
        snapshots = {json.loads(h["userMetadata"][len(METADATA_PREFIX):])["lsn"] for h in history
                     if (h["userMetadata"] or "").startswith(METADATA_PREFIX)}
        assert len(snapshots) == 2, "the chunks of the first attempt were copied again"
        assert_matches_publication(conn, spark, target, "pub", context="after the resumed copy")

        conn.execute("UPDATE t SET v = v + 1 WHERE id % 1000 = 0 OR id < 0; DELETE FROM t WHERE id > 100000")
        run_once(pg18_dsn, "pub", "s", target, *chunks)
        assert_matches_publication(conn, spark, target, "pub", context="streaming after the resumed copy")


@pytest.mark.parametrize("via_root", [False, True], ids=["leaves", "via-root"])
def test_joining_tables_keep_what_the_publication_publishes(spark, pg18_dsn, tmp_path, monkeypatch, via_root,
                                                            injection_actions):
    """Tables joining a running pipeline are copied as the stream publishes them: a partitioned
    table (by its leaves, or as its root), a row filter, a column list; and a table altered
    while its copy runs (the copy has the shape at its snapshot, the stream brings the new one).
    Chunked (small chunks), and resumed after a failure in the middle of the copies — or started
    over, for the table matched on whole rows (REPLICA IDENTITY FULL: no key to resume by)."""
    import threading

    target = str(tmp_path / "lake")
    release = tmp_path / "release-the-copies"
    chunks = ("--sync-chunk-rows", "300")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION pub FOR TABLE a WITH (publish_via_partition_root = {str(via_root).lower()})")
        conn.execute("INSERT INTO a VALUES (1, 'a')")
        run_once(pg18_dsn, "pub", "s", target)
        conn.execute("""
            CREATE TABLE p (id int, region int, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
            CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1);
            CREATE TABLE p2 PARTITION OF p FOR VALUES IN (2);
            INSERT INTO p SELECT g, 1 + g % 2, g FROM generate_series(1, 6000) g;
            CREATE TABLE f (id int PRIMARY KEY, v int);
            ALTER TABLE f REPLICA IDENTITY FULL;  -- filtered on v; matched on whole rows: copied by pages
            INSERT INTO f SELECT g, g % 100 FROM generate_series(1, 5000) g;
            CREATE TABLE c (id int PRIMARY KEY, a text, secret text);
            INSERT INTO c SELECT g, 'a' || g, 'no' FROM generate_series(1, 5000) g;
            CREATE TABLE d (id int PRIMARY KEY, v int);
            INSERT INTO d SELECT g, g FROM generate_series(1, 5000) g;
            ANALYZE;
            ALTER PUBLICATION pub ADD TABLE p, f WHERE (v > 10), c (id, a), d;
        """)
        monkeypatch.setenv(COPY_FAIL_AFTER_WAVES, "1")
        run_once(pg18_dsn, "pub", "s", target, *chunks, expect_exit=1)
        monkeypatch.delenv(COPY_FAIL_AFTER_WAVES)
        conn.execute("""
            UPDATE p SET v = -v WHERE id % 10 = 0;
            UPDATE p SET region = 3 - region WHERE id % 97 = 0;  -- moves rows between partitions
            UPDATE f SET v = 50 WHERE id % 100 = 5;              -- into the row filter
            UPDATE f SET v = 5 WHERE id % 100 = 60;              -- out of it
            UPDATE c SET a = 'changed', secret = 'still no' WHERE id % 9 = 0;
            DELETE FROM c WHERE id % 11 = 0;
        """)

        def alter_d_during_its_copy() -> None:  # once every copy holds its snapshot (paused in it)
            copying = sum(s["state"] == "copying" for s in _states(target).values())
            deadline = time.monotonic() + 600
            try:
                with psycopg.connect(pg18_dsn, autocommit=True) as other:
                    while time.monotonic() < deadline and other.execute(
                            "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'walspark_sync%%' "
                            "AND database = current_database()"
                    ).fetchone()[0] < copying:  # fmt: skip
                        time.sleep(0.2)
                    other.execute("ALTER TABLE d ADD COLUMN w int DEFAULT 7; UPDATE d SET v = 0, w = 1 WHERE id % 50 = 0")
            finally:
                release.touch()  # the copies go on from their snapshots, taken before the ALTER

        monkeypatch.setenv(COPY_PAUSE, "60")  # at most: the release file ends the pause
        monkeypatch.setenv(COPY_RELEASE, str(release))
        altering = threading.Thread(target=alter_d_during_its_copy)
        altering.start()
        out = run_once(pg18_dsn, "pub", "s", target, *chunks)
        altering.join()
        assert "resuming the copy of public.d" in out and "copy of public.f starts over" in out, out
        monkeypatch.delenv(COPY_PAUSE)
        monkeypatch.delenv(COPY_RELEASE)
        conn.execute("UPDATE d SET w = 2 WHERE id % 70 = 0; INSERT INTO p VALUES (9000, 2, 1); DELETE FROM f WHERE id < 100")
        run_once(pg18_dsn, "pub", "s", target, *chunks)
        assert all(s["state"] == "ready" for s in _states(target).values()), _states(target)
        assert_matches_publication(conn, spark, target, "pub", context=f"tables joined ({'via root' if via_root else 'leaves'})")
