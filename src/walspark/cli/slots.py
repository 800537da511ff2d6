"""``walspark slot create|drop|list`` and ``walspark status``: replication slots from the command line.

LSNs are printed as ``X/Y`` (also in ``--json``), byte counts as integers in JSON and with a
unit for humans. Errors are one line, say what to do, and never show a password (every DSN
printed goes through :func:`walspark.source.dsn.redact_dsn`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import click

from walspark.cli.errors import CommandError, cli_errors
from walspark.cli.group import cli

_DSN_HELP = "libpq connection string or URI of the slot's database (or $WALSPARK_DSN); sslmode etc. pass through."


def _errors(dsn: str) -> AbstractContextManager[None]:
    """Any failure leaves as one redacted line (see :func:`walspark.cli.errors.cli_errors`)."""
    return cli_errors(dsn)


def _connect(dsn: str) -> Any:
    from walspark.source.connect import connect_sql

    return connect_sql(dsn)


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1024 or unit == "TB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit} ({n} B)"
        size /= 1024
    return f"{n} B"


def _dsn_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--dsn", required=True, envvar="WALSPARK_DSN", help=_DSN_HELP)(f)


@cli.group()
def slot() -> None:
    """Create, drop and list pgoutput replication slots."""


@slot.command("create")
@_dsn_option
@click.option("--slot", "name", required=True, help="Slot name: 1-63 of [a-z0-9_].")
@click.option("--two-phase", is_flag=True, help="Enable two-phase decoding on the slot (PostgreSQL 14+).")
@click.option("--if-not-exists", is_flag=True, help="Succeed without change if the slot exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def slot_create(dsn: str, name: str, two_phase: bool, if_not_exists: bool, as_json: bool) -> None:
    """Create a logical slot using pgoutput in the DSN's database."""
    from walspark.protocol.lsn import format_lsn
    from walspark.source.slots import create_slot, get_slot

    with _errors(dsn), _connect(dsn) as conn:
        existing = get_slot(conn, name)
        if existing is not None and if_not_exists:
            point, created = existing.confirmed_flush_lsn or 0, False
        else:
            point, created = create_slot(conn, name, two_phase=two_phase).consistent_point, True
    if as_json:
        click.echo(json.dumps({"slot_name": name, "consistent_point": format_lsn(point), "created": created}))
    elif created:
        click.echo(f"created slot {name} (pgoutput) at {format_lsn(point)}")
    else:
        click.echo(f"slot {name} already exists (confirmed_flush_lsn {format_lsn(point)})")


@slot.command("drop")
@_dsn_option
@click.option("--slot", "name", required=True, help="Slot name.")
@click.option("--if-exists", is_flag=True, help="Succeed if the slot does not exist.")
@click.option("--force", is_flag=True, help="Terminate the walsender using the slot first.")
def slot_drop(dsn: str, name: str, if_exists: bool, force: bool) -> None:
    """Drop a slot (the server then frees the WAL it retained)."""
    from walspark.source.slots import drop_slot

    with _errors(dsn), _connect(dsn) as conn:
        dropped = drop_slot(conn, name, if_exists=if_exists, terminate_active=force)
    click.echo(f"dropped slot {name}" if dropped else f"slot {name} does not exist")


@slot.command("list")
@_dsn_option
@click.option("--all-databases", is_flag=True, help="Include slots of other databases.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def slot_list(dsn: str, all_databases: bool, as_json: bool) -> None:
    """List slots with their positions, lag and retained WAL."""
    from walspark.source.slots import list_slots

    with _errors(dsn), _connect(dsn) as conn:
        database = None if all_databases else conn.info.dbname
        slots = list_slots(conn, database=database)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in slots], indent=2))
        return
    if not slots:
        click.echo("no replication slots" + ("" if all_databases else f" in database {database}"))
        return
    header = (
        f"{'slot':<24} {'plugin':<10} {'database':<14} {'active':<6} {'confirmed_flush':>16} "
        f"{'restart_lsn':>14} {'lag bytes':>12} {'retained bytes':>15} wal_status"
    )
    click.echo(header)
    for s in slots:
        d = s.to_dict()
        click.echo(
            f"{s.slot_name:<24} {s.plugin or '-':<10} {s.database or '-':<14} {'yes' if s.active else 'no':<6} "
            f"{d['confirmed_flush_lsn'] or '-':>16} {d['restart_lsn'] or '-':>14} "
            f"{'-' if s.lag_bytes is None else s.lag_bytes:>12} "
            f"{'-' if s.retained_bytes is None else s.retained_bytes:>15} {s.wal_status or '-'}"
        )


@cli.command()
@click.option("--dsn", envvar="WALSPARK_DSN", help=_DSN_HELP + " Not needed with --target.")
@click.option("--slot", "name", help="Slot name (with --target: which pipeline, if the target has several).")
@click.option("--target", help="Report the pipeline writing this target (from its state files, no connection).")
@click.option("--state", help="The pipeline's state folder, if it was run with --state.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def status(dsn: str | None, name: str | None, target: str | None, state: str | None, as_json: bool) -> None:
    """Show one slot (plugin, activity, positions, lag, retained WAL), or with --target the pipeline:
    its state, last batch, rows, how far behind, tables being copied, the last error."""
    from walspark.source.errors import SlotNotFound
    from walspark.source.preflight import protection_notes
    from walspark.source.slots import get_slot

    if target is not None:
        _pipeline_status(target, state, name, as_json)
        return
    if not dsn or not name:
        raise click.UsageError("give --dsn (or $WALSPARK_DSN) and --slot for a slot, or --target for a pipeline")
    with _errors(dsn):
        with _connect(dsn) as conn:
            info = get_slot(conn, name)
            notes = [] if info is None else protection_notes(conn, name, info)
        if info is None:
            raise SlotNotFound(f"replication slot {name!r} does not exist; create it with `walspark slot create`")
    d = info.to_dict()
    if as_json:
        click.echo(json.dumps({**d, "not_protected": notes}, indent=2))
        return
    rows = [
        ("slot", info.slot_name),
        ("plugin", info.plugin or "-"),
        ("type", info.slot_type),
        ("database", info.database or "-"),
        ("active", f"yes (walsender PID {info.active_pid})" if info.active else "no"),
        ("temporary", "yes" if info.temporary else "no"),
        ("two_phase", "-" if info.two_phase is None else ("yes" if info.two_phase else "no")),
        ("confirmed_flush_lsn", d["confirmed_flush_lsn"] or "-"),
        ("restart_lsn", d["restart_lsn"] or "-"),
        ("current_wal_lsn", d["current_wal_lsn"]),
        ("lag", _human_bytes(info.lag_bytes)),
        ("retained WAL", _human_bytes(info.retained_bytes)),
        ("wal_status", info.wal_status or "-"),
    ]
    rows.append(("failover", "-" if info.failover is None else ("yes" if info.failover else "no")))
    rows.append(("synced", "-" if info.synced is None else ("yes" if info.synced else "no")))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")
    if info.invalidated:
        from walspark.source.preflight import lost_slot_line

        click.echo(f"INVALIDATED: {lost_slot_line(info)}")
    for note in notes:
        click.echo(f"NOT PROTECTED: {note}")


def _pipeline_status(target: str, state: str | None, slot: str | None, as_json: bool) -> None:
    """``walspark status --target``: what the pipeline's status file and table-sync state say."""
    import time

    from walspark.pipeline.progress import format_bytes, format_seconds
    from walspark.pipeline.status import ACTIVE_PHASES, read_status_files
    from walspark.spark.tablesync.state import SyncStore
    from walspark.storage import TargetLayout

    layout = TargetLayout(target, state)
    with cli_errors(None):
        records = [r for r in read_status_files(layout) if slot is None or r["slot"] == slot]
        if not records:
            which = f" for slot {slot!r}" if slot else ""
            raise CommandError(f"no pipeline status{which} under {layout.home}: no `walspark run` has written "
                                       "to this target yet (or give --state if it was run with one)")  # fmt: skip
        try:
            copying = sorted(f"{s.schema}.{s.table}" for s in SyncStore(layout).all() if s.syncing)
        except Exception:  # noqa: BLE001 - a state file being rewritten: shown as unknown
            copying = None
    if as_json:
        for record in records:
            record["tables_copying"] = copying
        click.echo(json.dumps(records if slot is None else records[0], indent=2))
        return
    now = time.time()

    def ago(at: float | None) -> str:
        return (
            "-"
            if at is None
            else f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(at))} ({format_seconds(max(now - at, 0))} ago)"
        )

    for n, r in enumerate(records):
        if n:
            click.echo("")
        running = {True: "running", False: "not running", None: "running elsewhere?"}[r["running"]]
        state_line = (
            f"{r['state']} ({running}: pid {r['pid']} on {r['host']})" if r["state"] in ACTIVE_PHASES else r["state"]
        )
        behind = "-" if r.get("lag_seconds") is None else f"{format_seconds(r['lag_seconds'])} behind the source"
        if r.get("slot_lag_bytes") is not None:
            behind += f", slot lag {format_bytes(r['slot_lag_bytes'])}"
        last = (
            "-"
            if r.get("last_batch_id") is None
            else f"batch {r['last_batch_id']}: {r['last_batch_rows']:,} change rows, {ago(r.get('last_batch_at'))}"
        )
        rows = [
            ("slot", r["slot"]),
            ("state", state_line),
            ("started", ago(r.get("started_at"))),
            ("updated", ago(r.get("written_at"))),
            ("batches", f"{r['batches']:,} ({r['rows']:,} change rows)"),
            ("last batch", last),
            ("position", r.get("slot_position") or "-"),
            ("behind", behind),
            ("copying", "?" if copying is None else ", ".join(copying) or "-"),
            ("error", r.get("error") or "-"),
        ]
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            click.echo(f"{key:<{width}}  {value}")
