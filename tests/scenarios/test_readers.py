"""Every table ``walspark run`` writes is read right by every engine that reads it, and refused by
the others — never read with wrong values.

One run copies eight small tables and applies a batch of changes to each (inserts, updates,
deletes, and at most one DDL per table: a rename, a drop, a drop and re-add, a widening, a name Parquet
refuses, deletion vectors on a table over the size rule). Each table then has only the Delta
features that its history asked for (``walspark.columnMapping`` says why column mapping is on),
and is read by delta-rs's default Arrow read, delta-rs's SQL engine, polars and DuckDB (its
``delta`` extension, a Python package); each read equals Spark's or raises. The matrix of which
reader reads which feature is docs/applying.md's "Readers" table, held here (``EXPECTED``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from walspark.spark.lake.tables import DELETION_VECTORS_MIN_ROWS

from .support import run_once

pytestmark = pytest.mark.spark

SETUP = """
CREATE TABLE plain (id int PRIMARY KEY, v int, s text);
CREATE TABLE renamed (id int PRIMARY KEY, a int, b text);
CREATE TABLE dropped (id int PRIMARY KEY, a int, b text);
CREATE TABLE readded (id int PRIMARY KEY, a int, b text);
CREATE TABLE awkward (id int PRIMARY KEY, "a b" int);
CREATE TABLE widened (id int PRIMARY KEY, a int);
CREATE TABLE stamps (id int PRIMARY KEY, ts timestamp);
CREATE TABLE big (id int PRIMARY KEY, v int, s text);
INSERT INTO plain SELECT g, g * 10, 's' || g FROM generate_series(1, 40) g;
INSERT INTO renamed SELECT g, g, 'b' || g FROM generate_series(1, 40) g;
INSERT INTO dropped SELECT g, g, 'b' || g FROM generate_series(1, 40) g;
INSERT INTO readded SELECT g, g, 'b' || g FROM generate_series(1, 40) g;
INSERT INTO awkward SELECT g, g FROM generate_series(1, 40) g;
INSERT INTO widened SELECT g, g FROM generate_series(1, 40) g;
INSERT INTO stamps SELECT g, TIMESTAMP '2024-02-29 12:00:00.5' + g * INTERVAL '1 hour' FROM generate_series(1, 40) g;
INSERT INTO big SELECT g, g, 'big' || g FROM generate_series(1, 3000) g;
ANALYZE;
CREATE PUBLICATION pub FOR ALL TABLES;
"""

CHANGES = """
UPDATE plain SET v = -v WHERE id % 3 = 0; DELETE FROM plain WHERE id % 7 = 0; INSERT INTO plain VALUES (41, 410, NULL);
ALTER TABLE renamed RENAME COLUMN b TO c;
UPDATE renamed SET c = 'after' WHERE id <= 5; DELETE FROM renamed WHERE id = 6; INSERT INTO renamed VALUES (41, 41, 'new');
ALTER TABLE dropped DROP COLUMN b;
UPDATE dropped SET a = -a WHERE id <= 5; DELETE FROM dropped WHERE id = 6; INSERT INTO dropped VALUES (41, 41);
ALTER TABLE readded DROP COLUMN b; ALTER TABLE readded ADD COLUMN b int;
UPDATE readded SET b = id * 2 WHERE id <= 5; DELETE FROM readded WHERE id = 6; INSERT INTO readded VALUES (41, 41, 82);
UPDATE awkward SET "a b" = -"a b" WHERE id <= 5; DELETE FROM awkward WHERE id = 6;
ALTER TABLE widened ALTER COLUMN a TYPE bigint;
UPDATE widened SET a = 5000000000 + id WHERE id <= 5; DELETE FROM widened WHERE id = 6;
UPDATE stamps SET ts = ts + INTERVAL '1 day' WHERE id <= 5; DELETE FROM stamps WHERE id = 6;
UPDATE big SET v = -v WHERE id % 100 = 0; DELETE FROM big WHERE id % 250 = 1; INSERT INTO big VALUES (3001, 1, 'x');
"""

#: The Delta features each table has after the run, and why column mapping is on where it is.
FEATURES: dict[str, tuple[set[str], str | None]] = {
    "plain": (set(), None),
    # column mapping under reader 3 (deletion vectors supported, not used: tables.COLUMN_MAPPING)
    "renamed": ({"columnMapping", "deletionVectors"}, "rename of column 'b' to 'c'"),
    "dropped": (set(), None),  # the Delta column stays (NULL from the drop on): nothing to rename
    "readded": ({"columnMapping", "deletionVectors"}, "drop of column 'b' (added again)"),
    "awkward": ({"columnMapping", "deletionVectors"}, "column name 'a b'"),
    "widened": ({"typeWidening"}, None),
    "stamps": ({"timestampNtz"}, None),
    "big": ({"deletionVectors"}, None),
}

READ, REFUSED = "reads", "refuses"

#: Which reader reads which table (docs/applying.md, "Readers").
EXPECTED: dict[str, dict[str, str]] = {
    "plain": {"delta-rs": READ, "delta-rs SQL": READ, "polars": READ, "DuckDB": READ},
    "renamed": {"delta-rs": REFUSED, "delta-rs SQL": READ, "polars": REFUSED, "DuckDB": READ},
    "dropped": {"delta-rs": READ, "delta-rs SQL": READ, "polars": READ, "DuckDB": READ},
    "readded": {"delta-rs": REFUSED, "delta-rs SQL": READ, "polars": REFUSED, "DuckDB": READ},
    "awkward": {"delta-rs": REFUSED, "delta-rs SQL": READ, "polars": REFUSED, "DuckDB": READ},
    "widened": {"delta-rs": REFUSED, "delta-rs SQL": REFUSED, "polars": REFUSED, "DuckDB": READ},
    "stamps": {"delta-rs": READ, "delta-rs SQL": READ, "polars": READ, "DuckDB": READ},
    "big": {"delta-rs": REFUSED, "delta-rs SQL": READ, "polars": READ, "DuckDB": READ},
}


def _delta_rs(path: str) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table()


def _delta_rs_sql(path: str) -> Any:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    reader = QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t")
    return pa.RecordBatchReader.from_stream(reader).read_all()


def _polars(path: str) -> Any:
    import polars as pl

    return pl.read_delta(path).to_arrow()


def _duckdb(path: str) -> Any:
    """DuckDB's ``delta_scan``, its extension loaded from the Python package that ships it (DuckDB
    would otherwise download it)."""
    import duckdb
    import duckdb_extension_delta

    extension = Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    with duckdb.connect() as con:
        con.load_extension(str(extension / "delta.duckdb_extension"))
        return con.execute("SELECT * FROM delta_scan(?)", [path]).to_arrow_table()


READERS: dict[str, Callable[[str], Any]] = {"delta-rs": _delta_rs, "delta-rs SQL": _delta_rs_sql, "polars": _polars,
                                           "DuckDB": _duckdb}  # fmt: skip


def _rows(table: Any, columns: list[str]) -> list[tuple]:
    """The rows of an Arrow table in ``columns``' order, sorted (a missing column is a wrong read)."""
    if sorted(table.column_names) != sorted(columns):
        return [("columns", *table.column_names)]
    values = [table.column(c).to_pylist() for c in columns]
    return sorted(zip(*values, strict=True), key=repr)


def _features(path: Path) -> tuple[set[str], dict[str, str], bool]:
    """The table's reader and writer features (its versions' implied ones named), its properties,
    and whether any data file has a deletion vector."""
    protocol: dict[str, Any] = {}
    config: dict[str, str] = {}
    vectors = False
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            entry = json.loads(line)
            protocol = entry.get("protocol", protocol)
            config = entry.get("metaData", {}).get("configuration", config)
            vectors |= bool(entry.get("add", {}).get("deletionVector"))
    named = set(protocol.get("readerFeatures", ())) | set(protocol.get("writerFeatures", ()))
    if protocol.get("minReaderVersion") == 2:
        named.add("columnMapping")
    return named & {"columnMapping", "deletionVectors", "typeWidening", "timestampNtz"}, config, vectors


def test_every_reader_reads_right_or_refuses(spark, pg18_dsn: str, tmp_path: Path) -> None:
    target = tmp_path / "lake"
    spark.conf.set(DELETION_VECTORS_MIN_ROWS, "1000")  # "big" only (3,000 rows; the others 40)
    try:
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            conn.execute(SETUP)
            run_once(pg18_dsn, "pub", "readers", str(target))  # the snapshot
            conn.execute(CHANGES)
            run_once(pg18_dsn, "pub", "readers", str(target))
    finally:
        spark.conf.unset(DELETION_VECTORS_MIN_ROWS)

    matrix: dict[str, dict[str, str]] = {}
    for table, (features, reason) in FEATURES.items():
        path = target / "public" / table
        found, config, vectors = _features(path)
        assert (found, config.get("walspark.columnMapping")) == (features, reason), table
        assert vectors == (table == "big"), table  # the readers meet real deletion vectors
        spark_read = spark.read.format("delta").load(str(path))
        columns = spark_read.columns
        want = sorted((tuple(r) for r in spark_read.collect()), key=repr)
        matrix[table] = {}
        for name, read in READERS.items():
            try:
                got = read(str(path))
            except Exception as exc:  # noqa: BLE001 - a refusal, whatever the reader's error type
                matrix[table][name] = REFUSED
                print(f"{table}: {name} refuses: {str(exc).splitlines()[0][:160]}")
                continue
            rows = _rows(got, columns)
            matrix[table][name] = READ if rows == want else f"WRONG: {rows[:3]} instead of {want[:3]}"
    print(json.dumps(matrix, indent=1))
    wrong = {t: {r: v for r, v in by.items() if v.startswith("WRONG")} for t, by in matrix.items()}
    assert not any(wrong.values()), wrong  # a reader that cannot read a table refuses it
    assert matrix == EXPECTED
