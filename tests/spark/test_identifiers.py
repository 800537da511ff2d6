"""Names with quotes, dots, spaces, upper case and non-ASCII letters replicate exactly, end to end.

Why: every layer handles names — SQL the snapshot and the catalog queries compose, the
walsender's command grammar (publication names), pgoutput's Relation messages, Spark column
expressions, Delta's column names (Parquet refuses `` ,;{}()\\n\\t=`` without column mapping)
and the folder of each Delta table. One table whose schema, name and columns are all awkward
goes through ``walspark run --once`` twice (snapshot, then streamed inserts, updates — one of
the key — and deletes) and must equal the source row by row, under a predictable path.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.rows import dict_row

pytestmark = pytest.mark.spark

SCHEMA = 'Sché"ma'
TABLE = "Tä'ble.1"
ODD_TABLE = "a/b:c%d"  # characters a folder name cannot hold as they are
PUBLICATION = "Pub 'ü' \"x\""
# Spaces, a comma, semicolon, braces, parentheses, '=', a tab and a newline: Parquet refuses all
# of them in column names unless Delta's column mapping is on.
COLUMNS = ["ÜberId", "Prix €", 'a"b', "名前", "MixedCase", "x ,;{}()=y", "tab\there", "new\nline"]


def _create(conn: psycopg.Connection) -> None:
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
    conn.execute(sql.SQL(
        "CREATE TABLE {} ({} int PRIMARY KEY, {} numeric(10, 2), {} text, {} text, {} int, {} text, {} text, {} text)"
    ).format(sql.Identifier(SCHEMA, TABLE), *map(sql.Identifier, COLUMNS)))
    conn.execute(sql.SQL("CREATE TABLE {} ({} int PRIMARY KEY, {} text)").format(
        sql.Identifier(SCHEMA, ODD_TABLE), sql.Identifier("Id"), sql.Identifier("Wert")))
    conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
        sql.Identifier(PUBLICATION), sql.Identifier(SCHEMA)))


def _insert(conn: psycopg.Connection, ids: range) -> None:
    query = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)").format(sql.Identifier(SCHEMA, TABLE))
    for i in ids:
        conn.execute(query, (i, Decimal(i) / 4, f"it's \"{i}\"", f"名前{i}", -i, "{;}", "\t", None if i % 3 else "é\n"))
    # No parameters with this table: psycopg would read the '%' of its name as a placeholder.
    conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'w' || g FROM generate_series({}, {}) g").format(
        sql.Identifier(SCHEMA, ODD_TABLE), sql.Literal(ids.start), sql.Literal(ids.stop - 1)))


def _run(target: str, dsn: str) -> None:
    from walspark.cli import commands  # noqa: F401  (registers the subcommands)
    from walspark.cli.main import cli

    result = CliRunner().invoke(cli, ["run", "--dsn", dsn, "--publication", PUBLICATION, "--slot", "odd_names",
                                      "--target", target, "--once", "--scd2", f"{SCHEMA}.{ODD_TABLE}"])
    assert result.exit_code == 0, (result.output, result.exception)


def _canon(rows: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str, ensure_ascii=False) for r in rows)


def _assert_equal(spark, conn: psycopg.Connection, path: Path, table: str, drop: tuple[str, ...] = ()) -> None:
    with conn.cursor(row_factory=dict_row) as cur:
        want = cur.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(SCHEMA, table))).fetchall()
    df = spark.read.format("delta").load(str(path))
    if drop and drop[-1] in df.columns:  # SCD2 columns arrive with the first streamed batch
        df = df.where(df["__END_AT"].isNull()).drop(*drop)
    assert df.columns == list(want[0].keys())  # the names exactly, in the source's order
    got = [r.asDict() for r in df.collect()]
    assert _canon(got) == _canon(want)


def test_awkward_identifiers_replicate_exactly(spark, pg18_dsn: str, tmp_path: Path) -> None:
    from walspark.storage.layout import TargetLayout

    target = str(tmp_path / "lake")
    # The documented mapping: names as they are, except what a folder cannot hold (%XX).
    main_path = tmp_path / "lake" / 'Sché"ma' / "Tä'ble.1"
    odd_path = tmp_path / "lake" / 'Sché"ma' / "a%2Fb%3Ac%25d"
    assert TargetLayout(target).table(SCHEMA, TABLE) == str(main_path)
    assert TargetLayout(target).table(SCHEMA, ODD_TABLE) == str(odd_path)

    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _create(conn)
        _insert(conn, range(1, 21))
        _run(target, pg18_dsn)  # snapshot
        _assert_equal(spark, conn, main_path, TABLE)
        _assert_equal(spark, conn, odd_path, ODD_TABLE, drop=("__START_AT", "__END_AT"))
        props = spark.sql(f"SHOW TBLPROPERTIES delta.`{main_path}`").collect()
        assert {r["key"]: r["value"] for r in props}["delta.columnMapping.mode"] == "name"
        plain = spark.sql(f"SHOW TBLPROPERTIES delta.`{odd_path}`").collect()  # its names need no mapping
        assert "delta.columnMapping.mode" not in {r["key"] for r in plain}

        main = sql.Identifier(SCHEMA, TABLE)
        uid, price, ab, name = (sql.Identifier(c) for c in COLUMNS[:4])
        with conn.transaction():
            _insert(conn, range(21, 31))
            conn.execute(sql.SQL("UPDATE {} SET {} = {} * 2, {} = 'ü''\"' WHERE {} <= 5").format(
                main, price, price, ab, uid))
            conn.execute(sql.SQL("UPDATE {} SET {} = {} + 1000 WHERE {} = 7").format(main, uid, uid, uid))
            conn.execute(sql.SQL("DELETE FROM {} WHERE {} BETWEEN 10 AND 12").format(main, uid))
        conn.execute(sql.SQL("UPDATE {} SET {} = NULL, {} = '更新' WHERE {} > 25").format(main, ab, name, uid))
        conn.execute(sql.SQL("UPDATE {} SET {} = 'v2' WHERE {} <= 3").format(
            sql.Identifier(SCHEMA, ODD_TABLE), sql.Identifier("Wert"), sql.Identifier("Id")))
        conn.execute(sql.SQL("DELETE FROM {} WHERE {} = 4").format(
            sql.Identifier(SCHEMA, ODD_TABLE), sql.Identifier("Id")))
        _run(target, pg18_dsn)  # streamed changes
        _assert_equal(spark, conn, main_path, TABLE)
        _assert_equal(spark, conn, odd_path, ODD_TABLE, drop=("__START_AT", "__END_AT"))
        history = spark.read.format("delta").load(str(odd_path)).where("Id = 1").count()
        assert history == 2  # SCD2 kept the old version of the updated row
