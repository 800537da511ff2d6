"""Checks a source database passes before any expensive work starts.

They read catalogs and open (then close) one replication connection; they change nothing on the
server. See docs/design/source.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .connect import connect_replication, connect_sql, error_from_exception
from .dsn import dsn_params
from .errors import (
    InvalidDsn,
    OptionError,
    PermissionDenied,
    PublicationNotFound,
    SlotInUse,
    SlotInvalidated,
    SlotNotFound,
    WalLevelNotLogical,
)
from .names import validate_slot_name
from .publications import publication_list

if TYPE_CHECKING:
    from .slots import SlotInfo

__all__ = ["SourceCheck", "check_source", "lost_slot_line", "protection_notes"]

# Tables a snapshot reads (the published ones, and the leaves of a published partitioned root,
# which the snapshot scans directly) that the current role may not SELECT.
_UNREADABLE_QUERY = """
WITH published AS (
    SELECT c.oid, c.relkind FROM pg_publication_tables t
    JOIN pg_namespace n ON n.nspname = t.schemaname
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
    WHERE t.pubname = ANY(%s)
), readable AS (
    SELECT oid FROM published
    UNION
    SELECT p.relid FROM published, pg_partition_tree(published.oid) p
    WHERE published.relkind = 'p' AND p.isleaf
)
SELECT format('%%I.%%I', n.nspname, c.relname) FROM readable r
JOIN pg_class c ON c.oid = r.oid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE NOT has_table_privilege(c.oid, 'SELECT')
ORDER BY 1
"""


def _check_slot(info: SlotInfo, dbname: str, *, lost_ok: bool = False) -> None:
    """A slot of another plugin, another database or one invalidated (unless ``lost_ok``: the
    caller re-creates it) cannot feed the stream."""
    if info.slot_type != "logical" or info.plugin != "pgoutput":
        raise OptionError(
            f"replication slot {info.slot_name!r} is a {info.slot_type} slot of plugin "
            f"{info.plugin or 'none'!r}, not a pgoutput slot: choose another --slot (or drop it)"
        )
    if info.database != dbname:
        raise OptionError(
            f"replication slot {info.slot_name!r} belongs to database {info.database!r}, not "
            f"{dbname!r}: connect to that database (dbname in the DSN) or choose another --slot"
        )
    if info.invalidated and not lost_ok:
        raise SlotInvalidated(lost_slot_line(info))


def protection_notes(conn: Any, slot: str, info: SlotInfo | None, *, failover: bool = True) -> list[str]:
    """One line for each way a failover of this server would cost the slot or changes (none: protected).

    On a primary: the slot (or, when it does not exist yet, the one ``failover`` says walspark
    will create) is not a failover slot; no standby is named in ``synchronized_standby_slots``, so
    the standby may not have received what walspark consumed; PostgreSQL 16 and older have no
    failover slots at all. On a standby: whether the slot is a synchronized copy. Reads settings
    and the slot only; see docs/deploying.md, "Failover and lost slots".
    """
    major = conn.info.server_version // 10000
    standby = bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])
    if major < 17:
        where = "its standby" if standby else "a standby"
        return [
            f"replication slot {slot!r}: PostgreSQL {major} has no failover slots, so {where} does not keep it and a "
            f"failover loses it (the run then stops and needs a new snapshot); "
            "upgrade to PostgreSQL 17+ to keep the slot across a failover"
        ]
    if standby:
        if info is not None and info.synced:
            return [
                f"replication slot {slot!r} on this standby is synchronized from the primary: it is streamed from "
                "here only after a promotion; give --dsn every host (host=a,b target_session_attrs=read-write) "
                "so walspark follows the primary"
            ]
        return [
            f"replication slot {slot!r} is not synchronized to this standby: a failover to it loses the slot; make "
            "it a failover slot on the primary and set sync_replication_slots = on, hot_standby_feedback = on, "
            "primary_slot_name and a dbname in primary_conninfo here"
        ]
    notes = []
    if info is not None and not info.failover:
        notes.append(
            f"replication slot {slot!r} is not a failover slot: no standby keeps it and a failover loses it; make it "
            f"one (ALTER_REPLICATION_SLOT {slot} (FAILOVER true) on a replication=database connection) or let "
            "walspark create it (--failover-slot)"
        )
    elif info is None and not failover:
        notes.append(
            f"replication slot {slot!r} will be created without failover (--no-failover-slot): no standby keeps "
            "it and a failover loses it; leave out --no-failover-slot to have the standbys synchronize it"
        )
    if info is None or info.failover or failover:
        names = conn.execute("SHOW synchronized_standby_slots").fetchone()[0]
        if not str(names).strip():
            notes.append(
                f"replication slot {slot!r}: no standby is named in synchronized_standby_slots, so a standby may lag "
                "behind what walspark consumed and a failover to it would lose changes; set "
                "synchronized_standby_slots = '<the standby's physical slot>' on the primary (then "
                "SELECT pg_reload_conf())"
            )
    return notes


def lost_slot_line(info: SlotInfo) -> str:
    """The one line of a slot that can no longer be streamed from: which, why, and the fix."""
    why = info.invalidation_reason or ("conflict with recovery" if info.conflicting else "wal_status lost")
    return (
        f"replication slot {info.slot_name!r} was invalidated ({why}): the WAL it needed is gone and its changes "
        "cannot be streamed; run with --on-slot-loss resnapshot (a new slot, every table copied again into this "
        f"target), or drop the slot (walspark slot drop --slot {info.slot_name}) and run into a new --target"
    )


def _wait_until_free(conn: Any, info: SlotInfo, seconds: float) -> None:
    """A slot serves one consumer at a time: wait up to ``seconds`` for its walsender to go (a
    consumer that just died is seen by the server within moments), else :class:`SlotInUse`."""
    from walspark.source.slots import get_slot

    deadline = time.monotonic() + seconds
    current: SlotInfo | None = info
    while current is not None and current.active and time.monotonic() < deadline:
        time.sleep(0.2)
        current = get_slot(conn, info.slot_name)
    if current is not None and current.active:
        pid = current.active_pid
        raise SlotInUse(
            f"replication slot {info.slot_name!r} is in use by another consumer (walsender PID {pid}) after "
            f"{seconds:g} s: a slot serves one reader at a time, and another walspark run or subscriber reads it; "
            f"wait for that one to end or stop it (SELECT pg_terminate_backend({pid}) ends its connection; "
            f"`walspark status --slot {info.slot_name}` shows the slot), or choose another --slot"
        )


@dataclass(frozen=True)
class SourceCheck:
    """What the checks learnt: the server version, whether the slot exists, and the
    :func:`protection_notes`."""

    server_version: int
    slot_exists: bool | None
    notes: tuple[str, ...] = ()
    #: The slot's :func:`lost_slot_line` when it is invalidated (only with ``lost_ok``).
    lost: str | None = None


def check_source(
    dsn: str,
    *,
    publications: Iterable[str] = (),
    slot: str | None = None,
    slot_must_exist: bool = False,
    snapshot: bool = False,
    replication: bool = True,
    slot_free_within: float | None = None,
    failover: bool | None = None,
    lost_ok: bool = False,
) -> SourceCheck:
    """Raise the walspark error that explains why ``dsn`` cannot serve a pipeline, else return.

    ``publications`` must exist (each item may be a comma-separated list, as ``--publication``
    and the stream read it); ``slot`` is validated and looked up (missing is an error only with
    ``slot_must_exist``; with ``slot_free_within``, one another consumer still reads after that
    many seconds is :class:`SlotInUse`); ``snapshot`` also checks SELECT on every table the
    snapshot of the publications would read; ``replication`` opens and closes a replication
    connection (the REPLICATION attribute and pg_hba's ``replication`` entries). With
    ``failover`` (whether walspark would create the slot as a failover slot), the result's
    ``notes`` say how a failover would cost the slot or changes (:func:`protection_notes`).
    ``lost_ok``: an invalidated slot is not an error but the result's ``lost`` (its caller
    creates it again).
    """
    from walspark.source.slots import get_slot

    names = list(publication_list(publications))
    if slot is not None:
        validate_slot_name(slot)
    try:
        dsn_params(dsn)
    except ValueError as exc:
        raise InvalidDsn(f"{exc}; use key=value pairs (host=... dbname=...) or a postgresql:// URI") from None
    with connect_sql(dsn) as conn:
        try:
            level = conn.execute("SHOW wal_level").fetchone()[0]  # type: ignore[index]
            if level != "logical":
                raise WalLevelNotLogical(
                    f"wal_level is {level!r} on the server: logical decoding needs wal_level = logical"
                    " (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)"
                )
            missing = [
                n
                for n in names
                if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (n,)).fetchone() is None
            ]
            if missing:
                raise PublicationNotFound(
                    f"publication {missing[0]!r} does not exist in database {conn.info.dbname!r}; "
                    "create it (CREATE PUBLICATION ... FOR TABLE ...) or check --publication and dbname"
                )
            exists = None
            lost = None
            notes: list[str] = []
            if slot is not None:
                info = get_slot(conn, slot)
                exists = info is not None
                if info is not None:
                    _check_slot(info, conn.info.dbname, lost_ok=lost_ok)
                    lost = lost_slot_line(info) if info.invalidated else None
                    if info.active and slot_free_within is not None:
                        _wait_until_free(conn, info, slot_free_within)
                if slot_must_exist and not exists:
                    raise SlotNotFound(
                        f"replication slot {slot!r} does not exist in database "
                        f"{conn.info.dbname!r}; create it with `walspark slot create`"
                    )
                if failover is not None:
                    notes = protection_notes(conn, slot, info, failover=failover)
            if snapshot and names:
                rows = conn.execute(_UNREADABLE_QUERY, (names,)).fetchall()
                if rows:
                    tables = ", ".join(r[0] for r in rows)
                    raise PermissionDenied(
                        f"role {conn.info.user!r} may not SELECT {tables}, which the snapshot of publication "
                        f"{', '.join(names)!r} copies; GRANT SELECT ON {rows[0][0]} TO {conn.info.user} (for every "
                        "table listed)"
                    )
            version = conn.info.server_version
        except Exception as exc:  # noqa: BLE001 - psycopg errors while reading catalogs
            raise error_from_exception(exc, dsn=dsn, what="cannot check the source") from None
    if replication:
        connect_replication(dsn).close()
    return SourceCheck(version, exists, tuple(notes), lost)
