"""Slots, publications, exported snapshots and the slot CLI against real servers."""

from __future__ import annotations

import json
import logging

import psycopg
import pytest
from click.testing import CliRunner
from srcutil import Collector, drain, wait_for

from walspark.cli.main import cli
from walspark.embedded.postgres import free_port
from walspark.protocol.lsn import format_lsn, parse_lsn
from walspark.source import (
    ConnectionLost,
    ReplicationStream,
    SlotExists,
    SlotInUse,
    SlotNotFound,
    StreamOptions,
    create_publication,
    create_slot,
    create_slot_with_snapshot,
    drop_publication,
    drop_slot,
    get_publication,
    get_slot,
    list_publications,
    list_slots,
    missing_publications,
)
from walspark.source.connect import connect_sql

pytestmark = pytest.mark.timeout(120)

WEIRD = 'we"ird pub ünï'


def _commands_registered() -> None:
    from walspark.cli import commands  # noqa: F401


_commands_registered()


def test_publications_with_unusual_names(pg18_dsn: str) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "Sch ema"')
        conn.execute('CREATE TABLE "Sch ema"."Ta""ble" (id int PRIMARY KEY)')
        conn.execute("CREATE TABLE plain (id int PRIMARY KEY)")
        create_publication(conn, WEIRD, tables=[("Sch ema", 'Ta"ble'), "public.plain"], publish=["insert", "update"])
        create_publication(conn, "everything", all_tables=True)
        create_publication(conn, "everything", all_tables=True, if_not_exists=True)
        info = get_publication(conn, WEIRD)
        assert info is not None
        assert info.tables == ('Sch ema.Ta"ble', "public.plain")
        assert info.publish == ("insert", "update")
        assert [p.name for p in list_publications(conn)] == ["everything", WEIRD]
        assert missing_publications(conn, [WEIRD, "nope"]) == ["nope"]
        drop_publication(conn, "everything")
        drop_publication(conn, "everything", if_exists=True)
        assert get_publication(conn, "everything") is None


def test_slot_lifecycle_and_inspection(pg18_dsn: str) -> None:
    with connect_sql(pg18_dsn) as conn:
        created = create_slot(conn, "life")
        with pytest.raises(SlotExists):
            create_slot(conn, "life")
        conn.execute("CREATE TABLE w (x text)")
        conn.execute("INSERT INTO w SELECT repeat('x', 100) FROM generate_series(1, 2000)")
        info = get_slot(conn, "life")
        assert info is not None
        assert (info.plugin, info.slot_type, info.active, info.temporary) == ("pgoutput", "logical", False, False)
        assert info.database == conn.info.dbname
        assert info.confirmed_flush_lsn == created.consistent_point
        assert info.restart_lsn is not None and info.restart_lsn <= created.consistent_point
        assert info.current_wal_lsn > created.consistent_point
        assert info.lag_bytes == info.current_wal_lsn - created.consistent_point > 100_000
        assert info.retained_bytes == info.current_wal_lsn - info.restart_lsn
        assert info.wal_status == "reserved" and info.two_phase is False
        assert info.conflicting is False and info.invalidation_reason is None and not info.invalidated
        d = info.to_dict()
        assert parse_lsn(d["confirmed_flush_lsn"]) == created.consistent_point
        assert [s.slot_name for s in list_slots(conn, database=conn.info.dbname)] == ["life"]
        assert drop_slot(conn, "life") is True
        assert drop_slot(conn, "life", if_exists=True) is False
        with pytest.raises(SlotNotFound):
            drop_slot(conn, "life")


def test_drop_active_slot_needs_force(pg18_dsn: str) -> None:
    with connect_sql(pg18_dsn) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        create_publication(conn, "p", tables=["t"])
        create_slot(conn, "busy")
        with ReplicationStream(pg18_dsn, "busy", StreamOptions(("p",)), reconnect=None) as stream:
            stream.read(0.5)
            with pytest.raises(SlotInUse):
                drop_slot(conn, "busy")
            assert drop_slot(conn, "busy", terminate_active=True)
        assert get_slot(conn, "busy") is None


def test_closed_stream_releases_the_slot_at_once(pg18_dsn: str) -> None:
    with connect_sql(pg18_dsn) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        create_publication(conn, "p", tables=["t"])
        create_slot(conn, "quick")
        for _ in range(3):
            with ReplicationStream(pg18_dsn, "quick", StreamOptions(("p",)), retry_on_open=False) as stream:
                conn.execute("INSERT INTO t SELECT coalesce(max(id), 0) + 1 FROM t")
                stream.read(0.3)
            info = get_slot(conn, "quick")
            assert info is not None and not info.active  # released before close() returned
        assert drop_slot(conn, "quick")


def test_inspection_on_pg15(pg15_dsn: str) -> None:
    with connect_sql(pg15_dsn) as conn:
        create_slot(conn, "old", two_phase=True)
        info = get_slot(conn, "old")
        assert info is not None and info.two_phase is True and info.wal_status == "reserved"
        assert info.conflicting is None and info.invalidation_reason is None  # columns PG15 lacks


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_exported_snapshot_then_stream_without_gap(server: str, request: pytest.FixtureRequest) -> None:
    dsn = request.getfixturevalue(f"{server}_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'before' FROM generate_series(1, 100) g")
        create_publication(conn, WEIRD, tables=["t"])
        with create_slot_with_snapshot(dsn, "snap") as snap:
            assert snap.snapshot_name and snap.output_plugin == "pgoutput"
            conn.execute("INSERT INTO t SELECT g, 'after' FROM generate_series(101, 150) g")
            with psycopg.connect(dsn) as reader:
                reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                reader.execute(f"SET TRANSACTION SNAPSHOT '{snap.snapshot_name}'")
                seen = reader.execute("SELECT count(*) FROM t").fetchone()
                reader.rollback()
            assert seen == (100,)
            point = snap.consistent_point
        info = get_slot(conn, "snap")
        assert info is not None and info.confirmed_flush_lsn == point
    collector = Collector(4 if server == "pg18" else 3)
    with ReplicationStream(dsn, "snap", StreamOptions((WEIRD,)), reconnect=None) as stream:
        assert stream.options is not None and stream.options.proto_version == collector.proto
        drain(stream, collector, until=lambda: len(collector.txns) >= 1, timeout=20)
    assert sorted(i for _, i in collector.txns[0].rows) == list(range(101, 151))


def test_temporary_slot_with_snapshot_disappears(pg18_dsn: str) -> None:
    with create_slot_with_snapshot(pg18_dsn, "tmp", temporary=True, snapshot="nothing") as snap:
        assert snap.snapshot_name is None
        with connect_sql(pg18_dsn) as conn:
            info = get_slot(conn, "tmp")
            assert info is not None and info.temporary
    with connect_sql(pg18_dsn) as conn:  # the backend drops it as it exits, just after we hang up
        wait_for(lambda: get_slot(conn, "tmp") is None, what="temporary slot to vanish")


# ----------------------------------------------------------------------------- CLI


def test_cli_slot_commands_and_status(pg18_dsn: str) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["slot", "create", "--dsn", pg18_dsn, "--slot", "cli_slot"])
    assert res.exit_code == 0, res.output
    assert "created slot cli_slot" in res.output
    res = runner.invoke(cli, ["slot", "create", "--dsn", pg18_dsn, "--slot", "cli_slot", "--if-not-exists"])
    assert res.exit_code == 0 and "already exists" in res.output
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE w AS SELECT repeat('x', 200) AS x FROM generate_series(1, 3000)")
        current = parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])

    res = runner.invoke(cli, ["status", "--dsn", pg18_dsn, "--slot", "cli_slot", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["plugin"] == "pgoutput" and data["active"] is False and data["wal_status"] == "reserved"
    confirmed = parse_lsn(data["confirmed_flush_lsn"])
    restart = parse_lsn(data["restart_lsn"])
    now = parse_lsn(data["current_wal_lsn"])
    assert now >= current
    assert data["lag_bytes"] == now - confirmed > 500_000
    assert data["retained_wal_bytes"] == now - restart >= data["lag_bytes"]

    res = runner.invoke(cli, ["status", "--dsn", pg18_dsn, "--slot", "cli_slot"])
    assert res.exit_code == 0
    assert f"confirmed_flush_lsn  {format_lsn(confirmed)}" in res.output
    assert "lag" in res.output and "retained WAL" in res.output and f"({data['lag_bytes']} B)" in res.output

    res = runner.invoke(cli, ["slot", "list", "--dsn", pg18_dsn, "--json"])
    assert [s["slot_name"] for s in json.loads(res.output)] == ["cli_slot"]
    res = runner.invoke(cli, ["slot", "list", "--dsn", pg18_dsn])
    assert "cli_slot" in res.output and format_lsn(confirmed) in res.output

    res = runner.invoke(cli, ["slot", "drop", "--dsn", pg18_dsn, "--slot", "cli_slot"])
    assert res.exit_code == 0 and "dropped slot cli_slot" in res.output
    res = runner.invoke(cli, ["status", "--dsn", pg18_dsn, "--slot", "cli_slot"])
    assert res.exit_code == 1 and "does not exist" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(cli, ["slot", "create", "--dsn", pg18_dsn, "--slot", "Bad-Name"])
    assert res.exit_code == 1 and "invalid slot name" in res.output


def test_cli_errors_never_show_the_password(caplog: pytest.LogCaptureFixture) -> None:
    secret = "pw-Very-S3cret"
    dead = f"host=127.0.0.1 port={free_port()} user=app password={secret} connect_timeout=3"
    uri = f"postgresql://app:{secret}@127.0.0.1:{free_port()}/db?connect_timeout=3"
    runner = CliRunner()
    caplog.set_level(logging.DEBUG)
    for dsn in (dead, uri):
        for args in (["status", "--slot", "x"], ["slot", "list"], ["slot", "create", "--slot", "x"]):
            res = runner.invoke(cli, [*args, "--dsn", dsn])
            assert res.exit_code == 1
            assert secret not in res.output
            assert "password=***" in res.output or "app:***@" in res.output
            assert len(res.output.strip().splitlines()) == 1
    with pytest.raises(ConnectionLost) as info:
        ReplicationStream(dead, "s", StreamOptions(("p",)), reconnect=None).open()
    assert secret not in str(info.value) and "password=***" in str(info.value)
    assert secret not in caplog.text
