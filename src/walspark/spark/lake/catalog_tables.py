"""The pipeline's tables by name in Spark's catalog (``--catalog-schema``): registered, renamed, re-pointed, dropped."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from walspark.spark.lake.tables import quote, sql_string
from walspark.storage.layout import TargetLayout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["CatalogError", "CatalogTables", "catalog_table_name", "check_catalog_schema"]

log = logging.getLogger(__name__)

Table = tuple[str, str]

#: A part of ``--catalog-schema``: what every catalog (Hive, Glue, Unity) takes unquoted.
_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: What a table's catalog name may hold: Hive's metastore keeps lower-case letters, digits and ``_``.
_OTHER = re.compile(r"[^a-z0-9_]")
#: The PostgreSQL schema whose tables are named without it.
_DEFAULT_SCHEMA = "public"


class CatalogError(RuntimeError):
    """A table cannot be registered under its name (one line naming it, the clash and the fix)."""


def check_catalog_schema(name: str) -> tuple[str, ...]:
    """``name`` (``schema`` or ``catalog.schema``) as its parts; ValueError naming the rule."""
    parts = tuple(name.split("."))
    if len(parts) > 2 or not all(_PART.match(part) for part in parts):
        raise ValueError(
            f"catalog_schema (--catalog-schema) must be NAME or CATALOG.NAME of letters, digits and _ "
            f"(not starting with a digit), not {name!r}"
        )
    return parts


def catalog_table_name(schema: str, table: str) -> str:
    """The catalog name of ``schema.table``: ``table`` in ``public``, else ``schema_table``; lower
    case, every character but ``a-z``, ``0-9`` and ``_`` as ``_`` (what a Hive metastore keeps)."""
    name = table if schema == _DEFAULT_SCHEMA else f"{schema}_{table}"
    return _OTHER.sub("_", name.lower())


def _place(uri: str) -> str:
    """A location as the catalog and the layout spell it alike (``file:`` and escapes aside)."""
    text = unquote(uri.rstrip("/"))
    if text.startswith("file:"):
        return "/" + text[len("file:") :].lstrip("/")
    return text


@dataclass(frozen=True, slots=True)
class CatalogTables:
    """The catalog entries of one pipeline's tables, all in the schema ``schema``, each an external
    Delta table at its folder (``layout.table``): made at the table's first copy, refreshed after a
    re-copy, dropped when it leaves the publication (a rename in PostgreSQL is a leave and a join:
    the old name is dropped, the new one made once its copy is in sync). The Delta folders are
    never touched: dropping an external table removes its name only."""

    spark: SparkSession
    layout: TargetLayout
    schema: str
    say: Callable[[str], None] = print

    def __post_init__(self) -> None:
        check_catalog_schema(self.schema)

    @property
    def qualified_schema(self) -> str:
        return ".".join(quote(part) for part in self.schema.split("."))

    def name(self, schema: str, table: str) -> str:
        """``schema.table``'s catalog name, quoted (``cdc.orders``)."""
        return f"{self.qualified_schema}.{quote(catalog_table_name(schema, table))}"

    # ------------------------------------------------------------------------------------------

    def register_all(self, tables: Iterable[Table], published: Iterable[Table]) -> None:
        """Register ``tables`` (those in sync) among the publication's ``published``; raises
        :class:`CatalogError` on a clash: two published tables of one name, or a name held by a
        table that is not this pipeline's."""
        published = sorted(set(published))
        self._check_clashes(published)
        if "." not in self.schema and self.spark.conf.get("spark.sql.catalogImplementation", "") == "in-memory":
            self.say(f"warning: --catalog-schema {self.schema}: this session's catalog is in memory, so the names "
                     "last as long as the session; make the session with Hive support (docs/applying.md)")  # fmt: skip
        self._create_schema()
        for table in tables:
            self._register(table, published)

    def register(self, table: Table, published: Iterable[Table]) -> None:
        """Register ``table`` after its copy (made, or refreshed: the copy replaced its rows and
        maybe its columns); a clash is one warning line, and the stream goes on."""
        published = sorted(set(published))
        try:
            self._check_clashes(published, table)
            self._create_schema()
            self._register(table, published)
        except CatalogError as exc:
            self.say(f"warning: {exc}")

    def forget(self, table: Table) -> None:
        """Drop ``table``'s name (it left the publication or was renamed); its Delta folder stays.
        A name that points elsewhere (another table took it) is left as it is."""
        name = self.name(*table)
        where = self._location(name)
        if where is not None and _place(where) == _place(self.layout.table(*table)):
            self.spark.sql(f"DROP TABLE IF EXISTS {name}")
            self.say(f"catalog: {name.replace('`', '')} dropped ({table[0]}.{table[1]} left the publication)")

    # ------------------------------------------------------------------------------------------

    def _check_clashes(self, published: list[Table], only: Table | None = None) -> None:
        seen: dict[str, Table] = {}
        for table in published:
            other = seen.setdefault(catalog_table_name(*table), table)
            if other != table and (only is None or only in (table, other)):
                raise CatalogError(
                    f"--catalog-schema {self.schema}: tables {other[0]}.{other[1]} and {table[0]}.{table[1]} would "
                    f"both be {self.schema}.{catalog_table_name(*table)}; rename one in PostgreSQL (names are "
                    "lower-cased, characters other than letters, digits and _ become _), or run without "
                    "--catalog-schema"
                )

    def _create_schema(self) -> None:
        self._sql(f"CREATE SCHEMA IF NOT EXISTS {self.qualified_schema}")

    def _register(self, table: Table, published: list[Table]) -> None:
        name, path = self.name(*table), self.layout.table(*table)
        shown = name.replace("`", "")
        where = self._location(name)
        if where is None:
            self._sql(f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION {sql_string(path)}")
            self.say(f"catalog: {shown} is {table[0]}.{table[1]} ({path})")
        elif _place(where) == _place(path):
            self._sql(f"REFRESH TABLE {name}")
        elif self._ours(where, published):  # the folder of a table that left or was renamed away
            self._sql(f"ALTER TABLE {name} SET LOCATION {sql_string(path)}")
            self.say(f"catalog: {shown} re-pointed from {where} to {table[0]}.{table[1]} ({path})")
        else:
            raise CatalogError(
                f"--catalog-schema {self.schema}: {shown} already names the table at {where}, not "
                f"{table[0]}.{table[1]} ({path}); drop it (DROP TABLE {shown}) or choose another --catalog-schema"
            )

    def _ours(self, where: str, published: list[Table]) -> bool:
        """``where`` is a folder under this target that no published table uses."""
        place = _place(where)
        return place.startswith(_place(self.layout.target) + "/") and all(
            place != _place(self.layout.table(*t)) for t in published
        )

    def _location(self, name: str) -> str | None:
        """Where the catalog's ``name`` points; None: no such table."""
        with self._metastore():
            if not self.spark.catalog.tableExists(name.replace("`", "")):
                return None
        for row in self._sql(f"DESCRIBE TABLE EXTENDED {name}").collect():
            if row[0] == "Location":
                return str(row[1])
        return ""  # a view, or a table without a location: never ours

    def _sql(self, statement: str) -> DataFrame:
        with self._metastore():
            return self.spark.sql(statement)

    @contextlib.contextmanager
    def _metastore(self) -> Iterator[None]:
        """Derby's refusal of a second process as one line naming the fix."""
        try:
            yield
        except Exception as exc:
            text = str(exc)
            if "XSDB6" not in text and "Another instance of Derby" not in text:
                raise
            url = self.spark.conf.get("spark.hadoop.javax.jdo.option.ConnectionURL", "") or ""
            raise CatalogError(
                f"--catalog-schema {self.schema}: the embedded Derby metastore ({url.split(';')[1] if ';' in url else url}) "
                "is in use by another process, and Derby serves one process at a time; stop that process, or give "
                "every process a real metastore (--conf spark.hadoop.hive.metastore.uris=thrift://HOST:9083)"
            ) from None
