"""Smoke scenario: the walking skeleton on a real PostgreSQL 18 and a real Spark with Delta.

PostgreSQL → pgoutput slot (SQL interface, binary changes) → walspark's decoder → Spark
DataFrame → Delta table → read back with Spark, independently of the write path.
"""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest

from tests.skeleton import run_smoke_pipeline

pytestmark = pytest.mark.spark


def test_changes_reach_a_delta_table_and_read_back_equal(pg18_dsn, spark, tmp_path):
    result = run_smoke_pipeline(pg18_dsn, spark, tmp_path, rows=300)

    # Inserts, updates and deletes all came through the slot.
    assert result.messages > 300
    with psycopg.connect(pg18_dsn) as conn:
        expected = conn.execute("SELECT id, customer, amount, status FROM shop.orders ORDER BY id").fetchall()
    assert len(expected) == 270  # 300 inserted, 30 deleted (id % 10 = 7)

    # Read the Delta table back through Spark alone, not through walspark's code.
    rows = spark.read.format("delta").load(str(tmp_path / "shop" / "orders")).orderBy("id").collect()
    assert [tuple(r) for r in rows] == expected
    assert rows[5].status == "shipped" and rows[2].status == "paid"
    assert isinstance(rows[0].amount, Decimal)
    assert spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'shop' / 'orders'}`").count() == 1
    assert result.matches


def test_embedded_server_is_logical_and_private(pg18):
    with psycopg.connect(pg18.dsn()) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        assert conn.execute("SHOW server_version_num").fetchone()[0].startswith("18")
    with psycopg.connect(pg18.socket_dsn()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_postgresql_15_is_available_for_protocol_v3(pg15):
    with psycopg.connect(pg15.dsn()) as conn:
        assert conn.execute("SHOW server_version_num").fetchone()[0].startswith("15")
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
