"""Publications: create, drop, list, inspect — over an ordinary psycopg 3 connection.

A publication decides *which* tables' changes pgoutput sends; it lives in one database, and a
slot streams from the publications of its own database only. Names go through
:func:`~walspark.source.names.validate_publication_name` and are composed with
:class:`psycopg.sql.Identifier`, so names with quotes, spaces or non-ASCII letters work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from .connect import error_from_exception
from .names import validate_publication_name

__all__ = [
    "ColumnListConflict",
    "PublicationInfo",
    "PublishedRelation",
    "create_publication",
    "drop_publication",
    "get_publication",
    "list_publications",
    "missing_publications",
    "publication_list",
    "published_relations",
]

TableRef = str | tuple[str, str]


@dataclass(frozen=True, slots=True)
class PublicationInfo:
    """One row of ``pg_publication`` plus its tables (``schema.table``, unquoted)."""

    name: str
    owner: str
    all_tables: bool
    publish: tuple[str, ...]
    via_partition_root: bool | None
    tables: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "owner": self.owner,
            "all_tables": self.all_tables,
            "publish": list(self.publish),
            "via_partition_root": self.via_partition_root,
            "tables": list(self.tables),
        }


class ColumnListConflict(ValueError):
    """A table has different column lists in the publications streamed together.

    pgoutput refuses to stream such a table ("cannot use different column lists for table ... in
    different publications"), and PostgreSQL's table sync refuses to copy it; so does the snapshot.
    """


@dataclass(frozen=True, slots=True)
class PublishedRelation:
    """One table as a set of publications streams it: what PostgreSQL's table sync copies.

    ``columns`` are the published column names (``pg_publication_tables.attnames``, PostgreSQL
    15+), None before 15 (every live, non-generated column); on 15–17 they may name a stored
    generated column, which pgoutput does not send before 18 (the copy and the stream's schema
    leave it out). ``row_filter`` is the server's own
    deparsed ``WHERE`` expression, already combined over the publications (``OR``), or None when
    the table is published unfiltered by any of them. ``relkind`` 'p' is a partitioned table
    published through its root (its rows are its leaf partitions'); any other table is copied
    with ``ONLY`` (its inheritance children, if published, are tables of their own).
    """

    oid: int
    schema: str
    table: str
    relkind: str
    columns: tuple[str, ...] | None
    row_filter: str | None
    publications: tuple[str, ...]

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"


def publication_list(value: str | Iterable[str]) -> tuple[str, ...]:
    """Publication names from a ``--publication`` value: comma-separated, as the stream reads it.

    The ``pgoutput`` data source splits its ``publication`` option at commas; the snapshot and
    the preflight checks must read the same list, or they would copy other tables than the
    stream sends. A sequence is taken as already split (each item still split at commas).
    """
    items = [value] if isinstance(value, str) else list(value)
    names = [p.strip() for item in items for p in item.split(",") if p.strip()]
    return tuple(dict.fromkeys(validate_publication_name(n) for n in names))


_PUBLISHED_QUERY = """
SELECT c.oid::int8, t.schemaname::text, t.tablename::text, c.relkind::text, t.pubname::text,
       {viaroot}, {attnames}, {rowfilter}
  FROM pg_publication_tables t
  JOIN pg_publication p ON p.pubname = t.pubname
  JOIN pg_namespace n ON n.nspname = t.schemaname
  JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
 WHERE t.pubname = ANY(%s)
 ORDER BY t.schemaname, t.tablename, t.pubname
"""


def published_relations(conn: Any, publications: str | Iterable[str]) -> list[PublishedRelation]:
    """The tables ``publications`` stream together, with their columns and combined row filter.

    The rules are PostgreSQL's (``pg_get_publication_tables``, tablesync.c's
    ``fetch_remote_table_info``, pgoutput's ``get_rel_sync_entry``):

    - ``pg_publication_tables`` lists each publication's tables: leaf partitions, or the root
      where ``publish_via_partition_root`` is on; an inheritance parent published ``FOR TABLE
      parent`` lists its children too, each with the parent's filter and column list.
    - When a partition and one of its ancestors both appear and any publication publishes via
      the root, the partition is dropped: its changes go out as the ancestor's.
    - Row filters of one table in several publications are ORed; if any publication publishes
      it without a filter (including ``FOR ALL TABLES`` and ``TABLES IN SCHEMA``, for which the
      catalog reports none) the table is unfiltered.
    - Column lists must be the same in every publication (else :class:`ColumnListConflict`).

    PostgreSQL 10-14 has no row filters or column lists (``row_filter`` and ``columns`` None).
    """
    names = list(publication_list(publications))
    major = conn.info.server_version // 10000
    query = _PUBLISHED_QUERY.format(
        viaroot="p.pubviaroot" if major >= 13 else "false",
        attnames="t.attnames::text[]" if major >= 15 else "NULL::text[]",
        rowfilter="t.rowfilter" if major >= 15 else "NULL::text",
    )  # constants chosen by server version, never user input
    rows = _run(conn, sql.SQL(query), (names,), what="cannot read the publications' tables")
    grouped: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    if len(names) > 1 and any(r[5] for r in rows):
        grouped = _drop_published_ancestors_partitions(conn, grouped)
    result = []
    for oid, group in grouped.items():
        _, schema, table, relkind, _, _, _, _ = group[0]
        column_lists = {None if r[6] is None else tuple(r[6]) for r in group}
        if len(column_lists) > 1:
            pubs = ", ".join(repr(r[4]) for r in group)
            raise ColumnListConflict(
                f"table {schema}.{table} has different column lists in publications {pubs}: PostgreSQL cannot "
                "stream it (pgoutput refuses); give it the same column list in every publication, or stream "
                "them separately")
        filters = [r[7] for r in group]
        row_filter = None if any(f is None for f in filters) else " OR ".join(
            f"({f})" for f in dict.fromkeys(filters))
        result.append(PublishedRelation(int(oid), schema, table, relkind, column_lists.pop(), row_filter,
                                        tuple(r[4] for r in group)))
    return result


def _drop_published_ancestors_partitions(conn: Any, grouped: dict[int, list[tuple[Any, ...]]]
                                         ) -> dict[int, list[tuple[Any, ...]]]:
    """Without the partitions whose ancestor is also listed (``filter_partitions`` in pg_publication.c).

    ``pg_publication_tables`` applies this within one publication only; across publications
    pgoutput publishes a partition's changes as its top-most published ancestor's.
    """
    listed = set(grouped)
    rows = _run(conn, sql.SQL("SELECT r.oid::int8, a.relid::oid::int8 FROM unnest(%s::int8[]) AS r(oid),"
                              " LATERAL pg_partition_ancestors(r.oid::oid) a WHERE a.relid::oid <> r.oid::oid"),
                ([*listed],), what="cannot read partition ancestors")
    covered = {int(oid) for oid, ancestor in rows if int(ancestor) in listed}
    return {oid: group for oid, group in grouped.items() if oid not in covered}


def _table_sql(ref: TableRef) -> sql.Composable:
    if isinstance(ref, tuple):
        schema, table = ref
        return sql.Identifier(schema, table)
    if "." in ref:
        schema, table = ref.split(".", 1)
        return sql.Identifier(schema, table)
    return sql.Identifier(ref)


def create_publication(
    conn: Any,
    name: str,
    *,
    tables: Iterable[TableRef] = (),
    all_tables: bool = False,
    publish: Sequence[str] | None = None,
    via_partition_root: bool | None = None,
    if_not_exists: bool = False,
) -> None:
    """``CREATE PUBLICATION name FOR TABLE ... | FOR ALL TABLES [WITH (...)]``.

    ``tables`` are ``"schema.table"`` strings (split at the first dot), bare table names
    (resolved by ``search_path``) or exact ``(schema, table)`` tuples. With neither ``tables``
    nor ``all_tables`` the publication starts empty (tables can be added later).
    ``if_not_exists`` makes an existing publication of that name a no-op (left unchanged).
    """
    validate_publication_name(name)
    tables = list(tables)
    if tables and all_tables:
        raise ValueError("give either tables or all_tables, not both")
    if if_not_exists and get_publication(conn, name) is not None:
        return
    query = sql.SQL("CREATE PUBLICATION {}").format(sql.Identifier(name))
    if all_tables:
        query += sql.SQL(" FOR ALL TABLES")
    elif tables:
        query += sql.SQL(" FOR TABLE ") + sql.SQL(", ").join(_table_sql(t) for t in tables)
    with_parts: list[sql.Composable] = []
    if publish is not None:
        with_parts.append(sql.SQL("publish = {}").format(sql.Literal(", ".join(publish))))
    if via_partition_root is not None:
        with_parts.append(sql.SQL("publish_via_partition_root = {}").format(sql.Literal(via_partition_root)))
    if with_parts:
        query += sql.SQL(" WITH (") + sql.SQL(", ").join(with_parts) + sql.SQL(")")
    _run(conn, query, what=f"cannot create publication {name!r}")


def drop_publication(conn: Any, name: str, *, if_exists: bool = False) -> None:
    """``DROP PUBLICATION [IF EXISTS] name``."""
    validate_publication_name(name)
    query = sql.SQL("DROP PUBLICATION {}{}").format(sql.SQL("IF EXISTS " if if_exists else ""), sql.Identifier(name))
    _run(conn, query, what=f"cannot drop publication {name!r}")


def list_publications(conn: Any) -> list[PublicationInfo]:
    """Every publication of the connection's database, by name."""
    return _select(conn, None)


def get_publication(conn: Any, name: str) -> PublicationInfo | None:
    """One publication, or None if it does not exist."""
    validate_publication_name(name)
    found = _select(conn, name)
    return found[0] if found else None


def missing_publications(conn: Any, names: Iterable[str]) -> list[str]:
    """The names among ``names`` that are not publications of the connection's database."""
    wanted = [validate_publication_name(n) for n in names]
    rows = _run(conn, sql.SQL("SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)"), (wanted,),
                what="cannot list publications")
    have = {r[0] for r in rows}
    return [n for n in wanted if n not in have]


def _select(conn: Any, name: str | None) -> list[PublicationInfo]:
    major = conn.info.server_version // 10000
    via_root = "p.pubviaroot" if major >= 13 else "NULL::bool"
    truncate = "p.pubtruncate" if major >= 11 else "false"
    query = sql.SQL(
        "SELECT p.pubname, pg_get_userbyid(p.pubowner), p.puballtables,"
        " p.pubinsert, p.pubupdate, p.pubdelete, " + truncate + ", " + via_root + ","
        " coalesce((SELECT array_agg(t.schemaname || '.' || t.tablename ORDER BY t.schemaname, t.tablename)"
        "           FROM pg_publication_tables t WHERE t.pubname = p.pubname), '{}')"
        " FROM pg_publication p" + (" WHERE p.pubname = %s" if name is not None else "") + " ORDER BY p.pubname"
    )  # the fragments above are constants chosen by server version, never user input
    rows = _run(conn, query, (name,) if name is not None else None, what="cannot inspect publications")
    result = []
    for pubname, owner, all_tables, ins, upd, dele, trunc, via, tables in rows:
        publish = tuple(op for op, on in (("insert", ins), ("update", upd), ("delete", dele), ("truncate", trunc)) if on)
        result.append(PublicationInfo(pubname, owner, all_tables, publish, via, tuple(tables)))
    return result


def _run(conn: Any, query: sql.Composable, params: Any = None, *, what: str) -> list[tuple[Any, ...]]:
    import psycopg

    try:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise error_from_exception(exc, what=what) from None
