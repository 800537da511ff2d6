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


def test_delta_rs_and_spark_read_every_value_alike_and_a_pending_change_shows(spark, pg18_dsn, tmp_path):
    """The oracle reads local tables with delta-rs: it must read what Spark reads — nested types,
    column mapping, the ±infinity sentinels — and still see a change walspark has not applied."""
    from walspark.storage.layout import TargetLayout

    from .support import _delta_rs_rows, _key, _spark_delta_rows, publication_mismatches

    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE TYPE mood AS ENUM ('sad', 'ok');
            CREATE TYPE pair AS (at timestamptz, tags text[]);
            CREATE TABLE "Odd name" ("id x" int PRIMARY KEY, ts timestamp, tstz timestamptz, d date,
                n numeric(30, 10), f real, b bytea, m mood, r tstzrange, rs int4range[], p pair, pa pair[],
                iv interval, noval text);
            INSERT INTO "Odd name" VALUES
              (1, 'infinity', '-infinity', 'infinity', 12345678901234567890.0123456789, 1.5, '\\x00ff', 'ok',
               '[2014-08-04 00:00:00+02, infinity)', '{"[1,3)", "[10,21)"}', ROW('2020-01-01 12:00+00', '{a,NULL}'),
               ARRAY[ROW('-infinity', '{}')::pair, NULL], '1 year 2 mons 3 days 04:05:06.789', NULL),
              (2, '1999-01-08 04:05:06.123456', '2038-01-19 03:14:08+00', '0001-01-01', -0.5, 'NaN', '', 'sad',
               'empty', '{}', NULL, NULL, '-1 day', 'x');
            CREATE PUBLICATION pub FOR TABLE "Odd name";
            """)
        run_once(pg18_dsn, "pub", "s", target)
        (table,) = published_tables(conn, "pub")
        path = TargetLayout(target).table(table.schema, table.table)
        by_delta_rs = sorted(_key(r) for r in _delta_rs_rows(path, table))
        by_spark = sorted(_key(r) for r in _spark_delta_rows(spark, path, table))
        assert len(by_delta_rs) == 2 and by_delta_rs == by_spark
        assert '"infinity"' in by_delta_rs[0] and '"-infinity"' in by_delta_rs[0]
        assert not publication_mismatches(conn, spark, target, "pub")
        conn.execute("""UPDATE "Odd name" SET tstz = 'infinity' WHERE "id x" = 2""")
        assert set(publication_mismatches(conn, spark, target, "pub")) == {'public.Odd name'}
