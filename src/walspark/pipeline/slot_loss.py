"""A lost slot created again, and every table copied again into the same target (``--on-slot-loss resnapshot``).

A slot invalidated while walspark was away (its WAL removed past ``max_slot_wal_keep_size``), or
gone while the target holds its tables, cannot bring the changes it lost. With ``resnapshot`` a
run, before its stream starts: drops the invalidated slot, creates it again at the server's
current position N (a failover slot as ``--failover-slot`` says, two-phase if the lost one was),
and asks the table sync to copy every published table again while the stream goes on from N
(docs/design/table-sync.md: each copy has its own consistent point C >= N, the changes streamed
meanwhile wait in a pending log, the hand-off applies those at or after C; a re-copy replaces its
table in one Delta commit).

The Spark checkpoint and its batch numbering are kept: LSNs only grow on one server, so the
query asks for the stream from its checkpoint's position and the server starts it at the new
slot's N; batch ids keep growing, so the Delta transaction ids of the tables (kept through a
REPLACE) never mistake a new batch for an old one. What the checkpoint's last batch staged from
the old slot stays (a replayed batch reads it again); its changes, all before N, go to the
pending logs and are dropped at the hand-off. What must not reach the new epoch is reset: the
table sync's states, pending logs and unfinished copies (they hold the old slot's changes and
their consistent points), and the prepared transactions kept from the old slot (the new slot
sends a transaction prepared before it whole at its COMMIT PREPARED).

Crash safety: ``slot-loss/<slot>.json`` is written first (``recreating``) and last (``done``); a
run that finds it unfinished does the steps again (the slot that exists then is the one it made).
The new slot's N is written as the stager's idle mark before any query starts: the query's
guard against a slot moved past its checkpoint by another consumer (``Stager.expect_start``)
accepts exactly that jump.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from walspark.pipeline.settings import RunSettings
    from walspark.storage import StorageSettings
    from walspark.storage.layout import TargetLayout

__all__ = ["lost_slot", "recreation_unfinished", "resnapshot_lost_slot"]


def recreation_unfinished(layout: TargetLayout, slot: str, storage: StorageSettings | None = None) -> str | None:
    """Why an earlier re-creation of ``slot`` did not end (its record is not ``done``), or None."""
    note = layout.slot_loss(slot, storage).read_json()
    if note is None or note.get("state") == "done":
        return None
    return str(note.get("reason") or "an earlier re-creation of the slot did not end")


def lost_slot(settings: RunSettings) -> str | None:
    """Why ``settings.slot`` must be created again before this run streams, or None: it is
    invalidated, gone while the target's snapshot record is complete with it, or an earlier
    re-creation did not end."""
    from walspark.source.connect import connect_sql
    from walspark.source.slots import get_slot
    from walspark.spark.snapshot.initial import read_record

    layout = settings.layout
    record = read_record(layout)
    if record is None or not record.complete or record.slot != settings.slot:
        return None
    unfinished = recreation_unfinished(layout, settings.slot)
    if unfinished is not None:
        return unfinished
    with connect_sql(settings.dsn) as conn:
        info = get_slot(conn, settings.slot)
    if info is None:
        return "gone from the source"
    if info.invalidated:
        return f"invalidated ({info.invalidation_reason or 'wal_status lost'})"
    return None


def resnapshot_lost_slot(settings: RunSettings, say: Callable[[str], None]) -> int | None:
    """Create the lost slot again and ask for every published table to be copied again (see the
    module docstring); returns the new slot's start N, or None when the slot is not lost."""
    from walspark.protocol import format_lsn
    from walspark.source.connect import connect_sql
    from walspark.source.slots import create_slot, drop_slot, get_slot
    from walspark.spark.tablesync.state import SyncStore, request_resnapshot
    from walspark.spark.tablesync.sync import membership
    from walspark.staging.stager import record_idle_mark
    from walspark.storage import location

    reason = lost_slot(settings)
    if reason is None:
        return None
    layout = settings.layout
    note = layout.slot_loss(settings.slot)
    previous = note.read_json()
    resumed = previous is not None and previous.get("state") != "done"
    note.write_json({"slot": settings.slot, "reason": reason, "state": "recreating", "at": time.time()})
    with connect_sql(settings.dsn) as conn:
        info = get_slot(conn, settings.slot)
        two_phase = bool(info is not None and info.two_phase)  # as the lost one was (unknown when gone: not)
        if info is not None and (info.invalidated or not resumed):
            drop_slot(conn, settings.slot, if_exists=True, terminate_active=True)
            info = None
        if info is None:
            created = create_slot(conn, settings.slot, two_phase=two_phase, failover=settings.failover_slot)
            start = created.consistent_point
        else:  # made by the re-creation that did not end
            start = info.confirmed_flush_lsn or info.restart_lsn or 0
        tables = sorted(membership(conn, settings.publication))
    record_idle_mark(settings.staging, start)  # before any query: its guard accepts the jump to N
    (location(settings.staging) / "prepared").delete_tree()
    SyncStore(layout).reset()
    if tables:
        request_resnapshot(layout, tables, tables, settings.publication,
                           why=f"is copied again: its slot {settings.slot} was {reason}")  # fmt: skip
    note.write_json({"slot": settings.slot, "reason": reason, "state": "done", "start": format_lsn(start),
                     "at": time.time()})  # fmt: skip
    say(f"replication slot {settings.slot!r} was {reason}: created again at {format_lsn(start)}; copying "
        f"{len(tables)} table(s) again into {settings.target} while the stream goes on (each replaced in one "
        "commit; the old versions stay readable by time travel)")  # fmt: skip
    return start
