"""An unchanged TOAST value is never written as NULL: kept from the target, or the table stops.

With REPLICA IDENTITY DEFAULT, an UPDATE that leaves a TOASTed column alone sends it as
unchanged ('u'); the apply keeps the target's value. When the target has no row for that key
(here: the row was deleted from the Delta table by hand, a damaged target), there is nothing to
keep: ``walspark run`` must stop for that table with one line naming the table, the key and
the fix, apply the other tables of the batch, write no NULL, and not confirm the slot past it.
"""

from __future__ import annotations

import psycopg
import pytest

from walspark.protocol import parse_lsn

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark

#: ~6.4 kB of incompressible text (md5 hex of random numbers), stored out of line.
BIG = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 200))"


def _setup(conn: psycopg.Connection, dsn: str, target: str, history: tuple[str, ...]) -> None:
    """Tables big (3 rows, each payload TOASTed out of line) and other, copied by a first run."""
    conn.execute("CREATE TABLE big (id int PRIMARY KEY, note text, payload text)")
    conn.execute("ALTER TABLE big ALTER COLUMN payload SET STORAGE EXTERNAL")  # TOAST, no compression
    conn.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    conn.execute("CREATE PUBLICATION pub FOR TABLE big, other")
    conn.execute(f"INSERT INTO big SELECT g, 'n' || g, {BIG} FROM generate_series(1, 3) g")
    (toasted,) = conn.execute("SELECT count(*) FROM big WHERE pg_column_size(payload) > 2048").fetchone()
    assert toasted == 3
    run_once(dsn, "pub", "s", target, *history)


def _confirmed(conn: psycopg.Connection) -> int:
    (lsn,) = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 's'").fetchone()
    return parse_lsn(lsn)


MODES = pytest.mark.parametrize("history", [(), ("--scd2", "public.big")], ids=["scd1", "scd2"])


@MODES
def test_unchanged_toast_is_kept_from_the_target(spark, pg18_dsn, tmp_path, history):
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _setup(conn, pg18_dsn, target, history)
        conn.execute("UPDATE big SET note = 'changed' WHERE id = 1")  # payload unchanged: sent as 'u'
        conn.execute("UPDATE big SET note = 'twice' WHERE id = 2; UPDATE big SET note = 'again' WHERE id = 2")
        run_once(pg18_dsn, "pub", "s", target, *history)
        assert_matches_publication(conn, spark, target, "pub", context="updates leaving the TOASTed payload alone")
        assert spark.read.format("delta").load(f"{target}/public/big").where("payload IS NULL").count() == 0


@MODES
def test_unchanged_toast_without_a_target_row_stops_that_table_only(spark, pg18_dsn, tmp_path, history):
    from delta.tables import DeltaTable

    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _setup(conn, pg18_dsn, target, history)
        DeltaTable.forPath(spark, f"{target}/public/big").delete("id = 2")  # a damaged target
        (before,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        conn.execute("BEGIN; UPDATE big SET note = 'changed' WHERE id = 2; INSERT INTO other VALUES (1, 'same batch');"
                     " UPDATE big SET note = 'kept' WHERE id = 1; COMMIT")
        for attempt in ("first", "second"):  # a rerun stops at the same place, in one line again
            output = run_once(pg18_dsn, "pub", "s", target, *history, expect_exit=1)
            line = output.strip().splitlines()[-1]
            assert "Traceback" not in output, output
            assert line.startswith("Error: table public.big:") and "(id)=(2)" in line and "'payload'" in line, line
            assert "walspark resnapshot --target" in line and "--table public.big" in line and "new snapshot" in line, line
            big = spark.read.format("delta").load(f"{target}/public/big")
            assert big.where("payload IS NULL OR id = 2").count() == 0, f"{attempt}: a NULL was invented"
            assert big.where("note = 'kept'").count() == 0, f"{attempt}: nothing of big from the failed batch"
            other = spark.read.format("delta").load(f"{target}/public/other")
            assert [r.asDict() for r in other.collect()] == [{"id": 1, "v": "same batch"}], attempt
            assert _confirmed(conn) <= parse_lsn(before), f"{attempt}: the slot moved past the failing change"
        if not history:  # the fix the line names: re-copy the table, run again
            from click.testing import CliRunner

            from walspark.cli.main import cli

            result = CliRunner().invoke(cli, ["resnapshot", "--target", target, "--table", "public.big"])
            assert result.exit_code == 0, result.output
            run_once(pg18_dsn, "pub", "s", target)
            assert_matches_publication(conn, spark, target, "pub", context="after the re-copy")


def test_the_key_is_rendered_on_one_short_line():
    import datetime as dt
    import decimal

    from walspark.spark.lake.unchanged import MAX_VALUE, render_key

    assert render_key(["id"], [2]) == "(id)=(2)"
    assert render_key(["a", "Mixed Case"], ["it's\nx", None]) == '(a, "Mixed Case")=("it\'s\\nx", NULL)'
    assert render_key(["d", "n"], [dt.date(2024, 1, 2), decimal.Decimal("1.50")]) == "(d, n)=('2024-01-02', 1.50)"
    long = render_key(["k"], ["x" * 1000])
    assert "\n" not in long and len(long) < MAX_VALUE + 10 and long.endswith("...)")
