"""apply_changes into Delta, from real change batches of the embedded PostgreSQL 18.

Every test decodes what the server really sent (SQL interface of a pgoutput slot → assembler →
ChangeRowBuilder → per-table layout), applies it with walspark, then reads the Delta tables
back *independently* (``spark.read.format("delta")``) and compares with ``SELECT *``.
"""

from __future__ import annotations

import decimal
import json
import random
import string
from collections.abc import Iterator

import pytest

from walspark.spark.lake.apply import apply_changes
from walspark.spark.lake.columns import END_AT, START_AT
from walspark.spark.lake.evolution import SchemaEvolutionError
from walspark.spark.lake.progress import ProgressTable
from walspark.spark.lake.sink import ApplyChanges
from walspark.spark.lake.tables import DELETION_VECTORS_MIN_ROWS, table_properties

from .support import Source, has_deletion_vectors

pytestmark = pytest.mark.spark


@pytest.fixture(params=[False, True], ids=["copy-on-write", "deletion-vectors"])
def deletion_vectors(request, spark) -> Iterator[bool]:
    """Both kinds of table walspark creates: small ones rewrite files, large ones get deletion
    vectors (``spark.walspark.deletionVectors.minRows``; 0 gives every table them)."""
    spark.conf.set(DELETION_VECTORS_MIN_ROWS, "0" if request.param else "-1")
    yield request.param
    spark.conf.unset(DELETION_VECTORS_MIN_ROWS)


def assert_deletion_vectors(spark, path: str, expected: bool) -> None:
    """The table has deletion vectors if and only if ``expected``. With them, no MERGE copied a
    row it kept into a new file (rows removed are marked instead, or their file is dropped when
    no row of it is left); without, no MERGE wrote a vector."""
    assert has_deletion_vectors(spark, path) is expected
    metrics = [r["operationMetrics"] or {} for r in
               spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("operation = 'MERGE'").collect()]  # fmt: skip
    assert metrics, "no MERGE ran"
    copied = sum(int(m.get("numTargetRowsCopied", 0)) for m in metrics)
    vectors = sum(int(m.get("numTargetDeletionVectorsAdded", 0)) for m in metrics)
    assert copied == 0 if expected else vectors == 0, metrics


def test_table_properties_give_features_only_where_needed():
    """Deletion vectors for large tables, column mapping for names Parquet refuses (at any depth)."""
    from pyspark.sql import types as T

    from walspark.spark.lake.tables import field_names

    assert table_properties(None, 999_999, ["id", "Prix.€", "名前"]) == {}  # no feature a table does not need
    nested = [T.StructField("id", T.IntegerType()),
              T.StructField("c", T.ArrayType(T.StructType([T.StructField("x=y", T.IntegerType())])))]  # fmt: skip
    assert table_properties(None, 0, field_names(nested))["walspark.columnMapping"] == "column name 'x=y'"
    mapped = table_properties(None, 999_999, ["id", "a b"])
    assert mapped == {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "3", "delta.minWriterVersion": "7",
                      "delta.feature.deletionVectors": "supported",  # reader 3: see tables.COLUMN_MAPPING
                      "walspark.columnMapping": "column name 'a b'"}  # fmt: skip
    assert table_properties(None, 1_000_000)["delta.enableDeletionVectors"] == "true"
    # where delta-rs merges (a local target), which writes no deletion vectors, only from 10M rows
    assert "delta.enableDeletionVectors" not in table_properties(None, 9_999_999, driver_merges=True)
    assert table_properties(None, 10_000_000, driver_merges=True)["delta.enableDeletionVectors"] == "true"
    assert (
        table_properties({DELETION_VECTORS_MIN_ROWS: "1000"}, 1000, driver_merges=True)["delta.enableDeletionVectors"]
        == "true"
    )
    # ... or from 2 GiB of the source's pages, wide rows (the rewrite grows with the bytes), unless set
    wide = 2 << 30
    dv = "delta.enableDeletionVectors"
    assert table_properties(None, 1_000_000, driver_merges=True, estimated_bytes=wide)[dv] == "true"
    assert dv not in table_properties(None, 1_000_000, driver_merges=True, estimated_bytes=wide - 1)
    assert dv not in table_properties({DELETION_VECTORS_MIN_ROWS: "-1"}, 1, driver_merges=True, estimated_bytes=wide)
    assert table_properties({DELETION_VECTORS_MIN_ROWS: "0"}, None)["delta.enableDeletionVectors"] == "true"
    assert "delta.enableDeletionVectors" not in table_properties({DELETION_VECTORS_MIN_ROWS: "-1"}, 10**12)
    with pytest.raises(ValueError, match="deletionVectors.minRows must be a number of rows, not 'many'"):
        table_properties({DELETION_VECTORS_MIN_ROWS: "many"}, 1)


def test_column_mapping_is_switched_on_in_place_once(spark, tmp_path):
    """A table without column mapping gets it in place (reader 3 with the feature, its rows and
    files as they were, the reason recorded) and can then rename; a table that has it already,
    at reader 2, is left as it is."""
    from deltalake import DeltaTable

    from walspark.spark.lake.evolution import TargetTable
    from walspark.spark.lake.tables import TABLE_PROPERTIES

    plain, mapped = str(tmp_path / "plain"), str(tmp_path / "mapped")
    spark.sql(f"CREATE TABLE delta.`{plain}` (id int, b string) USING delta")
    spark.sql(f"INSERT INTO delta.`{plain}` VALUES (1, 'x'), (2, 'y')")
    props = ", ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())
    spark.sql(f"CREATE TABLE delta.`{mapped}` (id int, b string) USING delta TBLPROPERTIES ({props})")
    files = set(DeltaTable(plain).file_uris())
    for path in (plain, mapped):
        TargetTable(spark, path, "public.t").require_column_mapping("rename of column 'b' to 'c'")
        spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN b TO c")
    table = DeltaTable(plain)
    protocol = table.protocol()
    assert (protocol.min_reader_version, set(protocol.reader_features or ())) == (
        3,
        {"columnMapping", "deletionVectors"},
    )
    assert table.metadata().configuration["walspark.columnMapping"] == "rename of column 'b' to 'c'"
    assert "delta.enableDeletionVectors" not in table.metadata().configuration  # supported, not used
    assert set(table.file_uris()) == files  # no file rewritten
    assert sorted(tuple(r) for r in spark.read.format("delta").load(plain).collect()) == [(1, "x"), (2, "y")]
    kept = DeltaTable(mapped)
    assert kept.protocol().min_reader_version == 2 and "walspark.columnMapping" not in kept.metadata().configuration


def delta_rows(spark, path: str, drop: tuple[str, ...] = ()) -> list[dict]:
    df = spark.read.format("delta").load(path)
    return [{k: v for k, v in r.asDict().items() if k not in drop} for r in df.collect()]


def canon(rows: list[dict], json_cols: tuple[str, ...] = ()) -> list[tuple]:
    """Rows as sorted tuples of (column, value), JSON text parsed, so Delta and PostgreSQL compare."""
    out = []
    for r in rows:
        items = []
        for k, v in sorted(r.items()):
            if k in json_cols and isinstance(v, str):
                v = json.loads(v)
            items.append((k, json.dumps(v, sort_keys=True, default=str)))
        out.append(tuple(items))
    return sorted(out)


def assert_equal(spark, source: Source, target: str, table: str, json_cols: tuple[str, ...] = ()) -> None:
    schema, name = table.split(".")
    got = canon(delta_rows(spark, f"{target}/{schema}/{name}"), json_cols)
    want = canon(source.rows(table), json_cols)
    assert got == want, [
        sorted((r.get("id"), r.get("n")) for r in delta_rows(spark, f"{target}/{schema}/{name}")),
        sorted((r.get("id"), r.get("n")) for r in source.rows(table)),
    ]


# ---------------------------------------------------------------------------------------------
# SCD1


WORKLOAD_DDL = """
CREATE TABLE items (id int PRIMARY KEY, qty bigint, price numeric(12,2), name text, ok boolean,
                    score double precision, day date, doc jsonb);
CREATE TABLE pairs (a int, b text, v int, PRIMARY KEY (a, b));
"""


def _random_txn(src: Source, rnd: random.Random, live: set[int], next_id: list[int]) -> None:
    statements: list[tuple[str, tuple]] = []
    for _ in range(rnd.randint(1, 6)):
        action = rnd.random()
        if action < 0.45 or not live:
            i = next_id[0]
            next_id[0] += 1
            live.add(i)
            statements.append((
                "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (i, rnd.randint(-10**12, 10**12), decimal.Decimal(rnd.randint(-10**6, 10**6)) / 100,
                 rnd.choice([None, "".join(rnd.choices(string.ascii_letters + " é'\"", k=rnd.randint(0, 30)))]),
                 rnd.choice([True, False, None]), rnd.random(), f"2024-0{rnd.randint(1, 9)}-1{rnd.randint(0, 9)}",
                 json.dumps({"k": rnd.randint(0, 9), "l": [1, "x"]})),
            ))  # fmt: skip
        elif action < 0.8:
            i = rnd.choice(sorted(live))
            statements.append(
                (
                    "UPDATE items SET qty = qty + %s, name = %s WHERE id = %s",
                    (rnd.randint(1, 5), f"n{rnd.randint(0, 99)}", i),
                )
            )
        elif action < 0.9:
            i = rnd.choice(sorted(live))
            new = next_id[0]
            next_id[0] += 1
            live.discard(i)
            live.add(new)
            statements.append(("UPDATE items SET id = %s, ok = NOT coalesce(ok, false) WHERE id = %s", (new, i)))
        else:
            i = rnd.choice(sorted(live))
            live.discard(i)
            statements.append(("DELETE FROM items WHERE id = %s", (i,)))
    with src.conn.transaction():
        for statement, params in statements:
            src.conn.execute(statement, params)
    a = rnd.randint(0, 5)
    src.sql(
        f"INSERT INTO pairs VALUES ({a}, 'x', 0) ON CONFLICT (a, b) DO UPDATE SET v = pairs.v + 1",
        f"DELETE FROM pairs WHERE a = {rnd.randint(0, 5)} AND b = 'x' AND v > 2",
    )


def test_scd1_random_workload_equals_source(source_factory, spark, tmp_path, deletion_vectors):
    src = source_factory(WORKLOAD_DDL)
    target = str(tmp_path / "lake")
    rnd = random.Random(7)
    live: set[int] = set()
    next_id = [1]
    for _ in range(2):  # two micro-batches of many transactions, keys changing within and across
        for _ in range(35):
            _random_txn(src, rnd, live, next_id)
        src.apply(target)
        assert_equal(spark, src, target, "public.items", ("doc",))
        assert_equal(spark, src, target, "public.pairs")
    # The Delta log shows one write (a MERGE, or an append for a batch of only inserts) per
    # applied batch, no more.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/items`").where("userMetadata LIKE '%batch_id%'")
    assert history.count() == 2
    assert_deletion_vectors(spark, f"{target}/public/items", deletion_vectors)


def _blob(rnd: random.Random, n: int) -> str:
    return "".join(rnd.choices(string.ascii_letters + string.digits, k=n))  # incompressible: stays TOASTed


def test_toast_values_survive_updates_in_one_batch_and_across(source_factory, spark, tmp_path):
    src = source_factory(
        "CREATE TABLE docs (id int PRIMARY KEY, n int, body text, doc jsonb);"
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL, ALTER COLUMN doc SET STORAGE EXTERNAL;"
    )
    target = str(tmp_path / "lake")
    rnd = random.Random(1)
    body = _blob(rnd, 1 << 20)
    doc = json.dumps({"items": [_blob(rnd, 100) for _ in range(2000)]})
    # One batch: insert, then updates that leave body/doc unchanged (sent as 'u').
    src.sql("INSERT INTO docs VALUES (1, 0, %s, %s)", params=(body, doc))
    src.sql("INSERT INTO docs VALUES (2, 0, %s, %s)", params=(body[::-1], doc))
    for _ in range(3):
        src.sql("UPDATE docs SET n = n + 1 WHERE id = 1")
    src.sql("UPDATE docs SET n = n + 1 WHERE id = 2", "UPDATE docs SET n = n + 1 WHERE id = 2")
    [df] = src.drain()
    assert df.where("_op = 'U' AND array_contains(_unchanged, 'body')").count() == 5  # really 'u'
    apply_changes(df, 0, target=target)
    assert_equal(spark, src, target, "public.docs", ("doc",))
    # Across batches: only updates of other columns, the values come from the Delta table.
    for batch in range(1, 3):
        src.sql("UPDATE docs SET n = n + 10")
        src.sql("UPDATE docs SET n = n + 1 WHERE id = 1")
        [df] = src.drain()
        apply_changes(df, batch, target=target)
        assert_equal(spark, src, target, "public.docs", ("doc",))
    # A new body for one row, then updates that leave it unchanged, all in one batch.
    body2 = _blob(rnd, 1 << 20)
    src.sql("UPDATE docs SET body = %s WHERE id = 2", params=(body2,))
    src.sql("UPDATE docs SET n = -1")
    [df] = src.drain()
    apply_changes(df, 3, target=target)
    assert_equal(spark, src, target, "public.docs", ("doc",))
    rows = {r["id"]: r for r in delta_rows(spark, f"{target}/public/docs")}
    assert rows[1]["body"] == body and rows[2]["body"] == body2 and json.loads(rows[1]["doc"]) == json.loads(doc)
    # Key changes leave the TOASTed values unchanged too: found under the old key (target or batch).
    src.sql("UPDATE docs SET id = 10 WHERE id = 1")
    src.sql("UPDATE docs SET id = 20, n = 5 WHERE id = 2", "UPDATE docs SET n = 6 WHERE id = 20")
    src.sql("INSERT INTO docs VALUES (3, 0, %s, '{}')", params=(body2[::-1],))
    src.sql("UPDATE docs SET id = 30 WHERE id = 3")
    [df] = src.drain()
    assert df.where("_old IS NOT NULL AND size(_unchanged) > 0").count() == 3
    apply_changes(df, 4, target=target)
    assert_equal(spark, src, target, "public.docs", ("doc",))


def test_truncate_in_the_middle_of_a_batch(source_factory, spark, tmp_path, deletion_vectors):
    src = source_factory("CREATE TABLE t (id int PRIMARY KEY, v text)")
    target = str(tmp_path / "lake")
    src.sql("INSERT INTO t SELECT g, 'a' || g FROM generate_series(1, 20) g")
    src.apply(target)
    src.sql("INSERT INTO t VALUES (21, 'before')", "UPDATE t SET v = 'upd' WHERE id < 5")
    src.sql("TRUNCATE t")
    src.sql("INSERT INTO t VALUES (1, 'after'), (30, 'after')", "UPDATE t SET v = 'again' WHERE id = 30")
    src.sql("DELETE FROM t WHERE id = 1")
    src.sql("INSERT INTO t VALUES (31, 'x')")
    [df] = src.drain()
    assert df.where("_op = 'T'").count() == 1
    apply_changes(df, 1, target=target)
    assert_equal(spark, src, target, "public.t")
    assert sorted(r["id"] for r in delta_rows(spark, f"{target}/public/t")) == [30, 31]
    assert has_deletion_vectors(spark, f"{target}/public/t") is deletion_vectors  # the truncate removed whole files


ODD_DDL = """CREATE TABLE "Odd Name" ("Key" text PRIMARY KEY, "a b" numeric(30,10), at timestamptz, arr int[],
                                blob bytea, n int)"""


def _odd_txn(src: Source, rnd: random.Random, batch: int) -> None:
    """Inserts, updates, deletes and key changes of a text-keyed table with awkward names and types."""
    keys = [f"k{batch}-{i}" for i in range(8)]
    src.sql(
        *[
            f"""INSERT INTO "Odd Name" VALUES ('{k}', {rnd.randint(-(10**9), 10**9)}.0123456789,
                  '2024-02-29 23:59:59.999999+05:30', ARRAY[{i}, NULL], '\\x00ff', {i})"""
            for i, k in enumerate(keys)
        ]
    )
    src.sql(f"""UPDATE "Odd Name" SET n = n + 10, "a b" = NULL WHERE "Key" = '{keys[0]}'""",
            f"""UPDATE "Odd Name" SET "Key" = '{keys[1]}-moved' WHERE "Key" = '{keys[1]}'""",
            f"""INSERT INTO "Odd Name" VALUES ('{keys[1]}', 1, NULL, NULL, NULL, -1)""",
            f"""DELETE FROM "Odd Name" WHERE "Key" = '{keys[2]}'""",
            f"""INSERT INTO "Odd Name" VALUES ('{keys[2]}', 2, NULL, '{{}}', '', -2)""")  # fmt: skip
    if batch:
        src.sql(f"""DELETE FROM "Odd Name" WHERE "Key" LIKE 'k{batch - 1}-%' AND n % 2 = 0""",
                f"""UPDATE "Odd Name" SET "Key" = "Key" || '+' WHERE "Key" = 'k{batch - 1}-3'""")  # fmt: skip


TOAST_DDL = """CREATE TABLE docs (id int PRIMARY KEY, n int, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL"""


def _toast_txn(src: Source, rnd: random.Random, batch: int) -> None:
    """Updates that leave a TOASTed column unchanged: of rows in the target, of rows inserted or
    given a new value earlier in the same batch, and of a key deleted and inserted again."""
    base = 10 * batch
    src.sql(
        f"INSERT INTO docs VALUES ({base}, 0, %s), ({base + 1}, 0, %s), ({base + 2}, 0, %s)",
        params=tuple(_blob(rnd, 3000) for _ in range(3)),
    )
    src.sql(f"UPDATE docs SET n = n + 1 WHERE id = {base}",  # unchanged: the value is earlier in the batch
            f"UPDATE docs SET body = %s WHERE id = {base + 1}", f"UPDATE docs SET n = 7 WHERE id = {base + 1}",
            params=(_blob(rnd, 3000),))  # fmt: skip
    if batch:
        src.sql(f"UPDATE docs SET n = n + 100 WHERE id < {base}",  # unchanged: the target's to keep
                f"DELETE FROM docs WHERE id = {base - 8}",
                f"INSERT INTO docs VALUES ({base - 8}, -1, %s)", f"UPDATE docs SET n = -2 WHERE id = {base - 8}",
                f"UPDATE docs SET n = n + 1 WHERE id = {base - 10}", params=(_blob(rnd, 3000),))  # fmt: skip


EDGE_DDL = """CREATE TABLE events (at int, what text);
CREATE TABLE bag (a int, b text); ALTER TABLE bag REPLICA IDENTITY FULL;
CREATE TABLE gone (id int PRIMARY KEY, v text);
CREATE TABLE keyed_later (id int NOT NULL, v text)"""


def _edge_txn(src: Source, batch: int) -> None:
    """Inserts only into a table without a key and one with REPLICA IDENTITY FULL (duplicates
    too): appended from the driver; at the second batch the FULL table also gets an update and a
    delete of one of two equal rows (a multiset MERGE, which reads the target's count of that
    value), and ``gone`` a TRUNCATE with nothing after it. ``keyed_later`` changes its replica
    identity within each batch: inserts without a key, then a primary key's changes (two runs);
    then changes under the key and under FULL (two runs, the second a multiset MERGE). At the
    third, the FULL table is truncated, refilled with duplicates and one of them deleted."""
    if batch == 2:
        src.sql("TRUNCATE bag", "INSERT INTO bag VALUES (5, 'z'), (5, 'z'), (6, NULL), (NULL, NULL)",
                "DELETE FROM bag WHERE ctid = (SELECT min(ctid) FROM bag WHERE a = 5)")  # fmt: skip
        return
    src.sql(f"INSERT INTO events VALUES ({batch}, 'a'), ({batch}, 'a'), ({batch}, NULL)",
            f"INSERT INTO bag VALUES ({batch}, 'x'), ({batch}, 'x'), (NULL, NULL)")  # fmt: skip
    if batch:
        src.sql("DELETE FROM bag WHERE ctid = (SELECT min(ctid) FROM bag WHERE a = 0)",
                "UPDATE bag SET b = 'y' WHERE a IS NULL", "TRUNCATE gone")  # fmt: skip
        src.sql("UPDATE keyed_later SET v = 'e' WHERE id = 2")
        src.sql("ALTER TABLE keyed_later REPLICA IDENTITY FULL")
        src.sql("DELETE FROM keyed_later WHERE id = 3", "UPDATE keyed_later SET v = 'f' WHERE id = 1")
    else:
        src.sql("INSERT INTO gone SELECT g, 'v' FROM generate_series(1, 5) g")
        src.sql("INSERT INTO keyed_later VALUES (1, 'a'), (2, 'b')")
        src.sql("ALTER TABLE keyed_later ADD PRIMARY KEY (id)")
        src.sql("UPDATE keyed_later SET v = 'c' WHERE id = 1", "INSERT INTO keyed_later VALUES (3, 'd')")


def test_small_batches_merged_from_the_driver_equal_spark_merges(source_factory, spark, tmp_path, monkeypatch,
                                                                 deletion_vectors):  # fmt: skip
    """The same batches through the sink twice: small plain batches merged from the driver with
    delta-rs, and every batch through Spark's MERGE — every other one from the rows the driver
    read (a query's batch read on the driver: its Arrow handed to the sink, made a DataFrame in
    Spark's schema again). The tables are equal to each other and to
    the source; the driver path was taken (a delta-rs commit) except on tables with deletion
    vectors or column mapping (whose protocol supports vectors), which it leaves to Spark; and a
    replay is skipped by the transaction it committed.

    With deletion vectors both sinks would take Spark's MERGE, so the driver's sink runs alone,
    over one round of the workload: that it left every table to Spark, and that Spark's MERGE
    with vectors equals the source, is what that case shows (the random workload of
    :func:`test_scd1_random_workload_equals_source` holds Spark's MERGE with vectors over more
    batches, and :func:`test_truncate_in_the_middle_of_a_batch` a TRUNCATE among them)."""
    from walspark.spark.lake.driver_merge import DRIVER_MERGE_ROWS

    src = source_factory(WORKLOAD_DDL + ";" + ODD_DDL + ";" + TOAST_DDL + ";" + EDGE_DDL)
    rnd = random.Random(31)
    live: set[int] = set()
    next_id = [1]
    sinks = {way: ApplyChanges(str(tmp_path / way)).app_id("q")
             for way in (("driver",) if deletion_vectors else ("driver", "spark"))}  # fmt: skip
    batch_id = 0
    edge = () if deletion_vectors else ("events", "bag", "gone", "keyed_later")
    rounds = 1 if deletion_vectors else 2
    for round_ in range(rounds):
        for j in range(12):
            if round_ == 1 and j == 6:
                src.sql("TRUNCATE pairs")  # the changes after it are merged into an emptied table
            _random_txn(src, rnd, live, next_id)
        _odd_txn(src, rnd, round_)
        _toast_txn(src, rnd, round_)
        if round_ == 1:  # delta-rs writes checkpoints too (at its commits), which Spark must read
            for table in ("items", "pairs", "Odd Name", "docs"):
                spark.sql(f"ALTER TABLE delta.`{tmp_path / 'driver' / 'public' / table}` "
                          "SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")  # fmt: skip
        for df in src.drain(join_identities=True):
            for way, sink in sinks.items():
                monkeypatch.setenv(DRIVER_MERGE_ROWS, "10000" if way == "driver" else "0")
                # Spark's sink gets every other batch's rows as the driver read them (its Arrow)
                sink.foreach_batch(df, batch_id, df.toArrow() if way == "spark" and batch_id % 2 else None)
                sink.flush()
            last = (df, batch_id)
            batch_id += 1
        for step in (round_, 2) if edge and round_ == 1 else (round_,) if edge else ():
            # the driver's own cases, held to the source (Spark's path for them: the tests above)
            if step == 2:  # the multiset MERGE of the step before, before a TRUNCATE empties the table
                assert canon(delta_rows(spark, str(tmp_path / "driver" / "public" / "bag")), ()) == canon(
                    src.rows("public.bag"), ()
                )
            _edge_txn(src, step)
            monkeypatch.setenv(DRIVER_MERGE_ROWS, "10000")
            for df in src.drain(join_identities=True):
                sinks["driver"].foreach_batch(df, batch_id)
                sinks["driver"].flush()
                batch_id += 1
    for table, json_cols in (("items", ("doc",)), ("pairs", ()), ("Odd Name", ()), ("docs", ()),
                             *[(t, ()) for t in edge]):  # fmt: skip
        paths = {way: str(tmp_path / way / "public" / table) for way in sinks if way == "driver" or table not in edge}
        want = canon(src.rows(f'public."{table}"' if table != "Odd Name" else  # Spark shows UTC, naive
                              """(SELECT "Key", "a b", at AT TIME ZONE 'UTC' AS at, arr, blob, n FROM "Odd Name") o"""),
                     json_cols)  # fmt: skip
        for path in paths.values():
            assert canon(delta_rows(spark, path), json_cols) == want
        engines = {way: {r.engineInfo for r in spark.sql(f"DESCRIBE HISTORY delta.`{p}`").collect()}
                   for way, p in paths.items()}  # fmt: skip
        assert not any(e.startswith("delta-rs") for e in engines.get("spark", ())), (table, engines)
        spark_only = deletion_vectors or table == "Odd Name"  # column mapping ("a b"): reader 3, vectors supported
        assert any(e.startswith("delta-rs") for e in engines["driver"]) is not spark_only, (table, engines)
        if table not in edge and not deletion_vectors:  # (their ALTER above costs a Spark commit each: kept
            # to these tables; with vectors delta-rs writes no commit, so there is no checkpoint of its own)
            assert list((tmp_path / "driver" / "public" / table / "_delta_log").glob("*.checkpoint.parquet"))
        if table in ("pairs", "gone"):  # the batch with a TRUNCATE was merged from the driver too
            (newest,) = spark.sql(f"DESCRIBE HISTORY delta.`{paths['driver']}` LIMIT 1").collect()
            assert newest.engineInfo.startswith("delta-rs") is not deletion_vectors, (table, newest)
        if table in ("keyed_later", "bag"):  # identity runs and multiset MERGEs: every one from the driver
            history = spark.sql(f"DESCRIBE HISTORY delta.`{paths['driver']}`").where("userMetadata LIKE '%batch_id%'")
            engines_of_runs = [r.engineInfo.startswith("delta-rs") for r in history.orderBy("version").collect()]
            assert engines_of_runs == [True] * {"keyed_later": 4, "bag": 3}[table], (table, engines_of_runs)
    # Unchanged TOAST values, kept from the batch or from the target, were merged from the driver too.
    writes = (
        spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'driver' / 'public' / 'docs'}`")
        .where("userMetadata LIKE '%batch_id%'")
        .collect()
    )
    assert len(writes) == rounds and all(w.engineInfo.startswith("delta-rs") is not deletion_vectors for w in writes)
    # A replay after a crash that lost the progress rows: the delta-rs commit's transaction skips it.
    import shutil

    driver_items = str(tmp_path / "driver" / "public" / "items")
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{driver_items}`").count()
    shutil.rmtree(tmp_path / "driver" / "_walspark" / "progress")
    ProgressTable.forget()
    monkeypatch.setenv(DRIVER_MERGE_ROWS, "10000")
    sinks["driver"].foreach_batch(*last)
    sinks["driver"].flush()
    assert spark.sql(f"DESCRIBE HISTORY delta.`{driver_items}`").count() == versions
    assert_equal(spark, src, str(tmp_path / "driver"), "public.items", ("doc",))


#: Batches of transactions on ``t (id int PRIMARY KEY, v text)``: updates (a row twice, a key
#: changed twice), a row inserted and deleted in one batch, deletes, inserts alone (an append), a
#: TRUNCATE among other changes and one alone.
CDF_BATCHES = [
    [["INSERT INTO t SELECT g, 'a' || g FROM generate_series(1, 8) g"]],
    [
        ["UPDATE t SET v = 'b' WHERE id = 1", "UPDATE t SET v = 'c' WHERE id = 2"],
        ["UPDATE t SET v = 'd' WHERE id = 2"],
        ["UPDATE t SET id = 20 WHERE id = 3"],
        ["UPDATE t SET id = 21 WHERE id = 20"],
        ["INSERT INTO t VALUES (30, 'x')"],
        ["DELETE FROM t WHERE id = 30", "DELETE FROM t WHERE id = 4"],
        ["INSERT INTO t VALUES (9, 'n')"],
    ],
    [["INSERT INTO t VALUES (10, 'i'), (11, 'j')"]],
    [
        ["UPDATE t SET v = 'e' WHERE id = 5"],
        ["TRUNCATE t"],
        ["INSERT INTO t VALUES (1, 'after'), (40, 'new')"],
        ["UPDATE t SET v = 'again' WHERE id = 40"],
    ],
    [["TRUNCATE t"]],
]


def _feed_per_batch(rows: list[dict], versions: list[int], first: int) -> dict[tuple[int, int], tuple]:
    """A change data feed's rows as (batch, key) → (value before, value after) (None: no row),
    each commit version given to the batch whose progress row records it or the next one above."""
    import bisect

    out: dict[tuple[int, int], list] = {}
    for r in rows:
        batch = bisect.bisect_left(versions, r["_commit_version"])
        assert first <= batch < len(versions), r
        slot = out.setdefault((batch, r["id"]), [None, None])
        side = 0 if r["_change_type"] in ("delete", "update_preimage") else 1
        assert slot[side] is None, (r, slot)  # one net change per key and batch
        slot[side] = r["v"]
    return {k: tuple(v) for k, v in out.items()}


def test_change_data_feed_gives_each_batch_net_change_per_key(source_factory, spark, tmp_path, monkeypatch):
    """With the change data feed on, a table's feed read by Spark (``readChangeFeed``) and by
    delta-rs (``load_cdf``) is, batch by batch (its commit versions mapped to the batch by the
    progress table's ``commit_version``), per key, the source's net change over the batch: an
    insert, an update's pre- and post-image, a delete — a row inserted and deleted within the batch
    gives nothing, a key changed twice a delete and an insert, a TRUNCATE a delete of every row it
    removed. Both ways of writing: small batches from the driver (delta-rs's appends and MERGEs) and
    every batch through Spark's MERGE. The first batch is applied before the feed is asked for; the
    next run's first batch turns it on (a metadata commit); each data commit's user metadata names
    its batch."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from walspark.spark.lake.driver_merge import DRIVER_MERGE_ROWS
    from walspark.spark.lake.tables import CHANGE_DATA_FEED

    src = source_factory("CREATE TABLE t (id int PRIMARY KEY, v text)")
    states = [{}]
    batches = []
    for txns in CDF_BATCHES:
        for txn in txns:
            src.sql(*txn)
        states.append({r["id"]: r["v"] for r in src.rows("t")})
        [df] = src.drain()
        batches.append(df)
    ways = {"driver": "10000", "spark": "0"}
    try:
        for batch_id, df in enumerate(batches):
            if batch_id == 1:
                spark.conf.set(CHANGE_DATA_FEED, "true")
            for way, limit in ways.items():
                monkeypatch.setenv(DRIVER_MERGE_ROWS, limit)
                sink = ApplyChanges(str(tmp_path / way)).app_id("q")  # a new run's sink from batch 1
                sink.foreach_batch(df, batch_id)
                sink.flush()
    finally:
        spark.conf.unset(CHANGE_DATA_FEED)
    want = {(b, k): (states[b].get(k), states[b + 1].get(k)) for b in range(1, len(batches))
            for k in states[b].keys() | states[b + 1].keys() if states[b].get(k) != states[b + 1].get(k)}  # fmt: skip
    assert any(after is None for _, after in want.values()) and any(b is None for b, _ in want.values())
    for way in ways:
        path = str(tmp_path / way / "public" / "t")
        progress = spark.read.format("delta").load(str(tmp_path / way / "_walspark" / "progress"))
        versions = [r.commit_version for r in progress.where("table_name = 't'").orderBy("batch_id").collect()]
        assert versions == sorted(versions) and len(versions) == len(batches), versions
        start = versions[0] + 1  # the feed was turned on by the commit after the first batch's
        feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start).load(path)
        by_spark = [r.asDict() for r in feed.collect()]
        by_rs = pa.RecordBatchReader.from_stream(DeltaTable(path).load_cdf(starting_version=start)).read_all()
        assert _feed_per_batch(by_spark, versions, 1) == want, way
        assert _feed_per_batch(by_rs.to_pylist(), versions, 1) == want, way
        history = {r.version: r for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()}
        assert [json.loads(history[v].userMetadata)["batch_id"] for v in versions] == list(range(len(batches)))
        engines = {history[v].engineInfo.startswith("delta-rs") for v in versions}
        assert engines == {way == "driver"}, (way, engines)


def test_a_dropped_column_leaves_the_batches_on_the_driver(source_factory, spark, tmp_path, monkeypatch):
    """After DROP COLUMN the Delta table keeps the column (NULL in every row written since, its
    values in the others); the table's batches stay on the driver (delta-rs commits: an update,
    an insert, a delete; then inserts alone, an append) and equal Spark's MERGE of the same."""
    from walspark.spark.lake.driver_merge import DRIVER_MERGE_ROWS

    src = source_factory("CREATE TABLE t (id int PRIMARY KEY, v text, w int DEFAULT 7)")
    src.sql("INSERT INTO t (id, v) SELECT g, 'a' FROM generate_series(1, 4) g")
    batches = [src.drain()]
    src.sql("ALTER TABLE t DROP COLUMN w", "UPDATE t SET v = 'b' WHERE id = 1", "INSERT INTO t VALUES (5, 'c')",
            "DELETE FROM t WHERE id = 2")  # fmt: skip
    batches.append(src.drain())
    src.sql("INSERT INTO t VALUES (6, 'd')")
    batches.append(src.drain())
    for way, limit in (("driver", "10000"), ("spark", "0")):
        monkeypatch.setenv(DRIVER_MERGE_ROWS, limit)
        sink = ApplyChanges(str(tmp_path / way)).app_id("q")
        for batch_id, dfs in enumerate(batches):
            for df in dfs:
                sink.foreach_batch(df, batch_id)
            sink.flush()
    tables = {way: str(tmp_path / way / "public" / "t") for way in ("driver", "spark")}
    want = [(1, "b", None), (3, "a", 7), (4, "a", 7), (5, "c", None), (6, "d", None)]
    for way, path in tables.items():
        got = sorted(tuple(r) for r in spark.read.format("delta").load(path).select("id", "v", "w").collect())
        assert got == want, (way, got)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tables['driver']}`").where("userMetadata LIKE '%batch_id%'")
    engines = [r.engineInfo.startswith("delta-rs") for r in history.orderBy("version").collect()]
    assert engines[-2:] == [True, True], engines


def test_each_table_of_a_large_batch_takes_its_engine_by_its_net_rows(source_factory, spark, tmp_path, monkeypatch):
    """Over the driver's row limit (here 50), a batch is not merged from the driver as a whole,
    but table by table: one of many changes to few keys (pgbench's tellers: 200 updates of 5
    rows) is merged by delta-rs whether the driver read the batch (its Arrow given) or not (the
    table's rows then collected alone), as is a table of few changes and one of up to ten times
    the limit in net rows (pgbench's accounts); a table whose changes name more keys goes to
    Spark's MERGE. Every table equals the source either way."""
    from walspark.spark.lake.driver_merge import DRIVER_MERGE_ROWS, net_rows

    src = source_factory("CREATE TABLE few (id int PRIMARY KEY, v int); CREATE TABLE small (id int PRIMARY KEY, v int);"
                         "CREATE TABLE mid (id int PRIMARY KEY, v int); CREATE TABLE many (id int PRIMARY KEY, v int)")  # fmt: skip
    src.sql("INSERT INTO few SELECT g, 0 FROM generate_series(1, 5) g",
            "INSERT INTO small SELECT g, 0 FROM generate_series(1, 5) g",
            "INSERT INTO mid SELECT g, 0 FROM generate_series(1, 80) g",
            "INSERT INTO many SELECT g, 0 FROM generate_series(1, 520) g")  # fmt: skip
    import functools

    one = lambda parts: functools.reduce(lambda a, b: a.unionByName(b), parts)  # noqa: E731 - same shape: one batch
    first = one(src.drain())
    for i in range(40):  # 200 updates of few's 5 rows, a key changed and changed back among them
        src.sql(f"UPDATE few SET v = v + {i}", *(["UPDATE few SET id = 50 WHERE id = 5"] if i == 10 else []),
                *(["UPDATE few SET id = 5 WHERE id = 50"] if i == 11 else []))  # fmt: skip
    src.sql("UPDATE small SET v = 1 WHERE id <= 3", "DELETE FROM small WHERE id = 4", "UPDATE mid SET v = v + 1",
            "UPDATE many SET v = v + 1")  # fmt: skip
    second = one(src.drain())
    assert second.count() > 250
    monkeypatch.setenv(DRIVER_MERGE_ROWS, "50")
    for way in ("arrow", "spark-read"):
        sink = ApplyChanges(str(tmp_path / way)).app_id("q")
        for batch_id, df in enumerate((first, second)):
            sink.foreach_batch(df, batch_id, df.toArrow() if way == "arrow" else None)
            sink.flush()
        for table, by_rs in (("few", True), ("small", True), ("mid", True), ("many", False)):
            path = str(tmp_path / way / "public" / table)
            assert canon(delta_rows(spark, path), ()) == canon(src.rows(f"public.{table}"), ()), (way, table)
            (newest,) = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()
            assert newest.engineInfo.startswith("delta-rs") is by_rs, (way, table, newest.engineInfo)
    from walspark.spark.lake.frames import arrow_table_changes

    few = arrow_table_changes(second.toArrow(), "public", "few")
    assert few.num_rows > 200 and net_rows(few, ("id",)) == 6  # keys 1-5 and the 50 the row passed through


def test_replayed_batch_changes_nothing(source_factory, spark, tmp_path):
    src = source_factory("CREATE TABLE t (id int PRIMARY KEY, v int)")
    target = str(tmp_path / "lake")
    src.sql("INSERT INTO t SELECT g, g FROM generate_series(1, 10) g")
    [first] = src.drain()
    src.sql("UPDATE t SET v = v + 100 WHERE id <= 5", "DELETE FROM t WHERE id = 10")
    [second] = src.drain()
    path = f"{target}/public/t"
    assert apply_changes(first, 0, target=target, app_id="q1").skipped is False
    assert apply_changes(second, 1, target=target, app_id="q1").skipped is False
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count()
    # Replays: skipped by the progress table ...
    assert apply_changes(second, 1, target=target, app_id="q1").skipped is True
    assert apply_changes(first, 0, target=target, app_id="q1").skipped is True
    # ... and, without it (a crash between the MERGE and the progress row), by Delta's txn id.
    import shutil

    shutil.rmtree(f"{target}/_walspark/progress")
    ProgressTable.forget()  # a restarted process
    # The first batch held only inserts: applied as a plain append, whose replay Delta skips too.
    assert apply_changes(first, 0, target=target, app_id="q1").skipped is False
    assert apply_changes(second, 1, target=target, app_id="q1").skipped is False
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count() == versions
    assert_equal(spark, src, target, "public.t")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("userMetadata LIKE '%batch_id%'").collect()
    assert [h.operation for h in sorted(history, key=lambda h: h.version)] == ["WRITE", "MERGE"]


def test_replayed_multi_table_append_batch_changes_nothing(source_factory, spark, tmp_path):
    """Tables of one batch are applied in parallel, each through a clone of the session: an
    appended (insert-only) table must carry its transaction id itself — once it did not, and a
    batch replayed after a crash between the Delta writes and Spark's commit log doubled it."""
    src = source_factory("CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text)")
    target = str(tmp_path / "lake")
    src.sql("INSERT INTO a SELECT g, 'a' FROM generate_series(1, 10) g",
            "INSERT INTO b SELECT g, 'b' FROM generate_series(1, 7) g")  # fmt: skip
    parts = src.drain()
    batch = parts[0].unionByName(parts[1])  # same shape: one per-table-layout batch of two tables
    sink = ApplyChanges(target).app_id("multi")
    assert len(sink.foreach_batch(batch, 0)) == 2
    sink.flush()
    versions = {t: spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/{t}`").count() for t in "ab"}
    # The crash: the tables' writes are in Delta, the progress rows and Spark's commit are not.
    import shutil

    shutil.rmtree(f"{target}/_walspark/progress")
    ProgressTable.forget()
    sink.foreach_batch(batch, 0)
    sink.flush()
    for t in "ab":
        assert spark.sql(f"DESCRIBE HISTORY delta.`{target}/public/{t}`").count() == versions[t]
        assert_equal(spark, src, target, f"public.{t}")


def test_identifiers_of_any_form_keep_their_names(source_factory, spark, tmp_path):
    src = source_factory(
        'CREATE SCHEMA "Sales Dept"; '
        'CREATE TABLE "Sales Dept"."Odd ""Table"" é" ("ID" int PRIMARY KEY, "a b" text, "quo""te`d" int, '
        '"ünï" text, "dot.ted" int, "UPPER" text)'
    )
    target = str(tmp_path / "lake")
    table = '"Sales Dept"."Odd ""Table"" é"'
    src.sql(f"INSERT INTO {table} VALUES (1, 'x', 1, 'ü', 1, 'A'), (2, 'y', 2, 'ö', 2, 'B'), (3, 'z', 3, 'ä', 3, 'C')")
    src.apply(target)
    src.sql(
        f'UPDATE {table} SET "a b" = \'changed\', "dot.ted" = 9 WHERE "ID" = 1', f'DELETE FROM {table} WHERE "ID" = 2'
    )
    src.sql(f'UPDATE {table} SET "ID" = 4 WHERE "ID" = 3')
    src.apply(target)
    path = f'{target}/Sales Dept/Odd "Table" é'
    df = spark.read.format("delta").load(path)
    assert df.columns == ["ID", "a b", 'quo"te`d', "ünï", "dot.ted", "UPPER"]
    assert canon(delta_rows(spark, path)) == canon(src.rows(table))


def test_tables_without_a_key(source_factory, spark, tmp_path, deletion_vectors, caplog):
    src = source_factory(
        "CREATE TABLE full_t (a int, b text); ALTER TABLE full_t REPLICA IDENTITY FULL;"
        "CREATE TABLE log_t (a int, b text); ALTER TABLE log_t REPLICA IDENTITY NOTHING;"
    )
    target = str(tmp_path / "lake")
    src.sql("INSERT INTO full_t VALUES (1, 'a'), (2, 'b'), (2, 'b'), (3, NULL)", "INSERT INTO log_t VALUES (1, 'a')")
    src.apply(target)
    src.sql(
        "UPDATE full_t SET b = 'c' WHERE a = 1", "DELETE FROM full_t WHERE a = 3", "INSERT INTO log_t VALUES (2, 'b')"
    )
    src.sql("UPDATE full_t SET a = 10 WHERE a = 1")
    src.apply(target)
    assert_equal(spark, src, target, "public.full_t")
    assert_equal(spark, src, target, "public.log_t")
    src.sql("TRUNCATE log_t", "INSERT INTO log_t VALUES (3, 'c')")
    src.apply(target)
    assert_equal(spark, src, target, "public.log_t")
    assert_deletion_vectors(spark, f"{target}/public/full_t", deletion_vectors)
    # Inserts and a TRUNCATE lose nothing without a key: no warning that updates were dropped
    # (PostgreSQL refuses a published table's updates and deletes without a replica identity).
    said = [r for r in caplog.records if "has no replica identity key" in r.getMessage()]
    assert not said, [r.getMessage() for r in said]


def test_schema_evolution_add_drop_widen_and_incompatible(source_factory, spark, tmp_path):
    src = source_factory("CREATE TABLE t (id int PRIMARY KEY, a int, b text)")
    target = str(tmp_path / "lake")
    path = f"{target}/public/t"
    src.sql("INSERT INTO t VALUES (1, 1, 'one'), (2, 2, 'two'), (3, 3, 'three')")
    src.apply(target)
    src.sql(
        "ALTER TABLE t ADD COLUMN c text", "ALTER TABLE t DROP COLUMN b", "ALTER TABLE t ALTER COLUMN a TYPE bigint"
    )
    src.sql("INSERT INTO t VALUES (4, 5000000000, 'four')", "UPDATE t SET c = 'cc' WHERE id = 1")
    src.apply(target)
    schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema.fields}
    assert schema == {"id": "int", "a": "bigint", "b": "string", "c": "string"}
    got = {r["id"]: r for r in delta_rows(spark, path)}
    assert got[4] == {"id": 4, "a": 5000000000, "b": None, "c": "four"}
    assert got[1] == {"id": 1, "a": 1, "b": None, "c": "cc"}  # updated after the drop: no stale b
    assert got[2] == {"id": 2, "a": 2, "b": "two", "c": None}  # untouched: keeps its b
    assert canon(delta_rows(spark, path, drop=("b",))) == canon(src.rows("t"))
    # An incompatible change stops this table with a clear error and leaves it as it was.
    src.sql("ALTER TABLE t ALTER COLUMN c TYPE int USING length(c)", "UPDATE t SET c = 7 WHERE id = 1")
    [df] = src.drain()
    before = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count()
    with pytest.raises(SchemaEvolutionError, match=r"public\.t: column 'c' changed from string to int"):
        apply_changes(df, 99, target=target)
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count() == before


def test_a_new_column_of_a_plain_table_is_added_from_the_driver(source_factory, spark, tmp_path):
    """ADD COLUMN on a table delta-rs writes as Spark does is committed with delta-rs (no Spark job,
    milliseconds, where Spark's ALTER TABLE costs seconds); Spark reads the table with its new
    columns, equal to the source. (Tables with column mapping get theirs from Spark: the
    re-added column of tests/scenarios/test_readers.py.)"""
    src = source_factory("CREATE TABLE t (id int PRIMARY KEY, a int)")
    target = str(tmp_path / "lake")
    path = f"{target}/public/t"
    src.sql("INSERT INTO t VALUES (1, 1), (2, 2)")
    src.apply(target)
    src.sql(
        "ALTER TABLE t ADD COLUMN c numeric(6,2), ADD COLUMN d text[]", "UPDATE t SET c = 1.5, d = '{x,y}' WHERE id = 1"
    )
    src.apply(target)
    src.sql("ALTER TABLE t ADD COLUMN ts timestamp", "UPDATE t SET ts = '2026-01-02 03:04:05.678901' WHERE id = 2")
    src.apply(target)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    adds = [(r.engineInfo or "", r.operation) for r in history if "ADD COLUMN" in r.operation]
    assert len(adds) == 2 and all(engine.startswith("delta-rs") for engine, _ in adds), adds
    schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema.fields}
    assert schema == {"id": "int", "a": "int", "c": "decimal(6,2)", "d": "array<string>", "ts": "timestamp"}
    assert canon(delta_rows(spark, path)) == canon(src.rows("t"))


def test_insert_only_batches_append_into_evolved_tables(source_factory, spark, tmp_path):
    """A batch of only inserts is appended, not merged: into a table with a dropped column
    (left NULL) and a column the target had widened (the narrower batch is cast up)."""
    src = source_factory("CREATE TABLE t (id int PRIMARY KEY, a smallint, b text)")
    target = str(tmp_path / "lake")
    path = f"{target}/public/t"
    src.sql("INSERT INTO t VALUES (1, 1, 'one')", "UPDATE t SET b = 'uno' WHERE id = 1")
    src.apply(target)
    src.sql("ALTER TABLE t ALTER COLUMN a TYPE int", "UPDATE t SET a = 70000 WHERE id = 1")
    src.apply(target)  # widens the target's a to int
    src.sql(
        "UPDATE t SET a = 1 WHERE id = 1", "ALTER TABLE t ALTER COLUMN a TYPE smallint", "ALTER TABLE t DROP COLUMN b"
    )
    src.apply(target)
    src.sql("INSERT INTO t VALUES (2, 2), (3, 3)", "INSERT INTO t VALUES (4, -4)")
    src.apply(target)
    ops = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("userMetadata LIKE '%batch_id%'").orderBy("version")
    assert [r.operation for r in ops.collect()][-1] == "WRITE"
    schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema.fields}
    assert schema == {"id": "int", "a": "int", "b": "string"}
    got = {r["id"]: r for r in delta_rows(spark, path)}
    assert got[4] == {"id": 4, "a": -4, "b": None}
    assert canon(delta_rows(spark, path, drop=("b",))) == canon(src.rows("t"))


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        ("int", "int", None),
        ("bigint", "int", "bigint"),
        ("int", "bigint", None),
        ("double", "float", "double"),
        ("decimal(12,2)", "decimal(10,2)", "decimal(12,2)"),
        ("decimal(10,4)", "decimal(10,2)", "decimal(12,4)"),
        ("decimal(38,0)", "decimal(38,10)", False),
        ("int", "double", None),
        ("string", "int", False),
        ("int", "string", False),
        ("date", "timestamp", False),
    ],
)
def test_widening_rules(spark, source, target, expected):  # the parser needs a session
    from pyspark.sql.types import _parse_datatype_string

    from walspark.spark.lake.evolution import _widening

    got = _widening(_parse_datatype_string(source), _parse_datatype_string(target))
    assert (got if got in (None, False) else got.simpleString()) == expected


# ---------------------------------------------------------------------------------------------
# SCD2


def _intervals(spark, path: str, key: int) -> list[tuple]:
    rows = spark.read.format("delta").load(path).where(f"id = {key}").orderBy(f"{START_AT}.lsn").collect()
    return [(r["v"], r[START_AT]["lsn"], r[END_AT]["lsn"] if r[END_AT] else None) for r in rows]


def test_scd2_history_of_one_key(source_factory, spark, tmp_path, deletion_vectors):
    src = source_factory("CREATE TABLE h (id int PRIMARY KEY, v text, big text);"
                         "ALTER TABLE h ALTER COLUMN big SET STORAGE EXTERNAL")  # fmt: skip
    target = str(tmp_path / "lake")
    sink = ApplyChanges(target).app_id("scd2-test").scd2("public.h")
    big = _blob(random.Random(3), 100_000)
    lsns = []

    def txn(*statements: str, params: tuple = ()) -> None:
        src.sql(*statements, params=params)
        lsns.append(src.conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])

    txn("INSERT INTO h VALUES (1, 'v1', %s)", "INSERT INTO h VALUES (2, 'other', NULL)", params=(big,))
    txn("UPDATE h SET v = 'v2' WHERE id = 1")
    src.apply(target, sink)  # batch: insert + update
    txn("UPDATE h SET v = 'tmp' WHERE id = 1", "UPDATE h SET v = 'v3' WHERE id = 1")  # one version
    txn("UPDATE h SET v = 'v4' WHERE id = 1")
    src.apply(target, sink)  # updates of a row from an earlier batch, big unchanged TOAST
    txn("DELETE FROM h WHERE id = 1")
    txn("INSERT INTO h VALUES (1, 'v5', 'small')")
    txn("UPDATE h SET v = 'v6' WHERE id = 1")
    src.apply(target, sink)  # delete, re-insert, update in one batch
    path = f"{target}/public/h"
    history = spark.read.format("delta").load(path).where("id = 1").orderBy(f"{START_AT}.lsn").collect()
    starts = [r[START_AT]["lsn"] for r in history]
    ends = [r[END_AT]["lsn"] if r[END_AT] else None for r in history]
    assert [r["v"] for r in history] == ["v1", "v2", "v3", "v4", "v5", "v6"]
    # Each version ends where the next begins, except across the delete (closed at the delete).
    assert ends[:3] == starts[1:4] and ends[4] == starts[5] and ends[5] is None
    assert starts[3] < ends[3] < starts[4]  # closed by the delete, before the re-insert
    assert [r["big"] == big for r in history] == [True] * 4 + [False] * 2  # TOAST never lost
    assert history[4]["big"] == "small"
    # Each boundary is a commit LSN, in the order of the transactions (bounded by WAL positions).
    boundaries = [starts[0], starts[1], starts[2], starts[3], ends[3], starts[4], starts[5]]
    assert boundaries == sorted(boundaries) and len(set(boundaries)) == 7
    assert all(
        b <= int(str(lsn).split("/")[0], 16) << 32 | int(str(lsn).split("/")[1], 16) for b, lsn in zip(boundaries, lsns)
    )
    times = [r[START_AT]["commit_time"] for r in history]
    assert times == sorted(times)
    # The other key: one current version; a truncate closes it, a later insert opens anew.
    assert [(r["v"], r[END_AT]) for r in spark.read.format("delta").load(path).where("id = 2").collect()] == [
        ("other", None)
    ]
    txn("UPDATE h SET v = 'w' WHERE id = 2")
    txn("TRUNCATE h")
    txn("INSERT INTO h VALUES (2, 'after', NULL)")
    src.apply(target, sink)
    current = spark.read.format("delta").load(path).where(f"{END_AT} IS NULL").collect()
    assert [(r["id"], r["v"]) for r in current] == [(2, "after")]
    two = spark.read.format("delta").load(path).where("id = 2").orderBy(f"{START_AT}.lsn").collect()
    assert [r["v"] for r in two] == ["other", "w", "after"]
    assert two[0][END_AT]["lsn"] == two[1][START_AT]["lsn"] < two[1][END_AT]["lsn"] < two[2][START_AT]["lsn"]
    assert spark.read.format("delta").load(path).where(f"id = 1 AND {END_AT} IS NULL").count() == 0
    # Key changes keep the TOASTed value: from the target's row, and from a row of the same batch.
    txn("INSERT INTO h VALUES (3, 'k', %s)", params=(big,))
    src.apply(target, sink)
    txn("UPDATE h SET id = 4 WHERE id = 3")
    txn("INSERT INTO h VALUES (5, 'k', %s)", params=(big[::-1],))
    txn("UPDATE h SET id = 6 WHERE id = 5")
    txn("UPDATE h SET v = 'k2' WHERE id = 6")
    src.apply(target, sink)
    now = {r["id"]: r for r in spark.read.format("delta").load(path).where(f"{END_AT} IS NULL").collect()}
    assert now[4]["big"] == big and now[6]["big"] == big[::-1] and now[6]["v"] == "k2" and 3 not in now
