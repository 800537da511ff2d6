"""The oracle itself: it reads what the publication publishes, so it must see columns, filters and ONLY."""

from __future__ import annotations

import psycopg
import pytest

from .support import assert_matches_publication, published_tables, run_once

pytestmark = pytest.mark.spark


def test_oracle_reads_column_lists_row_filters_and_only(pg18_dsn):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE parent (id int PRIMARY KEY, a int, b text)")
        conn.execute("CREATE TABLE child () INHERITS (parent)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE parent (id, a) WHERE (a > 1)")
        # FOR TABLE parent publishes its inheritance children too, each table on its own
        child, t = published_tables(conn, "pub")
        assert child.table == "child" and child.source_query().startswith('SELECT "id", "a" FROM ONLY "public"."child"')
        assert t.columns == ("id", "a") and t.rowfilter and "a > 1" in t.rowfilter and not t.partitioned
        assert t.source_query() == 'SELECT "id", "a" FROM ONLY "public"."parent" WHERE ((a > 1))'


def test_plain_table_snapshot_then_stream_matches(spark, pg18_dsn, tmp_path):
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION pub FOR TABLE t")
        conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 20) g")
        run_once(pg18_dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="after the snapshot")
        conn.execute("UPDATE t SET v = 'x' WHERE id < 5; DELETE FROM t WHERE id > 15")
        run_once(pg18_dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="after streaming")
