"""Partitioned tables through ``walspark run``: the workloads of PostgreSQL's 013_partition.pl.

Ported from src/test/subscription/t/013_partition.pl (its SQL, not its Perl): a partitioned
table whose first partition has its columns in another order, a default partition, a
sub-partitioned table, inserts into the root and into partitions, updates that stay in a
partition and updates that move a row to another one (pgoutput sends those as DELETE + INSERT),
deletes, a TRUNCATE of one partition and of the root. Published both ways:

* ``publish_via_partition_root = false``: each leaf partition is a published table of its own;
* ``= true``: changes are published as the root's, and pgoutput sends the leaf's Relation message
  after the root's before a change — which must not stop the pipeline (issue 13, item 1).

The leaves run with a ``walspark run --once`` at each of the test's catch-up points, the root as a
backlog (snapshot, then everything, then one run). The other two pairings are the TAP ports of the
same file (tests/scenarios/test_tap_workloads.py: ``013_partition`` as a backlog through the
leaves, ``013_partition:pub_all`` step by step through the root), so they are not run twice.
After each run every Delta table must equal what the publication publishes (the oracle, tests/scenarios/support.py) — except where
PostgreSQL's own subscriber differs by design: with the root publishing, a TRUNCATE of a single
partition is not replicated (pgoutput_truncate skips partitions published via their root;
013_partition.pl: "truncate of tab1_2 NOT replicated"), and the target keeps those rows exactly
as a PostgreSQL subscriber does.
"""

from __future__ import annotations

import psycopg
import pytest

from .support import assert_matches_publication, run_once
from .tap_workloads import PARTITION_013_TAB1, PARTITION_013_TAB2_TAB3, PARTITION_013_TAB4

pytestmark = pytest.mark.spark

SETUP = PARTITION_013_TAB1 + PARTITION_013_TAB4 + """
CREATE TABLE tab4_2 PARTITION OF tab4 FOR VALUES IN (2, 3);
INSERT INTO tab4 VALUES (-1);
"""

#: The catch-up points of 013_partition.pl's first part (leaf identity), plus the sub-partitioned tab4.
STEPS: list[tuple[str, str]] = [
    ("insert", "INSERT INTO tab1 VALUES (1); INSERT INTO tab1_1 (a) VALUES (3); INSERT INTO tab1_2 VALUES (5);"
               "INSERT INTO tab1 VALUES (0); INSERT INTO tab4 VALUES (0), (2)"),
    ("update within a partition and across", "UPDATE tab1 SET a = 2 WHERE a = 1; UPDATE tab1 SET a = 6 WHERE a = 5;"
                                             "UPDATE tab1 SET a = 4 WHERE a = 6; UPDATE tab1 SET a = 6 WHERE a = 4;"
                                             "UPDATE tab1 SET b = 'moved' WHERE a = 3; UPDATE tab4 SET a = 3 WHERE a = 0"),
    ("update as delete + insert", "UPDATE tab1 SET a = 1 WHERE a = 0; UPDATE tab1 SET a = 4 WHERE a = 1;"
                                  "UPDATE tab4 SET a = 1 WHERE a = 2"),
    ("delete", "DELETE FROM tab1 WHERE a IN (2, 3, 5); DELETE FROM tab1_2; DELETE FROM tab4_1_1 WHERE a = -1"),
    ("insert before truncate", "INSERT INTO tab1 VALUES (1, 'one'), (2, 'two'), (5, 'five'), (10, 'ten')"),
    ("truncate a partition", "TRUNCATE tab1_2; TRUNCATE tab4_1"),
    ("truncate the root", "TRUNCATE tab1, tab4"),
    ("changes after truncate", "INSERT INTO tab1 VALUES (1, 'foo'), (4, 'bar'), (10, 'baz');"
                               "UPDATE tab1 SET b = 'quux' WHERE a = 4; DELETE FROM tab1 WHERE a = 1;"
                               "INSERT INTO tab4 VALUES (1), (2)"),
]

#: With the root publishing, these TRUNCATEs of partitions are not replicated (see the docstring).
NOT_REPLICATED = {"truncate a partition": ("tab1_2", "tab4_1")}


def _delta_keys(spark, target: str, table: str) -> list[int]:
    return sorted(r["a"] for r in spark.read.format("delta").load(f"{target}/public/{table}").collect())


def _check(conn, spark, target: str, via_root: bool, context: str, kept: dict[str, list[int]]) -> None:
    """The oracle, or — for a root that kept rows of a partition TRUNCATE, as PostgreSQL's
    subscriber does — the published rows plus exactly those."""
    if not kept:
        assert_matches_publication(conn, spark, target, "pub", context=context)
        return
    for root, extra in kept.items():
        source = sorted(a for (a,) in conn.execute(f"SELECT a FROM {root}").fetchall())
        assert _delta_keys(spark, target, root) == sorted(source + extra), (context, root)


def _run_workload(conn, spark, dsn: str, target: str, via_root: bool, backlog: bool) -> None:
    kept: dict[str, list[int]] = {}
    for step, sql in STEPS:
        if via_root and step in NOT_REPLICATED:
            for leaf in NOT_REPLICATED[step]:
                root = leaf.split("_")[0]
                kept.setdefault(root, []).extend(a for (a,) in conn.execute(f"SELECT a FROM {leaf}").fetchall())
        if step == "truncate the root":
            kept = {}
        conn.execute(sql)
        if not backlog:
            run_once(dsn, "pub", "s", target)
            _check(conn, spark, target, via_root, f"after {step!r}", kept)
    if backlog:
        run_once(dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="after the backlog")


@pytest.mark.parametrize(("via_root", "backlog"), [(False, False), (True, True)],
                         ids=["leaves-steps", "viaroot-backlog"])
def test_013_partition_workload(spark, pg18_dsn, tmp_path, via_root, backlog):
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SETUP)
        conn.execute(f"CREATE PUBLICATION pub FOR TABLE tab1, tab4 WITH (publish_via_partition_root = {via_root})")
        run_once(pg18_dsn, "pub", "s", target)  # the snapshot
        assert_matches_publication(conn, spark, target, "pub", context="after the snapshot")
        _run_workload(conn, spark, pg18_dsn, target, via_root, backlog)


def test_013_partition_via_root_on_postgresql_15(spark, pg15_dsn, tmp_path):
    """PostgreSQL 15 sends the leaf's Relation after the root's too (maybe_send_schema)."""
    target = str(tmp_path / "lake")
    with psycopg.connect(pg15_dsn, autocommit=True) as conn:
        conn.execute(SETUP)
        conn.execute("CREATE PUBLICATION pub FOR TABLE tab1, tab4 WITH (publish_via_partition_root = true)")
        run_once(pg15_dsn, "pub", "s", target)
        _run_workload(conn, spark, pg15_dsn, target, True, True)


def test_013_root_and_partition_in_one_publication_publish_once(spark, pg18_dsn, tmp_path):
    """013_partition.pl's pub_viaroot: the root, one of its partitions, and a partition whose root is
    not published. Changes go through the root once; tab3_1 publishes as itself; and a column
    added with a default on the root after a drop (the test's last ALTER) is followed."""
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(PARTITION_013_TAB2_TAB3 + """
            CREATE PUBLICATION pub FOR TABLE tab2, tab2_1, tab3_1 WITH (publish_via_partition_root = true);
            INSERT INTO tab2 VALUES (1);
        """)
        run_once(pg18_dsn, "pub", "s", target)
        conn.execute("INSERT INTO tab2 VALUES (0), (3), (5); INSERT INTO tab3 VALUES (1), (0), (3), (5)")
        run_once(pg18_dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="inserts")
        conn.execute("UPDATE tab2 SET a = 6 WHERE a = 5; UPDATE tab3 SET a = 6 WHERE a = 5;"
                     "UPDATE tab2 SET a = 2 WHERE a = 6; UPDATE tab3 SET a = 2 WHERE a = 6")
        conn.execute("ALTER TABLE tab2 DROP b, ADD COLUMN c text DEFAULT 'pub_tab2', ADD b text")
        conn.execute("INSERT INTO tab2 (a, b) VALUES (5, 'zzz'); INSERT INTO tab2 (a, b, c) VALUES (6, 'aaa', 'xxx_c')")
        conn.execute("UPDATE tab2 SET b = 'quux' WHERE a = 5; DELETE FROM tab2 WHERE a = 1")
        run_once(pg18_dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="updates, DDL on the root, more changes")
