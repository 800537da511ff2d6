"""Table shapes seen in the stream that a query's schema could not hold, kept for the next start.

A streaming query's output schema is fixed when it starts, from the catalog (§4 of
docs/design/pipeline.md). The catalog only knows the tables' shapes *now*, while the slot's
backlog may still hold changes made under older shapes (a column dropped, retyped or renamed
since). When staging meets a change whose Relation does not fit the declared schema, the stager
writes every non-fitting shape of that transaction here before the query fails
(:func:`record_barrier`); the next start declares the union of the catalog and these shapes
(:func:`merge_recorded`), so each restart gets past the transaction that stopped the previous
one. A restart that stops at the same transaction again cannot make progress: ``walspark run``
then stops with one line (:func:`read_barrier` tells it where and why).

Pure file handling and Spark types: no I/O beyond the staging directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import types as T

from .durable import write_json_durably

__all__ = ["Barrier", "merge_recorded", "read_barrier", "record_barrier", "recorded_shapes"]

SHAPES_FILE = "stream-shapes.json"
BARRIER_FILE = "schema-barrier.json"

#: One recorded shape: the Relation's columns as (name, type OID, typmod).
Columns = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class Barrier:
    """Where and why staging stopped: the transaction (its end LSN) and the reasons, per table."""

    end_lsn: int
    reasons: tuple[tuple[str, str], ...]  # (qualified table, what does not fit)

    def line(self) -> str:
        return "; ".join(f"table {table}: {reason}" for table, reason in self.reasons)


def _read_json(path: Path) -> object | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def record_barrier(directory: str | Path, end_lsn: int, shapes: Mapping[str, Sequence[Columns]],
                   reasons: Sequence[tuple[str, str]]) -> None:
    """Remember the non-fitting shapes of the transaction ending at ``end_lsn`` (per table, in stream
    order), replacing what an earlier barrier recorded for the same tables, and the barrier itself."""
    directory = Path(directory)
    data = _read_json(directory / SHAPES_FILE)
    tables: dict[str, object] = dict(data) if isinstance(data, dict) else {}
    for table, columns in shapes.items():
        tables[table] = {"end_lsn": end_lsn, "shapes": [[list(c) for c in shape] for shape in columns]}
    write_json_durably(directory / SHAPES_FILE, tables)
    write_json_durably(directory / BARRIER_FILE, {"end_lsn": end_lsn, "reasons": [list(r) for r in reasons]})


def read_barrier(directory: str | Path) -> Barrier | None:
    """The last barrier recorded under ``directory`` (None if none)."""
    data = _read_json(Path(directory) / BARRIER_FILE)
    if not isinstance(data, dict):
        return None
    return Barrier(int(data["end_lsn"]), tuple((str(t), str(r)) for t, r in data.get("reasons", ())))


def recorded_shapes(directory: str | Path, *, after_lsn: int = 0) -> dict[str, list[Columns]]:
    """The shapes recorded per table, leaving out those of transactions at or before ``after_lsn``
    (the slot's confirmed position: such a transaction is applied, its shape is history)."""
    data = _read_json(Path(directory) / SHAPES_FILE)
    if not isinstance(data, dict):
        return {}
    out: dict[str, list[Columns]] = {}
    for table, entry in data.items():
        if int(entry["end_lsn"]) <= after_lsn:
            continue
        out[table] = [tuple((str(n), int(o), int(m)) for n, o, m in shape) for shape in entry["shapes"]]
    return out


def _fits(actual: T.DataType, declared: T.DataType) -> bool:
    from .schema import _fits as fits

    return fits(actual, declared)


def merge_recorded(name: str, declared: T.StructType | None, recorded: Sequence[T.StructType]) -> T.StructType:
    """The catalog's struct of a table widened to hold the recorded stream shapes too.

    Catalog columns come first and keep their catalog facts (attnum, missing value) as long as
    the recorded type fits them either way (the wider type is declared). A recorded column the
    catalog lacks (dropped or renamed since) is appended without facts, and so is a recorded
    column whose type cannot share a column with the catalog's (dropped and re-added with another
    type, or retyped): the stream's shape wins, because its changes come first — the catalog's
    shape is declared again at the restart its own changes cause. Shapes recorded together
    (one transaction) that conflict with each other raise :class:`~.schema.SchemaChangedError`.
    """
    from .schema import merge_structs

    fields: dict[str, T.StructField] = {f.name: f for f in (declared.fields if declared is not None else ())}
    stream = merge_structs(name, list(recorded)) if recorded else T.StructType([])
    for f in stream.fields:
        have = fields.get(f.name)
        if have is None:
            fields[f.name] = T.StructField(f.name, f.dataType, True, _plain_metadata(f))
        elif _fits(f.dataType, have.dataType):
            continue
        elif _fits(have.dataType, f.dataType):
            fields[f.name] = T.StructField(f.name, f.dataType, True, have.metadata)
        else:
            fields[f.name] = T.StructField(f.name, f.dataType, True, _plain_metadata(f))
    return T.StructType(list(fields.values()))


def _plain_metadata(field: T.StructField) -> dict:
    """A stream column's metadata without catalog facts (its identity in the catalog is unknown)."""
    return {k: v for k, v in (field.metadata or {}).items() if not k.startswith("walspark.")}
