"""Fresh reads: the mirror plus the pending change rows, folded on read, equal the source.

A differential check against a real PostgreSQL 18: the first drained batches are applied to a
mirror with ``apply_changes``, the later ones kept as pending change rows, and
``fresh_rows(mirror, pending)`` must equal ``SELECT *`` of the source — and must not change
when the mirror already holds a prefix of the pending rows (a fold that committed between the
reads of the fold position and of the mirror).
"""

from __future__ import annotations

import functools
import random
import string

import pytest

from walspark.spark.lake.apply import apply_changes
from walspark.spark.lake.fresh import fresh_rows, fresh_view, read_table, table_name

from .support import Source
from .test_apply import canon

pytestmark = pytest.mark.spark


def _union(dfs: list):
    return functools.reduce(lambda a, b: a.unionByName(b), dfs)


def _of(dfs: list, table: str) -> list:
    """The change DataFrames of one table among those of a drain."""
    return [df for df in dfs if df.select("_table").first()[0] == table]


def _mirror(spark, target: str, schema: str, table: str):
    from walspark.storage.layout import TargetLayout

    return spark.read.format("delta").load(TargetLayout(target).table(schema, table))


def _rows(df) -> list[dict]:
    return [r.asDict() for r in df.collect()]


def _blob(rnd: random.Random) -> str:
    return "".join(rnd.choices(string.ascii_letters + string.digits, k=3000))  # incompressible: TOASTed


def _txn(src: Source, rnd: random.Random, live: set[int], next_id: list[int], moved: set[int]) -> None:
    """One transaction of inserts, updates leaving the TOASTed body unchanged, key changes
    (body unchanged too), new bodies and deletes. A row is moved at most once per drain
    (``moved``): the apply does not follow chains of key changes within one batch — fresh reads
    do, and meet them across the drains of their pending rows."""
    statements: list[tuple[str, tuple]] = []
    for _ in range(rnd.randint(1, 4)):
        action = rnd.random()
        if action < 0.35 or not live:
            live.add(next_id[0])
            statements.append(("INSERT INTO items VALUES (%s, %s, %s, %s)",
                               (next_id[0], rnd.randint(0, 9), _blob(rnd), rnd.choice([None, "x", "y"]))))  # fmt: skip
            next_id[0] += 1
            continue
        i = rnd.choice(sorted(live))
        if action < 0.6:
            statements.append(("UPDATE items SET n = n + 1, note = %s WHERE id = %s", (rnd.choice([None, "z"]), i)))
        elif action < 0.78 and i not in moved:
            live.discard(i)
            moved.add(next_id[0])
            live.add(next_id[0])
            statements.append(("UPDATE items SET id = %s WHERE id = %s", (next_id[0], i)))
            next_id[0] += 1
        elif action < 0.88 or i in moved:
            statements.append(("UPDATE items SET body = %s WHERE id = %s", (_blob(rnd), i)))
        else:
            live.discard(i)
            statements.append(("DELETE FROM items WHERE id = %s", (i,)))
    with src.conn.transaction():
        for statement, params in statements:
            src.conn.execute(statement, params)


def test_fresh_rows_equal_the_source(source_factory, spark, tmp_path):
    src = source_factory("CREATE TABLE items (id int PRIMARY KEY, n int, body text, note text);"
                         "ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL")  # fmt: skip
    target = str(tmp_path / "lake")
    rnd = random.Random(11)
    live: set[int] = set()
    next_id = [1]
    moved: set[int] = set()

    def txns(n: int) -> None:
        for _ in range(n):
            _txn(src, rnd, live, next_id, moved)

    txns(12)  # the mirror: one applied batch
    src.apply(target)
    moved.clear()
    mirror = _mirror(spark, target, "public", "items")
    pending: list = []
    for step in range(3):
        if step == 0:  # a chain of key changes across drains, from a row of the mirror
            root = min(live)
            live.discard(root)
            src.sql(f"UPDATE items SET id = 10000 WHERE id = {root}")
        if step == 1:
            src.sql("UPDATE items SET id = 10001, n = n + 1 WHERE id = 10000")
        txns(8)
        if step == 2:  # a truncate mid-way, changes before and after it
            src.sql("TRUNCATE items")
            live.clear()
            txns(6)
        pending += src.drain()
        moved.clear()
        got = fresh_rows(mirror, _union(pending), None)
        assert got.columns == ["id", "n", "body", "note"]
        assert canon(_rows(got)) == canon(src.rows("items")), step
        if step == 0:  # unchanged TOAST resolved from the mirror, at the row's key and at its old key
            first = _union(pending)
            assert first.where("_old IS NOT NULL AND size(_unchanged) > 0").count() > 0
            assert first.where("_old IS NULL AND _op = 'U' AND size(_unchanged) > 0").count() > 0
    # A fold commits between the reads: the mirror already holds a prefix of the pending rows.
    apply_changes(pending[0], src.batch_id, target=target)
    got = fresh_rows(_mirror(spark, target, "public", "items"), _union(pending), ["id"])
    assert canon(_rows(got)) == canon(src.rows("items"))


def test_tables_without_a_key_and_multisets(source_factory, spark, tmp_path):
    src = source_factory(
        "CREATE TABLE full_t (a int, b text); ALTER TABLE full_t REPLICA IDENTITY FULL;"
        "CREATE TABLE log_t (a int, b text); ALTER TABLE log_t REPLICA IDENTITY NOTHING;"
    )
    target = str(tmp_path / "lake")
    src.sql("INSERT INTO full_t VALUES (1, 'a'), (2, 'b'), (2, 'b'), (2, 'b'), (3, NULL), (3, NULL)",
            "INSERT INTO log_t VALUES (1, 'a'), (1, 'a')")  # fmt: skip
    src.apply(target)
    one = "ctid = (SELECT ctid FROM full_t WHERE {} LIMIT 1)"
    src.sql("UPDATE full_t SET b = 'c' WHERE a = 1", f"DELETE FROM full_t WHERE {one.format('a = 2')}",
            "INSERT INTO full_t VALUES (3, NULL), (4, 'd')", f"UPDATE full_t SET a = 10 WHERE {one.format('a = 3')}",
            "INSERT INTO log_t VALUES (2, 'b'), (2, 'b')")  # fmt: skip
    src.sql("DELETE FROM full_t WHERE a = 4", "INSERT INTO full_t VALUES (2, 'b')")
    pending = src.drain()
    src.sql("TRUNCATE log_t", "INSERT INTO log_t VALUES (3, 'c')", "INSERT INTO log_t VALUES (3, 'c')")
    pending += src.drain()
    for table, keys in (("full_t", ["a", "b"]), ("log_t", [])):
        got = fresh_rows(_mirror(spark, target, "public", table), _union(_of(pending, table)), None)
        assert canon(_rows(got)) == canon(src.rows(table)), table
        assert _union(_of(pending, table)).select("_key").first()[0] == keys


def test_new_dropped_and_widened_columns(source_factory, spark, tmp_path):
    src = source_factory("CREATE TABLE t (id int PRIMARY KEY, a smallint, b text)")
    target = str(tmp_path / "lake")
    src.sql("INSERT INTO t VALUES (1, 1, 'one'), (2, 2, 'two'), (3, 3, 'three')")
    src.apply(target)
    src.sql("ALTER TABLE t ADD COLUMN c text", "ALTER TABLE t DROP COLUMN b", "ALTER TABLE t ALTER COLUMN a TYPE int")
    src.sql("INSERT INTO t VALUES (4, 70000, 'four')", "UPDATE t SET c = 'cc' WHERE id = 1",
            "DELETE FROM t WHERE id = 3")  # fmt: skip
    [pending] = src.drain()
    got = fresh_rows(_mirror(spark, target, "public", "t"), pending, None)
    assert [(f.name, f.dataType.simpleString()) for f in got.schema.fields] == [
        ("id", "int"), ("a", "int"), ("b", "string"), ("c", "string")]  # fmt: skip
    rows = {r["id"]: r for r in _rows(got)}
    assert rows == {1: {"id": 1, "a": 1, "b": None, "c": "cc"},  # written after the drop: no stale b
                    2: {"id": 2, "a": 2, "b": "two", "c": None},  # untouched: as in the mirror
                    4: {"id": 4, "a": 70000, "b": None, "c": "four"}}  # fmt: skip
    assert canon([{k: v for k, v in r.items() if k != "b"} for r in rows.values()]) == canon(src.rows("t"))


def test_odd_names_and_the_change_log_glue(source_factory, spark, tmp_path):
    from walspark.spark.lake.changelog import ChangeLog, FoldPlan, write_plan
    from walspark.storage.layout import TargetLayout

    src = source_factory('CREATE TABLE "we ird.tab" ("a b" int PRIMARY KEY, "x.y" text, "q`t" int)')
    target = str(tmp_path / "lake")
    table = 'public."we ird.tab"'
    log = ChangeLog(spark, TargetLayout(target), "public", "we ird.tab")
    src.sql(f"INSERT INTO {table} VALUES (1, 'a', 1), (2, 'b', 2), (3, NULL, 3)")
    [first] = src.drain()
    apply_changes(first, 0, target=target)
    log.append(first, 0, {})
    src.sql(f'UPDATE {table} SET "a b" = 10, "x.y" = \'moved\' WHERE "a b" = 1', f'DELETE FROM {table} WHERE "a b" = 2')
    [second] = src.drain()
    log.append(second, 1, {})
    src.sql(f'INSERT INTO {table} VALUES (2, \'again\', NULL)', f'UPDATE {table} SET "q`t" = 30 WHERE "a b" = 3')
    [third] = src.drain()
    log.append(third, 2, {})
    want = canon(src.rows(table))
    mirror = _mirror(spark, target, "public", "we ird.tab")
    assert canon(_rows(fresh_rows(mirror, _union([second, third]), ["a b"]))) == want
    # Nothing folded yet: batch 0 is re-applied on a mirror that holds it, harmlessly (SCD1).
    assert canon(_rows(read_table(spark, target, table))) == want
    write_plan(TargetLayout(target), "public", "we ird.tab", FoldPlan(-1, 0, True))
    got = read_table(spark, target, ("public", "we ird.tab"))
    assert got.columns == ["a b", "x.y", "q`t"] and canon(_rows(got)) == want
    fresh_view(spark, target, table, "fresh_weird", keys=["a b"])
    assert canon(_rows(spark.sql("SELECT * FROM fresh_weird"))) == want
    write_plan(TargetLayout(target), "public", "we ird.tab", FoldPlan(0, 2, True))  # all folded: the mirror
    assert canon(_rows(read_table(spark, target, table))) == canon(_rows(mirror))


def test_table_names_and_history_tables(spark):
    assert table_name('public."we ird.tab"') == ("public", "we ird.tab")
    assert table_name('"a.b"."c""d"') == ("a.b", 'c"d')
    assert table_name(("s.x", "t.y")) == ("s.x", "t.y")
    assert table_name("items") == ("public", "items")
    with pytest.raises(ValueError, match="expected schema.name"):
        table_name("a.b.c")
    validity = "struct<lsn: bigint>"
    history = spark.createDataFrame([(1, None, None)], f"id int, __START_AT {validity}, __END_AT {validity}")
    with pytest.raises(ValueError, match=r"fresh reads fold into mirrors \(SCD1\); read the history table"):
        fresh_rows(history, history, ["id"])
