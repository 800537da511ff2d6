"""From change-row batches (one per relation version) to the source's output batches.

Each batch is mapped onto the one Arrow schema of the scan, columns moved, never converted row by
row; a column a Relation lacks takes its missing value or null. See docs/design/staging.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from walspark.changes.relations import RelationVersion
from walspark.spark.datasource.schema import ENVELOPE_NAMES, MISSING_KEY, OLD_SUFFIX, SAME_AS_KEY, OutputLayout
from walspark.values import ColumnOptions, TypeRegistry

__all__ = ["OutputShaper", "Piece"]

#: Rows of one relation version: their count and their own output columns by name (the columns
#: of other tables, null in these rows, are left out until the pieces are merged).
Piece = tuple[int, dict[str, pa.Array]]

_POSITION = [("_commit_lsn", "ascending"), ("_seq", "ascending")]


def _conform_struct(source: pa.StructArray, target: pa.StructType, fills: dict[str, pa.Array] | None = None,
                    old_names: dict[str, list[str]] | None = None) -> pa.StructArray:  # fmt: skip
    """``source`` re-laid as ``target``: fields by name, types cast, nulls kept; a missing field takes
    its value in ``fills`` (a one-element array), else null — unless the source has it under an
    older name (``old_names``), whose column the sink folds into it."""
    by_name = {source.type.field(i).name: i for i in range(source.type.num_fields)}
    mask = source.is_null()
    children = []
    for i in range(target.num_fields):
        field = target.field(i)
        j = by_name.get(field.name)
        if j is None:
            fill = fills.get(field.name) if fills else None
            if fill is not None and any(o in by_name for o in (old_names or {}).get(field.name, ())):
                fill = None
            if fill is None:
                children.append(pa.nulls(len(source), field.type))
            else:
                children.append(fill.take(pa.array([0] * len(source), pa.int32())))
        else:
            children.append(source.field(j).cast(field.type))
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)


def commit_order(table: pa.Table) -> pa.Table:
    """``table``'s rows in commit order: by commit LSN and position in the transaction, which only
    the rows of one message share (a TRUNCATE of several tables: then in table order too). The two
    integer keys alone cost a few milliseconds where sorting by the names too took most of a
    second for 190,000 rows."""
    order = pc.sort_indices(table, sort_keys=_POSITION).cast(pa.int64())
    if len(order) > 1:
        lsn, seq = table.column("_commit_lsn").take(order), table.column("_seq").take(order)
        tied = pc.and_(pc.equal(lsn[1:], lsn[:-1]), pc.equal(seq[1:], seq[:-1]))
        if pc.any(tied).as_py():
            return table.sort_by([*_POSITION, ("_schema", "ascending"), ("_table", "ascending")])
        if pc.all(pc.equal(pc.subtract(order[1:], order[:-1]), 1)).as_py():
            return table  # in order already
        return table.take(order)
    return table


class OutputShaper:
    """Maps ChangeRowBuilder batches onto the scan's Arrow schema (see the module docstring)."""

    def __init__(self, schema: StructType, table: str | None, registry: TypeRegistry | None = None) -> None:
        self.layout = OutputLayout.from_schema(schema, table)
        self.target = to_arrow_schema(schema, timezone="UTC")
        self._index = {name: i for i, name in enumerate(self.target.names)}
        self._registry = registry or TypeRegistry()
        self._fills: dict[str, dict[str, pa.Array]] = {}

    def _missing_values(self, name: str, target: pa.StructType) -> dict[str, pa.Array]:
        """The declared columns of table ``name`` that have a missing value, as one-element arrays."""
        fills = self._fills.get(name)
        if fills is None:
            fills = {}
            for f in self.layout.tables[name].fields:
                md = f.metadata or {}
                if MISSING_KEY not in md or "pg.type_oid" not in md:
                    continue
                codec = self._registry.resolve(
                    int(md["pg.type_oid"]), int(md.get("pg.type_modifier", -1)), ColumnOptions(), binary=False
                )
                value = codec.arrow_from_text([str(md[MISSING_KEY]).encode()])
                if isinstance(value, pa.ChunkedArray):
                    value = value.combine_chunks()
                fills[f.name] = value.cast(target.field(target.get_field_index(f.name)).type)
            self._fills[name] = fills
        return fills

    def _old_names(self, name: str) -> dict[str, list[str]]:
        """Table ``name``'s columns that older stream shapes name otherwise (see :mod:`.shapes`)."""
        out: dict[str, list[str]] = {}
        for f in self.layout.tables[name].fields:
            now = (f.metadata or {}).get(SAME_AS_KEY)
            if now is not None:
                out.setdefault(now, []).append(f.name)
        return out

    def wants(self, version: RelationVersion) -> bool:
        return self.layout.wants(version.qualified_name)

    def pieces(self, built: Iterable[tuple[RelationVersion, pa.RecordBatch]]) -> list[Piece]:
        """The batches' rows, each conformed to its table's output columns (see :meth:`merge`)."""
        return [(batch.num_rows, own) for v, batch in built if (own := self._own(v, batch)) is not None]

    def merge(self, pieces: list[Piece], max_rows: int) -> Iterator[pa.RecordBatch]:
        """The pieces' rows on the output schema in commit order, at most ``max_rows`` a batch.
        Pieces of several shapers of one output schema (one per segment of a task) merge alike."""
        if not pieces:
            return
        table = self.assemble(pieces)
        if len(pieces) > 1:
            table = commit_order(table)
        yield from table.combine_chunks().to_batches(max_chunksize=max_rows)

    def _own(self, version: RelationVersion, batch: pa.RecordBatch) -> dict[str, pa.Array] | None:
        """A batch's own output columns by name: the envelope, and its table's columns (the other
        tables' columns of the all-tables layout are null in its rows)."""
        name = version.qualified_name
        if not self.layout.wants(name) or batch.num_rows == 0:
            return None
        if name not in self.layout.tables:
            from walspark.spark.datasource.schema import SchemaChangedError

            raise SchemaChangedError(
                f"changes of table {name}, which is not in the query's schema; restart the query to read it"
            )
        target = self.target
        own = {c: batch.column(c).cast(target.field(c).type) for c in ENVELOPE_NAMES}
        own["_unchanged"] = batch.column("_unchanged").cast(target.field("_unchanged").type)
        new, old = batch.column("_new"), batch.column("_old")
        if self.layout.table is not None:
            table_type = target.field("_old").type
            fills, old_names = self._missing_values(name, table_type), self._old_names(name)
            own.update(zip(table_type.names, _conform_struct(new, table_type, fills, old_names).flatten()))
            own["_old"] = _conform_struct(old, table_type, fills, old_names)
        else:
            for column, values in ((name, new), (name + OLD_SUFFIX, old)):
                struct = target.field(column).type
                own[column] = _conform_struct(values, struct, self._missing_values(name, struct), self._old_names(name))
        return own

    def assemble(self, pieces: list[Piece]) -> pa.Table:
        """The pieces' rows one after the other on the output schema: each column is its pieces'
        own arrays with one null run between them. Built column by column, so a batch of many
        small pieces (a segment of short transactions over tens of tables) costs what its
        columns do, not pieces × columns."""
        columns = []
        for field in self.target:
            runs: list[pa.Array] = []
            nulls = 0
            for rows, own in pieces:
                values = own.get(field.name)
                if values is None:
                    nulls += rows
                    continue
                if nulls:
                    runs.append(pa.nulls(nulls, field.type))
                    nulls = 0
                runs.append(values)
            if nulls:
                runs.append(pa.nulls(nulls, field.type))
            columns.append(runs[0] if len(runs) == 1 else pa.concat_arrays(runs))
        return pa.Table.from_arrays(columns, schema=self.target)
