"""What a set of publications publishes: its tables, their columns, row filters and rows.

The one answer the snapshot copies, the stream declares and the table sync discovers, held to
what pgoutput sends on PostgreSQL 15 and 18 by tests/source/test_catalog.py. The rules, generated
columns by server version included, are in docs/design/source.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from walspark.values import TYPE_CATALOG_QUERY, UserTypes

from .connect import error_from_exception
from .publications import publication_list

__all__ = [
    "ColumnListConflict",
    "PublishedColumn",
    "PublishedTable",
    "memberships",
    "published_tables",
    "user_types",
]


class ColumnListConflict(ValueError):
    """A table has different column lists in the publications streamed together.

    pgoutput refuses to stream such a table ("cannot use different column lists for table ... in
    different publications"), and PostgreSQL's table sync refuses to copy it; so does walspark.
    """


@dataclass(frozen=True, slots=True)
class PublishedColumn:
    """One column pgoutput sends for a table, as the catalog has it now."""

    name: str
    attnum: int  # pg_attribute.attnum: the column's identity (a rename keeps it)
    type_oid: int
    typmod: int
    #: The text of ``attmissingval`` (what rows older than the column hold, never streamed), from
    #: the table or, for a partitioned root, from a leaf; None without one.
    missing: str | None = None
    has_default: bool = False  # atthasdef: a default or generation expression


@dataclass(frozen=True, slots=True)
class PublishedTable:
    """One table as a set of publications streams it: what PostgreSQL's table sync copies.

    ``relkind`` 'p' is a partitioned table published through its root
    (``publish_via_partition_root``): its rows are its leaf partitions', streamed under its name.
    Any other table's rows are its own (read with ``ONLY``: its inheritance children, if
    published, are tables of their own). ``columns`` are those pgoutput sends, in attnum order.
    ``row_filter`` is the server's own deparsed ``WHERE`` expression, ORed over the publications,
    or None when any of them publishes the table unfiltered.
    """

    oid: int
    schema: str
    table: str
    relkind: str
    columns: tuple[PublishedColumn, ...]
    row_filter: str | None
    publications: tuple[str, ...]

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def via_root(self) -> bool:
        """A partitioned root: its rows are its leaf partitions'."""
        return self.relkind == "p"

    @property
    def only(self) -> bool:
        """Its rows are its own, read with ``ONLY`` (not a partitioned root)."""
        return not self.via_root


def _sent(major: int, attnames: tuple[str, ...] | None, name: str, generated: bool) -> bool:
    """Whether pgoutput sends this live column (the module docstring's rule, per server version)."""
    if attnames is not None and name not in attnames:
        return False  # not in the column list (PostgreSQL 15+)
    return not generated or major >= 18  # before 18 never sent, whatever attnames says


_TABLES_QUERY = """
SELECT c.oid::int8, t.schemaname::text, t.tablename::text, c.relkind::text, t.pubname::text,
       {viaroot}, {attnames}, {rowfilter}
  FROM pg_publication_tables t
  JOIN pg_publication p ON p.pubname = t.pubname
  JOIN pg_namespace n ON n.nspname = t.schemaname
  JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
 WHERE t.pubname = ANY(%s)
 ORDER BY t.schemaname, t.tablename, t.pubname
"""

# Live columns of the listed relations; a column's missing value is looked up on the relation
# and its leaf partitions (a partitioned root has no rows, so its leaves keep the values).
_COLUMNS_QUERY = """
SELECT a.attrelid::int8, a.attnum, a.attname::text, a.atttypid::int8, a.atttypmod, {generated}, a.atthasdef,
       {missing}
  FROM pg_attribute a
 WHERE a.attrelid = ANY(%s::oid[]) AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attrelid, a.attnum
"""

_MISSING = """(SELECT (x.attmissingval::text::text[])[1] FROM pg_attribute x
         WHERE x.attname = a.attname AND x.atthasmissing AND NOT x.attisdropped
           AND x.attrelid IN ({leaves}) LIMIT 1)"""


def published_tables(conn: Any, publications: str | Iterable[str]) -> list[PublishedTable]:
    """The tables ``publications`` stream together, by schema and name, with what is sent of each.

    - ``pg_publication_tables`` lists each publication's tables: leaf partitions, or the root
      where ``publish_via_partition_root`` is on; an inheritance parent published ``FOR TABLE
      parent`` lists its children too, each with the parent's filter and column list.
    - When a partition and one of its ancestors both appear and any publication publishes via
      the root, the partition is dropped: its changes go out as the ancestor's.
    - Row filters of one table in several publications are ORed; if any publication publishes
      it without a filter (including ``FOR ALL TABLES`` and ``TABLES IN SCHEMA``, for which the
      catalog reports none) the table is unfiltered.
    - Column lists (``attnames`` as the server reports them) must be the same in every
      publication, else :class:`ColumnListConflict`.

    PostgreSQL 10-14 has no row filters or column lists. Run it inside an exported snapshot to
    get the publications as of that snapshot.
    """
    names = list(publication_list(publications))
    major = conn.info.server_version // 10000
    query = _TABLES_QUERY.format(
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
    columns = _columns(conn, major, list(grouped))
    result = []
    for oid, group in grouped.items():
        _, schema, table, relkind, _, _, _, _ = group[0]
        column_lists = {None if r[6] is None else tuple(r[6]) for r in group}
        if len(column_lists) > 1:
            pubs = ", ".join(repr(r[4]) for r in group)
            raise ColumnListConflict(
                f"table {schema}.{table} has different column lists in publications {pubs}: PostgreSQL cannot "
                "stream it (pgoutput refuses); give it the same column list in every publication, or stream "
                "them separately"
            )
        attnames = column_lists.pop()
        sent = tuple(c for c, generated in columns.get(oid, ()) if _sent(major, attnames, c.name, generated))
        filters = [r[7] for r in group]
        row_filter = None if any(f is None for f in filters) else " OR ".join(f"({f})" for f in dict.fromkeys(filters))
        result.append(PublishedTable(int(oid), schema, table, relkind, sent, row_filter, tuple(r[4] for r in group)))
    return result


def _columns(conn: Any, major: int, oids: list[int]) -> dict[int, list[tuple[PublishedColumn, bool]]]:
    """Each relation's live columns in attnum order, each with whether it is generated."""
    if not oids:
        return {}
    leaves = (
        "SELECT a.attrelid UNION ALL SELECT relid FROM pg_partition_tree(a.attrelid) WHERE isleaf"
        if major >= 12
        else "SELECT a.attrelid"
    )
    query = _COLUMNS_QUERY.format(
        generated="a.attgenerated <> ''" if major >= 12 else "false",
        missing=_MISSING.format(leaves=leaves) if major >= 11 else "NULL::text",
    )  # constants chosen by server version, never user input
    out: dict[int, list[tuple[PublishedColumn, bool]]] = {}
    for relid, attnum, name, type_oid, typmod, generated, has_default, missing in _run(
        conn, sql.SQL(query), (oids,), what="cannot read the published tables' columns"
    ):
        column = PublishedColumn(name, int(attnum), int(type_oid), int(typmod), missing, bool(has_default))
        out.setdefault(int(relid), []).append((column, bool(generated)))
    return out


def _drop_published_ancestors_partitions(
    conn: Any, grouped: dict[int, list[tuple[Any, ...]]]
) -> dict[int, list[tuple[Any, ...]]]:
    """Without the partitions whose ancestor is also listed (``filter_partitions`` in pg_publication.c).

    ``pg_publication_tables`` applies this within one publication only; across publications
    pgoutput publishes a partition's changes as its top-most published ancestor's.
    """
    listed = set(grouped)
    rows = _run(
        conn,
        sql.SQL(
            "SELECT r.oid::int8, a.relid::oid::int8 FROM unnest(%s::int8[]) AS r(oid),"
            " LATERAL pg_partition_ancestors(r.oid::oid) a WHERE a.relid::oid <> r.oid::oid"
        ),
        ([*listed],),
        what="cannot read partition ancestors",
    )
    covered = {int(oid) for oid, ancestor in rows if int(ancestor) in listed}
    return {oid: group for oid, group in grouped.items() if oid not in covered}


_MEMBERSHIPS_QUERY = """
SELECT c.oid::int8,
       array(SELECT 'r' || pr.oid FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
              WHERE p.pubname = ANY(%(pubs)s)
                AND (pr.prrelid = c.oid OR pr.prrelid IN (SELECT relid FROM pg_partition_ancestors(c.oid)))
             {namespace}
             UNION ALL
             SELECT 'a' || p.oid FROM pg_publication p WHERE p.pubname = ANY(%(pubs)s) AND p.puballtables
             ORDER BY 1)
  FROM pg_class c WHERE c.oid = ANY(%(oids)s)
"""

_NAMESPACE = """
             UNION ALL
             SELECT 'n' || pn.oid FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = pn.pnpubid
              WHERE p.pubname = ANY(%(pubs)s) AND pn.pnnspid = c.relnamespace
"""


def memberships(conn: Any, publications: str | Iterable[str], oids: Iterable[int]) -> dict[int, tuple[str, ...]]:
    """The catalog rows through which ``publications`` publish each relation of ``oids``.

    ``'r'`` + a ``pg_publication_rel`` oid (the table or an ancestor listed), ``'n'`` + a
    ``pg_publication_namespace`` oid (its schema), ``'a'`` + a ``FOR ALL TABLES`` publication's
    oid; sorted. ``ALTER PUBLICATION … DROP TABLE t`` then ``ADD TABLE t`` makes a new
    ``pg_publication_rel`` row, so the answer changes even when both happened in between.
    """
    pubs = list(publication_list(publications))
    major = conn.info.server_version // 10000
    query = _MEMBERSHIPS_QUERY.format(namespace=_NAMESPACE if major >= 15 else "")  # constants only
    rows = _run(
        conn,
        sql.SQL(query),
        {"pubs": pubs, "oids": [int(o) for o in oids]},
        what="cannot read the publications' membership rows",
    )
    return {int(oid): tuple(sig or ()) for oid, sig in rows}


def user_types(conn: Any) -> UserTypes:
    """The database's user types (enums, domains, composites, ranges, extension base types), as
    :data:`walspark.values.TYPE_CATALOG_QUERY` rows: the snapshot and the stream type every column
    from the same rows (docs/design/values.md)."""
    rows = _run(conn, sql.SQL(TYPE_CATALOG_QUERY), what="cannot read the user types")
    return tuple((*r[:9], tuple(tuple(f) for f in r[9]) if r[9] else None) for r in rows)


def _run(conn: Any, query: sql.Composable, params: Any = None, *, what: str) -> list[tuple[Any, ...]]:
    import psycopg

    try:
        return conn.execute(query, params).fetchall()
    except psycopg.Error as exc:
        raise error_from_exception(exc, what=what) from None
