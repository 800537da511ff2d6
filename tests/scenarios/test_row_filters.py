"""Row filters, inheritance, partition roots and leaves, column lists: the target holds what is published.

PostgreSQL's table sync copies ``SELECT <published columns> FROM ONLY t WHERE <row filters ORed>``
and pgoutput streams the same rows (an UPDATE that moves a row into the filter arrives as an
INSERT, one that moves it out as a DELETE). Each scenario here runs ``walspark run --once`` at the
catch-up points of its workload and compares every Delta table with the publication (the
oracle of :mod:`tests.scenarios.support`), plus the TAP test's own expected rows where it gives
them. Workloads come from PostgreSQL's ``src/test/subscription/t/028_row_filter.pl`` and the
snapshot parts of ``031_column_list.pl`` (named in each test), plus walspark's own.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark


def _conn(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def _rows(spark, target: str, schema: str, table: str, *columns: str) -> list[tuple]:  # noqa: ANN001
    """The Delta table's rows (the given columns), sorted: for the TAP tests' literal expectations."""
    from walspark.spark.tables import table_path

    frame = spark.read.format("delta").load(table_path(target, schema, table))
    return sorted(tuple(r) for r in frame.select(*columns).collect())


class Pipeline:
    """One target fed by ``walspark run --once`` from one slot; ``check`` runs it and compares."""

    def __init__(self, spark, dsn: str, publication: str, target: str, slot: str = "s") -> None:  # noqa: ANN001
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
