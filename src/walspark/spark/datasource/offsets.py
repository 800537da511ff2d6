"""Spark offsets of the ``pgoutput`` stream: LSNs, and how far one micro-batch may go.

An offset is ``{"lsn": "X/Y"}``: the end LSN of the last transaction included (what a subscriber
confirms). Text, not a number: Spark stores offsets as JSON, JSON numbers lose precision past
2**53 in many readers, and ``X/Y`` is what every PostgreSQL tool prints. The micro-batch for
``(start, end]`` holds exactly the transactions whose end LSN lies in that range.

:func:`plan_end` is the admission control: pure, so the rule "at least one transaction, then as
many whole transactions as the limit allows" is tested without Spark.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from walspark.protocol import format_lsn, parse_lsn
from walspark.storage import Location, location

__all__ = ["TxnEntry", "from_offset", "last_committed_end", "plan_end", "to_offset"]


def to_offset(lsn: int) -> dict[str, str]:
    """The JSON-safe Spark offset for an LSN."""
    return {"lsn": format_lsn(lsn)}


def from_offset(offset: dict | str | None) -> int:
    """The LSN of a Spark offset (``{"lsn": "X/Y"}``; a bare ``"X/Y"`` is accepted too)."""
    if offset is None:
        raise ValueError("no offset")
    if isinstance(offset, str):
        return parse_lsn(offset)
    try:
        return parse_lsn(offset["lsn"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a pgoutput offset (expected {{'lsn': 'X/Y'}}): {offset!r}") from exc


@dataclass(frozen=True, slots=True)
class TxnEntry:
    """One staged transaction, as admission control sees it.

    ``changes`` counts its change messages (Insert, Update, Delete, Truncate); ``bytes`` the
    pgoutput bytes of all its data messages.
    """

    end_lsn: int
    changes: int
    bytes: int


def plan_end(
    entries: Sequence[TxnEntry],
    start: int,
    *,
    max_rows: int | None = None,
    max_bytes: int | None = None,
    target: int | None = None,
) -> int:
    """The end LSN of the next micro-batch starting after ``start`` (``start`` when nothing is due).

    ``entries`` are in end-LSN order. Whole transactions only; the first one is always taken,
    however large, so that a transaction bigger than the limit still goes through (alone).
    ``target`` (Trigger.AvailableNow) caps the end LSN.
    """
    end = start
    rows = size = 0
    for entry in entries:
        if entry.end_lsn <= start:
            continue
        if target is not None and entry.end_lsn > target:
            break
        rows += entry.changes
        size += entry.bytes
        if end != start and (
            (max_rows is not None and rows > max_rows) or (max_bytes is not None and size > max_bytes)
        ):
            break
        end = entry.end_lsn
    return end


def last_committed_end(checkpoint: str | Path | Location) -> int | None:
    """The end LSN of the last batch in a query's commit log (``<checkpoint>/commits``), or None.

    A batch is in the commit log only after its sink (the Delta MERGEs) returned: everything up
    to this end is durably in Delta. Spark's offset log keeps the batch's end offset in
    ``offsets/<batch>``: a version line, the batch metadata, then one JSON line per source (the
    query reads one source).
    """
    root = location(checkpoint)
    batches = [int(p.name) for p in (root / "commits").list() if p.name.isdigit()]
    if not batches:
        return None
    lines = (root / "offsets" / str(max(batches))).read_text().splitlines()
    return from_offset(json.loads(lines[-1])) if len(lines) >= 3 else None
