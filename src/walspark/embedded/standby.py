"""A physical standby of an embedded PostgreSQL, made with ``pg_basebackup``, that syncs failover slots.

For the failover tests and benchmarks: a primary's copy streaming its WAL through a physical
slot, with ``sync_replication_slots`` and ``hot_standby_feedback`` on (PostgreSQL 17+), that can
be promoted. See docs/deploying.md, "Failover and lost slots".
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from walspark.embedded.postgres import EmbeddedPostgres, EmbeddedPostgresError, _quote_conninfo

__all__ = ["EmbeddedStandby", "kill_server"]


class EmbeddedStandby(EmbeddedPostgres):
    """A hot standby of ``primary``, streaming through the physical slot ``slot`` on it.

    :meth:`start` copies the primary with ``pg_basebackup`` (creating ``slot``), then starts the
    copy in recovery on a port of its own. ``dbname`` goes into ``primary_conninfo``: the slot
    sync worker connects to that database. ``synchronize=True`` also names ``slot`` in the
    primary's ``synchronized_standby_slots`` (a logical walsender then sends nothing this standby
    has not received), reloading the primary. ``primary`` may be a promoted standby (the next
    standby of a switchover); the port is chosen here, so a DSN can name it before :meth:`start`.
    """

    def __init__(
        self,
        primary: EmbeddedPostgres,
        *,
        slot: str = "walspark_standby",
        dbname: str = "postgres",
        synchronize: bool = True,
        settings: Mapping[str, str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        standby = {
            "hot_standby": "on",
            "hot_standby_feedback": "on",
            "primary_slot_name": f"'{slot}'",
            "wal_receiver_status_interval": "1s",
        }
        if primary.major_version >= 17:
            standby["sync_replication_slots"] = "on"
        super().__init__(base_dir, bindir=primary.bindir, settings={**primary.settings, **standby, **(settings or {})})
        self.primary = primary
        self.slot = slot
        self.synchronize = synchronize
        conninfo = primary.dsn(dbname, application_name=f"standby_{self.port}")
        self.settings["primary_conninfo"] = _quote_conninfo(conninfo) if " " in conninfo else conninfo

    def start(self) -> EmbeddedStandby:
        """Copy the primary (once), then start the standby and wait until it accepts connections."""
        if not (self.data_dir / "PG_VERSION").exists():
            self._basebackup()
        super().start()
        return self

    def _basebackup(self) -> None:
        self._bindir = self.primary._bindir
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._who.chown(self.base_dir)
        self.primary_sql(f"SELECT pg_create_physical_replication_slot('{self.slot}', true)")
        self._run(
            self.bin("pg_basebackup"),
            "-D", str(self.data_dir),
            "-d", self.primary.dsn(),
            "-S", self.slot,
            "-X", "stream",
            "-c", "fast",
            "-R",
            "--no-sync",
        )  # fmt: skip
        if self.synchronize and self.primary.major_version >= 17:
            self.primary_sql(f"ALTER SYSTEM SET synchronized_standby_slots = '{self.slot}'")
            self.primary_sql("SELECT pg_reload_conf()")

    def primary_sql(self, statement: str) -> None:
        """Run one statement on the primary as the superuser."""
        import psycopg

        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            conn.execute(statement)

    def promote(self, timeout: float = 60.0) -> None:
        """Make this standby a primary (``pg_ctl promote``), waiting until it accepts writes."""
        self._pg_ctl("promote", "-w", "-t", str(int(timeout)))

    def wait_for_slot(self, name: str, *, confirmed: int | None = None, timeout: float = 120.0) -> None:
        """Wait until the slot sync worker has a persistent copy of ``name`` here, confirmed at least
        ``confirmed`` (an LSN) when given.

        Each second until then, a running-transactions record is logged on the primary (the first
        copy waits for the slot to move past one, which the bgwriter writes only every 15 s) and this
        standby is reloaded: the reload wakes its sync worker, whose nap grows to 30 s while it finds
        nothing to sync."""
        import psycopg

        deadline = time.monotonic() + timeout
        nudged = 0.0
        while True:
            with psycopg.connect(self.dsn(), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT synced AND NOT temporary, pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::int8"
                    " FROM pg_replication_slots WHERE slot_name = %s",
                    (name,),
                ).fetchone()
                if row is not None and row[0] and (confirmed is None or (row[1] or 0) >= confirmed):
                    return
                if time.monotonic() > deadline:
                    raise EmbeddedPostgresError(
                        f"slot {name!r} was not synchronized to the standby within {timeout:g} s"
                    )
                if time.monotonic() - nudged >= 1.0:
                    nudged = time.monotonic()
                    self.primary_sql("SELECT pg_log_standby_snapshot()")
                    conn.execute("SELECT pg_reload_conf()")
            time.sleep(0.2)


def kill_server(server: EmbeddedPostgres) -> None:
    """SIGKILL ``server``'s postmaster and every process it started: a crash, no shutdown at all."""
    try:
        pid = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError) as exc:
        raise EmbeddedPostgresError(f"no running server in {server.data_dir}") from exc
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat.parent.name))
    for victim in (pid, *children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    server._running = False
