"""Row filters, inheritance, partition roots and leaves, column lists: the target holds what is published.

PostgreSQL's table sync copies ``SELECT <published columns> FROM ONLY t WHERE <row filters ORed>``
and pgoutput streams the same rows (an UPDATE that moves a row into the filter arrives as an
INSERT, one that moves it out as a DELETE). Each scenario here runs ``walspark run --once`` at the
catch-up points of its workload and compares every Delta table with the publication (the
oracle of :mod:`tests.scenarios.support`), plus the TAP test's own expected rows where it gives
them. Workloads come from PostgreSQL's ``src/test/subscription/t/028_row_filter.pl`` and the
snapshot parts of ``031_column_list.pl`` (named in each test), plus walspark's own.

Their PostgreSQL 15 runs are the soak run's for now, like every Spark scenario on 15
(tests/conftest.py, docs/testing.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from .support import assert_matches_publication, run_once
from .tap_workloads import (
    ROWFILTER_028_DML,
    ROWFILTER_028_IN_SCHEMA,
    ROWFILTER_028_IN_SCHEMA_DML,
    ROWFILTER_028_INITIAL,
    ROWFILTER_028_TABLES,
    ROWFILTER_028_TOAST_UPDATE,
)

pytestmark = pytest.mark.spark


def _conn(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def _rows(spark, target: str, schema: str, table: str, *columns: str) -> list[tuple]:
    """The Delta table's rows (the given columns), sorted: for the TAP tests' literal expectations."""
    from walspark.storage.layout import TargetLayout

    frame = spark.read.format("delta").load(TargetLayout(target).table(schema, table))
    return sorted(tuple(r) for r in frame.select(*columns).collect())


class Pipeline:
    """One target fed by ``walspark run --once`` from one slot; ``check`` runs it and compares."""

    def __init__(self, spark, dsn: str, publication: str, target: str, slot: str = "s") -> None:
        self.spark, self.dsn, self.publication, self.target, self.slot = spark, dsn, publication, target, slot

    def check(self, conn: psycopg.Connection[Any], context: str) -> None:
        run_once(self.dsn, self.publication, self.slot, self.target)
        assert_matches_publication(conn, self.spark, self.target, self.publication.split(","), context=context)

    def rows(self, table: str, *columns: str, schema: str = "public") -> list[tuple]:
        return _rows(self.spark, self.target, schema, table, *columns)


# --------------------------------------------------------------------------------------------
# 028_row_filter.pl: FOR ALL TABLES and TABLES IN SCHEMA make a table's filter void


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_028_for_all_tables_publication_voids_the_filter(spark, server, request, tmp_path):
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute("CREATE TABLE tab_rf_x (x int primary key)")
        conn.execute("INSERT INTO tab_rf_x (x) VALUES (0), (5), (10), (15), (20)")
        conn.execute("CREATE PUBLICATION tap_pub_x FOR TABLE tab_rf_x WHERE (x > 10)")
        conn.execute("CREATE PUBLICATION tap_pub_forall FOR ALL TABLES")
        p = Pipeline(spark, dsn, "tap_pub_x,tap_pub_forall", str(tmp_path / "lake"))
        p.check(conn, "initial copy: not filtered")
        assert len(p.rows("tab_rf_x", "x")) == 5
        conn.execute("INSERT INTO tab_rf_x (x) VALUES (-99), (99)")
        p.check(conn, "after inserts: not filtered")
        assert len(p.rows("tab_rf_x", "x")) == 7


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_028_tables_in_schema_voids_the_filter_of_its_tables_only(spark, server, request, tmp_path):
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(ROWFILTER_028_IN_SCHEMA)
        conn.execute("CREATE PUBLICATION tap_pub_x FOR TABLE schema_rf_x.tab_rf_x WHERE (x > 10)")
        p = Pipeline(spark, dsn, "tap_pub_x,tap_pub_allinschema", str(tmp_path / "lake"))
        p.check(conn, "initial copy")
        assert len(p.rows("tab_rf_x", "x", schema="schema_rf_x")) == 5
        assert p.rows("tab_rf_partition", "x") == [(20,)]
        for statement in ROWFILTER_028_IN_SCHEMA_DML:
            conn.execute(statement)
        p.check(conn, "after inserts")
        assert len(p.rows("tab_rf_x", "x", schema="schema_rf_x")) == 7
        assert p.rows("tab_rf_partition", "x") == [(20,), (25,)]


# --------------------------------------------------------------------------------------------
# 028_row_filter.pl: FOR TABLE with row filters (leaf-published partitions, inheritance, TOAST)

_028_PUBLICATIONS = """
CREATE PUBLICATION tap_pub_1 FOR TABLE tab_rowfilter_1 WHERE (a > 1000 AND b <> 'filtered');
ALTER PUBLICATION tap_pub_1 ADD TABLE tab_rowfilter_2 WHERE (c % 7 = 0);
ALTER PUBLICATION tap_pub_1 SET TABLE tab_rowfilter_1 WHERE (a > 1000 AND b <> 'filtered'),
    tab_rowfilter_2 WHERE (c % 2 = 0), tab_rowfilter_3;
CREATE PUBLICATION tap_pub_2 FOR TABLE tab_rowfilter_2 WHERE (c % 3 = 0);
CREATE PUBLICATION tap_pub_3 FOR TABLE tab_rowfilter_partitioned;
ALTER PUBLICATION tap_pub_3 ADD TABLE tab_rowfilter_less_10k WHERE (a < 6000);
CREATE PUBLICATION tap_pub_not_used FOR TABLE tab_rowfilter_1 WHERE (a < 0);
CREATE PUBLICATION tap_pub_4a FOR TABLE tab_rowfilter_4 WHERE (c % 2 = 0);
CREATE PUBLICATION tap_pub_4b FOR TABLE tab_rowfilter_4;
CREATE PUBLICATION tap_pub_5a FOR TABLE tab_rowfilter_partitioned_2;
CREATE PUBLICATION tap_pub_5b FOR TABLE tab_rowfilter_partition WHERE (a > 10);
CREATE PUBLICATION tap_pub_toast FOR TABLE tab_rowfilter_toast WHERE (a = repeat('1234567890', 200) AND b < '10');
CREATE PUBLICATION tap_pub_inherits FOR TABLE tab_rowfilter_inherited WHERE (a > 15);
"""

_028_PUBS = "tap_pub_1,tap_pub_2,tap_pub_3,tap_pub_4a,tap_pub_4b,tap_pub_5a,tap_pub_5b,tap_pub_toast,tap_pub_inherits"


def _028_expect_initial(p: Pipeline) -> None:
    """The TAP test's checks after the initial copy."""
    assert p.rows("tab_rowfilter_1", "a", "b") == [(1001, "test 1001"), (1002, "test 1002"), (1980, "not filtered")]
    assert [c for (c,) in p.rows("tab_rowfilter_2", "c")] == [2, 3, 4, 6, 8, 9, 10, 12, 14, 15, 16, 18, 20]
    assert [c for (c,) in p.rows("tab_rowfilter_4", "c")] == list(range(1, 11))
    assert len(p.rows("tab_rowfilter_3", "a")) == 10
    assert p.rows("tab_rowfilter_less_10k", "a", "b") == [(1, 100), (2, 200), (5500, 300)]
    assert p.rows("tab_rowfilter_greater_10k", "a", "b") == [(15000, 102), (16000, 103)]
    assert p.rows("tab_rowfilter_partition", "a", "b") == [(1, 1), (20, 20)]
    assert p.rows("tab_rowfilter_toast", "a") == []
    assert p.rows("tab_rowfilter_inherited", "a") == [(20,)]  # ONLY the parent's rows
    assert p.rows("tab_rowfilter_child", "a", "b") == [(30, "30"), (40, "40")]


@pytest.mark.parametrize("backlog", [False, True], ids=["steps", "backlog"])
@pytest.mark.parametrize("server", ["pg15"])
def test_028_row_filters_for_table_publications(spark, server, backlog, request, tmp_path):
    """The TAP's catch-up points, or (backlog) the pipeline down until the end: snapshot, then
    everything in one run. On PostgreSQL 15, with the subscriber's rows checked at each point;
    on 18 the same SQL is the TAP port ``028_row_filter`` (test_tap_workloads.py), which the
    oracle judges at each catch-up point."""
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(ROWFILTER_028_TABLES)
        conn.execute(_028_PUBLICATIONS)
        conn.execute(ROWFILTER_028_INITIAL)
        p = Pipeline(spark, dsn, _028_PUBS, str(tmp_path / "lake"))
        p.check(conn, "initial copy")
        _028_expect_initial(p)
        for statement in ROWFILTER_028_DML:
            conn.execute(statement)
        if not backlog:
            p.check(conn, "after the row filter DML")
            assert [c for (c,) in p.rows("tab_rowfilter_2", "c")][-3:] == [21, 22, 24]
            assert len(p.rows("tab_rowfilter_2", "c")) == 16
            assert [c for (c,) in p.rows("tab_rowfilter_4", "c")] == list(range(0, 13))
            assert p.rows("tab_rowfilter_1", "a", "b") == [
                (1001, "test 1001"), (1002, "test 1002"), (1601, "test 1601 updated"), (1602, "test 1602 updated"),
                (1980, "not filtered")]
            assert p.rows("tab_rowfilter_inherited", "a") == [(16,), (20,)]
            assert p.rows("tab_rowfilter_child", "a") == [(17,), (30,), (40,)]
        # old (a, '1234567890') fails the filter, new (a, '1') passes: an INSERT whose a is the
        # unchanged TOAST value pgoutput takes from the old key
        conn.execute(ROWFILTER_028_TOAST_UPDATE)
        p.check(conn, "after the whole backlog" if backlog else "after the TOAST update")
        assert p.rows("tab_rowfilter_toast", "a", "b") == [("1234567890" * 200, "1")]


# --------------------------------------------------------------------------------------------
# Updates that move rows into or out of the filter (pgoutput sends them as INSERT / DELETE)

_MOVES_TABLES = """
CREATE TABLE t_full (id int PRIMARY KEY, a int, b text, c int, big text);
ALTER TABLE t_full REPLICA IDENTITY FULL;
ALTER TABLE t_full ALTER COLUMN big SET STORAGE EXTERNAL;
INSERT INTO t_full SELECT g, g, CASE WHEN g % 5 = 0 THEN 'no' WHEN g % 7 = 0 THEN NULL ELSE 'b' || g END,
                          CASE WHEN g % 3 = 0 THEN NULL ELSE g END, repeat(md5(g::text), 200)
  FROM generate_series(1, 30) g;
CREATE TABLE t_def (id int, k int, v text, PRIMARY KEY (id, k));
INSERT INTO t_def SELECT g, CASE WHEN g % 4 = 0 THEN -g ELSE g END, 'v' || g FROM generate_series(1, 30) g;
CREATE PUBLICATION moves FOR TABLE t_full WHERE (a > 10 AND b <> 'no' OR c IS NULL),
                                 t_def WHERE (k > 0 AND id % 2 = 0);
"""

_MOVES_WORKLOAD = [
    # t_full (REPLICA IDENTITY FULL: the filter sees the whole old row)
    "UPDATE t_full SET a = a + 10 WHERE id BETWEEN 1 AND 4",        # out -> in (c not NULL): INSERT, big unchanged
    "UPDATE t_full SET a = 0 WHERE id BETWEEN 11 AND 14",           # in -> out: DELETE
    "UPDATE t_full SET b = NULL WHERE id IN (16, 17)",              # b <> 'no' is NULL: out unless c IS NULL
    "UPDATE t_full SET c = NULL WHERE id IN (5, 10, 19)",           # c IS NULL: in
    "UPDATE t_full SET c = 1 WHERE id IN (3, 6, 9)",                # c no longer NULL: some go out
    "UPDATE t_full SET id = id + 100 WHERE id IN (20, 22)",         # key change inside the filter: UPDATE
    "UPDATE t_full SET b = 'back' WHERE id IN (16, 17, 25)",        # 16, 17 come back in
    "BEGIN; UPDATE t_full SET a = 50 WHERE id = 8; UPDATE t_full SET a = 1 WHERE id = 8;"
    " UPDATE t_full SET a = 60, big = 'small now' WHERE id = 8; COMMIT",  # in, out, in within one transaction
    "DELETE FROM t_full WHERE id IN (2, 13, 21)",                   # published only where the old row matched
    "INSERT INTO t_full VALUES (40, 40, 'x', 1, NULL), (41, 1, 'x', 1, 'y'), (42, NULL, NULL, NULL, 'z')",
    # t_def (REPLICA IDENTITY DEFAULT: the filter may use key columns only)
    "UPDATE t_def SET k = -k WHERE id IN (2, 4, 6, 8)",             # 2, 6 go out (DELETE), 4, 8 come in (INSERT)
    "UPDATE t_def SET v = v || '!' WHERE id <= 12",                 # key unchanged: UPDATE if the row matches
    "UPDATE t_def SET id = id + 1 WHERE id IN (10, 11, 13)",        # parity changes move rows both ways
    "DELETE FROM t_def WHERE id IN (12, 15, 16)",
    "INSERT INTO t_def VALUES (50, 1, 'new'), (51, 1, 'odd'), (52, -1, 'neg')",
]


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_updates_moving_rows_across_the_filter(spark, server, request, tmp_path):
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(_MOVES_TABLES)
        p = Pipeline(spark, dsn, "moves", str(tmp_path / "lake"))
        p.check(conn, "initial copy")
        for statement in _MOVES_WORKLOAD[:10]:
            conn.execute(statement)
        p.check(conn, "after the t_full moves")
        for statement in _MOVES_WORKLOAD[10:]:
            conn.execute(statement)
        p.check(conn, "after the t_def moves")
        # the rows that came in by UPDATE carry their TOAST value, not NULL
        assert {i: len(big) for i, big in p.rows("t_full", "id", "big") if i in (1, 2, 3, 4)} == {1: 6400, 3: 6400, 4: 6400}


def test_updates_moving_rows_as_one_backlog(spark, pg18_dsn, tmp_path):
    with _conn(pg18_dsn) as conn:
        conn.execute(_MOVES_TABLES)
        p = Pipeline(spark, pg18_dsn, "moves", str(tmp_path / "lake"))
        p.check(conn, "initial copy")
        for statement in _MOVES_WORKLOAD:
            conn.execute(statement)
        p.check(conn, "after the whole backlog")


# --------------------------------------------------------------------------------------------
# Inheritance: a parent's copy holds its own rows (ONLY); children are tables of their own or none

_INHERITANCE = """
CREATE TABLE parent (id int PRIMARY KEY, v text);
CREATE TABLE child (extra text, PRIMARY KEY (id)) INHERITS (parent);
CREATE TABLE grandchild (more int, PRIMARY KEY (id)) INHERITS (child);
INSERT INTO parent SELECT g, 'p' || g FROM generate_series(1, 10) g;
INSERT INTO child SELECT g, 'c' || g, 'x' FROM generate_series(101, 110) g;
INSERT INTO grandchild SELECT g, 'g' || g, 'y', g FROM generate_series(201, 205) g;
ALTER TABLE parent REPLICA IDENTITY FULL;  -- the filter reads v, so every table of the tree needs FULL
ALTER TABLE child REPLICA IDENTITY FULL;
ALTER TABLE grandchild REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_tree FOR TABLE parent WHERE (id % 2 = 1 OR v LIKE 'c%');
CREATE PUBLICATION pub_only FOR TABLE ONLY parent;
"""

_INHERITANCE_WORKLOAD = """
INSERT INTO parent VALUES (11, 'p11'), (12, 'p12');
INSERT INTO child VALUES (111, 'c111', 'x'), (112, 'x112', 'x');
INSERT INTO grandchild VALUES (206, 'g206', 'y', 1), (207, 'c207', 'y', 2);
UPDATE parent SET v = v || '!' WHERE id IN (1, 2, 103, 201);
UPDATE child SET v = 'moved' WHERE id IN (104, 105);
UPDATE grandchild SET v = 'c' || id WHERE id = 202;
DELETE FROM parent WHERE id IN (3, 106, 203);
"""


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_inheritance_parent_copies_its_own_rows(spark, server, request, tmp_path):
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(_INHERITANCE)
        tree = Pipeline(spark, dsn, "pub_tree", str(tmp_path / "tree"), slot="tree")
        only = Pipeline(spark, dsn, "pub_only", str(tmp_path / "only"), slot="only")
        for p in (tree, only):
            p.check(conn, f"initial copy of {p.publication}")
        assert [i for (i,) in only.rows("parent", "id")] == list(range(1, 11))
        assert [i for (i,) in tree.rows("parent", "id")] == [1, 3, 5, 7, 9]
        assert len(tree.rows("child", "id")) == 10 and tree.rows("grandchild", "id") == [(201,), (203,), (205,)]
        assert not (tmp_path / "only" / "public" / "child").exists()
        conn.execute(_INHERITANCE_WORKLOAD)
        for p in (tree, only):
            p.check(conn, f"after the workload, {p.publication}")
        assert [i for (i,) in only.rows("parent", "id")] == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12]
        assert [i for (i,) in tree.rows("grandchild", "id")] == [201, 202, 205, 207]


# --------------------------------------------------------------------------------------------
# Partitioned tables: leaves (publish_via_partition_root = false) and roots (true), sub-partitions

_PARTITIONS = """
CREATE TABLE m (id int, region text, v int, note text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE m_eu PARTITION OF m FOR VALUES IN ('eu');
CREATE TABLE m_us PARTITION OF m FOR VALUES IN ('us') PARTITION BY RANGE (id);
CREATE TABLE m_us_low PARTITION OF m_us FOR VALUES FROM (MINVALUE) TO (100);
CREATE TABLE m_us_high PARTITION OF m_us FOR VALUES FROM (100) TO (MAXVALUE);
CREATE TABLE m_other PARTITION OF m DEFAULT;
INSERT INTO m SELECT g, (ARRAY['eu', 'us', 'asia'])[1 + g % 3], g % 20, 'n' || g FROM generate_series(1, 240) g;
"""

_PARTITION_WORKLOAD = """
INSERT INTO m VALUES (300, 'eu', 15, 'a'), (301, 'eu', 5, 'b'), (50, 'us', 2, 'c'), (150, 'us', 1, 'd'),
                     (302, 'asia', 0, 'e');
UPDATE m SET v = 30 WHERE region = 'eu' AND v = 3;
UPDATE m SET v = 0 WHERE region = 'eu' AND v = 19;
UPDATE m SET v = v + 10 WHERE region = 'us' AND id < 30;
UPDATE m SET region = 'eu' WHERE id IN (2, 5, 7);
UPDATE m SET id = id + 100 WHERE region = 'us' AND id BETWEEN 40 AND 46;
DELETE FROM m WHERE id % 17 = 0;
UPDATE m SET note = 'changed' WHERE id % 11 = 0;
"""


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_partitions_published_as_leaves(spark, server, request, tmp_path):
    """Leaf publishing: each leaf is its own table with its own filter and column list (PostgreSQL refuses
    both on the root when publish_via_partition_root is false); sub-partitions' leaves included."""
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(_PARTITIONS)
        conn.execute("""
            ALTER TABLE m_us_low REPLICA IDENTITY FULL;  -- its filter reads v and note
            CREATE PUBLICATION pub_leaf FOR TABLE m;
            ALTER PUBLICATION pub_leaf ADD TABLE m_eu (id, region, v) WHERE (id > 100 OR id < 10),
                                                 m_us_low WHERE (v < 5 AND note IS NOT NULL);
        """)
        p = Pipeline(spark, dsn, "pub_leaf", str(tmp_path / "lake"))
        p.check(conn, "initial copy")
        assert sorted(d.name for d in (tmp_path / "lake" / "public").iterdir()) == [
            "m_eu", "m_other", "m_us_high", "m_us_low"]
        assert all(i > 100 or i < 10 for i, _ in p.rows("m_eu", "id", "v")) and len(p.rows("m_eu", "id")) == 50
        assert len(p.rows("m_other", "id", "note")) == 80
        conn.execute(_PARTITION_WORKLOAD)
        p.check(conn, "after the workload")


def _via_root_publication(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_PARTITIONS)
    # The leaf's own filter in the same publication is not used: its rows go out as the root's.
    conn.execute("""
        CREATE PUBLICATION pub_root FOR TABLE m (id, region, v) WHERE (id > 10 AND region <> 'asia')
            WITH (publish_via_partition_root = true);
        ALTER PUBLICATION pub_root ADD TABLE m_eu WHERE (id < 3);
    """)


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_partitions_published_via_root_snapshot(spark, server, request, tmp_path):
    """publish_via_partition_root: one table holding every leaf's rows (sub-partitions too) under the
    root's filter and column list."""
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        _via_root_publication(conn)
        p = Pipeline(spark, dsn, "pub_root", str(tmp_path / "lake"))
        p.check(conn, "initial copy")
        assert sorted(d.name for d in (tmp_path / "lake" / "public").iterdir()) == ["m"]
        expected = conn.execute("SELECT id, region, v FROM m WHERE id > 10 AND region <> 'asia'").fetchall()
        assert p.rows("m", "id", "region", "v") == sorted(expected) and len(expected) == 153


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_partitions_published_via_root_stream(spark, server, request, tmp_path):
    """The same, then streaming (needs the stream to accept the leaves' Relation messages: issue 13 item 1)."""
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        _via_root_publication(conn)
        p = Pipeline(spark, dsn, "pub_root", str(tmp_path / "lake"))
        p.check(conn, "initial copy")
        conn.execute(_PARTITION_WORKLOAD)
        p.check(conn, "after the workload")


_028_VIA_ROOT = """
CREATE TABLE tab_rowfilter_partitioned (a int primary key, b integer) PARTITION BY RANGE(a);
CREATE TABLE tab_rowfilter_less_10k (LIKE tab_rowfilter_partitioned);
ALTER TABLE tab_rowfilter_partitioned ATTACH PARTITION tab_rowfilter_less_10k FOR VALUES FROM (MINVALUE) TO (10000);
CREATE TABLE tab_rowfilter_greater_10k (LIKE tab_rowfilter_partitioned);
ALTER TABLE tab_rowfilter_partitioned ATTACH PARTITION tab_rowfilter_greater_10k FOR VALUES FROM (10000) TO (MAXVALUE);
CREATE TABLE tab_rowfilter_viaroot_part (a int) PARTITION BY RANGE (a);
CREATE TABLE tab_rowfilter_viaroot_part_1 PARTITION OF tab_rowfilter_viaroot_part FOR VALUES FROM (1) TO (20);
CREATE TABLE tab_rowfilter_parent_sync (a int) PARTITION BY RANGE (a);
CREATE TABLE tab_rowfilter_child_sync PARTITION OF tab_rowfilter_parent_sync FOR VALUES FROM (1) TO (20);
CREATE PUBLICATION tap_pub_3 FOR TABLE tab_rowfilter_partitioned WHERE (a < 5000), tab_rowfilter_less_10k WHERE (a < 6000)
    WITH (publish_via_partition_root = true);
CREATE PUBLICATION tap_pub_viaroot_1 FOR TABLE tab_rowfilter_viaroot_part WHERE (a > 15) WITH (publish_via_partition_root);
CREATE PUBLICATION tap_pub_viaroot_2 FOR TABLE tab_rowfilter_viaroot_part_1 WHERE (a < 15) WITH (publish_via_partition_root);
CREATE PUBLICATION tap_pub_parent_sync FOR TABLE tab_rowfilter_parent_sync WHERE (a > 15) WITH (publish_via_partition_root);
CREATE PUBLICATION tap_pub_child_sync FOR TABLE tab_rowfilter_child_sync WHERE (a < 15);
INSERT INTO tab_rowfilter_parent_sync(a) VALUES(14), (16);
INSERT INTO tab_rowfilter_partitioned (a, b) VALUES(1, 100),(7000, 101),(15000, 102),(5500, 300);
INSERT INTO tab_rowfilter_less_10k (a, b) VALUES(2, 200),(6005, 201);
INSERT INTO tab_rowfilter_greater_10k (a, b) VALUES(16000, 103);
"""

_028_VIA_ROOT_PUBS = "tap_pub_3,tap_pub_viaroot_2,tap_pub_viaroot_1,tap_pub_parent_sync,tap_pub_child_sync"


def _028_via_root_expect_initial(p: Pipeline) -> None:
    """Across publications a partition goes out as its top-most published ancestor, with that one's
    filter: the TAP test's expectations (the oracle reads pg_publication_tables one publication at a
    time, which lists the partitions too, so it is used for tap_pub_3 alone)."""
    assert p.rows("tab_rowfilter_partitioned", "a", "b") == [(1, 100), (2, 200)]
    assert p.rows("tab_rowfilter_parent_sync", "a") == [(16,)]
    assert p.rows("tab_rowfilter_viaroot_part", "a") == []
    public = sorted(d.name for d in (Path(p.target) / "public").iterdir())
    assert public == ["tab_rowfilter_parent_sync", "tab_rowfilter_partitioned", "tab_rowfilter_viaroot_part"]


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_028_row_filters_via_root_snapshot(spark, server, request, tmp_path):
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(_028_VIA_ROOT)
        p = Pipeline(spark, dsn, _028_VIA_ROOT_PUBS, str(tmp_path / "lake"))
        run_once(dsn, p.publication, p.slot, p.target)
        assert_matches_publication(conn, spark, p.target, "tap_pub_3", context="initial copy")
        _028_via_root_expect_initial(p)


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_028_row_filters_via_root_stream(spark, server, request, tmp_path):
    """The same, then the TAP test's streamed changes (needs issue 13 item 1)."""
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(_028_VIA_ROOT)
        p = Pipeline(spark, dsn, _028_VIA_ROOT_PUBS, str(tmp_path / "lake"))
        run_once(dsn, p.publication, p.slot, p.target)
        _028_via_root_expect_initial(p)
        conn.execute("""
            INSERT INTO tab_rowfilter_viaroot_part (a) VALUES (14), (15), (16);
            INSERT INTO tab_rowfilter_partitioned (a, b) VALUES(4000, 400),(4001, 401),(4002, 402);
            INSERT INTO tab_rowfilter_less_10k (a, b) VALUES(4500, 450);
            INSERT INTO tab_rowfilter_less_10k (a, b) VALUES(5600, 123);
            INSERT INTO tab_rowfilter_greater_10k (a, b) VALUES(14000, 1950);
            UPDATE tab_rowfilter_less_10k SET b = 30 WHERE a = 4001;
            DELETE FROM tab_rowfilter_less_10k WHERE a = 4002;
            INSERT INTO tab_rowfilter_parent_sync(a) VALUES (3), (17);
        """)
        run_once(dsn, p.publication, p.slot, p.target)
        assert_matches_publication(conn, spark, p.target, "tap_pub_3", context="after streaming")
        assert p.rows("tab_rowfilter_partitioned", "a", "b") == [(1, 100), (2, 200), (4000, 400), (4001, 30),
                                                                 (4500, 450)]
        assert p.rows("tab_rowfilter_viaroot_part", "a") == [(16,)]
        assert p.rows("tab_rowfilter_parent_sync", "a") == [(16,), (17,)]


# --------------------------------------------------------------------------------------------
# 031_column_list.pl: column lists in the initial copy and the stream

_031_TABLES = """
CREATE TABLE tab1 (a int PRIMARY KEY, "B" int, c int);
CREATE TABLE tab3 ("a'" int PRIMARY KEY, "B" varchar, "c'" int);
CREATE TYPE test_typ AS ENUM ('blue', 'red');
CREATE TABLE tab4 (a INT PRIMARY KEY, b test_typ, c int, d text);
CREATE TABLE test_part_c (a int, b int, c int) PARTITION BY LIST (a);
CREATE TABLE test_part_c_1 PARTITION OF test_part_c FOR VALUES IN (1,3);
ALTER TABLE test_part_c_1 ADD PRIMARY KEY (a);
ALTER TABLE test_part_c_1 REPLICA IDENTITY USING INDEX test_part_c_1_pkey;
CREATE TABLE test_part_c_2 PARTITION OF test_part_c FOR VALUES IN (2,4);
ALTER TABLE test_part_c_2 ADD PRIMARY KEY (b);
ALTER TABLE test_part_c_2 REPLICA IDENTITY USING INDEX test_part_c_2_pkey;
CREATE PUBLICATION pub1 FOR TABLE tab1 (a, "B"), tab3 ("a'", "c'"), tab4 (a, b, d), test_part_c;
ALTER PUBLICATION pub1 ADD TABLE test_part_c_1 (a,c);
ALTER PUBLICATION pub1 ADD TABLE test_part_c_2 (a,b);
INSERT INTO tab1 VALUES (1, 2, 3), (4, 5, 6);
INSERT INTO tab3 VALUES (1, 2, 3), (4, 5, 6);
INSERT INTO tab4 VALUES (1, 'red', 3, 'oh my'), (2, 'blue', 4, 'hello');
INSERT INTO test_part_c VALUES (1, 3, 5), (2, 4, 6);
CREATE TABLE tab5 (a int PRIMARY KEY, b int, c int, d int);
CREATE PUBLICATION pub2 FOR TABLE tab5 (a, b);
CREATE PUBLICATION pub3 FOR TABLE tab5 (a, b);
INSERT INTO tab5 VALUES (1, 11, 111, 1111), (2, 22, 222, 2222);
CREATE TABLE test_mix_4 (a int PRIMARY KEY, b int, c int, d int GENERATED ALWAYS AS (a + 1) STORED);
ALTER TABLE test_mix_4 DROP COLUMN c;
CREATE PUBLICATION pub_mix_7 FOR TABLE test_mix_4 (a, b);
CREATE PUBLICATION pub_mix_8 FOR TABLE test_mix_4;
INSERT INTO test_mix_4 VALUES (1, 2);
"""

_031_STREAMED = """
INSERT INTO tab1 VALUES (2, 3, 4), (5, 6, 7);
INSERT INTO tab3 VALUES (2, 3, 4), (5, 6, 7);
INSERT INTO tab4 VALUES (3, 'red', 5, 'foo'), (4, 'blue', 6, 'bar');
INSERT INTO test_part_c VALUES (3, 7, 8), (4, 9, 10);
UPDATE tab1 SET "B" = 2 * "B" where a = 1;
UPDATE tab1 SET c = 2*c where a = 4;
UPDATE tab3 SET "B" = "B" || ' updated' where "a'" = 4;
UPDATE tab3 SET "c'" = 2 * "c'" where "a'" = 1;
UPDATE tab4 SET b = 'blue', c = c * 2, d = d || ' updated' where a = 1;
UPDATE tab4 SET b = 'red', c = c * 2, d = d || ' updated' where a = 2;
INSERT INTO tab5 VALUES (3, 33, 333, 3333), (4, 44, 444, 4444);
INSERT INTO test_mix_4 VALUES (3, 4);
"""


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_031_column_lists(spark, server, request, tmp_path):
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(_031_TABLES)
        one = Pipeline(spark, dsn, "pub1", str(tmp_path / "one"), slot="one")
        # PostgreSQL 15 counts the generated column in pub_mix_8's list and refuses the pair, as the
        # snapshot does (see test_031_different_column_lists_stop_with_one_line)
        mixed = "pub2,pub3" + (",pub_mix_7,pub_mix_8" if server == "pg18" else "")
        mix = Pipeline(spark, dsn, mixed, str(tmp_path / "mix"), slot="mix")
        for p in (one, mix):
            p.check(conn, f"initial copy of {p.publication}")
        from walspark.storage.layout import TargetLayout

        def columns(p: Pipeline, table: str) -> list[str]:
            return spark.read.format("delta").load(TargetLayout(p.target).table("public", table)).columns

        assert one.rows("tab1", "a", "B") == [(1, 2), (4, 5)]
        assert one.rows("tab3", "a'", "c'") == [(1, 3), (4, 6)]
        assert one.rows("tab4", "a", "b", "d") == [(1, "red", "oh my"), (2, "blue", "hello")]
        assert one.rows("test_part_c_1", "a", "c") == [(1, 5)] and one.rows("test_part_c_2", "a", "b") == [(2, 4)]
        if server == "pg18":
            assert mix.rows("test_mix_4", "a", "b") == [(1, 2)] and columns(mix, "test_mix_4") == ["a", "b"]
        assert (columns(one, "tab1"), columns(one, "tab3"), columns(one, "test_part_c_1")) == (
            ["a", "B"], ["a'", "c'"], ["a", "c"])
        assert columns(mix, "tab5") == ["a", "b"]
        conn.execute(_031_STREAMED)
        for p in (one, mix):
            p.check(conn, f"after the workload, {p.publication}")
        assert one.rows("tab1", "a", "B") == [(1, 4), (2, 3), (4, 5), (5, 6)]
        assert one.rows("tab3", "a'", "c'") == [(1, 6), (2, 4), (4, 6), (5, 7)]
        assert one.rows("tab4", "a", "b", "d") == [(1, "blue", "oh my updated"), (2, "red", "hello updated"),
                                                   (3, "red", "foo"), (4, "blue", "bar")]
        assert mix.rows("tab5", "a", "b") == [(1, 11), (2, 22), (3, 33), (4, 44)]
        if server == "pg18":
            assert mix.rows("test_mix_4", "a", "b") == [(1, 2), (3, 4)]


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_031_different_column_lists_stop_with_one_line(spark, server, request, tmp_path):
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute("""
            CREATE TABLE test_mix_1 (a int PRIMARY KEY, b int, c int);
            CREATE PUBLICATION pub_mix_1 FOR TABLE test_mix_1 (a, b);
            CREATE PUBLICATION pub_mix_2 FOR TABLE test_mix_1 (a, c);
        """)
        out = run_once(dsn, "pub_mix_1,pub_mix_2", "s", str(tmp_path / "lake"), expect_exit=1)
        *before, line = out.splitlines()  # the snapshot's start line, then the error: one line
        assert all(not b.startswith("Error") and "Traceback" not in b for b in before), out
        assert line.startswith("Error: ") and "different column lists" in line and "public.test_mix_1" in line, out
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()").fetchone()[0] == 0
        if server == "pg15":  # PostgreSQL 15's pgoutput counts a generated column in a publication without a list
            conn.execute("""
                CREATE TABLE test_mix_4 (a int PRIMARY KEY, b int, d int GENERATED ALWAYS AS (a + 1) STORED);
                CREATE PUBLICATION pub_mix_7 FOR TABLE test_mix_4 (a, b);
                CREATE PUBLICATION pub_mix_8 FOR TABLE test_mix_4;
            """)
            conn.execute("SELECT pg_create_logical_replication_slot('probe', 'pgoutput')")
            conn.execute("INSERT INTO test_mix_4 VALUES (1, 2)")
            with pytest.raises(psycopg.Error, match="different column lists"):
                conn.execute("SELECT count(*) FROM pg_logical_slot_peek_binary_changes('probe', NULL, NULL,"
                             " 'proto_version', '1', 'publication_names', 'pub_mix_7,pub_mix_8')")
            out = run_once(dsn, "pub_mix_7,pub_mix_8", "s", str(tmp_path / "lake2"), expect_exit=1)
            assert "different column lists" in out and "public.test_mix_4" in out, out


_031_VIA_ROOT = """
CREATE TABLE test_part (a int PRIMARY KEY, b text, c timestamptz) PARTITION BY LIST (a);
CREATE TABLE test_part_1_1 PARTITION OF test_part FOR VALUES IN (1,2,3,4,5,6);
CREATE TABLE test_part_2_1 PARTITION OF test_part FOR VALUES IN (7,8,9,10,11,12) PARTITION BY LIST (a);
CREATE TABLE test_part_2_2 PARTITION OF test_part_2_1 FOR VALUES IN (7,8,9,10);
CREATE TABLE test_part_d (a int, b int) PARTITION BY LIST (a);
CREATE TABLE test_part_d_1 PARTITION OF test_part_d FOR VALUES IN (1,3);
ALTER TABLE test_part_d_1 ADD PRIMARY KEY (a);
ALTER TABLE test_part_d_1 REPLICA IDENTITY USING INDEX test_part_d_1_pkey;
CREATE TABLE t (a int, b int, c int) PARTITION BY RANGE (a);
CREATE TABLE t_1 PARTITION OF t FOR VALUES FROM (1) TO (10) PARTITION BY RANGE (a);
CREATE TABLE t_2 PARTITION OF t_1 FOR VALUES FROM (1) TO (10);
CREATE PUBLICATION pub_vr FOR TABLE test_part (a, b), test_part_d (a), t_1 (a), t_2
    WITH (publish_via_partition_root = true);
INSERT INTO test_part VALUES (1, 'abc', '2021-07-04 12:00:00'), (2, 'bcd', '2021-07-03 11:12:13'),
                             (7, 'abc', '2021-07-04 12:00:00'), (8, 'bcd', '2021-07-03 11:12:13');
INSERT INTO test_part_d VALUES (1, 2);
INSERT INTO t VALUES (1, 2, 3);
CREATE TABLE test_root (a int PRIMARY KEY, b int, c int) PARTITION BY RANGE (a);
CREATE TABLE test_root_1 PARTITION OF test_root FOR VALUES FROM (1) TO (10);
CREATE TABLE test_root_2 PARTITION OF test_root FOR VALUES FROM (10) TO (20);
CREATE PUBLICATION pub_test_root FOR TABLE test_root (a) WITH (publish_via_partition_root = true);
CREATE PUBLICATION pub_test_root_1 FOR TABLE test_root_1 (a, b);
INSERT INTO test_root VALUES (1, 2, 3), (10, 20, 30);
"""


def _031_via_root_initial(conn: psycopg.Connection[Any], spark, vr: Pipeline, root: Pipeline) -> None:
    for p in (vr, root):
        run_once(p.dsn, p.publication, p.slot, p.target)
    assert_matches_publication(conn, spark, vr.target, "pub_vr", context="initial copy of pub_vr")
    assert vr.rows("test_part", "a", "b") == [(1, "abc"), (2, "bcd"), (7, "abc"), (8, "bcd")]
    assert vr.rows("test_part_d", "a") == [(1,)] and vr.rows("t_1", "a") == [(1,)]
    assert sorted(d.name for d in (Path(vr.target) / "public").iterdir()) == ["t_1", "test_part", "test_part_d"]
    # two publications: the root's column list wins, the partition is not a table of its own (the
    # oracle lists it, reading pg_publication_tables one publication at a time)
    assert sorted(d.name for d in (Path(root.target) / "public").iterdir()) == ["test_root"]
    assert spark.read.format("delta").load(str(Path(root.target) / "public" / "test_root")).columns == ["a"]
    assert root.rows("test_root", "a") == [(1,), (10,)]


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_031_column_lists_via_root_stream(spark, server, request, tmp_path):
    """The snapshot's checks (:func:`_031_via_root_initial`), then streaming (issue 13 item 1)."""
    dsn = request.getfixturevalue(f"{server}_dsn")
    with _conn(dsn) as conn:
        conn.execute(_031_VIA_ROOT)
        vr = Pipeline(spark, dsn, "pub_vr", str(tmp_path / "vr"), slot="vr")
        root = Pipeline(spark, dsn, "pub_test_root,pub_test_root_1", str(tmp_path / "root"), slot="root")
        _031_via_root_initial(conn, spark, vr, root)
        conn.execute("""
            INSERT INTO test_part VALUES (3, 'xxx', '2022-02-01 10:00:00'), (4, 'yyy', '2022-03-02 15:12:13'),
                                         (9, 'zzz', '2022-04-03 21:00:00'), (10, 'qqq', '2022-05-04 22:12:13');
            INSERT INTO test_part_d VALUES (3, 4);
            INSERT INTO t VALUES (4, 5, 6);
            INSERT INTO test_root VALUES (2, 3, 4), (11, 21, 31);
        """)
        vr.check(conn, "after streaming pub_vr")
        run_once(root.dsn, root.publication, root.slot, root.target)
        assert vr.rows("test_part", "a") == [(1,), (2,), (3,), (4,), (7,), (8,), (9,), (10,)]
        assert vr.rows("test_part_d", "a") == [(1,), (3,)] and vr.rows("t_1", "a") == [(1,), (4,)]
        assert root.rows("test_root", "a") == [(1,), (2,), (10,), (11,)]


def test_generated_columns_are_not_streamed_before_18(spark, pg15_dsn, tmp_path):
    """PostgreSQL 15's ``attnames`` lists a stored generated column for a publication without a
    column list, but its pgoutput never sends one (PostgreSQL 18's ``attnames`` leaves it out unless
    it is published): the copy, the stream's declared schema and the mirror hold what is sent."""
    from walspark.source.catalog import published_tables
    from walspark.storage.layout import TargetLayout

    with _conn(pg15_dsn) as conn:
        conn.execute("""
            CREATE TABLE g (id int PRIMARY KEY, a int, twice int GENERATED ALWAYS AS (a * 2) STORED);
            INSERT INTO g (id, a) SELECT x, x FROM generate_series(1, 10) x;
            CREATE PUBLICATION pub FOR TABLE g;
        """)
        assert conn.execute("SELECT attnames FROM pg_publication_tables").fetchone()[0] == ["id", "a", "twice"]
        assert [c.name for c in published_tables(conn, "pub")[0].columns] == ["id", "a"]
        p = Pipeline(spark, pg15_dsn, "pub", str(tmp_path / "lake"))
        p.check(conn, "initial copy")
        conn.execute("UPDATE g SET a = a + 1 WHERE id <= 3; DELETE FROM g WHERE id = 10; INSERT INTO g (id, a) VALUES (30, 30)")
        p.check(conn, "after the workload")
        assert spark.read.format("delta").load(TargetLayout(p.target).table("public", "g")).columns == ["id", "a"]
        assert p.rows("g", "id", "a")[:3] == [(1, 2), (2, 3), (3, 4)]


def test_publish_generated_columns_in_the_copy_and_the_stream(spark, pg18_dsn, tmp_path):
    """PostgreSQL 18: stored generated columns published by option or by naming them in a column list."""
    with _conn(pg18_dsn) as conn:
        conn.execute("""
            CREATE TABLE g (id int PRIMARY KEY, a int, secret text, twice int GENERATED ALWAYS AS (a * 2) STORED);
            INSERT INTO g (id, a, secret) SELECT x, x, 's' FROM generate_series(1, 20) x;
            CREATE PUBLICATION gen FOR TABLE g WHERE (id % 2 = 0) WITH (publish_generated_columns = stored);
            CREATE PUBLICATION gen_list FOR TABLE g (id, twice);
        """)
        gen = Pipeline(spark, pg18_dsn, "gen", str(tmp_path / "gen"), slot="gen")
        listed = Pipeline(spark, pg18_dsn, "gen_list", str(tmp_path / "listed"), slot="listed")
        for p in (gen, listed):
            p.check(conn, f"initial copy of {p.publication}")
        assert gen.rows("g", "id", "twice")[:2] == [(2, 4), (4, 8)] and len(gen.rows("g", "id")) == 10
        assert listed.rows("g", "id", "twice")[:2] == [(1, 2), (2, 4)]
        conn.execute("UPDATE g SET a = a + 1 WHERE id <= 6; DELETE FROM g WHERE id = 20; INSERT INTO g (id, a) VALUES (30, 30)")
        for p in (gen, listed):
            p.check(conn, f"after the workload, {p.publication}")
