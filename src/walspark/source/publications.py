"""Publications: create, drop, list, inspect — over an ordinary psycopg 3 connection.

A publication decides *which* tables' changes pgoutput sends; it lives in one database, and a
slot streams from the publications of its own database only. Names go through
:func:`~walspark.source.names.validate_publication_name` and are composed with
:class:`psycopg.sql.Identifier`, so names with quotes, spaces or non-ASCII letters work.
What a publication publishes (tables, columns, row filters) is :mod:`.catalog`'s answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from .connect import error_from_exception
from .names import validate_publication_name

__all__ = [
    "PublicationInfo",
    "create_publication",
    "drop_publication",
    "get_publication",
    "list_publications",
    "missing_publications",
    "publication_list",
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


def publication_list(value: str | Iterable[str]) -> tuple[str, ...]:
    """Publication names from a ``--publication`` value: comma-separated, as the stream reads it.

    The ``pgoutput`` data source splits its ``publication`` option at commas; the snapshot and
    the preflight checks must read the same list, or they would copy other tables than the
    stream sends. A sequence is taken as already split (each item still split at commas).
    """
    items = [value] if isinstance(value, str) else list(value)
    names = [p.strip() for item in items for p in item.split(",") if p.strip()]
    return tuple(dict.fromkeys(validate_publication_name(n) for n in names))


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
    rows = _run(
        conn,
        sql.SQL("SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)"),
        (wanted,),
        what="cannot list publications",
    )
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
        publish = tuple(
            op for op, on in (("insert", ins), ("update", upd), ("delete", dele), ("truncate", trunc)) if on
        )
        result.append(PublicationInfo(pubname, owner, all_tables, publish, via, tuple(tables)))
    return result


def _run(conn: Any, query: sql.Composable, params: Any = None, *, what: str) -> list[tuple[Any, ...]]:
    import psycopg

    try:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise error_from_exception(exc, what=what) from None
