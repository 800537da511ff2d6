"""Extension types and arrays of them: the snapshot and the stream type a column alike.

pgvector's ``vector`` is an array of floats, ``hstore`` a map of strings (NULL values kept); the
others walspark keeps as their text.

Both resolve every column from the same catalog rows (``walspark.source.catalog.user_types``):
an array of an extension type the values layer does not know is an array of its text, in the
copy and in the changes after it, so the first change after the snapshot is applied rather than
taken for an ALTER COLUMN TYPE.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types import TypeInfo
from psycopg.types.hstore import register_hstore

from tests.scenarios.support import assert_matches_publication
from walspark.spark.lake.evolution import SchemaEvolutionError

pytestmark = pytest.mark.spark

COLUMNS = "id, h, ha, lt::text, la::text[], ci::text, ca::text[], v::real[]"


def test_extension_types_and_every_type_keep_their_delta_type_from_snapshot_to_stream(spark, pg18_dsn, tmp_path):
    """One pipeline, three tables (one pair of runs: the snapshot, then the stream's changes).

    ``ext``: extension types and arrays of them, each typed alike by the copy and by the changes,
    and their values equal to the server's. ``every``: a column of every type the value tests
    know (built-in, user, extension): the snapshot's Delta schema is the one the stream's changes
    are applied to, unchanged. ``ext_full``: REPLICA IDENTITY FULL with hstore maps (alone, in
    arrays, in a composite), matched on whole rows, duplicates kept. An SCD2 history of it stops
    with one line naming the table and the fix: its versions would be matched on maps."""
    from tests.values.test_fidelity_server import CASES
    from walspark import Pipeline

    types = [t for t, _ in CASES] + ["mood", "price", "item", "item[]", "floatrange", "hstore", "ltree[]",
                                     "citext", "vector(2)"]  # fmt: skip
    literals = [lits[0] for _, lits in CASES] + ["ok", "1.50", "(1,x)", '{"(2,y)"}', "[1,2)", "a=>1", "{a.b}",
                                                  "Ci", "[1,2]"]  # fmt: skip
    columns = ", ".join(f"c{i} {t}" for i, t in enumerate(types))
    values = ", ".join(["%s"] + [f"%s::{t}" for t in types])
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for extension in ("hstore", "ltree", "citext", "vector"):
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
        conn.execute("CREATE TABLE ext (id int PRIMARY KEY, h hstore, ha hstore[], lt ltree, la ltree[],"
                     " ci citext, ca citext[], v vector(3))")  # fmt: skip
        conn.execute("""INSERT INTO ext VALUES (1, 'a=>1, "b c"=>NULL', ARRAY['x=>2'::hstore, NULL], 'top.a',
                        '{top.a,top.b.c}', 'MiXed', '{X,y}', '[1,2.5,-3]')""")
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
        conn.execute("CREATE DOMAIN price AS numeric(8,2)")
        conn.execute("CREATE TYPE item AS (n int, s text)")
        conn.execute("CREATE TYPE floatrange AS RANGE (subtype = float8)")
        conn.execute(f"CREATE TABLE every (id int PRIMARY KEY, {columns})")
        conn.execute(f"INSERT INTO every VALUES ({values})", [1, *literals])
        conn.execute("CREATE TYPE tagged AS (n int, h hstore)")
        conn.execute("CREATE TABLE ext_full (id int, h hstore, ha hstore[], t tagged)")  # matched on whole rows
        conn.execute("ALTER TABLE ext_full REPLICA IDENTITY FULL")
        conn.execute("""INSERT INTO ext_full VALUES (1, 'a=>1, b=>NULL', ARRAY['x=>2'::hstore, NULL], '(1,"k=>v")'),
                        (2, 'a=>1', NULL, NULL), (2, 'a=>1', NULL, NULL), (4, NULL, NULL, '(2,)')""")
        conn.execute("CREATE PUBLICATION extpub FOR TABLE ext, every, ext_full")
        conn.execute("CREATE PUBLICATION fullpub FOR TABLE ext_full")
    target = str(tmp_path / "lake")
    pipeline = Pipeline(spark, dsn=pg18_dsn, publication="extpub", slot="ext_slot", target=target)
    assert pipeline.run_once().snapshot_tables == 3
    history = Pipeline(spark, dsn=pg18_dsn, publication="fullpub", slot="full_slot",
                       target=str(tmp_path / "history")).scd2("public.ext_full")  # fmt: skip
    history.run_once()
    copied = spark.read.format("delta").load(f"{target}/public/every").schema
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO ext VALUES (2, 'k=>v', '{}', 'a', ARRAY['b.c'::ltree], 'z', NULL, NULL)")
        conn.execute("UPDATE ext SET la = '{top.z}', ha = ARRAY['y=>3'::hstore], v = '[0,0.25,7]' WHERE id = 1")
        conn.execute(f"INSERT INTO every VALUES ({values})", [2, *literals])
        conn.execute("UPDATE every SET c0 = NOT c0 WHERE id = 1")
        conn.execute("UPDATE ext_full SET h = 'c=>3' WHERE id = 1")
        conn.execute("DELETE FROM ext_full WHERE ctid = (SELECT min(ctid) FROM ext_full WHERE id = 2)")
        conn.execute("INSERT INTO ext_full VALUES (3, 'z=>NULL', '{}')")
        conn.execute("UPDATE ext_full SET ha = ARRAY['q=>1'::hstore, NULL] WHERE id = 3")
        conn.execute("UPDATE ext_full SET t = '(3,\"k=>w\")' WHERE id = 1; DELETE FROM ext_full WHERE id = 4")
        second = pipeline.run_once()
        assert second.rows == 10, second
        assert_matches_publication(conn, spark, target, "fullpub", context="after the stream")  # ext_full
        with pytest.raises(SchemaEvolutionError, match=r"public\.ext_full: .* \['h', 'ha', 't'\], which hold hstore maps"):
            history.run_once()  # SCD2 matches versions on their values, and Spark cannot compare maps
        register_hstore(TypeInfo.fetch(conn, "hstore"), conn)  # hstore -> dict, as Spark gives a map
        expected = [tuple(r) for r in conn.execute(f"SELECT {COLUMNS} FROM ext ORDER BY id").fetchall()]
    mirror = spark.read.format("delta").load(f"{target}/public/ext")
    types_of = {f.name: f.dataType.simpleString() for f in mirror.schema.fields}
    assert {c: types_of[c] for c in ("h", "ha", "lt", "la", "ci", "ca", "v")} == {
        "h": "map<string,string>", "ha": "array<map<string,string>>", "lt": "string", "la": "array<string>", "ci": "string",
        "ca": "array<string>", "v": "array<float>"}, types_of  # fmt: skip
    got = [tuple(r) for r in mirror.select("id", "h", "ha", "lt", "la", "ci", "ca", "v").orderBy("id").collect()]
    assert got == expected
    every = spark.read.format("delta").load(f"{target}/public/every")
    assert [(f.name, f.dataType) for f in every.schema.fields] == [(f.name, f.dataType) for f in copied.fields]
    assert every.count() == 2
