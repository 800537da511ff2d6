"""The schema barrier: where the stager stopped because a table's shape no longer fits, and the shapes it saw.

The next start declares those shapes beside the catalog's, so it gets past the transaction that
stopped the previous one. See docs/design/staging.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from walspark.storage import Location, location

__all__ = ["Barrier", "Columns", "SchemaChangedError", "read_barrier", "record_barrier", "recorded_shapes"]


class SchemaChangedError(RuntimeError):
    """A table's shape in the stream differs from the schema the query started with.

    Raised (at planning, once every change before the new shape has been delivered) when a
    Relation message adds or retypes a column, or a table joins the publication. Restart the
    query: the new schema is read from the catalog at start (``walspark run`` does it itself).
    """


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


def _read_json(path: Location) -> object | None:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def record_barrier(
    directory: str | Path | Location,
    end_lsn: int,
    shapes: Mapping[str, Sequence[Columns]],
    reasons: Sequence[tuple[str, str]],
) -> None:
    """Remember the non-fitting shapes of the transaction ending at ``end_lsn`` (per table, in stream
    order), replacing what an earlier barrier recorded for the same tables, and the barrier itself."""
    directory = location(directory)
    data = _read_json(directory / SHAPES_FILE)
    tables: dict[str, object] = dict(data) if isinstance(data, dict) else {}
    for table, columns in shapes.items():
        tables[table] = {"end_lsn": end_lsn, "shapes": [[list(c) for c in shape] for shape in columns]}
    (directory / SHAPES_FILE).write_json(tables)
    (directory / BARRIER_FILE).write_json({"end_lsn": end_lsn, "reasons": [list(r) for r in reasons]})


def read_barrier(directory: str | Path | Location) -> Barrier | None:
    """The last barrier recorded under ``directory`` (None if none)."""
    data = _read_json(location(directory) / BARRIER_FILE)
    if not isinstance(data, dict):
        return None
    return Barrier(int(data["end_lsn"]), tuple((str(t), str(r)) for t, r in data.get("reasons", ())))


def recorded_shapes(directory: str | Path | Location, *, after_lsn: int = 0) -> dict[str, list[Columns]]:
    """The shapes recorded per table, leaving out those of transactions at or before ``after_lsn``
    (the slot's confirmed position: such a transaction is applied, its shape is history)."""
    data = _read_json(location(directory) / SHAPES_FILE)
    if not isinstance(data, dict):
        return {}
    out: dict[str, list[Columns]] = {}
    for table, entry in data.items():
        if int(entry["end_lsn"]) <= after_lsn:
            continue
        out[table] = [tuple((str(n), int(o), int(m)) for n, o, m in shape) for shape in entry["shapes"]]
    return out
