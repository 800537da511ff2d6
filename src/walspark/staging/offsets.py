"""Spark offsets of the ``pgoutput`` stream: LSNs, and how far one micro-batch may go.

An offset is ``{"lsn": "X/Y"}``, the end LSN of the last transaction included; :func:`plan_end`
is the admission control, pure. See docs/design/staging.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from walspark.protocol import format_lsn, parse_lsn
from walspark.storage import Location, location

__all__ = [
    "CommittedBatch",
    "TxnEntry",
    "batch_range",
    "from_offset",
    "is_fresh",
    "last_batch",
    "last_committed_end",
    "plan_end",
    "start_checkpoint",
    "to_offset",
]


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
    batches = _batch_ids(root / "commits")
    if not batches:
        return None
    lines = (root / "offsets" / str(max(batches))).read_text().splitlines()
    return from_offset(json.loads(lines[-1])) if len(lines) >= 3 else None


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """The last batch of a query's checkpoint, in both its offset log and its commit log.

    What the driver needs to run the query's next micro-batch itself (``walspark run --once``
    with a few changes pending, :mod:`walspark.pipeline.driver_batch`): the batch id, its end LSN,
    and Spark's own lines to write the next entries with (the offset log's metadata, the commit
    log's entry). Batch id -1 is a begun checkpoint's position before its batch 0
    (:func:`start_checkpoint`).
    """

    checkpoint: Location
    batch_id: int
    end: int
    metadata: str
    commit_entry: str

    def log_next(self, end: int) -> int:
        """Write batch ``batch_id + 1``, reading ``(self.end, end]``, to the offset log; its id.

        As Spark does before it runs a batch: a crash after this line leaves a batch that the next
        query replays with the same range (the same staged segments, Delta's transaction ids
        skipping the tables already written).
        """
        metadata = json.loads(self.metadata)
        metadata["batchTimestampMs"] = int(time.time() * 1000)
        batch_id = self.batch_id + 1
        text = f"v1\n{json.dumps(metadata, separators=(',', ':'))}\n{json.dumps(to_offset(end))}"
        _write_entry(self.checkpoint / "offsets", batch_id, text)
        return batch_id

    @property
    def end_text(self) -> str:
        return format_lsn(self.end)

    def next(self, end: int) -> CommittedBatch:
        """The batch after this one, ending at ``end``, once it is in the commit log."""
        return CommittedBatch(self.checkpoint, self.batch_id + 1, end, self.metadata, self.commit_entry)

    def commit_next(self) -> None:
        """Write batch ``batch_id + 1`` to the commit log: its sink returned, the next query starts after it."""
        _write_entry(self.checkpoint / "commits", self.batch_id + 1, self.commit_entry)


def is_fresh(checkpoint: str | Path | Location) -> bool:
    """Whether no query has used this checkpoint yet: no query id, no batch planned or committed."""
    root = location(checkpoint)
    return not (root / "metadata").exists() and not _batch_ids(root / "offsets") and not _batch_ids(root / "commits")


def start_checkpoint(checkpoint: str | Path | Location, lsn: int, metadata: str) -> CommittedBatch:
    """Begin a fresh checkpoint (:func:`is_fresh`) as a query's first micro-batch would: write the
    query id, and return the position before batch 0 (batch id -1, ending at ``lsn``), whose
    :meth:`~CommittedBatch.log_next` and :meth:`~CommittedBatch.commit_next` then write an empty
    batch 0 ending at ``lsn`` to the offset log and the commit log, as the query does.

    ``lsn`` must be where the query's ``initialOffset`` would start (the slot's confirmed
    position): a query's batch 0 reads from there too, so the next batch, whoever runs it, reads
    what comes after. ``metadata`` is the offset log's metadata line as the session writes it
    (``OffsetSeqMetadata``, with the SQL settings a restarted query keeps). Used by a ``--once``
    run that applies its first changes from the driver (:mod:`walspark.pipeline.driver_batch`).
    A crash in between leaves what a query killed at the same step leaves: a query id and no batch
    (the query starts at batch 0), or batch 0 planned and not committed (the query replays it).
    """
    import uuid

    root = location(checkpoint)
    (root / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":")),
                                   tmp_name=".metadata.walspark.tmp")  # fmt: skip
    return CommittedBatch(root, -1, lsn, metadata, 'v1\n{"nextBatchWatermarkMs":0}')


def _write_entry(log: Location, batch_id: int, text: str) -> None:
    (log / f".{batch_id}.crc").delete()  # Hadoop's checksum of an older file of that name would not match
    (log / str(batch_id)).write_text(text, tmp_name=f".{batch_id}.walspark.tmp")


def last_batch(checkpoint: str | Path | Location) -> CommittedBatch | None:
    """The checkpoint's last batch if it is committed and nothing was planned after it, else None.

    None also when the checkpoint is not Spark's format version 1 or has no batch yet: the query
    then runs as usual.
    """
    root = location(checkpoint)
    planned, committed = _batch_ids(root / "offsets"), _batch_ids(root / "commits")
    if not planned or not committed or max(planned) != max(committed):
        return None
    batch_id = max(planned)
    lines = (root / "offsets" / str(batch_id)).read_text().splitlines()
    entry = (root / "commits" / str(batch_id)).read_text()
    if len(lines) != 3 or lines[0] != "v1" or not entry.startswith("v1\n"):
        return None
    return CommittedBatch(root, batch_id, from_offset(json.loads(lines[2])), lines[1], entry)


def batch_range(checkpoint: str | Path | Location, batch_id: int) -> tuple[int, int] | None:
    """The LSN range ``(start, end]`` of a planned batch: the end offsets of ``batch_id - 1`` and of
    ``batch_id`` in the offset log; None when either is not there in Spark's format version 1 (a
    query's first batch starts at its source's initial offset, which that log does not hold)."""
    root = location(checkpoint)
    ends = []
    for batch in (batch_id - 1, batch_id):
        entry = root / "offsets" / str(batch)
        if batch < 0 or not entry.exists():
            return None
        lines = entry.read_text().splitlines()
        if len(lines) != 3 or lines[0] != "v1":
            return None
        ends.append(from_offset(json.loads(lines[2])))
    return ends[0], ends[1]


def _batch_ids(log: Location) -> list[int]:
    """The batch ids of a Spark metadata log (its files named by number; ``.crc`` and temp files not)."""
    return [int(p.name) for p in log.list() if p.name.isdigit()]
