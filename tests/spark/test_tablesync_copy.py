"""Chunk plans of a table sync's resumable copy (spark/tablesync/copying.py), against a real server.

The one property everything rests on: the key ranges of a relation are disjoint and cover it,
whatever the key (composite, text under a collation, negative numbers), so chunks read in
different snapshots never overlap; and the key is the replica identity the stream matches on.
"""

from __future__ import annotations

import psycopg
import pytest

from walspark.spark.snapshot.initial import publication_tables
from walspark.spark.snapshot.pgsnapshot import copy_query
from walspark.spark.tablesync.copying import key_columns, plan_chunks


def _chunk_rows(conn: psycopg.Connection, table: str, **sizes: int) -> tuple[list[str], list[list[tuple]]]:
    plan = next(p for p in publication_tables(conn, "pub") if p.table == table)
    keys, chunks = plan_chunks(conn, plan, parallelism=4, **sizes)
    names = [c[0] for c in plan.columns]
    out = []
    for chunk in chunks:
        with conn.cursor() as cur, cur.copy(copy_query(names, chunk.schema, chunk.table, chunk.start, chunk.end,
                                                       binary=False, key_range=chunk)) as copy:  # fmt: skip
            out.append(list(copy.rows()))
    return keys, out


@pytest.mark.parametrize("key", ["id int PRIMARY KEY", "id text COLLATE \"en_US\" PRIMARY KEY",
                                 "a int, id text, PRIMARY KEY (a, id)"])  # fmt: skip
def test_key_ranges_are_disjoint_and_cover_the_table(pg18_dsn, key):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        if "en_US" in key and not conn.execute("SELECT 1 FROM pg_collation WHERE collname = 'en_US'").fetchone():
            key = key.replace('COLLATE "en_US" ', "")
        conn.execute(f"CREATE TABLE t ({key}, v text)")
        extra = "g % 7 - 3, " if key.startswith("a int") else ""
        conn.execute(f"INSERT INTO t SELECT {extra}CASE WHEN g % 2 = 0 THEN 'B' ELSE 'a' END || (g - 5000), 'x' "
                     "FROM generate_series(1, 20000) g" if "text" in key else
                     "INSERT INTO t SELECT g - 5000, 'x' FROM generate_series(1, 20000) g")  # fmt: skip
        conn.execute("ANALYZE t; CREATE PUBLICATION pub FOR TABLE t")
        keys, chunks = _chunk_rows(conn, "t", partition_rows=1000, small_rows=1000)
        assert keys == (["a", "id"] if key.startswith("a int") else ["id"])
        assert len(chunks) >= 10, "a table of 20 chunk sizes is split"
        rows = [r for c in chunks for r in c]
        assert len(rows) == 20000 and len(set(rows)) == 20000
        assert max(len(c) for c in chunks) < 20000 / 3, [len(c) for c in chunks]


def test_the_key_is_the_replica_identity(pg18_dsn):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE pk (id int PRIMARY KEY, u int NOT NULL UNIQUE);
            CREATE TABLE ri (id int PRIMARY KEY, u int NOT NULL, w int NOT NULL);
            CREATE UNIQUE INDEX ri_u ON ri (u, w) INCLUDE (id);
            ALTER TABLE ri REPLICA IDENTITY USING INDEX ri_u;
            CREATE TABLE full_ (id int PRIMARY KEY); ALTER TABLE full_ REPLICA IDENTITY FULL;
            CREATE TABLE nokey (id int);
            CREATE TABLE listed (id int PRIMARY KEY, v int);
            CREATE PUBLICATION pub FOR TABLE pk, ri, full_, nokey, listed (v);
        """)
        plans = {p.table: p for p in publication_tables(conn, "pub")}
        assert key_columns(conn, plans["pk"]) == [("id", "integer")]
        assert key_columns(conn, plans["ri"]) == [("u", "integer"), ("w", "integer")]  # not its INCLUDE column
        assert key_columns(conn, plans["full_"]) == []  # matched on whole rows: page ranges, starts over
        assert key_columns(conn, plans["nokey"]) == []
        assert key_columns(conn, plans["listed"]) == []  # the key is not a published column
