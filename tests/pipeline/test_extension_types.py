"""Extension types and arrays of them: the snapshot and the stream type a column alike.

pgvector's ``vector`` is an array of floats; the others walspark keeps as their text.

Both resolve every column from the same catalog rows (``walspark.source.catalog.user_types``):
an array of an extension type the values layer does not know is an array of its text, in the
copy and in the changes after it, so the first change after the snapshot is applied rather than
taken for an ALTER COLUMN TYPE.
"""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.spark

COLUMNS = "id, h::text, ha::text[], lt::text, la::text[], ci::text, ca::text[], v::real[]"


def test_extension_types_and_every_type_keep_their_delta_type_from_snapshot_to_stream(spark, pg18_dsn, tmp_path):
    """One pipeline, two tables (one pair of runs: the snapshot, then the stream's changes).

    ``ext``: extension types and arrays of them, each typed alike by the copy and by the changes,
    and their values equal to the server's text. ``every``: a column of every type the value tests
    know (built-in, user, extension): the snapshot's Delta schema is the one the stream's changes
    are applied to, unchanged."""
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
        conn.execute("CREATE PUBLICATION extpub FOR TABLE ext, every")
    target = str(tmp_path / "lake")
    pipeline = Pipeline(spark, dsn=pg18_dsn, publication="extpub", slot="ext_slot", target=target)
    assert pipeline.run_once().snapshot_tables == 2
    copied = spark.read.format("delta").load(f"{target}/public/every").schema
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO ext VALUES (2, 'k=>v', '{}', 'a', ARRAY['b.c'::ltree], 'z', NULL, NULL)")
        conn.execute("UPDATE ext SET la = '{top.z}', ha = ARRAY['y=>3'::hstore], v = '[0,0.25,7]' WHERE id = 1")
        conn.execute(f"INSERT INTO every VALUES ({values})", [2, *literals])
        conn.execute("UPDATE every SET c0 = NOT c0 WHERE id = 1")
        second = pipeline.run_once()
        assert second.rows == 4, second
        expected = [tuple(r) for r in conn.execute(f"SELECT {COLUMNS} FROM ext ORDER BY id").fetchall()]
    mirror = spark.read.format("delta").load(f"{target}/public/ext")
    types_of = {f.name: f.dataType.simpleString() for f in mirror.schema.fields}
    assert {c: types_of[c] for c in ("h", "ha", "lt", "la", "ci", "ca", "v")} == {
        "h": "string", "ha": "array<string>", "lt": "string", "la": "array<string>", "ci": "string",
        "ca": "array<string>", "v": "array<float>"}, types_of  # fmt: skip
    got = [tuple(r) for r in mirror.select("id", "h", "ha", "lt", "la", "ci", "ca", "v").orderBy("id").collect()]
    assert got == expected
    every = spark.read.format("delta").load(f"{target}/public/every")
    assert [(f.name, f.dataType) for f in every.schema.fields] == [(f.name, f.dataType) for f in copied.fields]
    assert every.count() == 2
