"""``--publication a,b``: the union of the publications' tables, also with ``--scd2`` tables of either."""

from __future__ import annotations

import psycopg
import pytest

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark


def test_scd2_tables_of_two_publications(spark, pg18_dsn, tmp_path):
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION pa FOR TABLE a; CREATE PUBLICATION pb FOR TABLE b")
        conn.execute("INSERT INTO a VALUES (1, 'a1'), (2, 'a2'); INSERT INTO b VALUES (1, 'b1')")
        scd2 = ("--scd2", "public.a", "--scd2", "public.b")
        run_once(pg18_dsn, "pa,pb", "s", target, *scd2)
        assert_matches_publication(conn, spark, target, ["pa", "pb"], context="after the snapshot")
        conn.execute("UPDATE a SET v = 'a1x' WHERE id = 1; DELETE FROM a WHERE id = 2; UPDATE b SET v = 'b1x'")
        run_once(pg18_dsn, "pa,pb", "s", target, *scd2)
        assert_matches_publication(conn, spark, target, ["pa", "pb"], context="after streaming")
        history = spark.read.format("delta").load(f"{target}/public/b")
        assert history.count() == 2 and history.where("__END_AT IS NULL").count() == 1  # b1 closed, b1x current


def test_scd2_table_of_neither_publication_names_both(pg18_dsn, tmp_path):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE c (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION pa FOR TABLE a; CREATE PUBLICATION pb FOR TABLE b")
    output = run_once(pg18_dsn, "pa, pb", "s", str(tmp_path / "lake"), "--scd2", "public.c", expect_exit=1)
    line = output.strip().splitlines()[-1]
    assert "'public.c' is not a table of publications 'pa', 'pb'" in line and "public.a, public.b" in line, output
