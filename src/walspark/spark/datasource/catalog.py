"""The output layout of a live slot: the catalog's tables, with the shapes a previous query recorded.

Kept apart from :mod:`.schema` (layouts and types, no connection) and :mod:`.shapes` (what a query
could not hold): this is where the two meet, over a connection to the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from walspark.source.catalog import published_tables, user_types
from walspark.spark.datasource.schema import OutputLayout, TableShape
from walspark.spark.datasource.shapes import merge_recorded
from walspark.staging.barrier import recorded_shapes
from walspark.values import UserTypes, registry_of, spark_schema

if TYPE_CHECKING:
    from walspark.storage import Location

__all__ = ["catalog_layout"]


def catalog_layout(
    conn: Any,
    publications: Sequence[str],
    table: str | None,
    *,
    binary: bool = False,
    staging_path: str | Location | None = None,
    slot: str | None = None,
) -> tuple[OutputLayout, UserTypes]:
    """The output layout of a live slot's publications, and the user types its tasks register.

    With ``staging_path``, each table also holds the shapes a previous query of that staging
    directory recorded when the stream did not fit its schema (:mod:`.shapes`), except those of
    transactions the slot has confirmed already.
    """
    from walspark.source.publications import missing_publications

    missing = missing_publications(conn, publications)
    if missing:
        raise ValueError(f"publication(s) {', '.join(map(repr, missing))} do not exist in the slot's database")
    shapes = [TableShape.from_published(t) for t in published_tables(conn, publications)]
    recorded = recorded_shapes(staging_path, after_lsn=_confirmed_lsn(conn, slot)) if staging_path else {}
    types = user_types(conn)
    registry = registry_of(types)
    tables = {s.qualified_name: s.struct(registry, binary=binary) for s in shapes}
    names = {s.qualified_name: (s.schema, s.table) for s in shapes}
    for name, found in recorded.items():
        history = _attnum_history(conn, *names[name]) if name in names else {}
        tables[name] = merge_recorded(
            name, tables.get(name), [spark_schema(list(shape), registry, binary=binary) for shape in found], history
        )
    return OutputLayout.build(tables, table), types


def _attnum_history(conn: Any, schema: str, table: str) -> dict[int, str | None]:
    """Every attnum the table ever gave a column: its name now, or None if it was dropped
    (PostgreSQL keeps dropped columns' attnums in ``pg_attribute``, never reusing them)."""
    rows = conn.execute(
        "SELECT a.attnum, CASE WHEN a.attisdropped THEN NULL ELSE a.attname::text END FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0",
        (schema, table),
    ).fetchall()
    return {int(n): name for n, name in rows}


def _confirmed_lsn(conn: Any, slot: str | None) -> int:
    if not slot:
        return 0
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    if row is None or row[0] is None:
        return 0
    from walspark.protocol import parse_lsn

    return parse_lsn(row[0])
