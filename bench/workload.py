"""The benchmarks' shared write load: one `bench_rows` table, inserts then updates then deletes.

Large multi-row statements (``generate_series``) so that writing a million changes takes
seconds, not minutes, and every change kind is well represented in what the slot holds.
"""

from __future__ import annotations

import math

import psycopg

TABLE_DDL = (
    "CREATE TABLE bench_rows (id int PRIMARY KEY, name text, qty int, price numeric(12, 2), at timestamptz{tags})"
)


def create_table(conn: psycopg.Connection, *, tags: bool = False) -> None:
    """The table (``tags text[]`` as a sixth column when asked)."""
    conn.execute(TABLE_DDL.format(tags=", tags text[]" if tags else ""))


def write_changes(
    conn: psycopg.Connection, changes: int, *, statement_rows: int, shares: tuple[float, float] = (0.5, 0.3),
    tags: bool = False,
) -> None:  # fmt: skip
    """At least ``changes`` row changes: ``shares`` of inserts and updates, deletes for the rest.

    Each statement (one transaction in autocommit) touches up to ``statement_rows`` rows.
    Updates change the text and numeric columns of the first rows, deletes remove the last ones.
    """
    inserts = math.ceil(changes * shares[0])
    updates = math.ceil(changes * shares[1])
    deletes = changes - inserts - updates
    tag_expr = ", ARRAY['a', g::text]" if tags else ""
    for first, last in _ranges(1, inserts, statement_rows):
        conn.execute(
            "INSERT INTO bench_rows SELECT g, 'customer ' || md5(g::text), g %% 1000, (g * 1.25)::numeric(12, 2),"
            f" timestamptz '2025-01-01 00:00:00+00' + g * interval '1 second'{tag_expr}"
            " FROM generate_series(%s::int, %s::int) g",
            (first, last),
        )
    for first, last in _ranges(1, updates, statement_rows):
        conn.execute("UPDATE bench_rows SET name = upper(name), price = price + 1 WHERE id BETWEEN %s AND %s",
                     (first, last))  # fmt: skip
    for first, last in _ranges(inserts - deletes + 1, inserts, statement_rows):
        conn.execute("DELETE FROM bench_rows WHERE id BETWEEN %s AND %s", (first, last))


def _ranges(first: int, last: int, step: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + step - 1, last)) for lo in range(first, last + 1, step)]
