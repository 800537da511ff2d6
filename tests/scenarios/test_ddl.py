"""DDL in the slot's backlog: ``walspark run`` applies it, or stops with one line — never a loop.

Each workload is a list of steps (SQL); it runs twice: with a ``walspark run --once`` after each
step, and as a backlog (snapshot, then every step, then one run). The backlog is the hard case:
the catalog describes the tables as they are *after* all the DDL, while the slot still holds
changes made under every older shape (issue 13, item 2). After each run every Delta table must
equal what the publication publishes (tests/scenarios/support.py). A change PostgreSQL makes to
existing rows without streaming them (a table rewrite: ALTER COLUMN TYPE to an unrelated type, a
column added with a volatile default) must stop the run with one line naming the table, the
change and what to do — and a second run must say the same at once.

pgoutput sends no DDL: a table's new shape reaches the stream with its next change (the Relation
message before it). A table altered and then left alone is brought to the catalog's columns when
the next query starts (``evolution.follow_catalog``): see the DDL-only test at the end.
"""

from __future__ import annotations

import psycopg
import pytest

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark

SETUP = """
CREATE TABLE t (id int PRIMARY KEY, a int, b text);
CREATE TABLE other (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, g, 'b' || g FROM generate_series(1, 6) g;
INSERT INTO other VALUES (1, 'x');
CREATE PUBLICATION pub FOR ALL TABLES;
"""

#: Both modes: DDL applied between runs ("steps"), and waiting in one batch ("backlog").
MODES = pytest.mark.parametrize("backlog", [False, True], ids=["steps", "backlog"])


def _workload(spark, dsn: str, tmp_path, workloads: dict[str, list[str]], backlog: bool, setup: str = SETUP) -> None:
    """Run ``workloads`` side by side in one pipeline, each on tables of its own (``setup``'s, in a
    schema named after the workload): the snapshot, then step i of every workload followed by a
    run (or, as a backlog, every step and then one run); every table checked after each run."""
    target = str(tmp_path / "lake")
    tables, publication = setup.rsplit("CREATE PUBLICATION", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in workloads:
            conn.execute(f"CREATE SCHEMA {name}; SET search_path = {name}; {tables}")
        conn.execute(f"RESET search_path; CREATE PUBLICATION {publication}")
        run_once(dsn, "pub", "s", target)  # the snapshot
        for i in range(max(len(steps) for steps in workloads.values())):
            for name, steps in workloads.items():
                if i < len(steps):
                    conn.execute(f"SET search_path = {name}; {steps[i]}")
            if not backlog:
                run_once(dsn, "pub", "s", target)
                assert_matches_publication(conn, spark, target, "pub", context=f"after step {i}")
        if backlog:
            output = run_once(dsn, "pub", "s", target)
            assert_matches_publication(conn, spark, target, "pub", context="after the backlog")
            # a schema change in the backlog is read past from the driver, as a query's restart would
            assert "restarting the query" not in output and "no query started" in output, output


def _stops(dsn: str, target: str, expected: str) -> str:
    """Run twice: both exit 1 with the same single error line, which contains ``expected``; the
    second without more than one query restart (no loop)."""
    lines = []
    for attempt in range(2):
        output = run_once(dsn, "pub", "s", target, expect_exit=1)
        errors = [line for line in output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "Traceback" not in output, output
        assert expected in errors[0], errors[0]
        if attempt:
            assert output.count("restarting the query") <= 1, output
        lines.append(errors[0])
    assert lines[0] == lines[1]
    return lines[0]


#: The DDL workloads a run applies, by name: the steps.
APPLIED: dict[str, list[str]] = {
    "drop_column_with_changes_before_and_after": [
        "UPDATE t SET b = 'x' || id WHERE id <= 2; INSERT INTO t VALUES (7, 7, 'seven'); UPDATE other SET v = 'y'",
        "ALTER TABLE t DROP COLUMN b",
        "UPDATE t SET a = a + 10 WHERE id IN (1, 3); INSERT INTO t VALUES (8, 8); DELETE FROM t WHERE id = 5",
    ],
    # ADD, DROP, ADD again (the dropped name, another type), a constant default, changes between.
    "several_ddls_of_one_table": [
        "UPDATE t SET b = 'u' WHERE id = 1",
        "ALTER TABLE t ADD COLUMN c text; UPDATE t SET c = 'c' || id WHERE id < 3",
        "ALTER TABLE t DROP COLUMN b; INSERT INTO t (id, a, c) VALUES (10, 10, 'ten')",
        "ALTER TABLE t ADD COLUMN b int; UPDATE t SET b = id * 2 WHERE id IN (2, 10); DELETE FROM t WHERE id = 3",
        "ALTER TABLE t ADD COLUMN d numeric(6,2) DEFAULT 7.5; UPDATE t SET d = 1 WHERE id = 1;"
        "INSERT INTO t (id, a) VALUES (11, 11)",
        "ALTER TABLE t DROP COLUMN c; UPDATE t SET a = -a WHERE id = 2",
    ],
    "drop_and_add_again_with_another_type": [
        "UPDATE t SET b = 'old' WHERE id <= 3",
        "ALTER TABLE t DROP COLUMN b",
        "UPDATE t SET a = 100 WHERE id = 4",
        "ALTER TABLE t ADD COLUMN b int; UPDATE t SET a = 0 WHERE id = 6",
        "UPDATE t SET b = id * 10 WHERE id IN (1, 4); INSERT INTO t VALUES (9, 9, 90)",
    ],
    "rename_column": [
        "UPDATE t SET b = 'before' WHERE id <= 2; INSERT INTO t VALUES (7, 7, 'seven')",
        "ALTER TABLE t RENAME COLUMN b TO c; UPDATE t SET a = 0 WHERE id = 6",
        "UPDATE t SET c = 'after' WHERE id IN (2, 3); INSERT INTO t VALUES (8, 8, 'eight'); DELETE FROM t WHERE id = 1",
    ],
    # Existing rows hold the default without being rewritten or streamed (attmissingval); a row
    # inserted before the ALTER but applied in the same run holds it too.
    "add_column_with_a_constant_default": [
        "INSERT INTO t VALUES (7, 7, 'seven'); UPDATE t SET a = 0 WHERE id = 1",
        "ALTER TABLE t ADD COLUMN d int DEFAULT 42, ADD COLUMN e text DEFAULT 'e''s', ADD COLUMN f int;"
        "UPDATE t SET a = 0 WHERE id = 6",
        "UPDATE t SET d = 1, f = 1 WHERE id = 2; INSERT INTO t (id, a) VALUES (8, 8); INSERT INTO t VALUES (9, 9, 'n', 9)",
    ],
    "alter_column_type_that_widens": [
        "UPDATE t SET a = 2147483647 WHERE id = 1",
        "ALTER TABLE t ALTER COLUMN a TYPE bigint",
        "UPDATE t SET a = 5000000000 WHERE id = 2",
    ],
    # Steps of DDL only (006_rewrite's ADD COLUMN ... DEFAULT, a rename, a drop and re-add with
    # another type and a default): nothing is streamed for them, and still the next run's target
    # has the catalog's columns with the values PostgreSQL's existing rows read.
    "ddl_alone_reaches_the_target_at_the_next_run": [
        "ALTER TABLE t ADD COLUMN d int NOT NULL DEFAULT 42, ADD COLUMN e text",
        "ALTER TABLE t RENAME COLUMN b TO c",
        "ALTER TABLE t DROP COLUMN a; ALTER TABLE t ADD COLUMN a text DEFAULT 'new'",
        "UPDATE t SET c = 'after', a = 'x' WHERE id = 2; INSERT INTO t (id, c) VALUES (9, 'nine')",
    ],
    # A column added, written, renamed; another renamed twice — changes under every name, placed
    # by attnum order in the backlog (shapes.identify_old_columns).
    "added_then_renamed_and_renamed_twice": [
        "ALTER TABLE t ADD COLUMN c text; UPDATE t SET c = 'c' || id WHERE id <= 2",
        "ALTER TABLE t RENAME COLUMN c TO e; UPDATE t SET e = 'e' || id WHERE id = 3",
        "ALTER TABLE t RENAME COLUMN b TO b2; UPDATE t SET b2 = 'two' WHERE id = 4",
        "ALTER TABLE t RENAME COLUMN b2 TO b3; UPDATE t SET b3 = 'three' WHERE id = 5",
    ],
}


#: Run alone: every step of it is DDL only, so a run in "steps" mode has nothing to stream and
#: must still bring the target to the catalog's columns.
ALONE = "ddl_alone_reaches_the_target_at_the_next_run"


@MODES
def test_ddl_is_applied(spark, pg18_dsn, tmp_path, backlog):
    """Every workload of ``APPLIED`` but the DDL-only one, side by side in one pipeline (one schema each)."""
    _workload(spark, pg18_dsn, tmp_path, {name: steps for name, steps in APPLIED.items() if name != ALONE}, backlog)


@MODES
def test_ddl_alone_is_applied(spark, pg18_dsn, tmp_path, backlog):
    _workload(spark, pg18_dsn, tmp_path, {ALONE: APPLIED[ALONE]}, backlog)


#: Changes PostgreSQL makes to existing rows without streaming them: the DDL (with a change of
#: ``t`` and one of ``other``, which must keep going), and what the one line says.
REWRITES = {
    "alter_column_type": ("ALTER TABLE t ALTER COLUMN a TYPE text USING 'n' || a; UPDATE t SET a = 'x' WHERE id = 2",
                          "public.t: column 'a' changed from int to string (ALTER COLUMN TYPE)"),
    "volatile_default": ("ALTER TABLE t ADD COLUMN r float8 DEFAULT random(); UPDATE t SET a = 5 WHERE id = 2",
                         "public.t: column(s) 'r' were added with a default that PostgreSQL computed"),
}


@MODES
@pytest.mark.parametrize("rewrite", list(REWRITES))
def test_rewrite_stops_with_one_line(spark, pg18_dsn, tmp_path, rewrite, backlog):
    sql, expected = REWRITES[rewrite]
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SETUP)
        run_once(pg18_dsn, "pub", "s", target)
        conn.execute("UPDATE t SET a = 0 WHERE id = 1")
        if not backlog:
            run_once(pg18_dsn, "pub", "s", target)
        conn.execute(sql)
        conn.execute("UPDATE other SET v = 'still replicated'")
        line = _stops(pg18_dsn, target, expected)
        assert f"`walspark resnapshot --target {target} --table public.t`" in line, line
        # the other table keeps going
        assert spark.read.format("delta").load(f"{target}/public/other").collect()[0]["v"] == "still replicated"
        # the fix it names: the table copied again as it is now, the changes after it applied
        from click.testing import CliRunner

        from walspark.cli import commands  # noqa: F401  (registers the subcommands)
        from walspark.cli.main import cli

        assert CliRunner().invoke(cli, ["resnapshot", "--target", target, "--table", "public.t"]).exit_code == 0
        conn.execute("UPDATE t SET b = 'after' WHERE id = 3")
        run_once(pg18_dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="after the re-copy")


def test_conflicting_shapes_in_one_transaction_stop_with_one_line(spark, pg18_dsn, tmp_path):
    """A column dropped and added again with another type *inside* one transaction that changes rows
    under both shapes: no single schema holds that transaction. The restart loop must see that it
    makes no progress and stop with one line."""
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SETUP)
        run_once(pg18_dsn, "pub", "s", target)
        with conn.transaction():
            conn.execute("UPDATE t SET b = 'x' WHERE id = 1")
            conn.execute("ALTER TABLE t DROP COLUMN b")
            conn.execute("ALTER TABLE t ADD COLUMN b int")
            conn.execute("UPDATE t SET b = 1 WHERE id = 2")
        line = _stops(pg18_dsn, target, "cannot get past the schema change in the transaction ending at")
        assert "table public.t: column 'b'" in line and "walspark slot drop --slot s" in line


def test_drop_column_backlog_and_constant_default_on_postgresql_15(spark, pg15_dsn, tmp_path):
    _workload(spark, pg15_dsn, tmp_path, {"on_15": [
        "UPDATE t SET b = 'x' WHERE id <= 2",
        "ALTER TABLE t DROP COLUMN b",
        "UPDATE t SET a = 0 WHERE id = 3",
        "ALTER TABLE t ADD COLUMN d int DEFAULT 42; ALTER TABLE t RENAME COLUMN a TO aa",
        "INSERT INTO t (id, aa) VALUES (20, 20); UPDATE t SET d = 1 WHERE id = 4",
    ]}, True)
