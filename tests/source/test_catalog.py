"""What the catalog says publications publish, held to what pgoutput sends, on PostgreSQL 15 and 18.

The question settled here is a stored generated column of a table published without a column
list: PostgreSQL 15's ``pg_publication_tables.attnames`` names it, but its pgoutput never sends
it; PostgreSQL 18's ``attnames`` names it only under ``publish_generated_columns = stored``, and
pgoutput then sends it. Each case reads the slot through the SQL interface, decodes it with
walspark's decoder, and compares the Relation message of every change with
:func:`walspark.source.catalog.published_tables`.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from walspark.protocol import Decoder, Insert, Relation
from walspark.source.catalog import ColumnListConflict, published_tables
from walspark.source.sqlinterface import slot_changes

pytestmark = pytest.mark.timeout(120)

Columns = tuple[tuple[str, int, int], ...]

#: A plain table, and a partitioned one published through its root, each with a stored generated
#: column; ``n`` has a typmod. Then one change of each (the slot is created in between).
TABLES = """
CREATE TABLE g (id int PRIMARY KEY, a int, twice int GENERATED ALWAYS AS (a * 2) STORED, n numeric(9, 2));
CREATE TABLE parts (id int, b text, half int GENERATED ALWAYS AS (id / 2) STORED) PARTITION BY RANGE (id);
CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (100);
"""
CHANGES = "INSERT INTO g (id, a, n) VALUES (1, 1, 1.5); INSERT INTO parts (id, b) VALUES (1, 'x')"


def _attnames(conn: psycopg.Connection[Any], publication: str) -> dict[str, list[str]]:
    rows = conn.execute("SELECT tablename::text, attnames::text[] FROM pg_publication_tables WHERE pubname = %s",
                        (publication,)).fetchall()
    return {table: list(names) for table, names in rows}


def _sent(conn: psycopg.Connection[Any], publications: str, proto: int) -> dict[str, Columns]:
    """Per table a change was published as, the columns of the Relation message the change refers to."""
    decoder, relations, out = Decoder(proto), {}, {}
    for lsn, data in slot_changes(conn, "s", {"proto_version": str(proto), "publication_names": publications}):
        message = decoder.decode(data, lsn)
        if isinstance(message, Relation):
            relations[message.relation_id] = message
        elif isinstance(message, Insert):
            rel = relations[message.relation_id]
            out[rel.relation_name] = tuple((c.name, c.type_oid, c.type_modifier) for c in rel.columns)
    return out


def _catalog(conn: psycopg.Connection[Any], publications: str) -> dict[str, Columns]:
    return {t.table: tuple((c.name, c.type_oid, c.typmod) for c in t.columns)
            for t in published_tables(conn, publications)}


def _names(columns: dict[str, Columns]) -> dict[str, list[str]]:
    return {table: [c[0] for c in cols] for table, cols in columns.items()}


def _setup(conn: psycopg.Connection[Any], publications: str) -> None:
    conn.execute(TABLES)
    conn.execute(publications)
    conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    conn.execute(CHANGES)


@pytest.mark.pg15
def test_postgresql_15_lists_generated_columns_pgoutput_never_sends(pg15_dsn: str) -> None:
    with psycopg.connect(pg15_dsn, autocommit=True) as conn:
        _setup(conn, """
            CREATE PUBLICATION pub FOR TABLE g, parts WITH (publish_via_partition_root = true);
            CREATE PUBLICATION pub_list FOR TABLE g (id, a);
        """)
        assert _attnames(conn, "pub") == {"g": ["id", "a", "twice", "n"], "parts": ["id", "b", "half"]}
        sent = _sent(conn, "pub", 1)
        assert _names(sent) == {"g": ["id", "a", "n"], "parts": ["id", "b"]}
        assert _catalog(conn, "pub") == sent
        assert _catalog(conn, "pub_list") == _sent(conn, "pub_list", 1)
        # the generated column counts in 15's comparison of column lists: pgoutput refuses, so does the catalog
        with pytest.raises(psycopg.Error, match="different column lists"):
            _sent(conn, "pub,pub_list", 1)
        with pytest.raises(ColumnListConflict):
            published_tables(conn, "pub,pub_list")


def test_postgresql_18_sends_what_attnames_lists(pg18_dsn: str) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        _setup(conn, """
            ALTER TABLE g ADD COLUMN plus int GENERATED ALWAYS AS (a + 1) VIRTUAL;
            CREATE PUBLICATION pub FOR TABLE g, parts WITH (publish_via_partition_root = true);
            CREATE PUBLICATION pub_stored FOR TABLE g, parts
                WITH (publish_via_partition_root = true, publish_generated_columns = stored);
            CREATE PUBLICATION pub_list FOR TABLE g (id, twice);
        """)
        expected = {
            "pub": {"g": ["id", "a", "n"], "parts": ["id", "b"]},
            "pub_stored": {"g": ["id", "a", "twice", "n"], "parts": ["id", "b", "half"]},  # never a virtual one
            "pub_list": {"g": ["id", "twice"]},
        }
        for publication, columns in expected.items():
            assert _attnames(conn, publication) == columns, publication
            sent = _sent(conn, publication, 4)
            assert _names(sent) == columns, publication
            assert _catalog(conn, publication) == sent, publication
        for both in ("pub,pub_stored", "pub_stored,pub_list"):
            with pytest.raises(psycopg.Error, match="cannot use different"):
                _sent(conn, both, 4)
            with pytest.raises(ColumnListConflict):
                published_tables(conn, both)
