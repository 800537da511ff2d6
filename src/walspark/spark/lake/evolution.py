"""Delta target tables that follow the source's DDL: creation, widening, renames, drops, defaults.

Columns keep PostgreSQL's identity, their attnum (the table property ``walspark.attnums``). See
docs/design/applying.md for the rules.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField

    from walspark.spark.lake.frames import TableRows

from walspark.spark.datasource.schema import (
    AMBIGUOUS_KEY,
    ATTNUM_KEY,
    DEFAULT_KEY,
    MISSING_KEY,
    SAME_AS_KEY,
)
from walspark.spark.lake.tables import (
    CDF_PROPERTY,
    COLUMN_MAPPING,
    COLUMN_MAPPING_REASON,
    change_data_feed,
    field_names,
    mapping_reason,
    quote,
    sql_string,
    table_properties,
)

__all__ = [
    "ATTNUMS_PROPERTY",
    "ColumnIds",
    "SchemaEvolutionError",
    "TargetTable",
    "attnums_property",
    "follow_catalog",
    "follow_ddl",
    "parse_attnums",
]

log = logging.getLogger(__name__)

#: The attnum recorded for a column added from an older stream shape (which has none): a later
#: catalog column of that name is another column, never this one.
UNKNOWN_ATTNUM = 0

#: The table property holding ``{column: attnum}`` of a target table.
ATTNUMS_PROPERTY = "walspark.attnums"


@dataclass(frozen=True, slots=True)
class ColumnIds:
    """The ``walspark.attnums`` property: each column's attnum, and the names columns had before a
    rename (so that changes from before it, still named the old way, find their column)."""

    attnums: dict[str, int]
    renamed: dict[str, str]

    def to_json(self) -> str:
        return json.dumps({"attnums": self.attnums, "renamed": self.renamed})

    def current_name(self, name: str) -> str | None:
        seen = set()
        while name in self.renamed and name not in seen:
            seen.add(name)
            name = self.renamed[name]
        return name if seen else None


def parse_attnums(text: str | None) -> ColumnIds:
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    return ColumnIds(
        {str(k): int(v) for k, v in (data.get("attnums") or {}).items()},
        {str(k): str(v) for k, v in (data.get("renamed") or {}).items()},
    )


def attnums_property(fields: Iterable[StructField]) -> tuple[str, str] | None:
    """The ``walspark.attnums`` property of a new table with these columns (None without catalog facts)."""
    attnums = {f.name: int(f.metadata[ATTNUM_KEY]) for f in fields if ATTNUM_KEY in (f.metadata or {})}
    return (ATTNUMS_PROPERTY, ColumnIds(attnums, {}).to_json()) if attnums else None


class SchemaEvolutionError(RuntimeError):
    """A source column changed in a way the Delta table cannot follow safely."""


# ---------------------------------------------------------------------------------------------
# Target tables: creation and widening

_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_FLOATING = ("float", "double")


def _widening(source: DataType, target: DataType) -> DataType | Literal[False] | None:
    """How the target column must change to take ``source`` values.

    None: as is (same type, or the target is wider and values cast up on write); a DataType: the
    target must widen to it; False: incompatible.
    """
    from pyspark.sql.types import DecimalType

    s, t = source.simpleString(), target.simpleString()
    if s == t:
        return None
    for ladder in (_INTEGRAL, _FLOATING):
        if s in ladder and t in ladder:
            return source if ladder.index(s) > ladder.index(t) else None
    if s in _INTEGRAL[:3] and t == "double":
        return None
    if isinstance(source, DecimalType) and isinstance(target, DecimalType):
        scale = max(source.scale, target.scale)
        digits = max(source.precision - source.scale, target.precision - target.scale)
        if digits + scale > 38:
            return False
        wide = DecimalType(digits + scale, scale)
        return None if wide == target else wide
    if s in _INTEGRAL and isinstance(target, DecimalType):
        return (
            None
            if target.precision - target.scale >= {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}[s]
            else False
        )
    return False


@dataclass(slots=True)
class TargetTable:
    """One Delta table of the target: created with the features it needs, evolved to fit each batch."""

    spark: SparkSession
    path: str
    qualified: str

    @property
    def sql_name(self) -> str:
        return f"delta.{quote(self.path)}"

    def recopy_advice(self) -> str:
        """What to do when the table's rows can no longer follow the source: copy it again."""
        target = self.path.rstrip("/").rsplit("/", 2)[0]
        return (f"Copy the table again, then run again: `walspark resnapshot --target {target} --table {self.qualified}` "
                "(or start over from a new snapshot: drop the slot with `walspark slot drop` and run into a new "
                "--target)")  # fmt: skip

    def exists(self) -> bool:
        from walspark.spark.lake.tables import is_delta_table

        return is_delta_table(self.path)  # a listing of its log, not a Spark snapshot of it

    def create(self, fields: Iterable[StructField], extra_ddl: Sequence[tuple[str, str]] = ()) -> None:
        from delta.tables import DeltaTable

        fields = list(fields)
        builder = DeltaTable.createIfNotExists(self.spark).location(self.path)
        for f in fields:
            builder = builder.addColumn(f.name, f.dataType, nullable=True)
        for name, ddl in extra_ddl:
            builder = builder.addColumn(name, ddl, nullable=True)
        names = [*field_names(fields), *(name for name, _ in extra_ddl)]
        for k, v in table_properties(self.spark.conf, 0, names).items():  # a new table has no rows yet
            builder = builder.property(k, v)
        ids = attnums_property(fields)
        if ids is not None:
            builder = builder.property(*ids)
        builder.execute()

    def properties(self) -> dict[str, str]:
        """The table's properties.

        A local table's are read from its log with delta-rs (milliseconds); elsewhere with SHOW
        TBLPROPERTIES (the log's metadata only), not ``DeltaTable.detail()``, which also sums
        the table's files — a Spark job over the whole log, seconds per table at the first batch
        of every run."""
        from walspark.spark.lake import driver_log

        properties = driver_log.properties(self.path)
        if properties is None:
            rows = self.spark.sql(f"SHOW TBLPROPERTIES {self.sql_name}").collect()
            properties = {row[0]: row[1] for row in rows}
        return properties

    def column_ids(self) -> ColumnIds:
        """The PostgreSQL ``attnum`` of each column, as recorded in the table's properties."""
        return parse_attnums(self.properties().get(ATTNUMS_PROPERTY))

    def require_column_mapping(self, reason: str) -> None:
        """Switch column mapping on for the table, in place, before a change that needs it (a
        rename, a drop, a name Parquet refuses), recording ``reason``; a table that has it
        already is left as it is. Delta upgrades the protocol (:data:`.tables.COLUMN_MAPPING`) and
        rewrites no data file."""
        if self.properties().get("delta.columnMapping.mode", "none") != "none":
            return
        log.warning("%s: switching Delta column mapping on for the %s", self.qualified, reason)
        props = {**COLUMN_MAPPING, COLUMN_MAPPING_REASON: reason}
        text = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in props.items())
        self.spark.sql(f"ALTER TABLE {self.sql_name} SET TBLPROPERTIES ({text})")

    def follow_change_data_feed(self) -> None:
        """Turn Delta's change data feed on for the table when the session asks for it
        (:data:`.tables.CHANGE_DATA_FEED`) and it lacks it: one metadata commit (Spark's ``ALTER
        TABLE ... SET TBLPROPERTIES``, which gives the protocol the ``changeDataFeed`` feature), from
        which its feed is readable. Never turned off here (walspark removes no feature)."""
        if not change_data_feed(self.spark.conf):
            return
        if self.properties().get(CDF_PROPERTY, "false").lower() == "true":
            return
        log.warning("%s: turning Delta's change data feed on (readable from the table's next version)", self.qualified)
        self.spark.sql(f"ALTER TABLE {self.sql_name} SET TBLPROPERTIES ({sql_string(CDF_PROPERTY)} = 'true')")

    def add_columns(self, fields: Sequence[StructField], ddl: Sequence[tuple[str, str]] = ()) -> None:
        """Add nullable columns: ``fields``, then ``ddl``'s (name, Spark SQL type). From the driver
        with delta-rs where it writes the table as Spark does and only ``fields`` are added, else
        with Spark's ``ALTER TABLE ... ADD COLUMNS``."""
        from walspark.spark.lake import driver_merge

        if not ddl and driver_merge.add_columns(self.path, [{**f.jsonValue(), "metadata": {}} for f in fields]):
            return
        cols = [(f.name, f.dataType.simpleString()) for f in fields] + list(ddl)
        self.spark.sql(f"ALTER TABLE {self.sql_name} ADD COLUMNS ({', '.join(f'{quote(n)} {t}' for n, t in cols)})")

    def set_column_ids(self, ids: ColumnIds) -> None:
        """Record the columns' attnums in the table's properties: from the driver with delta-rs
        where it writes the table as Spark does, else with Spark."""
        from walspark.spark.lake import driver_merge

        if driver_merge.set_properties(self.path, {ATTNUMS_PROPERTY: ids.to_json()}):
            return
        self.spark.sql(
            f"ALTER TABLE {self.sql_name} SET TBLPROPERTIES "
            f"({sql_string(ATTNUMS_PROPERTY)} = {sql_string(ids.to_json())})"
        )

    def columns(self) -> list[StructField]:
        """The table's columns: from its log with delta-rs where it is local (no Spark snapshot)."""
        from delta.tables import DeltaTable
        from pyspark.sql.types import StructType

        from walspark.spark.lake import driver_log

        logged = driver_log.schema(self.path)
        if logged is not None:
            return list(StructType.fromJson(logged).fields)
        return list(DeltaTable.forPath(self.spark, self.path).toDF().schema.fields)

    def evolve(self, fields: Sequence[StructField], extra_ddl: Sequence[tuple[str, str]] = (),
               known: dict[str, dict[str, DataType | None]] | None = None) -> list[str]:  # fmt: skip
        """Make the table fit the batch's columns; returns the table's columns the batch lacks.

        Checks every column before changing anything, so an incompatible change leaves the table
        as it was. ``known`` (path → column → type; None for the validity columns) remembers
        the table's columns between batches: a batch whose columns the table already takes is
        answered from it without reading the Delta log (the sink that owns it is the only one
        changing the schemas of its tables while it runs).
        """
        extra = {name for name, _ in extra_ddl}
        present = {f.name for f in fields}
        cached = known.get(self.path) if known is not None else None
        if (
            cached is not None
            and extra <= cached.keys()
            and all(
                cached.get(f.name) is not None and _widening(f.dataType, cached[f.name]) is None  # type: ignore[arg-type]
                for f in fields
            )
        ):
            return [name for name in cached if name not in present and name not in extra]
        schema = self._evolve(fields, extra_ddl)
        if known is not None:
            known[self.path] = schema
        return [name for name in schema if name not in present and name not in extra]

    def _evolve(
        self, fields: Sequence[StructField], extra_ddl: Sequence[tuple[str, str]]
    ) -> dict[str, DataType | None]:
        """:meth:`evolve` against the Delta table; returns its columns afterwards."""
        if not self.exists():
            self.create(fields, extra_ddl)
            return {**{f.name: f.dataType for f in fields}, **{name: None for name, _ in extra_ddl}}
        self.follow_change_data_feed()
        current = {f.name: f for f in self.columns()}
        added = [f for f in fields if f.name not in current]
        widened: list[tuple[str, DataType]] = []
        for f in fields:
            if f.name in current:
                change = _widening(f.dataType, current[f.name].dataType)
                if change is False:
                    raise SchemaEvolutionError(
                        f"{self.qualified}: column {f.name!r} changed from {current[f.name].dataType.simpleString()} "
                        f"to {f.dataType.simpleString()} (ALTER COLUMN TYPE): PostgreSQL rewrote the existing rows "
                        "without streaming them, and Delta cannot convert them exactly; other tables keep going. "
                        f"{self.recopy_advice()}"
                    )
                if change is not None:
                    widened.append((f.name, change))
        if widened:
            self.spark.sql(f"ALTER TABLE {self.sql_name} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
            for name, dtype in widened:
                log.warning("%s: widening column %r to %s", self.qualified, name, dtype.simpleString())
                self.spark.sql(f"ALTER TABLE {self.sql_name} ALTER COLUMN {quote(name)} TYPE {dtype.simpleString()}")
        # Validity columns too: an SCD2 table may start from a snapshot's plain copy.
        new_cols = [(f.name, f.dataType.simpleString()) for f in added]
        new_cols += [(name, ddl) for name, ddl in extra_ddl if name not in current]
        if new_cols:
            reason = mapping_reason([*field_names(added), *(name for name, _ in new_cols)])
            if reason is not None:
                self.require_column_mapping(reason)
            log.warning("%s: adding columns %s", self.qualified, [name for name, _ in new_cols])
            self.add_columns(added, [(name, ddl) for name, ddl in extra_ddl if name not in current])
        extra = {name for name, _ in extra_ddl}
        schema: dict[str, DataType | None] = {
            name: None if name in extra else f.dataType for name, f in current.items()
        }
        schema.update(widened)
        schema.update({f.name: f.dataType for f in added})
        schema.update({name: None for name, _ in extra_ddl if name not in current})
        return schema


# ---------------------------------------------------------------------------------------------
# Column identity: renames, drops and re-adds, new columns' existing rows


@dataclass(slots=True)
class _Plan:
    """What one batch's columns ask of the Delta table (see :func:`follow_ddl`)."""

    drops: list[str]
    renames: list[tuple[str, str]]  # (Delta name, new name)
    added: list[StructField]  # new columns with a known attnum
    ids: ColumnIds  # the property afterwards


def _plan(fields: Sequence[StructField], current: dict[str, StructField], ids: ColumnIds) -> _Plan:
    attnums = ids.attnums
    holders = {n: name for name, n in attnums.items() if name in current}
    plan = _Plan([], [], [], ColumnIds({}, dict(ids.renamed)))
    moved: set[str] = set()  # Delta columns renamed away or dropped
    for f in fields:
        n = (f.metadata or {}).get(ATTNUM_KEY)
        if SAME_AS_KEY in (f.metadata or {}):
            continue  # an older name of a batch column: folded into it (see _aliases)
        if n is None:  # a column of an older stream shape: identity unknown (0), matched by name
            if f.name not in current and f.name not in ids.renamed:
                plan.ids.attnums[f.name] = UNKNOWN_ATTNUM
            continue
        n = int(n)
        plan.ids.attnums[f.name] = n
        holder = holders.get(n)
        if holder == f.name or (f.name in current and f.name not in attnums):
            continue  # the same column (one from before attnums were recorded: by name)
        if f.name in current:  # an older column of that name (dropped since, or renamed away)
            plan.drops.append(f.name)
        if holder is not None:  # renamed in PostgreSQL
            plan.renames.append((holder, f.name))
            plan.ids.renamed[holder] = f.name
            moved.add(holder)
        else:
            plan.added.append(f)
    plan.drops = [d for d in plan.drops if d not in moved]  # a column renamed away is not dropped
    moved.update(plan.drops)
    for name, n in attnums.items():  # Delta columns the batch does not name keep their identity
        if name in current and name not in moved and name not in plan.ids.attnums:
            plan.ids.attnums[name] = n
    for f in fields:  # an older-shape column already in the table keeps what it had
        if ATTNUM_KEY not in (f.metadata or {}) and f.name in attnums and f.name not in moved:
            plan.ids.attnums.setdefault(f.name, attnums[f.name])
    for name in plan.ids.attnums:
        plan.ids.renamed.pop(name, None)
    return plan


def _aliases(fields: Sequence[StructField], ids: ColumnIds) -> dict[str, str]:
    """Batch columns without an attnum that carry an old name of a column of the batch."""
    names = {f.name for f in fields}
    out = {}
    for f in fields:
        if ATTNUM_KEY in (f.metadata or {}) or f.name in ids.attnums:
            continue
        now = (f.metadata or {}).get(SAME_AS_KEY) or ids.current_name(f.name)
        if now is not None and now in names and now != f.name:
            out[f.name] = now
    return out


def _has_rows(tgt: TargetTable) -> bool:
    return bool(tgt.spark.read.format("delta").load(tgt.path).limit(1).count())


def _fill_missing(tgt: TargetTable, columns: Sequence[StructField]) -> None:
    """Set new columns to their missing value in every existing row (one MERGE with a one-row source)."""
    import pyarrow as pa
    from delta.tables import DeltaTable
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from walspark.values import ColumnOptions, TypeRegistry

    registry = TypeRegistry()
    arrays, names = [], []
    for i, f in enumerate(columns):
        md = f.metadata or {}
        codec = registry.resolve(
            int(md["pg.type_oid"]), int(md.get("pg.type_modifier", -1)), ColumnOptions(), binary=False
        )
        value = codec.arrow_from_text([str(md[MISSING_KEY]).encode()])
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        arrow_type = to_arrow_schema(T.StructType([T.StructField("v", f.dataType)]), timezone="UTC").field(0).type
        arrays.append(value.cast(arrow_type))
        names.append(f"v{i}")
    source = tgt.spark.createDataFrame(pa.Table.from_arrays(arrays, names=names))
    log.warning(
        "%s: filling existing rows of %s with their missing value (ADD COLUMN ... DEFAULT)",
        tgt.qualified,
        [f.name for f in columns],
    )
    (
        DeltaTable.forPath(tgt.spark, tgt.path)
        .alias("t")
        .merge(source.alias("s"), "true")
        .whenMatchedUpdate(set={quote(f.name): f"s.v{i}" for i, f in enumerate(columns)})
        .execute()
    )


def _renamed(old: str, new: str):
    """A one-argument function for ``F.transform``: the element ``old`` becomes ``new``."""
    from pyspark.sql import functions as F

    return lambda x: F.when(x == F.lit(old), F.lit(new)).otherwise(x)


def _alias_rows(rows: DataFrame, aliases: dict[str, str]) -> DataFrame:
    """Fold columns still named as before a rename into their new name (a row has only one of them)."""
    from pyspark.sql import functions as F

    out = rows
    for old, new in aliases.items():
        out = out.withColumn(new, F.coalesce(F.col(quote(new)), F.col(quote(old)))).drop(old)
        out = out.withColumn("_unchanged", F.transform("_unchanged", _renamed(old, new)))
    if "_old" in rows.columns and aliases:
        old_fields = [f.name for f in rows.schema["_old"].dataType.fields]  # type: ignore[attr-defined]
        parts = []
        for name in old_fields:
            if name in aliases:
                continue
            value = F.col("_old").getField(name)
            sources = [o for o, n in aliases.items() if n == name and o in old_fields]
            if sources:
                value = F.coalesce(value, *[F.col("_old").getField(o) for o in sources])
            parts.append(value.alias(name))
        out = out.withColumn("_old", F.when(F.col("_old").isNull(), F.lit(None)).otherwise(F.struct(*parts)))
    return out


def _settled(field: StructField, ids: ColumnIds) -> bool:
    """The table already has this batch column as the batch means it (nothing to plan)."""
    n = (field.metadata or {}).get(ATTNUM_KEY)
    if SAME_AS_KEY in (field.metadata or {}):
        return True
    if n is None:
        return field.name in ids.attnums or field.name in ids.renamed
    return ids.attnums.get(field.name) == int(n)


def forget(known: dict[str, Any], path: str) -> None:
    """Forget what ``known`` remembers of the table at ``path`` (its columns, its attnums): the
    table was replaced (a table sync's copy), so the next batch reads them again."""
    known.pop(path, None)
    known.pop(_ids_key(path), None)


def _ids_key(path: str) -> str:
    return f"{path}\0ids"


def follow_ddl(
    tgt: TargetTable, rows: TableRows, fields: Sequence[StructField], known: dict[str, Any] | None = None
) -> tuple[TableRows, list[StructField]]:
    """Make the Delta table's columns the batch's by identity (see the module docstring).

    Returns the rows and fields to apply (columns still named as before a rename folded into
    the new name). Widening and plain additions are left to :meth:`TargetTable.evolve`.
    Everything is checked before anything changes; each change is idempotent, so a replayed
    batch finds nothing left to do.
    """
    fields = list(fields)
    if not any(ATTNUM_KEY in (f.metadata or {}) for f in fields):
        return rows, fields  # no catalog facts (a capture, a hand-made frame): columns match by name
    key = _ids_key(tgt.path)
    ids = known.get(key) if known is not None else None
    if ids is None or not all(_settled(f, ids) for f in fields):
        if not tgt.exists():
            return rows, fields  # created with the batch's columns and their attnums
        ids = _follow(tgt, fields)
        if known is not None:
            known[key] = ids
            known.pop(tgt.path, None)  # the column cache of TargetTable.evolve may be stale now
    aliases = _aliases(fields, ids)
    if aliases:
        fields = [f for f in fields if f.name not in aliases]
        rows = rows.then(lambda df: _alias_rows(df, aliases), fields)
    return rows, fields


def follow_catalog(tgt: TargetTable, declared: Sequence[StructField], *, drained: bool = False) -> bool:
    """Give an existing Delta table the catalog's columns now, before any change of the table
    carries them; True if it changed.

    ``declared`` is the table's declared struct (the query's schema): only its catalog columns
    (those with an attnum) are followed — older stream shapes are the batches' business. Before
    a query (``drained`` False) the slot may still hold changes made under older shapes, so only
    what those changes cannot contradict is done: renames (older changes are folded into the new
    name) and columns whose name the table never had (older changes take their missing value).
    A column dropped and added again under the same name waits until the stream is ``drained``
    (everything the slot held when the query started is applied: ``run --once`` at its end), or
    for the table's next change. A table without recorded attnums (made before walspark recorded
    them) is left to its batches. A change that cannot be followed (a rewrite PostgreSQL does not
    stream) is left to the table's next batch, which stops that table with the one-line reason.
    """
    catalog = [f for f in declared if ATTNUM_KEY in (f.metadata or {})]
    if not catalog or not tgt.exists():
        return False
    ids = tgt.column_ids()
    if not ids.attnums:
        return False
    if not drained:  # a name the table holds under another attnum: a re-add, not yet
        catalog = [
            f for f in catalog if ids.attnums.get(f.name, int(f.metadata[ATTNUM_KEY])) == int(f.metadata[ATTNUM_KEY])
        ]
    if all(_settled(f, ids) for f in catalog):
        return False
    try:
        return _follow(tgt, catalog) != ids
    except SchemaEvolutionError as exc:
        log.info("%s: left to the table's next batch: %s", tgt.qualified, exc)
        return False


def _follow(tgt: TargetTable, fields: Sequence[StructField]) -> ColumnIds:
    """Rename, drop and add the Delta table's columns as :func:`_plan` says; the property afterwards."""
    unknown = [f.name for f in fields if (f.metadata or {}).get(AMBIGUOUS_KEY)]
    if unknown:
        raise SchemaEvolutionError(
            f"{tgt.qualified}: changes from before a series of DDL on this table (columns renamed, dropped and "
            f"added within one backlog) carry column(s) {', '.join(map(repr, unknown))}, which the stream alone "
            f"cannot match to today's columns; other tables keep going. {tgt.recopy_advice()}"
        )
    current = {f.name: f for f in tgt.columns()}
    before = tgt.column_ids()
    plan = _plan(fields, current, before)
    if plan.ids == before and not plan.added:
        return before
    fill = [f for f in plan.added if MISSING_KEY in (f.metadata or {})]
    rewritten = [f.name for f in plan.added if (f.metadata or {}).get(DEFAULT_KEY) and f not in fill]
    if (fill or rewritten) and not _has_rows(tgt):
        fill, rewritten = [], []
    if rewritten:
        raise SchemaEvolutionError(
            f"{tgt.qualified}: column(s) {', '.join(map(repr, rewritten))} were added with a default that PostgreSQL "
            "computed for every existing row by rewriting the table (a volatile default, a generated column, or "
            f"another ALTER in the same statement), which is not streamed; other tables keep going. {tgt.recopy_advice()}"
        )
    if plan.drops:
        tgt.require_column_mapping(f"drop of column {plan.drops[0]!r} (added again)")
    elif plan.renames:
        tgt.require_column_mapping(f"rename of column {plan.renames[0][0]!r} to {plan.renames[0][1]!r}")
    elif plan.added and (reason := mapping_reason(field_names(plan.added))) is not None:
        tgt.require_column_mapping(reason)
    if plan.drops:
        log.warning("%s: dropping columns %s (dropped and added again in PostgreSQL)", tgt.qualified, plan.drops)
        tgt.spark.sql(f"ALTER TABLE {tgt.sql_name} DROP COLUMNS ({', '.join(quote(d) for d in plan.drops)})")
    for i, (old, _) in enumerate(plan.renames):  # two steps, so that names can swap
        tgt.spark.sql(f"ALTER TABLE {tgt.sql_name} RENAME COLUMN {quote(old)} TO {quote(f'__ws_rename_{i}')}")
    for i, (old, new) in enumerate(plan.renames):
        log.warning("%s: renaming column %r to %r", tgt.qualified, old, new)
        tgt.spark.sql(f"ALTER TABLE {tgt.sql_name} RENAME COLUMN {quote(f'__ws_rename_{i}')} TO {quote(new)}")
    if plan.added:
        log.warning("%s: adding columns %s", tgt.qualified, [f.name for f in plan.added])
        tgt.add_columns(plan.added)
    if fill:
        _fill_missing(tgt, fill)
    tgt.set_column_ids(plan.ids)
    return plan.ids
