"""``walspark run --once`` end to end: snapshot, streaming through the data source, apply, evolve.

The Delta tables are read back with ``spark.read.format("delta")`` and compared with
``SELECT *`` of the source (nothing is written to the source while ``run`` runs, so both are at
the same LSN).
"""

from __future__ import annotations

import json
import random
import string

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.rows import dict_row

pytestmark = pytest.mark.spark

DDL = """
CREATE TABLE shop_items (id int PRIMARY KEY, qty int, name text, body text, doc jsonb);
ALTER TABLE shop_items ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE "Odd Table" ("Key" int PRIMARY KEY, "a b" text);
CREATE TABLE bag (a int, b text);
ALTER TABLE bag REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR ALL TABLES;
"""


def _canon(rows: list[dict], drop: tuple[str, ...] = ()) -> list[str]:
    out = []
    for r in rows:
        r = {k: (json.loads(v) if k == "doc" and isinstance(v, str) else v) for k, v in r.items() if k not in drop}
        out.append(json.dumps(r, sort_keys=True, default=str))
    return sorted(out)


def _equal(spark, conn, target: str, table: str, path: str, drop: tuple[str, ...] = (), where: str = "true") -> None:
    with conn.cursor(row_factory=dict_row) as cur:
        want = cur.execute(f"SELECT * FROM {table}").fetchall()
    got = [r.asDict() for r in spark.read.format("delta").load(f"{target}/{path}").where(where).collect()]
    assert _canon(got, drop) == _canon(want, drop)


def _run(target: str, dsn: str, *extra: str) -> None:
    from walspark.cli import commands  # noqa: F401  (registers the subcommands)
    from walspark.cli.main import cli

    result = CliRunner().invoke(
        cli, ["run", "--dsn", dsn, "--publication", "pub", "--slot", "run_slot", "--target", target, "--once",
              "--scd2", "public.Odd Table", *extra]
    )
    assert result.exit_code == 0, (result.output, result.exception)


def test_run_once_snapshot_then_changes_then_schema_change(spark, pg18_dsn, tmp_path):
    target = str(tmp_path / "lake")
    rnd = random.Random(5)
    body = "".join(rnd.choices(string.ascii_letters, k=300_000))
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(DDL)
        conn.execute("INSERT INTO shop_items SELECT g, g, 'n' || g, %s, '{\"a\": 1}' FROM generate_series(1, 50) g", (body,))
        conn.execute("""INSERT INTO "Odd Table" VALUES (1, 'x'), (2, 'y')""")
        conn.execute("INSERT INTO bag VALUES (1, 'a'), (1, 'a'), (2, NULL)")
        _run(target, pg18_dsn)  # no slot yet: the snapshot copies everything
        _equal(spark, conn, target, "shop_items", "public/shop_items")

        with conn.transaction():
            conn.execute("UPDATE shop_items SET qty = qty + 1 WHERE id <= 20")  # body unchanged TOAST
            conn.execute("DELETE FROM shop_items WHERE id > 45")
            conn.execute("INSERT INTO shop_items VALUES (100, 1, 'new', %s, '{\"b\": [1, 2]}')", (body[::-1],))
        conn.execute("UPDATE shop_items SET qty = -qty WHERE id <= 10")
        conn.execute("UPDATE shop_items SET id = id + 1000 WHERE id = 3")
        conn.execute("""UPDATE "Odd Table" SET "a b" = 'z' WHERE "Key" = 1""")
        conn.execute("""DELETE FROM "Odd Table" WHERE "Key" = 2""")
        conn.execute("DELETE FROM bag WHERE a = 2")
        conn.execute("UPDATE bag SET b = 'c' WHERE ctid = (SELECT min(ctid) FROM bag)")
        _run(target, pg18_dsn)
        _equal(spark, conn, target, "shop_items", "public/shop_items")
        # SCD2 over the snapshot's copy: the current versions equal the source.
        scd2 = ("__START_AT", "__END_AT")
        _equal(spark, conn, target, '"Odd Table"', "public/Odd Table", scd2, where="__END_AT IS NULL")
        odd = spark.read.format("delta").load(f"{target}/public/Odd Table").orderBy("Key", "__START_AT.lsn").collect()
        assert [(r["Key"], r["a b"], r["__END_AT"] is None) for r in odd] == [
            (1, "x", False), (1, "z", True), (2, "y", False)]
        _equal(spark, conn, target, "bag", "public/bag")

        conn.execute("ALTER TABLE shop_items ADD COLUMN note text")
        conn.execute("INSERT INTO shop_items VALUES (200, 2, 'with note', 'short', NULL, 'hello')")
        conn.execute("UPDATE shop_items SET note = 'n' WHERE id = 1")
        conn.execute("TRUNCATE bag")
        conn.execute("INSERT INTO bag VALUES (9, 'z')")
        _run(target, pg18_dsn)
        _equal(spark, conn, target, "shop_items", "public/shop_items")
        _equal(spark, conn, target, "bag", "public/bag")
        progress = spark.read.format("delta").load(f"{target}/_walspark/progress")
        assert progress.where("table_name = 'shop_items'").count() >= 2
    # No batch was applied twice: each batch's commit (MERGE, or append) names its batch, once.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/shop_items`").where(
        "userMetadata LIKE '%batch_id%'").collect()
    batches = [json.loads(h.userMetadata)["batch_id"] for h in history]
    assert batches and len(batches) == len(set(batches))
