"""Whether a ``--once`` run has anything to stream, asked before a streaming query is started.

Why: a streaming query costs seconds even when it plans nothing — the Python data source's
schema and planning workers, the stager's replication connection, the query's start and stop
(docs/design/fixed-costs.md) — and a scheduled ``run --once`` often finds nothing new. Such a
run confirms the slot as an idle stream would and skips the query; the rest of the run (the
catalog followed, maintenance, the table sync's finish) is the same.

Nothing is pending when all of these hold, and any doubt (an error, a message of two-phase
commit, a long peek) runs the query as before:

* the checkpoint's commit log has a last batch, and no staged transaction, schema barrier or
  prepared transaction lies beyond its end;
* no table is being copied or handed off by the table sync;
* the slot holds no transaction that commits after that end: a peek up to the server's current
  position (``pg_logical_slot_peek_binary_changes``, bounded to :data:`PEEK_ROWS` rows) finds
  only transactions the lake already has (a PREPARE or COMMIT PREPARED of a two-phase slot is
  left to the query, whose staging keeps prepared transactions across runs).

The slot is then advanced to that position the way the stager confirms an idle keepalive: the
staging directory's idle mark is written first (so the next query tells this apart from a slot
moved by another consumer), then ``pg_replication_slot_advance``. Nothing was applied, so the
slot is never confirmed past what the lakehouse holds.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walspark.pipeline.settings import RunSettings

__all__ = ["PEEK_ROWS", "confirm_idle", "idle_position"]

log = logging.getLogger(__name__)

#: Rows a peek reads at most before the run gives up on skipping its query (the server decodes
#: up to this many changes before answering; a slot holding more is streamed as usual).
PEEK_ROWS = 10_000

_BEGIN, _COMMIT = ord("B"), ord("C")
#: Messages inside a transaction the lake already has: origin, relation, type, the row changes.
_INSIDE = frozenset(b"ORYIUDT")


def idle_position(settings: RunSettings, sync: Any) -> int | None:
    """The server's WAL position if nothing is pending up to it, else None (run the query)."""
    try:
        return _idle_position(settings, sync)
    except Exception as exc:  # noqa: BLE001 - any doubt runs the query, which reports errors its own way
        log.debug("pending changes not ruled out: %s", exc)
        return None


def _idle_position(settings: RunSettings, sync: Any) -> int | None:
    from walspark.source.connect import connect_sql
    from walspark.source.names import publication_names_value
    from walspark.source.publications import publication_list
    from walspark.source.sqlinterface import slot_changes
    from walspark.spark.datasource.offsets import last_committed_end
    from walspark.spark.datasource.segments import list_segments
    from walspark.spark.datasource.shapes import read_barrier
    from walspark.storage import location

    end = last_committed_end(settings.checkpoint)
    if end is None:
        return None
    staging = location(settings.staging)
    barrier = read_barrier(staging)
    if barrier is not None and barrier.end_lsn > end:
        return None
    if any(seg.last_end > end for seg in list_segments(staging / "segments")):
        return None
    if any(entry.name != "since.json" for entry in (staging / "prepared").list()):
        return None
    if any(state.syncing or state.cuts for state in sync.store.all()):
        return None
    options = {"proto_version": "1", "publication_names": publication_names_value(publication_list(settings.publication))}
    with connect_sql(settings.dsn) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_replication_slots "
                           "WHERE slot_name = %s", (settings.slot,)).fetchone()  # fmt: skip
        if row is None:
            return None
        now = int(row[0])
        rows = 0
        inside = False
        for _, data in slot_changes(conn, settings.slot, options, upto_lsn=now, upto_nchanges=PEEK_ROWS):
            rows += 1
            kind = data[0]
            if kind == _BEGIN:
                # its final LSN (where its commit record starts): the lake's last transaction ends before it
                if int.from_bytes(data[1:9], "big") >= end:
                    return None
                inside = True
            elif kind == _COMMIT:
                inside = False
            elif not (inside and kind in _INSIDE):
                return None
        if rows >= PEEK_ROWS:
            return None
    return now


def confirm_idle(settings: RunSettings, lsn: int) -> None:
    """Advance the slot to ``lsn`` as the stager confirms an idle position (its mark first)."""
    from walspark.protocol import format_lsn
    from walspark.source.connect import connect_sql
    from walspark.spark.datasource.staging import record_idle_mark

    with connect_sql(settings.dsn) as conn:
        confirmed = conn.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (settings.slot,)).fetchone()  # fmt: skip
        if confirmed is None or confirmed[0] is None or int(confirmed[0]) >= lsn:
            return
        record_idle_mark(settings.staging, lsn)
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (settings.slot, format_lsn(lsn)))
