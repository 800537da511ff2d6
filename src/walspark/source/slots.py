"""Replication slots: create, drop, list, inspect — and creation with an exported snapshot.

See docs/design/source.md for the version-aware inspection and why a snapshot's slot is a context
manager.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from walspark.protocol.lsn import format_lsn, parse_lsn

from .connect import connect_replication, error_from_exception
from .dsn import redact_dsn
from .errors import OptionError, SlotInUse, SlotNotFound
from .names import quote_repl_ident, validate_slot_name

__all__ = [
    "CreatedSlot",
    "SlotInfo",
    "SlotSnapshot",
    "create_slot",
    "create_slot_command",
    "create_slot_with_snapshot",
    "drop_slot",
    "get_slot",
    "list_slots",
]

log = logging.getLogger(__name__)

PLUGIN = "pgoutput"
SnapshotAction = Literal["export", "nothing", "use"]


def _lsn(text: str | None) -> int | None:
    return None if text is None else parse_lsn(text)


def _fmt(lsn: int | None) -> str | None:
    return None if lsn is None else format_lsn(lsn)


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """A replication slot as the server sees it, plus retained WAL and lag in bytes.

    Fields the server does not have (older versions, physical slots) are ``None``.
    ``current_wal_lsn`` is the server position the byte counts were computed against.
    """

    slot_name: str
    plugin: str | None
    slot_type: str
    database: str | None
    temporary: bool
    active: bool
    active_pid: int | None
    restart_lsn: int | None
    confirmed_flush_lsn: int | None
    current_wal_lsn: int
    retained_bytes: int | None
    lag_bytes: int | None
    wal_status: str | None
    safe_wal_size: int | None
    two_phase: bool | None
    conflicting: bool | None
    invalidation_reason: str | None
    #: PostgreSQL 17+: the slot is synchronized to standbys (``failover``), and this copy of it is
    #: one the slot sync worker made on a standby (``synced``, kept after a promotion).
    failover: bool | None = None
    synced: bool | None = None

    @property
    def invalidated(self) -> bool:
        """True when the slot can no longer be streamed from (its WAL is gone or it was invalidated)."""
        return self.wal_status == "lost" or bool(self.invalidation_reason) or bool(self.conflicting)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, LSNs as ``X/Y``."""
        return {
            "slot_name": self.slot_name,
            "plugin": self.plugin,
            "slot_type": self.slot_type,
            "database": self.database,
            "temporary": self.temporary,
            "active": self.active,
            "active_pid": self.active_pid,
            "restart_lsn": _fmt(self.restart_lsn),
            "confirmed_flush_lsn": _fmt(self.confirmed_flush_lsn),
            "current_wal_lsn": _fmt(self.current_wal_lsn),
            "retained_wal_bytes": self.retained_bytes,
            "lag_bytes": self.lag_bytes,
            "wal_status": self.wal_status,
            "safe_wal_size": self.safe_wal_size,
            "two_phase": self.two_phase,
            "conflicting": self.conflicting,
            "invalidation_reason": self.invalidation_reason,
            "invalidated": self.invalidated,
            "failover": self.failover,
            "synced": self.synced,
        }


def _slot_query(server_version_num: int) -> str:
    """The SELECT for :class:`SlotInfo`, naming only columns this server version has."""
    major = server_version_num // 10000
    current = "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END"
    optional = [
        ("s.wal_status", 13, "NULL::text"),
        ("s.safe_wal_size", 13, "NULL::int8"),
        ("s.two_phase", 14, "NULL::bool"),
        ("s.conflicting", 16, "NULL::bool"),
        ("s.invalidation_reason", 17, "NULL::text"),
        ("s.failover", 17, "NULL::bool"),
        ("s.synced", 17, "NULL::bool"),
    ]
    extra = ", ".join(col if major >= since else absent for col, since, absent in optional)
    return (
        "SELECT s.slot_name::text, s.plugin::text, s.slot_type, s.database::text, s.temporary, s.active,"
        " s.active_pid, s.restart_lsn::text, s.confirmed_flush_lsn::text, c.lsn::text,"
        " pg_wal_lsn_diff(c.lsn, s.restart_lsn)::int8, pg_wal_lsn_diff(c.lsn, s.confirmed_flush_lsn)::int8, "
        + extra
        + f" FROM pg_replication_slots s CROSS JOIN (SELECT {current} AS lsn) c"
    )


def _row_to_info(row: tuple[Any, ...]) -> SlotInfo:
    (
        name,
        plugin,
        slot_type,
        database,
        temporary,
        active,
        pid,
        restart,
        confirmed,
        current,
        retained,
        lag,
        wal_status,
        safe,
        two_phase,
        conflicting,
        reason,
        failover,
        synced,
    ) = row
    return SlotInfo(
        slot_name=name,
        plugin=plugin,
        slot_type=slot_type,
        database=database,
        temporary=bool(temporary),
        active=bool(active),
        active_pid=pid,
        restart_lsn=_lsn(restart),
        confirmed_flush_lsn=_lsn(confirmed),
        current_wal_lsn=_lsn(current) or 0,
        retained_bytes=retained,
        lag_bytes=lag,
        wal_status=wal_status,
        safe_wal_size=safe,
        two_phase=two_phase,
        conflicting=conflicting,
        invalidation_reason=reason,
        failover=failover,
        synced=synced,
    )


def list_slots(conn: Any, *, database: str | None = None) -> list[SlotInfo]:
    """Every slot of the server (or of one ``database``), by name."""
    query = _slot_query(conn.info.server_version)
    params: tuple[Any, ...] = ()
    if database is not None:
        query += " WHERE s.database = %s"
        params = (database,)
    rows = _fetch(conn, query + " ORDER BY s.slot_name", params, what="cannot list replication slots")
    return [_row_to_info(r) for r in rows]


def get_slot(conn: Any, name: str) -> SlotInfo | None:
    """One slot by name, or None when it does not exist."""
    validate_slot_name(name)
    rows = _fetch(
        conn,
        _slot_query(conn.info.server_version) + " WHERE s.slot_name = %s",
        (name,),
        what=f"cannot inspect replication slot {name!r}",
    )
    return _row_to_info(rows[0]) if rows else None


@dataclass(frozen=True, slots=True)
class CreatedSlot:
    """Result of creating a slot: its name and the LSN from which it can stream."""

    slot_name: str
    consistent_point: int


def create_slot(
    conn: Any, name: str, *, temporary: bool = False, two_phase: bool = False, failover: bool = False
) -> CreatedSlot:
    """Create a ``pgoutput`` slot in the connection's database (SQL interface).

    ``temporary`` slots belong to the creating *session* and vanish with it; they suit tests of
    the SQL interface, not a stream on another connection (use the stream's
    ``create_temporary_slot`` for that). ``two_phase`` needs PostgreSQL 14+. ``failover`` makes
    it a slot the standbys synchronize (PostgreSQL 17+; ignored before, where no slot can be).
    """
    validate_slot_name(name)
    major = conn.info.server_version // 10000
    if two_phase and major < 14:
        raise OptionError(f"two_phase slots need PostgreSQL 14+, server is {major}")
    query: str
    params: tuple[object, ...]
    if major >= 17:
        query, params = (
            "SELECT slot_name::text, lsn::text FROM pg_create_logical_replication_slot(%s, %s, %s, %s, %s)",
            (name, PLUGIN, temporary, two_phase, failover and not temporary),
        )
    elif major >= 14:
        query, params = (
            "SELECT slot_name::text, lsn::text FROM pg_create_logical_replication_slot(%s, %s, %s, %s)",
            (name, PLUGIN, temporary, two_phase),
        )
    else:
        query, params = (
            "SELECT slot_name::text, lsn::text FROM pg_create_logical_replication_slot(%s, %s, %s)",
            (name, PLUGIN, temporary),
        )
    rows = _fetch(conn, query, params, what=f"cannot create replication slot {name!r}")
    slot_name, lsn = rows[0]
    log.info("created slot %s at %s", slot_name, lsn)
    return CreatedSlot(slot_name, parse_lsn(lsn))


def drop_slot(
    conn: Any, name: str, *, if_exists: bool = False, terminate_active: bool = False, wait_seconds: float = 10.0
) -> bool:
    """Drop a slot; returns False if it did not exist and ``if_exists`` is set.

    An active slot (a walsender is streaming from it) cannot be dropped; with
    ``terminate_active`` that walsender is terminated first and the drop waits up to
    ``wait_seconds`` for the slot to be released.
    """
    validate_slot_name(name)
    info = get_slot(conn, name)
    if info is None:
        if if_exists:
            return False
        raise SlotNotFound(
            f"replication slot {name!r} does not exist; check the name and database "
            "(`walspark slot list`), or pass --if-exists"
        )
    if info.active:
        if not terminate_active:
            raise SlotInUse(
                f"replication slot {name!r} is active (walsender PID {info.active_pid}); "
                "stop its consumer first or use --force"
            )
        deadline = time.monotonic() + wait_seconds
        while info is not None and info.active:
            if info.active_pid is not None:
                _fetch(conn, "SELECT pg_terminate_backend(%s)", (info.active_pid,), what="cannot stop the walsender")
            if time.monotonic() > deadline:
                raise SlotInUse(f"replication slot {name!r} is still active after {wait_seconds:g}s")
            time.sleep(0.05)
            info = get_slot(conn, name)
        if info is None:
            return True
    _fetch(conn, "SELECT pg_drop_replication_slot(%s)", (name,), what=f"cannot drop replication slot {name!r}")
    log.info("dropped slot %s", name)
    return True


# --------------------------------------------------------------------------- replication protocol


def create_slot_command(
    name: str,
    *,
    server_version_num: int,
    temporary: bool = False,
    two_phase: bool = False,
    snapshot: SnapshotAction = "export",
    failover: bool = False,
) -> str:
    """``CREATE_REPLICATION_SLOT`` in the syntax the server understands.

    PostgreSQL 15 introduced the parenthesised option list (``(SNAPSHOT 'export', TWO_PHASE)``);
    14 and older take keywords (``EXPORT_SNAPSHOT``/``NOEXPORT_SNAPSHOT``/``USE_SNAPSHOT``, and
    ``TWO_PHASE`` on 14 only). ``failover`` (``FAILOVER``, PostgreSQL 17+) asks the standbys'
    slot sync to keep a copy of the slot; older servers have no such slot and it is left out.
    """
    validate_slot_name(name)
    if snapshot not in ("export", "nothing", "use"):
        raise OptionError(f"snapshot must be 'export', 'nothing' or 'use', not {snapshot!r}")
    major = server_version_num // 10000
    if two_phase and major < 14:
        raise OptionError(f"two_phase slots need PostgreSQL 14+, server is {major}")
    head = f"CREATE_REPLICATION_SLOT {quote_repl_ident(name)}{' TEMPORARY' if temporary else ''} LOGICAL {PLUGIN}"
    if major >= 15:
        opts = [f"SNAPSHOT '{snapshot}'"] + (["TWO_PHASE"] if two_phase else [])
        if failover and major >= 17 and not temporary:
            opts.append("FAILOVER")
        return f"{head} ({', '.join(opts)})"
    keyword = {"export": "EXPORT_SNAPSHOT", "nothing": "NOEXPORT_SNAPSHOT", "use": "USE_SNAPSHOT"}[snapshot]
    return f"{head} {keyword}{' TWO_PHASE' if two_phase else ''}"


@dataclass(slots=True)
class SlotSnapshot:
    """A slot just created on a replication connection that is still open.

    ``snapshot_name`` (with ``snapshot='export'``) can be imported by other sessions with
    ``SET TRANSACTION SNAPSHOT`` inside a REPEATABLE READ transaction for as long as this object
    is open; ``consistent_point`` is where streaming must start to continue that snapshot with
    no gap and no duplicate. With ``snapshot='use'`` the snapshot is the one of the transaction
    open on :attr:`connection` (a psycopg2 connection), to query through it.
    """

    slot_name: str
    consistent_point: int
    snapshot_name: str | None
    output_plugin: str
    server_version: int
    connection: Any

    def close(self) -> None:
        """Release the snapshot (closes the replication connection; the slot stays unless temporary)."""
        if self.connection is not None and not self.connection.closed:
            self.connection.close()


@contextlib.contextmanager
def create_slot_with_snapshot(
    dsn: str,
    name: str,
    *,
    temporary: bool = False,
    two_phase: bool = False,
    snapshot: SnapshotAction = "export",
    failover: bool = False,
) -> Iterator[SlotSnapshot]:
    """Create a slot over the replication protocol and keep its snapshot alive inside the ``with``.

    The replication connection stays open and idle until the block ends: any further command on
    it, or closing it, ends the exported snapshot (PostgreSQL's rule). A temporary slot is
    dropped by the server when the block ends.
    """
    import psycopg2

    validate_slot_name(name)
    conn = connect_replication(dsn)
    try:
        version = conn.server_version
        command = create_slot_command(
            name,
            server_version_num=version,
            temporary=temporary,
            two_phase=two_phase,
            snapshot=snapshot,
            failover=failover,
        )
        cur = conn.cursor()
        try:
            if snapshot == "use":
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            cur.execute(command)
            slot_name, consistent_point, snapshot_name, plugin = cur.fetchone()
        except psycopg2.Error as exc:
            raise error_from_exception(exc, dsn=dsn, what=f"cannot create replication slot {name!r}") from None
        log.info(
            "created slot %s at %s (snapshot %s) on %s", slot_name, consistent_point, snapshot_name, redact_dsn(dsn)
        )
        handle = SlotSnapshot(slot_name, parse_lsn(consistent_point), snapshot_name, plugin, version, conn)
        yield handle
    finally:
        conn.close()


def _fetch(conn: Any, query: str, params: tuple[Any, ...] = (), *, what: str) -> list[tuple[Any, ...]]:
    import psycopg

    try:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise error_from_exception(exc, what=what) from None
