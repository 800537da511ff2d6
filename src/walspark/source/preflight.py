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

__all__ = ["SourceCheck", "check_source"]

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


def _check_slot(info: SlotInfo, dbname: str) -> None:
    """A slot of another plugin, another database or one invalidated cannot feed the stream."""
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
    if info.invalidated:
        raise SlotInvalidated(
            f"replication slot {info.slot_name!r} was invalidated "
            f"({info.invalidation_reason or 'wal_status lost'}): the WAL it needed is gone; "
            "drop the slot, create a new one and re-snapshot"
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
    """What the checks learnt: the server version, and whether the slot exists."""

    server_version: int
    slot_exists: bool | None


def check_source(
    dsn: str,
    *,
    publications: Iterable[str] = (),
    slot: str | None = None,
    slot_must_exist: bool = False,
    snapshot: bool = False,
    replication: bool = True,
    slot_free_within: float | None = None,
) -> SourceCheck:
    """Raise the walspark error that explains why ``dsn`` cannot serve a pipeline, else return.

    ``publications`` must exist (each item may be a comma-separated list, as ``--publication``
    and the stream read it); ``slot`` is validated and looked up (missing is an error only with
    ``slot_must_exist``; with ``slot_free_within``, one another consumer still reads after that
    many seconds is :class:`SlotInUse`); ``snapshot`` also checks SELECT on every table the
    snapshot of the publications would read; ``replication`` opens and closes a replication
    connection (the REPLICATION attribute and pg_hba's ``replication`` entries).
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
            if slot is not None:
                info = get_slot(conn, slot)
                exists = info is not None
                if info is not None:
                    _check_slot(info, conn.info.dbname)
                    if info.active and slot_free_within is not None:
                        _wait_until_free(conn, info, slot_free_within)
                if slot_must_exist and not exists:
                    raise SlotNotFound(
                        f"replication slot {slot!r} does not exist in database "
                        f"{conn.info.dbname!r}; create it with `walspark slot create`"
                    )
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
    return SourceCheck(version, exists)
