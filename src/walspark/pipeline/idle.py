"""What a ``--once`` run has to stream, asked before a streaming query is started.

Nothing pending: the slot is confirmed as an idle stream would and no query starts; a few plain
transactions: :mod:`walspark.pipeline.driver_batch`; any doubt: the query. See
docs/design/pipeline.md §6.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walspark.pipeline.settings import RunSettings

__all__ = ["PEEK_ROWS", "Pending", "confirm_idle", "pending"]

log = logging.getLogger(__name__)

#: Rows a peek reads at most before the run gives up on skipping its query (the server decodes
#: up to this many messages before answering: ~50 ms for 15,000 here; a slot holding more is
#: streamed as usual). A transaction is three rows or more (BEGIN, a change, COMMIT): this admits
#: the driver's row limit of changes (``WALSPARK_DRIVER_MERGE_ROWS``) in single-row transactions.
PEEK_ROWS = 40_000

_BEGIN, _COMMIT = ord("B"), ord("C")
#: Messages inside a transaction the lake already has: origin, relation, type, the row changes.
_INSIDE = frozenset(b"ORYIUDT")
_CHANGES = frozenset(b"IUDT")


@dataclass(frozen=True, slots=True)
class Pending:
    """What the slot holds for the lake up to the server's WAL position ``position``."""

    position: int
    #: transactions that commit after the checkpoint's last batch, and their row changes
    transactions: int
    changes: int
    #: a checkpoint no query has used yet: where its (empty) batch 0 ends, the slot's confirmed position
    first_batch_end: int | None = None
    #: the peek stopped at :data:`PEEK_ROWS`: more follows (``transactions`` and ``changes`` are
    #: what the peek saw, a lower bound; nothing is known of the rest)
    more: bool = False


def pending(settings: RunSettings, store: Any) -> Pending | None:
    """What is pending up to the server's WAL position, or None: run the query. ``store``: the
    run's :class:`~walspark.spark.tablesync.state.SyncStore` (a table being copied: the query)."""
    try:
        return _pending(settings, store)
    except Exception as exc:  # noqa: BLE001 - any doubt runs the query, which reports errors its own way
        log.debug("pending changes not ruled out: %s", exc)
        return None


def copying(store: Any) -> bool:
    """Whether a table is being copied, or has copies to hand off (the query's to follow)."""
    return any(state.syncing or state.cuts for state in store.all())


def _pending(settings: RunSettings, store: Any) -> Pending | None:
    from walspark.source.connect import connect_sql
    from walspark.source.names import publication_names_value
    from walspark.source.publications import publication_list
    from walspark.source.sqlinterface import slot_changes
    from walspark.staging.barrier import read_barrier
    from walspark.staging.offsets import is_fresh, last_committed_end
    from walspark.staging.segments import list_segments
    from walspark.storage import location

    end = last_committed_end(settings.checkpoint)
    fresh = end is None and is_fresh(settings.checkpoint)
    if end is None and not fresh:
        return None
    # from here, end is None if and only if the checkpoint is fresh
    staging = location(settings.staging)
    barrier = read_barrier(staging)
    if barrier is not None and (end is None or barrier.end_lsn > end):
        return None
    if any(end is None or seg.last_end > end for seg in list_segments(staging / "segments")):
        return None
    if any(entry.name != "since.json" for entry in (staging / "prepared").list()):
        return None
    if copying(store):
        return None
    options = {
        "proto_version": "1",
        "publication_names": publication_names_value(publication_list(settings.publication)),
    }
    with connect_sql(settings.dsn) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, coalesce(confirmed_flush_lsn, restart_lsn)"
                           " - '0/0'::pg_lsn, confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots"
                           " WHERE slot_name = %s", (settings.slot,)).fetchone()  # fmt: skip
        if row is None or (fresh and row[1] is None):
            return None
        now = int(row[0])
        if end is None:  # fresh: where a query's initialOffset would start (stream_reader.PgoutputStreamReader)
            end = int(row[1])
        elif row[2] is not None and int(row[2]) < end:
            _confirm_committed(conn, settings.slot, end)
        rows = transactions = changes = 0
        inside = new = False
        for _, data in slot_changes(conn, settings.slot, options, upto_lsn=now, upto_nchanges=PEEK_ROWS):
            rows += 1
            kind = data[0]
            if kind == _BEGIN:
                # its final LSN (where its commit record starts): the lake's last transaction ends before it
                new = int.from_bytes(data[1:9], "big") >= end
                transactions += new
                inside = True
            elif kind == _COMMIT:
                inside = False
            elif not (inside and kind in _INSIDE):
                return None
            else:
                changes += new and kind in _CHANGES
        more = rows >= PEEK_ROWS
        if (inside and not more) or (more and not transactions):
            return None
    return Pending(now, transactions, changes, end if fresh else None, more)


def _confirm_committed(conn: Any, slot: str, end: int) -> None:
    """Confirm the slot up to the checkpoint's last committed batch, ``end``, before peeking.

    Spark calls a source's ``commit(end)`` for a batch only when it plans the next, which an
    ``AvailableNow`` query never does after its last: a ``--once`` run that drained a backlog
    through its query leaves the slot confirmed up to the batch before. Spark's commit log is the
    durable record that every table holds that batch (what the stager's ``commit(end)`` confirms),
    and nothing is staged past it (checked before): without this the peek would read the whole
    last batch again, give up at :data:`PEEK_ROWS`, and start a query with nothing to apply."""
    from walspark.protocol import format_lsn

    conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(end)))
    log.info("slot %s confirmed up to the last committed batch (%s)", slot, format_lsn(end))


def confirm_idle(settings: RunSettings, lsn: int) -> None:
    """Advance the slot to ``lsn`` as the stager confirms an idle position (its mark first)."""
    from walspark.protocol import format_lsn
    from walspark.source.connect import connect_sql
    from walspark.staging.stager import record_idle_mark

    with connect_sql(settings.dsn) as conn:
        confirmed = conn.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (settings.slot,)).fetchone()  # fmt: skip
        if confirmed is None or confirmed[0] is None or int(confirmed[0]) >= lsn:
            return
        record_idle_mark(settings.staging, lsn)
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (settings.slot, format_lsn(lsn)))
