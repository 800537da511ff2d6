"""Output schemas of the ``pgoutput`` source, and where the tables' columns come from.

The two layouts and the schema barrier are docs/design/pipeline.md §4; the declared schema is read
back from the Spark schema itself (:meth:`OutputLayout.from_schema`); the tables' columns come from
:mod:`walspark.source.catalog`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from walspark.changes.rows import ENVELOPE, UNCHANGED_FIELD
from walspark.protocol import RelationColumn
from walspark.staging.barrier import SchemaChangedError
from walspark.values import TypeRegistry, spark_schema, spark_type

if TYPE_CHECKING:
    from walspark.source.catalog import PublishedTable

__all__ = [
    "AMBIGUOUS_KEY",
    "ATTNUM_KEY",
    "DEFAULT_KEY",
    "ENVELOPE_NAMES",
    "MISSING_KEY",
    "SAME_AS_KEY",
    "ColumnFacts",
    "OutputLayout",
    "SchemaChangedError",
    "TableShape",
    "check_relation",
    "is_schema_change",
    "merge_structs",
    "parse_table_name",
    "relation_misfit",
]

OLD_SUFFIX = ":old"
ENVELOPE_NAMES = tuple(ENVELOPE.names)


def is_schema_change(error: BaseException) -> bool:
    """Whether a streaming query ended with :class:`SchemaChangedError`: raised in the source's
    Python process, it reaches the driver through the JVM as text, so its name is what tells."""
    return SchemaChangedError.__name__ in str(error)


def parse_table_name(text: str) -> tuple[str, str]:
    """``schema.name`` (either part may be double-quoted, quotes doubled inside) → (schema, name).

    A bare name means ``public``. Unquoted parts are kept as written (pgoutput reports the
    catalog's spelling, which for unquoted identifiers created without quotes is lower case).
    """
    parts: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':
            j, buf = i + 1, []
            while True:
                k = text.find('"', j)
                if k < 0:
                    raise ValueError(f"unterminated quoted identifier in table name {text!r}")
                buf.append(text[j:k])
                if k + 1 < n and text[k + 1] == '"':
                    buf.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            parts.append("".join(buf))
        else:
            k = text.find(".", i)
            k = n if k < 0 else k
            parts.append(text[i:k])
            i = k
        if i < n:
            if text[i] != ".":
                raise ValueError(f"invalid table name {text!r}: expected schema.name")
            i += 1
            if i == n:
                raise ValueError(f"invalid table name {text!r}: empty name after '.'")
    if len(parts) == 1:
        parts.insert(0, "public")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"invalid table name {text!r}: expected schema.name")
    return parts[0], parts[1]


# --------------------------------------------------------------------------- envelope and layouts


def _envelope_fields() -> list[T.StructField]:
    return [T.StructField(f.name, spark_type(f.type), f.nullable) for f in ENVELOPE]


def _unchanged_field() -> T.StructField:
    return T.StructField(UNCHANGED_FIELD.name, spark_type(UNCHANGED_FIELD.type), UNCHANGED_FIELD.nullable)


def _plain(dt: T.DataType) -> str:
    """A type's identity without field metadata or nullability."""
    return dt.simpleString()


#: Field metadata of a declared column taken from the catalog (what the sink needs to follow DDL
#: exactly, pipeline.md §4): its ``pg_attribute.attnum`` (a column's identity — a rename keeps it,
#: DROP + ADD gives a new one), the text of its missing value (``attmissingval``: what rows that
#: existed when it was added hold, never streamed), and whether it has a default or generation
#: expression without a missing value (existing rows were then rewritten, or are NULL).
ATTNUM_KEY = "walspark.attnum"
MISSING_KEY = "walspark.missing"
DEFAULT_KEY = "walspark.default"
#: Field metadata of a declared column that only older stream shapes have (:mod:`.shapes`): the
#: catalog column it is now, renamed since (``SAME_AS_KEY``: its changes belong there), or a mark
#: that the stream cannot tell which column it was (``AMBIGUOUS_KEY``: the sink stops the table).
SAME_AS_KEY = "walspark.same_as"
AMBIGUOUS_KEY = "walspark.ambiguous"


@dataclass(frozen=True, slots=True)
class ColumnFacts:
    """What the catalog says about a published column beyond its type."""

    attnum: int
    missing: str | None = None  # text form of attmissingval's element
    has_default: bool = False

    def metadata(self) -> dict[str, Any]:
        md: dict[str, Any] = {ATTNUM_KEY: self.attnum}
        if self.missing is not None:
            md[MISSING_KEY] = self.missing
        if self.has_default:
            md[DEFAULT_KEY] = True
        return md


@dataclass(frozen=True, slots=True)
class TableShape:
    """A table as declared: qualified name and its published columns as (name, type OID, typmod)."""

    schema: str
    table: str
    columns: tuple[tuple[str, int, int], ...]
    facts: tuple[ColumnFacts, ...] = ()  # per column, when read from the catalog

    @classmethod
    def from_published(cls, table: PublishedTable) -> TableShape:
        """The shape of a table the catalog says is published (:mod:`walspark.source.catalog`)."""
        return cls(
            table.schema,
            table.table,
            tuple((c.name, c.type_oid, c.typmod) for c in table.columns),
            tuple(ColumnFacts(c.attnum, c.missing, c.has_default) for c in table.columns),
        )

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"

    def struct(self, registry: TypeRegistry, *, binary: bool = False) -> T.StructType:
        struct = spark_schema(list(self.columns), registry, binary=binary)
        if not self.facts:
            return struct
        return T.StructType(
            [
                T.StructField(f.name, f.dataType, f.nullable, {**(f.metadata or {}), **facts.metadata()})
                for f, facts in zip(struct.fields, self.facts, strict=True)
            ]
        )


@dataclass(frozen=True, slots=True)
class OutputLayout:
    """Which layout, and each declared table's columns (as Spark structs)."""

    table: str | None  # qualified name in per-table mode, None for all tables
    tables: Mapping[str, T.StructType]

    @classmethod
    def build(cls, tables: Mapping[str, T.StructType], table: str | None) -> OutputLayout:
        if table is not None and table not in tables:
            known = ", ".join(sorted(tables)) or "none"
            raise ValueError(f"table {table!r} is not published (published tables: {known})")
        return cls(table, dict(tables) if table is None else {table: tables[table]})

    def misfit(
        self, qualified_name: str, columns: Sequence[RelationColumn], registry: TypeRegistry, *, binary: bool
    ) -> str | None:
        """Why rows of this Relation do not fit (:func:`relation_misfit`); the stager's question."""
        return relation_misfit(self, qualified_name, columns, registry, binary=binary)

    def spark_schema(self) -> T.StructType:
        if self.table is not None:
            columns = self.tables[self.table]
            clash = [f.name for f in columns.fields if f.name in ENVELOPE_NAMES or f.name in ("_old", "_unchanged")]
            if clash:
                raise ValueError(
                    f"table {self.table} has columns named like walspark's own ({', '.join(clash)}); "
                    "read it in all-tables mode instead (no table option)"
                )
            return T.StructType(
                [*_envelope_fields(), *columns.fields, T.StructField("_old", columns, True), _unchanged_field()]
            )
        fields = [*_envelope_fields(), _unchanged_field()]
        for name in sorted(self.tables):
            fields.append(T.StructField(name, self.tables[name], True))
            fields.append(T.StructField(name + OLD_SUFFIX, self.tables[name], True))
        return T.StructType(fields)

    @classmethod
    def from_schema(cls, schema: T.StructType, table: str | None) -> OutputLayout:
        """Read the declared tables back from an output schema (the one Spark holds)."""
        names = schema.fieldNames()
        if table is not None:
            try:
                old = schema["_old"].dataType
            except KeyError:
                raise ValueError("a per-table schema needs an _old struct column") from None
            assert isinstance(old, T.StructType)
            return cls(table, {table: old})
        tables = {}
        for f in schema.fields:
            if f.name in ENVELOPE_NAMES or f.name == "_unchanged" or f.name.endswith(OLD_SUFFIX):
                continue
            if not isinstance(f.dataType, T.StructType) or f.name + OLD_SUFFIX not in names:
                raise ValueError(
                    f"column {f.name!r} is not a table column pair (expected {f.name!r} and "
                    f"{f.name + OLD_SUFFIX!r} structs)"
                )
            tables[f.name] = f.dataType
        return cls(None, tables)

    def wants(self, qualified_name: str) -> bool:
        return self.table is None or self.table == qualified_name


# --------------------------------------------------------------------------- shape checks

_WIDENINGS = {
    ("smallint", "int"),
    ("smallint", "bigint"),
    ("int", "bigint"),
    ("float", "double"),
}


def _fits(actual: T.DataType, declared: T.DataType) -> bool:
    if _plain(actual) == _plain(declared):
        return True
    if (_plain(actual), _plain(declared)) in _WIDENINGS:
        return True
    if isinstance(actual, T.DecimalType) and isinstance(declared, T.DecimalType):
        return declared.scale >= actual.scale and declared.precision - declared.scale >= actual.precision - actual.scale
    if isinstance(actual, T.StructType) and isinstance(declared, T.StructType):
        want = {f.name: f.dataType for f in declared.fields}
        return all(f.name in want and _fits(f.dataType, want[f.name]) for f in actual.fields)
    if isinstance(actual, T.ArrayType) and isinstance(declared, T.ArrayType):
        return _fits(actual.elementType, declared.elementType)
    return False


def relation_misfit(
    layout: OutputLayout,
    qualified_name: str,
    columns: Sequence[RelationColumn],
    registry: TypeRegistry,
    *,
    binary: bool = False,
) -> str | None:
    """Why rows of this Relation do not fit the declared schema (None when they fit).

    Fits: every column of the Relation exists in the declared table with the same Spark type
    or a lossless widening (int → bigint, float → double, a wider decimal). Declared columns
    the Relation lacks are filled (null, or the column's missing value) — which lets a query
    started after ``ADD COLUMN`` read the older changes still in the slot.
    """
    if not layout.wants(qualified_name):
        return None
    declared = layout.tables.get(qualified_name)
    if declared is None:
        return "changes of a table the query's schema does not hold (it joined the publication after the query started)"
    actual = spark_schema(list(columns), registry, binary=binary)
    want = {f.name: f.dataType for f in declared.fields}
    for f in actual.fields:
        if f.name not in want:
            return f"new column {f.name!r} ({_plain(f.dataType)}) is not in the query's schema (ALTER TABLE)"
        if not _fits(f.dataType, want[f.name]):
            return (
                f"column {f.name!r} is {_plain(f.dataType)} in the stream, {_plain(want[f.name])} in the query's "
                "schema (ALTER TABLE)"
            )
    return None


def check_relation(
    layout: OutputLayout,
    qualified_name: str,
    columns: Sequence[RelationColumn],
    registry: TypeRegistry,
    *,
    binary: bool = False,
) -> None:
    """Raise :class:`SchemaChangedError` unless rows of this Relation fit the declared schema
    (see :func:`relation_misfit`)."""
    reason = relation_misfit(layout, qualified_name, columns, registry, binary=binary)
    if reason is not None:
        raise SchemaChangedError(f"table {qualified_name}: {reason}; restart the query to pick up the new shape")


# --------------------------------------------------------------------------- catalog


def merge_structs(name: str, structs: Sequence[T.StructType]) -> T.StructType:
    """One struct holding every shape a table had (columns in order of first appearance).

    A column whose type changed takes the wider of the two types when one fits the other;
    otherwise the shapes cannot share a schema and :class:`SchemaChangedError` says so.
    """
    merged: dict[str, T.StructField] = {}
    for struct in structs:
        for f in struct.fields:
            have = merged.get(f.name)
            if have is None or _plain(have.dataType) == _plain(f.dataType):
                merged.setdefault(f.name, f)
            elif _fits(have.dataType, f.dataType):
                merged[f.name] = f
            elif not _fits(f.dataType, have.dataType):
                raise SchemaChangedError(
                    f"column {f.name!r} of table {name} changes type from {_plain(have.dataType)} to "
                    f"{_plain(f.dataType)} within the stream; read the parts before and after apart"
                )
    return T.StructType(list(merged.values()))
