"""The initial snapshot against a real PostgreSQL 18 and a real Spark + Delta (no mocks).

What is proved here: values arrive exactly (binary COPY path == the text codecs' reading of the
same rows); a table is read by as many Spark tasks as CTID ranges were planned; the snapshot plus
the slot's stream from the consistent point equals the source at the end, with writers running
before, during and after the snapshot (every row exactly once); a failed snapshot leaves no
complete-looking target and a rerun repairs it; a partitioned table published via its root
lands as one Delta table.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")
pytest.importorskip("delta")

import psycopg

from walspark.protocol import Decoder, Delete, Insert, Update
from walspark.source.slots import get_slot
from walspark.source.sqlinterface import slot_changes
from walspark.spark.lake.tables import DELETION_VECTORS_MIN_ROWS
from walspark.spark.snapshot.initial import (
    SnapshotProgress,
    plan_partitions,
    publication_tables,
    read_record,
    run_snapshot,
)
from walspark.spark.snapshot.pgsnapshot import SnapshotSourcePlan
from walspark.storage.layout import TargetLayout
from walspark.values import (
    TYPE_CATALOG_QUERY,
    TypeRegistry,
    arrow_schema,
    column_codecs,
    register_catalog_rows,
)

from .support import has_deletion_vectors


def _conn(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def _delta_arrow(spark, path: str, order: str) -> pa.Table:
    return spark.read.format("delta").load(path).orderBy(order).toArrow()


def _expected_arrow(conn: psycopg.Connection[Any], schema: str, table: str, order: str) -> pa.Table:
    """The source table read as *text* and decoded by the text codecs: an independent path."""
    registry = TypeRegistry()
    register_catalog_rows(registry, conn.execute(TYPE_CATALOG_QUERY).fetchall())
    cols = conn.execute(
        "SELECT attname::text, atttypid::int8, atttypmod FROM pg_attribute WHERE attrelid = %s::regclass"
        " AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (f'"{schema}"."{table}"',)).fetchall()
    codecs = column_codecs(cols, registry)
    schema_ = arrow_schema(cols, registry)
    for name, value in (("DateStyle", "ISO"), ("IntervalStyle", "postgres"), ("extra_float_digits", "1"),
                        ("bytea_output", "hex")):
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    with conn.cursor() as cur, cur.copy(
            f'COPY (SELECT * FROM "{schema}"."{table}" ORDER BY "{order}") TO STDOUT (FORMAT text)') as copy:
        rows = list(copy.rows())
    arrays = [c.arrow_from_text([None if v is None else v.encode() for v in col])
              for c, col in zip(codecs, zip(*rows))]
    return pa.Table.from_arrays(arrays, schema=schema_)


def _same(actual: pa.Table, expected: pa.Table) -> None:
    plain = pa.schema([pa.field(f.name, f.type) for f in expected.schema])
    actual = actual.cast(plain)
    expected = expected.cast(plain)
    assert actual.column_names == expected.column_names
    for name in expected.column_names:
        assert actual[name].to_pylist() == expected[name].to_pylist(), name


MANY_TYPES = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE "Many Types" (
    id int PRIMARY KEY, small int2, big int8, f8 float8, f4 float4, n numeric(14, 3), nu numeric,
    t text, "Odd, (name)" varchar(20), b bool, d date, ts timestamp, tstz timestamptz, by bytea,
    u uuid, j jsonb, ia int4[], ta text[], m mood, iv interval
);
INSERT INTO "Many Types"
SELECT g, (g % 30000)::int2, g::int8 * 1000000007, g / 7.0, (g / 3.0)::float4, (g / 3.0)::numeric(14, 3),
       CASE WHEN g % 5 = 0 THEN 'NaN'::numeric ELSE (g::numeric ^ 3) / 7 END,
       'täxt ' || g || E'\\n"q"', 'v' || g, g % 2 = 0, DATE '2000-01-01' + g, TIMESTAMP '2020-02-29 12:00:00.123456' + g * INTERVAL '1 minute',
       TIMESTAMPTZ '1999-12-31 23:59:59.5+05' + g * INTERVAL '1 second', decode(lpad(to_hex(g), 8, '0'), 'hex'),
       md5(g::text)::uuid, jsonb_build_object('k', g, 'a', jsonb_build_array(1, 'x')), ARRAY[g, NULL, -g],
       ARRAY['a' || g, NULL], (ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::mood, g * INTERVAL '1 day 3 hours'
  FROM generate_series(1, 3000) g;
INSERT INTO "Many Types" (id) VALUES (0);  -- all NULLs
"""


def test_many_types_snapshot_exactly(spark, pg18_dsn: str, tmp_path: Path) -> None:
    with _conn(pg18_dsn) as conn:
        conn.execute(MANY_TYPES)
        conn.execute('CREATE PUBLICATION pub FOR TABLE "Many Types"')
        seen: list[SnapshotProgress] = []
        result = run_snapshot(spark, pg18_dsn, "pub", "snap_types", str(tmp_path), partition_pages=20,
                              progress=seen.append)
        expected = _expected_arrow(conn, "public", "Many Types", "id")
    [table] = result.tables
    assert table.rows == 3001 and table.tasks > 1
    assert seen and seen[-1].done and seen[-1].rows_copied == 3001
    _same(_delta_arrow(spark, table.path, "id"), expected)
    props = spark.sql(f"SHOW TBLPROPERTIES delta.`{table.path}`").collect()
    props = {r[0]: r[1] for r in props}
    assert props["delta.columnMapping.mode"] == "name"  # a name Parquet refuses without it
    assert props["walspark.columnMapping"] == "column name 'Odd, (name)'"
    record = read_record(TargetLayout(str(tmp_path)))
    assert record is not None and record.complete and record.consistent_point == result.consistent_point


def test_ctid_ranges_run_as_tasks(spark, pg18_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with _conn(pg18_dsn) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, pad text)")
        conn.execute("INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g")
        conn.execute("ANALYZE t")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        [plan] = publication_tables(conn, "pub")
        ranges = plan_partitions(plan, parallelism=2, partition_pages=17)
        assert plan.pages > 17 * 10 and len(ranges) == -(-plan.pages // 17)
        assert ranges[0].start == 0 and ranges[-1].end is None
        assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
        default = plan_partitions(plan, parallelism=4, partition_rows=5000, small_rows=1000)
        assert len(default) >= 4
        from walspark.spark.snapshot import initial

        monkeypatch.setattr(initial, "MAX_TASK_PAGES", 10)  # wide rows: at most that many pages a task
        capped = plan_partitions(plan, parallelism=1, partition_rows=10**9, small_rows=1000)
        assert len(capped) == -(-plan.pages // 10), (len(capped), plan.pages)
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        name = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        source = SnapshotSourcePlan(pg18_dsn, name, plan.columns, plan.binary, ranges)
        from walspark.spark.snapshot.pgsnapshot import register

        register(spark)
        df = spark.read.format("pgsnapshot").option("plan", source.to_json()).load()
        assert df.rdd.getNumPartitions() == len(ranges)
        ids = sorted(r.id for r in df.select("id").collect())
        assert ids == list(range(1, 20001))
        conn.execute("COMMIT")


def _decode_stream(dsn: str, slot: str, publication: str) -> list[tuple[str, int, int | None, int | None]]:
    """(op, id, val, batch) for every change the slot streams, in commit order."""
    out = []
    decoder = Decoder(protocol_version=1)
    with _conn(dsn) as conn:
        for lsn, data in slot_changes(conn, slot, {"proto_version": "1", "publication_names": publication}):
            msg = decoder.decode(data, lsn=lsn)

            def ints(tup):
                return [None if v is None else int(v) for v in tup.values]

            if isinstance(msg, Insert):
                i, v, b = ints(msg.new_tuple)
                out.append(("I", i, v, b))
            elif isinstance(msg, Update):
                i, v, b = ints(msg.new_tuple)
                out.append(("U", i, v, b))
            elif isinstance(msg, Delete):
                out.append(("D", ints(msg.key_tuple)[0], None, None))
    return out


def test_snapshot_plus_stream_equals_source_with_concurrent_writers(spark, pg18_dsn: str, tmp_path: Path) -> None:
    with _conn(pg18_dsn) as conn:
        conn.execute("CREATE TABLE w (id int PRIMARY KEY, val int NOT NULL, batch int NOT NULL)")
        conn.execute("INSERT INTO w SELECT g, g, -1 FROM generate_series(1, 30000) g")
        conn.execute("CREATE PUBLICATION pub FOR TABLE w")
    stop = threading.Event()
    committed = [0]
    errors: list[BaseException] = []

    def writer() -> None:
        rng = random.Random(8)
        next_id = 100_000
        try:
            with _conn(pg18_dsn) as wc:
                while not stop.is_set():
                    batch = committed[0]
                    with wc.transaction():
                        for _ in range(5):
                            op = rng.random()
                            if op < 0.4:
                                next_id += 1
                                wc.execute("INSERT INTO w VALUES (%s, %s, %s)", (next_id, batch, batch))
                            elif op < 0.8:
                                wc.execute("UPDATE w SET val = val + 1, batch = %s WHERE id = %s",
                                           (batch, rng.randint(1, next_id)))
                            else:
                                wc.execute("DELETE FROM w WHERE id = %s", (rng.randint(1, next_id),))
                    committed[0] += 1
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while committed[0] < 20:  # writes before the slot exists
            threading.Event().wait(0.01)
        result = run_snapshot(spark, pg18_dsn, "pub", "snap_cdc", str(tmp_path), partition_pages=8)
        during = committed[0]
        target = committed[0] + 20
        while committed[0] < target and not errors:  # writes after the snapshot
            threading.Event().wait(0.01)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    [table] = result.tables
    assert table.tasks > 10
    rows = {r["id"]: (r["val"], r["batch"]) for r in spark.read.format("delta").load(table.path).collect()}
    assert len(rows) == table.rows
    changes = _decode_stream(pg18_dsn, "snap_cdc", "pub")
    assert changes, "the stream from the consistent point must hold the writes after the snapshot"
    # Writes committed while the snapshot ran reached the target through the stream or the copy.
    assert any(b is not None and b < during for _, _, _, b in changes)
    assert any(b is not None and b >= 0 for b in (v[1] for v in rows.values()))
    state = dict(rows)
    for op, i, v, b in changes:
        if op == "I":
            assert i not in state, f"insert of id {i} already in the snapshot: a duplicate"
            state[i] = (v, b)
        elif op == "U":
            assert i in state, f"update of id {i} missing from snapshot + stream: a gap"
            state[i] = (v, b)
        else:
            assert i in state, f"delete of id {i} missing from snapshot + stream: a gap"
            del state[i]
    with _conn(pg18_dsn) as conn:
        final = {i: (v, b) for i, v, b in conn.execute("SELECT id, val, batch FROM w").fetchall()}
    assert state == final


def test_failed_snapshot_then_rerun_is_complete(spark, pg18_dsn: str, tmp_path: Path) -> None:
    with _conn(pg18_dsn) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, x text)")
        conn.execute("CREATE TABLE b (id int PRIMARY KEY, x text)")
        conn.execute("INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 5000) g")
        conn.execute("INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 5000) g")
        conn.execute("CREATE TABLE e (id int PRIMARY KEY, x text)")  # empty: one task, an empty Delta table
        conn.execute("CREATE PUBLICATION pub FOR TABLE a, b, e")
        with pytest.raises(Exception, match="fails on purpose"):
            run_snapshot(spark, pg18_dsn, "pub", "snap_fail", str(tmp_path), partition_pages=4,
                         fail_partition=("public.b", 3))
        record = read_record(TargetLayout(str(tmp_path)))
        assert record is not None and not record.complete and record.slot == "snap_fail"
        assert json.loads((tmp_path / "_walspark" / "snapshot.json").read_text())["state"] == "in_progress"
        # A crash would have left the slot behind: recreate it to prove the rerun cleans it up.
        conn.execute("SELECT pg_create_logical_replication_slot('snap_fail', 'pgoutput')")
        conn.execute("INSERT INTO b VALUES (5001, 'late')")
        conn.execute("ANALYZE a, b, e")  # the estimate that decides on deletion vectors
        spark.conf.set(DELETION_VECTORS_MIN_ROWS, "1000")
        try:
            result = run_snapshot(spark, pg18_dsn, "pub", "snap_fail", str(tmp_path), partition_pages=4)
        finally:
            spark.conf.unset(DELETION_VECTORS_MIN_ROWS)
        assert get_slot(conn, "snap_fail").confirmed_flush_lsn == result.consistent_point
    assert read_record(TargetLayout(str(tmp_path))).complete
    counts = {t.table: t.rows for t in result.tables}
    assert counts == {"a": 5000, "b": 5001, "e": 0}
    assert spark.read.format("delta").load(str(tmp_path / "public" / "e")).columns == ["id", "x"]
    b = spark.read.format("delta").load(str(tmp_path / "public" / "b"))
    assert b.count() == 5001 and b.where("id = 5001").first()["x"] == "late"
    vectors = {t: has_deletion_vectors(spark, str(tmp_path / "public" / t)) for t in "abe"}
    assert vectors == {"a": True, "b": True, "e": False}
    # A second run sees the complete record and does nothing.
    again = run_snapshot(spark, pg18_dsn, "pub", "snap_fail", str(tmp_path))
    assert again.skipped and again.consistent_point == result.consistent_point


def test_partitioned_table_via_root_lands_as_one_table(spark, pg18_dsn: str, tmp_path: Path) -> None:
    with _conn(pg18_dsn) as conn:
        conn.execute("CREATE TABLE m (id int, region text, v numeric(8, 2), PRIMARY KEY (id, region))"
                     " PARTITION BY LIST (region)")
        for r in ("eu", "us", "asia"):
            conn.execute(f"CREATE TABLE m_{r} PARTITION OF m FOR VALUES IN ('{r}')")
        conn.execute("INSERT INTO m SELECT g, (ARRAY['eu', 'us', 'asia'])[1 + g % 3], g / 4.0"
                     " FROM generate_series(1, 9000) g")
        conn.execute("CREATE PUBLICATION pub FOR TABLE m WITH (publish_via_partition_root = true)")
        result = run_snapshot(spark, pg18_dsn, "pub", "snap_part", str(tmp_path), partition_pages=5)
        expected = _expected_arrow(conn, "public", "m", "id")
    [table] = result.tables
    assert (table.schema, table.table, table.rows) == ("public", "m", 9000)
    assert table.tasks >= 3
    assert sorted(p.name for p in (tmp_path / "public").iterdir()) == ["m"]
    _same(_delta_arrow(spark, table.path, "id"), expected)


def test_cli_prints_progress_and_consistent_point(spark, pg18_dsn: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from walspark.cli import commands  # noqa: F401  (registers the subcommands)
    from walspark.cli.main import cli
    from walspark.protocol import format_lsn

    with _conn(pg18_dsn) as conn:
        conn.execute("CREATE TABLE c (id int PRIMARY KEY)")
        conn.execute("INSERT INTO c SELECT generate_series(1, 100)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE c")
        args = ["snapshot", "--dsn", pg18_dsn, "--publication", "pub", "--slot", "snap_cli", "--target", str(tmp_path)]
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 0, out.output
        point = get_slot(conn, "snap_cli").confirmed_flush_lsn
    assert "public.c: done, 100 rows" in out.output
    assert f"consistent point {format_lsn(point)} (slot snap_cli)" in out.output
    assert spark.read.format("delta").load(str(tmp_path / "public" / "c")).count() == 100


def test_copy_splitters_agree(pg18_dsn: str) -> None:
    """The compiled, the vectorised and the field-by-field splitters read a real binary COPY alike."""
    from walspark.compiled import speedups
    from walspark.spark.snapshot.pgsnapshot import copy_columns, split_rows, split_rows_slow, strip_copy_header

    with _conn(pg18_dsn) as conn, conn.cursor() as cur:
        query = ("COPY (SELECT g, CASE WHEN g % 3 = 0 THEN NULL ELSE repeat('x', g % 4) END, ''::text, NULL::int"
                 " FROM generate_series(1, 500) g) TO STDOUT (FORMAT binary)")
        with cur.copy(query) as copy:
            chunks = [bytes(c) for c in copy]
    chunks[0] = strip_copy_header(chunks[0])
    chunks = [c for c in chunks if c and c != b"\xff\xff"]
    fast = split_rows(chunks, 4)
    slow = split_rows_slow(chunks, 4)
    assert [a.to_pylist() for a in fast] == [a.to_pylist() for a in slow]
    assert fast[1].null_count == 166 and fast[2].to_pylist() == [b""] * 500 and fast[3].null_count == 500
    assert speedups is not None, "walspark_c is not installed: run ./dev setup"
    assert speedups.split_copy_rows(chunks, 4) is not None
    compiled = copy_columns(chunks, 4)
    for array in compiled:
        array.validate(full=True)
    assert [a.to_pylist() for a in compiled] == [a.to_pylist() for a in slow]
    assert [a.null_count for a in compiled] == [a.null_count for a in fast]


@given(st.lists(st.binary(max_size=40), max_size=6), st.integers(0, 4))
@settings(max_examples=300, deadline=None)
def test_compiled_copy_splitter_takes_only_whole_rows(chunks: list[bytes], ncols: int) -> None:
    """On any bytes the compiled splitter either refuses (None) or reads what the reference reads."""
    from walspark.compiled import speedups
    from walspark.spark.snapshot.pgsnapshot import CopyFormatError, split_rows

    assert speedups is not None, "walspark_c is not installed: run ./dev setup"
    split = speedups.split_copy_rows(chunks, ncols)
    try:
        expected = [a.to_pylist() for a in split_rows(chunks, ncols)]
    except CopyFormatError:
        assert split is None, (chunks, ncols, split)
        return
    assert split is not None, (chunks, ncols)
    got = [pa.Array.from_buffers(pa.binary(), len(chunks), [pa.py_buffer(v), pa.py_buffer(o), pa.py_buffer(d)], nulls)
           for nulls, v, o, d in split]
    assert [a.to_pylist() for a in got] == expected


def test_fixed_width_path_matches_codecs(pg18_dsn: str) -> None:
    """The numpy path for fixed-width types gives the codecs' arrays, and declines on sentinels."""
    from walspark.spark.snapshot.pgsnapshot import fixed_width_array, split_rows, strip_copy_header

    exprs = {
        "bool": "g % 2 = 0", "int2": "(g - 50)::int2", "int4": "g * -99991", "int8": "g::int8 << 40",
        "float4": "(g / 3.0)::float4", "float8": "CASE WHEN g = 7 THEN 'NaN'::float8 ELSE g / 7.0 END",
        "date": "DATE '1850-03-01' + g * 400", "timestamp": "TIMESTAMP '0044-03-15 BC' + g * INTERVAL '9 years 1 us'",
        "timestamptz": "TIMESTAMPTZ '2262-04-11 23:47:16.854775+00' - g * INTERVAL '1 day'",
    }
    registry = TypeRegistry()
    with _conn(pg18_dsn) as conn, conn.cursor() as cur:
        for name, expr in exprs.items():
            for extra in ("", f" UNION ALL SELECT NULL::{name}", f" UNION ALL SELECT 'infinity'::{name}"):
                if "infinity" in extra and name not in ("date", "timestamp", "timestamptz", "float8"):
                    continue
                query = f"COPY (SELECT ({expr})::{name} FROM generate_series(1, 300) g{extra}) TO STDOUT (FORMAT binary)"
                with cur.copy(query) as copy:
                    chunks = [bytes(c) for c in copy]
                chunks[0] = strip_copy_header(chunks[0])
                [raw] = split_rows([c for c in chunks if c and c != b"\xff\xff"], 1)
                oid = conn.execute(f"SELECT '{name}'::regtype::oid::int8").fetchone()[0]
                codec = column_codecs([("v", oid, -1)], registry, binary=True)[0]
                fast = fixed_width_array(raw, codec.oid, codec.arrow_type)
                expected = codec.arrow_from_binary(raw.to_pylist())
                if "infinity" in extra and name != "float8":
                    assert fast is None, name
                else:
                    assert fast is not None and fast.type == expected.type, (name, extra)
                    if pa.types.is_temporal(fast.type):  # BC values have no Python datetime
                        storage = pa.int32() if pa.types.is_date32(fast.type) else pa.int64()
                        fast, expected = fast.cast(storage), expected.cast(storage)
                    assert [repr(v) for v in fast.to_pylist()] == [repr(v) for v in expected.to_pylist()], name


def test_columns_are_the_published_ones(spark, pg18_dsn: str, tmp_path: Path) -> None:
    """Column lists and generated columns: the snapshot has exactly the columns pgoutput streams."""
    with _conn(pg18_dsn) as conn:
        conn.execute("CREATE TABLE g (id int PRIMARY KEY, a int, secret text,"
                     " twice int GENERATED ALWAYS AS (a * 2) STORED)")
        conn.execute("INSERT INTO g (id, a, secret) SELECT g, g, 'x' FROM generate_series(1, 50) g")
        conn.execute("CREATE PUBLICATION plain FOR TABLE g")
        conn.execute("CREATE PUBLICATION listed FOR TABLE g (id, a)")
        conn.execute("CREATE PUBLICATION gen FOR TABLE g WITH (publish_generated_columns = stored)")
        cols = {}
        for pub in ("plain", "listed", "gen"):
            result = run_snapshot(spark, pg18_dsn, pub, f"snap_{pub}", str(tmp_path / pub))
            cols[pub] = spark.read.format("delta").load(result.tables[0].path).columns
    assert cols == {"plain": ["id", "a", "secret"], "listed": ["id", "a"], "gen": ["id", "a", "secret", "twice"]}


def test_snapshot_on_postgresql_15(spark, pg15_dsn: str, tmp_path: Path) -> None:
    with _conn(pg15_dsn) as conn:
        conn.execute("CREATE TABLE v (id int PRIMARY KEY, n numeric, t timestamptz)")
        conn.execute("INSERT INTO v SELECT g, g / 3.0, TIMESTAMPTZ '2001-01-01' + g * INTERVAL '1h'"
                     " FROM generate_series(1, 4000) g")
        conn.execute("CREATE PUBLICATION pub FOR TABLE v")
        result = run_snapshot(spark, pg15_dsn, "pub", "snap15", str(tmp_path), partition_pages=5)
        assert get_slot(conn, "snap15").confirmed_flush_lsn == result.consistent_point
        expected = _expected_arrow(conn, "public", "v", "id")
    assert result.tables[0].tasks > 1
    _same(_delta_arrow(spark, result.tables[0].path, "id"), expected)


def test_copy_query_reads_only_the_table_and_ands_the_filter_with_the_range(pg18_dsn: str) -> None:
    """``ONLY`` and the row filter in parentheses, so a filter's own OR cannot escape the CTID range."""
    from walspark.spark.snapshot.pgsnapshot import copy_query

    with _conn(pg18_dsn) as conn:
        text = copy_query(["a", 'we"ird'], "s", "t", 3, 9, binary=True, row_filter="(a = 1) OR (a = 2)").as_string(conn)
        plain = copy_query(["a"], "s", "t", 0, None, binary=False).as_string(conn)
    assert text == ('COPY (SELECT "a", "we""ird" FROM ONLY "s"."t" WHERE ((a = 1) OR (a = 2)) AND '
                    "ctid >= '(3,0)'::tid AND ctid < '(9,0)'::tid) TO STDOUT (FORMAT binary)")
    assert plain == 'COPY (SELECT "a" FROM ONLY "s"."t") TO STDOUT (FORMAT text)'


def test_publication_tables_combine_filters_like_table_sync(pg18_dsn: str) -> None:
    """Filters ORed over publications, none if one publication has none, ONLY for inheritance
    parents' children as their own tables, and a column-list conflict refused."""
    from walspark.spark.snapshot.initial import SnapshotError

    with _conn(pg18_dsn) as conn:
        conn.execute("""
            CREATE TABLE f (id int PRIMARY KEY, a int, b text);
            CREATE TABLE h (id int PRIMARY KEY, a int);
            CREATE TABLE hc () INHERITS (h);
            CREATE PUBLICATION p1 FOR TABLE f WHERE (a > 1), h (id) WHERE (id < 5);
            CREATE PUBLICATION p2 FOR TABLE f WHERE (b = 'x' OR b IS NULL);
            CREATE PUBLICATION p3 FOR TABLE f;
            CREATE PUBLICATION p4 FOR TABLE h (id, a);
        """)
        plans = {p.table: p for p in publication_tables(conn, "p1, p2")}
        assert set(plans) == {"f", "h", "hc"}
        assert plans["f"].row_filter == "((a > 1)) OR (((b = 'x'::text) OR (b IS NULL)))"
        assert plans["hc"].row_filter == "((id < 5))" and [c[0] for c in plans["hc"].columns] == ["id"]
        assert [r.table for r in plans["h"].relations] == ["h"]
        assert {p.table: p.row_filter for p in publication_tables(conn, ["p1", "p2,p3"])}["f"] is None
        with pytest.raises(SnapshotError, match="different column lists"):
            publication_tables(conn, "p1,p4")


def test_generated_columns_are_not_copied_before_18(spark, pg15_dsn: str, tmp_path: Path) -> None:
    """PostgreSQL 15's attnames lists a stored generated column for a publication without a column
    list, but its pgoutput never sends one: the snapshot copies what the stream sends."""
    with _conn(pg15_dsn) as conn:
        conn.execute("CREATE TABLE g (id int PRIMARY KEY, a int, twice int GENERATED ALWAYS AS (a * 2) STORED)")
        conn.execute("INSERT INTO g (id, a) SELECT x, x FROM generate_series(1, 10) x")
        conn.execute("CREATE PUBLICATION pub FOR TABLE g WHERE (id > 3)")
        assert conn.execute("SELECT attnames FROM pg_publication_tables").fetchone()[0] == ["id", "a", "twice"]
        result = run_snapshot(spark, pg15_dsn, "pub", "snap_gen15", str(tmp_path))
    frame = spark.read.format("delta").load(result.tables[0].path)
    assert frame.columns == ["id", "a"] and sorted(r.id for r in frame.collect()) == list(range(4, 11))


def _strip_mapping(value: Any) -> Any:
    """A Delta schema without column mapping's per-table ids and physical names."""
    if isinstance(value, dict):
        return {k: _strip_mapping(v) for k, v in value.items() if not k.startswith("delta.columnMapping.")}
    if isinstance(value, list):
        return [_strip_mapping(v) for v in value]
    return value


def _log_facts(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    table = DeltaTable(path)
    first = [json.loads(line) for line in (Path(path) / "_delta_log" / f"{0:020}.json").read_text().splitlines()]
    [info] = [e["commitInfo"] for e in first if "commitInfo" in e]
    return {"engine": info.get("engineInfo", ""), "protocol": table.protocol(),
            "configuration": table.metadata().configuration,
            "schema": _strip_mapping(json.loads(table.schema().to_json()))}


def test_small_tables_copied_from_the_driver_equal_spark_copies(spark, pg18_dsn: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A small table is written by delta-rs from the driver exactly as Spark's CREATE TABLE AS
    SELECT writes it (schema with the columns' catalog facts, protocol, properties, rows); a
    table with a type delta-rs would protect differently (timestamp without time zone), or with
    a name that needs column mapping, is left to Spark.

    A table of several tasks (four here), with deletion vectors (the size rule at one
    row): its tasks write its files with delta-rs and the driver commits them on the table Spark
    made, and it equals Spark's copy too — one file per task, each with its statistics."""
    from walspark.spark.lake.tables import DELETION_VECTORS_MIN_ROWS
    from walspark.spark.snapshot.driver_copy import DRIVER_SNAPSHOT
    from walspark.spark.snapshot.task_write import STAGING, TASK_WRITES

    with _conn(pg18_dsn) as conn:
        conn.execute(MANY_TYPES)
        conn.execute('CREATE TABLE "Plain Types" AS SELECT * FROM "Many Types"')
        conn.execute('ALTER TABLE "Plain Types" DROP COLUMN ts, DROP COLUMN "Odd, (name)", ADD PRIMARY KEY (id)')  # attnums with gaps
        conn.execute('INSERT INTO "Plain Types" (id, t) SELECT g, repeat(\'x\', 500) FROM generate_series(100000, 100100) g')
        conn.execute('CREATE PUBLICATION pub FOR TABLE "Many Types", "Plain Types"')
        conn.execute('CREATE PUBLICATION plain FOR TABLE "Plain Types"')
        run_snapshot(spark, pg18_dsn, "pub", "snap_driver", str(tmp_path / "driver"))
        pages = conn.execute("""SELECT pg_relation_size('"Plain Types"') / 8192""").fetchone()[0]
        per_task = max(1, pages // 4)
        spark.conf.set(DELETION_VECTORS_MIN_ROWS, "1")
        try:
            run_snapshot(spark, pg18_dsn, "plain", "snap_tasks", str(tmp_path / "tasks"), partition_pages=per_task)
            monkeypatch.setenv(DRIVER_SNAPSHOT, "0")
            monkeypatch.setenv(TASK_WRITES, "0")
            run_snapshot(spark, pg18_dsn, "plain", "snap_spark_tasks", str(tmp_path / "spark-tasks"),
                         partition_pages=per_task)  # fmt: skip
        finally:
            spark.conf.unset(DELETION_VECTORS_MIN_ROWS)
        run_snapshot(spark, pg18_dsn, "pub", "snap_spark", str(tmp_path / "spark"))
        expected = {t: _expected_arrow(conn, "public", t, "id") for t in ("Many Types", "Plain Types")}
    for ours_side, theirs_side, tables in (("driver", "spark", ("Plain Types", "Many Types")),
                                           ("tasks", "spark-tasks", ("Plain Types",))):  # fmt: skip
        for table in tables:
            engine = "Apache-Spark" if table == "Many Types" or ours_side == "tasks" else "delta-rs"
            ours, theirs = (_log_facts(str(tmp_path / side / "public" / table)) for side in (ours_side, theirs_side))
            assert ours["engine"].startswith(engine) and theirs["engine"].startswith("Apache-Spark")
            assert ours["protocol"] == theirs["protocol"]
            assert ours["configuration"] == theirs["configuration"]
            assert ours["schema"] == theirs["schema"]
            for side in (ours_side, theirs_side):
                _same(_delta_arrow(spark, str(tmp_path / side / "public" / table), "id"), expected[table])
    tasks = tmp_path / "tasks" / "public" / "Plain Types"
    assert json.loads(_log_facts(str(tasks))["configuration"].get("delta.enableDeletionVectors", "false"))
    committed = [json.loads(line) for line in (tasks / "_delta_log" / f"{1:020}.json").read_text().splitlines()]
    adds = [e["add"] for e in committed if "add" in e]
    assert next(e["commitInfo"]["engineInfo"] for e in committed if "commitInfo" in e).startswith("delta-rs")
    assert len(adds) == -(-pages // per_task) >= 4, (pages, per_task, len(adds))  # a file per task
    assert all(json.loads(a["stats"])["numRecords"] > 0 and "minValues" in json.loads(a["stats"]) for a in adds)
    assert not (tasks / STAGING).exists()  # what staging left is gone
